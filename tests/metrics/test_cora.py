"""CORA F, Z, tables and SEM aggregation against hand-worked values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cl_suites.metrics import cora
from cl_suites.metrics.runs import load_run


def _values(run, **kw):
    m = cora.cora_matrices(run.eval, run.schedule, window=1, **kw)
    return m, m.values.set_index(["metric", "i", "j"])["value"]


def test_isolated_forgetting_and_zero_shot_transfer_by_hand(hand_run):
    run = load_run(hand_run)
    m, v = _values(run)
    # F_ij = (r_i(B_{j-1}) - r_i(B_j)) / max|r_i| ; task 0 max 10, task 1 max 8
    assert v["F", 0, 1] == pytest.approx((10 - 4) / 10)
    assert v["F", 0, 2] == pytest.approx((4 - 2) / 10)
    assert v["F", 1, 2] == pytest.approx((8 - 6) / 8)
    # Z_ij = (r_i(B_j) - r_i(B_{j-1})) / max|r_i| with r_i(B_{-1}) the step-0 value
    assert v["Z", 1, 0] == pytest.approx((2 - 1) / 8)
    assert v["Z", 2, 0] == pytest.approx((5 - 0) / 20)
    assert v["Z", 2, 1] == pytest.approx(0.0)
    assert len(v) == 6  # only the i<j (F) and i>j (Z) triangles
    assert m.order == [0, 1, 2]


def test_non_isolated_forgetting_uses_max_up_to_end_of_task(hand_run):
    run = load_run(hand_run)
    _, v = _values(run, isolated=False)
    assert v["F", 0, 1] == pytest.approx((10 - 4) / 10)
    assert v["F", 0, 2] == pytest.approx((10 - 2) / 10)
    assert v["F", 1, 2] == pytest.approx((8 - 6) / 8)


def test_smoothing_window_changes_the_values(hand_run):
    run = load_run(hand_run)
    m = cora.cora_matrices(run.eval, run.schedule, window=2)
    v = m.values.set_index(["metric", "i", "j"])["value"]
    # smoothed task 0: [0, 5, 7, 3], max 7 -> F_01 = (5 - 7) / 7
    assert v["F", 0, 1] == pytest.approx((5 - 7) / 7)


def test_table_scaling_and_single_seed_corner(hand_run):
    run = load_run(hand_run)
    m, _ = _values(run)
    t = cora.cora_table(m.values, "F", m.order)
    assert t.mean.loc[0, 1] == pytest.approx(6.0)
    assert t.mean.loc["Avg", "Avg"] == pytest.approx((6 + 2 + 2.5) / 3)
    assert np.isnan(t.sem.loc[0, 1])  # one seed: no error bar


def _two_seed_values():
    rows = []
    for run, vals in (("a", (0.1, 0.3, 0.2)), ("b", (0.3, 0.5, 0.6))):
        for (i, j), v in zip(((0, 1), (0, 2), (1, 2)), vals, strict=False):
            rows.append(
                {"run": run, "method": "m", "seed": 0, "metric": "F", "i": i, "j": j, "value": v}
            )
    return pd.DataFrame(rows)


def test_sem_aggregation_appendix_e1():
    t = cora.cora_table(_two_seed_values(), "F", [0, 1, 2])
    # cell: mean and SEM over seeds
    assert t.mean.loc[0, 1] == pytest.approx(2.0)
    assert t.sem.loc[0, 1] == pytest.approx(1.0)
    # row 0: per-seed row means .2 and .4 -> 3.0 +- 1.0
    assert t.mean.loc[0, "Avg"] == pytest.approx(3.0)
    assert t.sem.loc[0, "Avg"] == pytest.approx(1.0)
    # column 2: per-seed column means .25 and .55 -> 4.0 +- 1.5
    assert t.mean.loc["Avg", 2] == pytest.approx(4.0)
    assert t.sem.loc["Avg", 2] == pytest.approx(1.5)
    # table: per-seed means .2 and .4667 -> 3.333 +- 1.333
    assert t.mean.loc["Avg", "Avg"] == pytest.approx(10 / 3)
    assert t.sem.loc["Avg", "Avg"] == pytest.approx(4 / 3)


def test_sem_over_tasks_option():
    t = cora.cora_table(_two_seed_values(), "F", [0, 1, 2], aggregate_sem="tasks")
    per_seed = np.array([0.2, 1.4 / 3])
    assert t.sem.loc["Avg", "Avg"] == pytest.approx(10 * per_seed.std(ddof=1) / np.sqrt(3))
    # cells are unchanged by the option
    assert t.sem.loc[0, 1] == pytest.approx(1.0)


def test_norm_scope_method_pools_runs(tmp_path):
    from .conftest import HAND, write_run

    a = load_run(write_run(tmp_path / "a", returns=HAND))
    b = load_run(write_run(tmp_path / "b", returns=HAND * 2, seed=1))
    ev = pd.concat([a.eval, b.eval])
    pooled = cora.cora_matrices(ev, a.schedule, 1).values
    per_run = cora.cora_matrices(ev, a.schedule, 1, norm_scope="run").values

    def f(v, run):
        return v[(v.metric == "F") & (v.i == 0) & (v.j == 1) & (v.run == run)]["value"].item()

    assert f(per_run, a.run_id) == pytest.approx(0.6)
    assert f(per_run, b.run_id) == pytest.approx(0.6)
    # code default: normaliser is the max over both runs of the method (20)
    assert f(pooled, a.run_id) == pytest.approx(6 / 20)
    assert f(pooled, b.run_id) == pytest.approx(12 / 20)


def test_test_split_is_used_where_it_exists(tmp_path):
    from .conftest import HAND, write_run

    run = load_run(write_run(tmp_path / "r", returns=HAND, splits=("train", "test")))
    v = cora.cora_matrices(run.eval, run.schedule, 1).values.set_index(["metric", "i", "j"])[
        "value"
    ]
    # test = train + 0.5: task 0 test [0.5, 10.5, 4.5, 2.5]
    assert v["F", 0, 1] == pytest.approx((10.5 - 4.5) / 10.5)


def test_curves_mean_and_sem_over_seeds(tmp_path):
    from .conftest import HAND, write_run

    a = load_run(write_run(tmp_path / "a", returns=HAND))
    b = load_run(write_run(tmp_path / "b", returns=HAND + 2, seed=1))
    c = cora.continual_eval_curves(pd.concat([a.eval, b.eval]), window=1)
    row = c[(c.task_id == 0) & (c.total_step == 100)].iloc[0]
    assert row["mean"] == pytest.approx(11.0)
    assert row["sem"] == pytest.approx(1.0)
    assert row["n"] == 2
