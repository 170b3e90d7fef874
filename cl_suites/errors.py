"""Clear errors for missing optional simulators."""

from __future__ import annotations

import importlib
from types import ModuleType


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
