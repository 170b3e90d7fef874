"""The form of suite ids, and MEAL's ids (``MEAL-<N>``), read without the catalog.

A leaf module (it imports only ``cl_suites.errors``), so that MEAL's suite builder
(``cl_suites.meal.suite.parse_meal_id``) reads MEAL's ids without importing the catalog.
Which suites exist, and the one parser of every suite id (``parse_suite_id``), are the
catalog's (``cl_suites.suites``): the catalog's entries are the one declaration of the
suites' names.
"""

from __future__ import annotations

import re

from cl_suites.errors import UnknownSuiteError

NAMESPACE = "CLSuite"
MEAL_ID = "CLSuite/MEAL-<N>-v0"
"""MEAL's ids: one suite per number of tasks ``N >= 1``."""

_MEAL = re.compile(r"MEAL-(\d+)")


def bare_name(suite: object) -> str:
    """The name inside a suite id, not yet checked against the catalog: ``suite`` without
    gymnasium's module prefix, the namespace and the version
    (``"cl_suites:CLSuite/Procgen6-v0"``, ``"CLSuite/Procgen6-v0"`` and ``" Procgen6 "`` ->
    ``"Procgen6"``)."""
    name = str(suite).strip().split(":", 1)[-1]
    if name.startswith(NAMESPACE + "/"):
        name = name[len(NAMESPACE) + 1 :]
    return name.removesuffix("-v0")


def meal_name(suite: object) -> str | None:
    """The catalog name of a MEAL id (``"CLSuite/MEAL-020-v0"`` -> ``"MEAL-20"``; any
    ``N >= 1``), ``None`` for an id that is not MEAL's; ``UnknownSuiteError`` (a
    ``KeyError`` and a ``ValueError``) for a malformed one (``"MEAL-0"``, ``"MEAL-x"``)."""
    name = bare_name(suite)
    if not name.startswith("MEAL"):
        return None
    match = _MEAL.fullmatch(name)
    if match is None or int(match.group(1)) < 1:
        raise UnknownSuiteError(
            f"{suite!r} is not a MEAL id; use {MEAL_ID!r} or 'MEAL-<N>' with N >= 1 tasks"
        )
    return f"MEAL-{int(match.group(1))}"
