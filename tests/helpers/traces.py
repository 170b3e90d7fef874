"""Comparing recorded env traces (lists of arrays, lists and ``None``s) exactly."""

from __future__ import annotations

import numpy as np


def same_trace(a: list, b: list) -> bool:
    """Whether two traces are equal entry for entry: lists and ``None`` by ``==``, arrays
    bit for bit (``np.array_equal``)."""
    return len(a) == len(b) and all(
        x == y if isinstance(x, list) or x is None else np.array_equal(x, y)
        for x, y in zip(a, b, strict=True)
    )
