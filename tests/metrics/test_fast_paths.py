"""The numpy fast paths give exactly the values of the pandas / scipy code they replace."""

from __future__ import annotations

import numpy as np
import pandas as pd
from rliable.metrics import aggregate_iqm

from cl_suites.metrics import preprocess as pp
from cl_suites.metrics import stats
from cl_suites.metrics.runs import metric_split, metric_split_wide


def test_fast_iqm_is_bitwise_rliable_iqm():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 40, 301):
        x = rng.normal(size=(n, 3))
        assert stats.fast_iqm(x) == aggregate_iqm(x)


def _frame(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for run in ("a", "b"):
        for task in (0, 1, 2):
            splits = ("train", "test") if task != 1 else ("train",)
            for split in splits:
                for step in (0, 10, 20, 30):
                    if task == 2 and step == 10:
                        continue  # a missing eval point -> forward filled
                    rows.append((run, task, split, step, float(rng.normal())))
    cols = ["run", "task_id", "split", "total_step", "mean_return"]
    return pd.DataFrame(rows, columns=cols)


def test_metric_split_wide_matches_pivot_table():
    frame = _frame(np.random.default_rng(1))
    one = frame[frame["run"] == "a"]
    steps, tasks, wide = metric_split_wide(one)
    ref = metric_split(one).pivot_table(index="total_step", columns="task_id", values="mean_return")
    ref = ref.sort_index().ffill()
    np.testing.assert_array_equal(steps, ref.index.to_numpy())
    np.testing.assert_array_equal(tasks, ref.columns.to_numpy())
    np.testing.assert_array_equal(wide, ref.to_numpy())
    assert set(metric_split(one)["split"][metric_split(one)["task_id"] == 1]) == {"train"}


def test_sorted_groups_fast_path_equals_lexsort():
    frame = _frame(np.random.default_rng(2))
    shuffled = frame.sample(frac=1.0, random_state=3)  # generic path (lexsort)
    by_split = frame.sort_values(["run", "task_id", "split", "total_step"])  # fast path
    a, ca = pp._sorted_groups(shuffled)
    b, cb = pp._sorted_groups(by_split)
    pd.testing.assert_frame_equal(a, b)
    np.testing.assert_array_equal(ca, cb)
    assert a["split"].iloc[0] == "train" and a["total_step"].is_monotonic_increasing is False
    assert list(a["total_step"].iloc[:4]) == [0, 10, 20, 30]
