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
