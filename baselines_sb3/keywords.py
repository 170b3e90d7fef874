"""The keyword names a class accepts, and one check of a run's keywords against them.

A leaf module (imports nothing of the package): ``cl`` and ``factory`` (and the job
layer's ``cl_suites.job.hyperparameters``) use it without importing one another.
"""

from __future__ import annotations

import inspect
from typing import Any

from cl_suites.errors import UnknownOptionError


def accepted_options(cls: type) -> tuple[str, ...]:
    """Keyword arguments ``cls(...)`` accepts (through ``**kwargs`` to its bases)."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names += [
            p.name
            for p in params
            if p.kind is p.KEYWORD_ONLY
            or (p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "policy", "env"))
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return tuple(dict.fromkeys(n for n in names if not n.startswith("_")))


def check_keywords(kind: str, name: str, cls: type, options: dict[str, Any]) -> None:
    """``UnknownOptionError`` (a ``ValueError`` and ``TypeError``) naming any key of
    ``options`` that ``cls`` does not accept."""
    valid = accepted_options(cls)
    bad = sorted(k for k in options if k not in valid)
    if bad:
        raise UnknownOptionError(
            f"{kind} {name!r} does not support option(s) {', '.join(map(repr, bad))}; "
            f"valid: {', '.join(sorted(valid))}"
        )
