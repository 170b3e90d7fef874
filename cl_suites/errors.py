"""The errors cl-suites raises, under one root, and clear errors for missing simulators.

Every error of the package derives from :class:`CLSuitesError`; each subclass also
derives from the built-in type code caught before the hierarchy existed (``ValueError``,
``TypeError``, ``KeyError``, ``ImportError``, ...), so existing ``except`` clauses keep
working. The CLI maps these classes, never message text, to its exit codes.

>>> from cl_suites.errors import CLSuitesError, UnknownOptionError
>>> issubclass(UnknownOptionError, (CLSuitesError, ValueError, TypeError))
True
"""

from __future__ import annotations

import importlib
from types import ModuleType


class CLSuitesError(Exception):
    """Root of every error cl-suites raises on purpose."""


class ConfigError(CLSuitesError, ValueError):
    """A run configuration that cannot be used (the message names the value and why)."""


class UnknownOptionError(ConfigError, TypeError):
    """An option name no part of the run accepts (a ``TypeError`` too: a keyword the
    constructors do not take; the message lists the valid names)."""


class BadValueError(ConfigError):
    """An option value outside its declared type or range (the message names both)."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise ``ImportError`` naming the cl-suites extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{module!r} is not installed (or failed to import: {e}); "
            f'install it with: pip install "cl-suites[{extra}]"'
        ) from e


def silence_legacy_gym_banner() -> None:
    """Import the legacy ``gym`` package (if installed) with its stderr banner suppressed.

    procgen2 depends on old ``gym``, and stable-baselines3 imports it when present; gym
    then prints an "unmaintained" notice on every start. cl-suites only uses gymnasium.
    """
    import contextlib
    import importlib.util
    import io
    import sys

    if "gym" in sys.modules or importlib.util.find_spec("gym") is None:
        return
    with contextlib.redirect_stderr(io.StringIO()):
        importlib.import_module("gym")
