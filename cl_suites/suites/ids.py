"""Suite ids: which ids exist, and the one parser of them (:func:`parse_suite_id`).

A leaf module (it imports only ``cl_suites.errors``), so that code the catalog stands on,
such as MEAL's suite builder (``cl_suites.meal.suite.parse_meal_id``), parses ids without
importing the catalog (``cl_suites.suites``), which holds what each id is.
"""

from __future__ import annotations

import difflib
import re

from cl_suites.errors import UnknownSuiteError

NAMESPACE = "CLSuite"
SUITE_NAMES: tuple[str, ...] = (
    "Atari6",
    "Procgen6",
    "MiniHack15",
    "Diagnostic",
    "CHORES-VaryRoom",
    "CHORES-VaryTask",
    "CHORES-VaryObject",
    "CHORES-MultiTraj",
)
"""The suites with one id each (``cl_suites.suites.SUITES`` has one entry per name, in
this order)."""
MEAL_ID = "CLSuite/MEAL-<N>-v0"
"""MEAL's ids: one suite per number of tasks ``N >= 1``."""

_MEAL = re.compile(r"MEAL-(\d+)")


def parse_suite_id(suite: object) -> str:
    """The catalog name of a suite id: the one suite-id parser of the package.

    Accepts the short name (``"Procgen6"``, ``"MEAL-20"``), the gymnasium id
    (``"CLSuite/Procgen6-v0"``, ``"CLSuite/MEAL-20-v0"``) and gymnasium's module-qualified
    form (``"cl_suites:CLSuite/Procgen6-v0"``). ``MEAL-<N>`` is any ``N >= 1``
    (``"MEAL-020"`` -> ``"MEAL-20"``). Anything else raises ``UnknownSuiteError`` (a
    ``KeyError`` and a ``ValueError``) listing the valid ids.
    """
    name = str(suite).strip().split(":", 1)[-1]
    if name.startswith(NAMESPACE + "/"):
        name = name[len(NAMESPACE) + 1 :]
    name = name.removesuffix("-v0")
    if name in SUITE_NAMES:
        return name
    if name.startswith("MEAL"):
        match = _MEAL.fullmatch(name)
        if match is None or int(match.group(1)) < 1:
            raise UnknownSuiteError(
                f"{suite!r} is not a MEAL id; use {MEAL_ID!r} or 'MEAL-<N>' with N >= 1 tasks"
            )
        return f"MEAL-{int(match.group(1))}"
    raise UnknownSuiteError(
        f"unknown suite {suite!r}{_did_you_mean(name)}; available: "
        f"{', '.join(f'{NAMESPACE}/{name}-v0' for name in SUITE_NAMES)} and {MEAL_ID} (N >= 1)"
    )


def _did_you_mean(name: str) -> str:
    """`` (did you mean 'Procgen6'?)`` for the catalog name closest to ``name`` (case
    and a missing number forgiven), or ``""``."""
    by_lower = {n.lower(): n for n in SUITE_NAMES}
    lowered = name.lower()
    hits = [by_lower[lowered]] if lowered in by_lower else []
    hits = hits or [n for n in SUITE_NAMES if n.lower().startswith(lowered) and lowered]
    hits = hits or [by_lower[m] for m in difflib.get_close_matches(lowered, list(by_lower), n=1)]
    return f" (did you mean {hits[0]!r}?)" if len(hits) >= 1 and hits[0] != name else ""


def short_name(suite: object) -> str:
    """The catalog name of ``suite`` (:func:`parse_suite_id`), or its text as given when
    the catalog does not know it (an own loop's suite; a name a later check reports)."""
    try:
        return parse_suite_id(suite)
    except UnknownSuiteError:
        return str(suite)
