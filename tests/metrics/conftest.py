"""Builders for synthetic run directories (written with the real RunLog writer): the
run writer and the hand-worked log live in ``benchmarks/report/synthetic_runs.py``, which
the report benchmark shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from benchmarks.report.synthetic_runs import HAND, write_run


@pytest.fixture
def hand_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "hand", returns=HAND)


def learning_curve(method: str, seed: int) -> Callable[[int, str, int], float]:
    """Smooth synthetic continual-evaluation curves (3 tasks x 2 cycles of 1000 steps)."""
    rng = np.random.default_rng(seed + (0 if method == "ft" else 100))
    keep = 0.9 if method == "clear" else 0.4

    def f(task: int, split: str, step: int) -> float:
        seg_len, n = 1000, 3
        level = 0.0
        for c in range(2):
            start = (c * n + task) * seg_len
            if step >= start:
                progress = min(1.0, (step - start) / seg_len)
                level = max(level, (task + 1) * 2 * progress)
                if step > start + seg_len:
                    level *= keep ** ((step - start - seg_len) / seg_len)
        noise = rng.normal(0, 0.15)
        return level + noise - (0.4 if split == "test" else 0.0)

    return f
