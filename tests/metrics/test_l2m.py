"""DARPA L2M metrics by hand, including the worked figures of the L2M document."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cl_suites.metrics import l2m
from cl_suites.metrics.runs import load_run


def test_contrast_and_ratio_worked_figures():
    # Figs. 7 and 9: FT from blue to green = Contrast(G1, G0) = (G1 - G0) / (G1 + G0)
    g0, g1 = 20.0, 60.0
    assert l2m.contrast(g1, g0) == pytest.approx(40 / 80)
    # BT from green to blue = Contrast(B2, B1); forgetting gives a negative value
    b1, b2 = 80.0, 40.0
    assert l2m.contrast(b2, b1) == pytest.approx(-40 / 120)
    assert l2m.ratio(g1, g0) == pytest.approx(3.0)
    # contrasts are defined when b = 0 (section 3.3), ratios are not
    assert l2m.contrast(5.0, 0.0) == pytest.approx(1.0)
    assert np.isnan(l2m.ratio(5.0, 0.0))
    assert np.isnan(l2m.contrast(0.0, 0.0))


def _raw_blocks(run):
    return l2m.eval_blocks(run.eval, run.schedule)


def test_eval_blocks_from_schedule(hand_run):
    run = load_run(hand_run)
    eb = _raw_blocks(run).pivot(index="eb", columns="task_id", values="perf")
    np.testing.assert_allclose(eb.to_numpy().T, [[0, 10, 4, 2], [1, 2, 8, 6], [0, 5, 5, 20]])


def test_performance_maintenance_by_hand(hand_run):
    run = load_run(hand_run)
    pm = l2m.performance_maintenance(_raw_blocks(run), run.schedule)
    # task 0: EB2, EB3 vs EB1: (4-10, 2-10) -> -7 ; task 1: EB3 vs EB2: 6-8 -> -2
    assert pm[0] == pytest.approx(-7.0)
    assert pm[1] == pytest.approx(-2.0)
    assert 2 not in pm.index
    assert pm.mean() == pytest.approx(-4.5)


def test_forward_and_backward_transfer_by_hand(hand_run):
    run = load_run(hand_run)
    tr = l2m.transfer(_raw_blocks(run), run.schedule)
    ft = l2m.lifetime_transfer(tr, "FT")
    assert ft == pytest.approx(np.mean([(2 - 1) / (2 + 1), (5 - 0) / (5 + 0), 0.0]))
    assert l2m.lifetime_transfer(tr, "FT", "ratio") == pytest.approx(np.mean([2.0, 1.0]))
    bt = l2m.lifetime_transfer(tr, "BT")
    assert bt == pytest.approx(np.mean([-6 / 14, -2 / 6, -2 / 14]))
    assert l2m.lifetime_transfer(tr, "BT", "ratio") == pytest.approx(np.mean([0.4, 0.5, 0.75]))


def _lx(blocks, task=0):
    rows = []
    for lb, vals in enumerate(blocks):
        for k, v in enumerate(vals):
            rows.append({"lb": lb, "task_id": task, "exp": k, "perf": float(v)})
    return pd.DataFrame(rows)


def test_relative_performance_by_hand():
    lx = _lx([[2, 4], [6, 8]])
    rp = l2m.relative_performance(lx, {0: [np.array([1, 2, 3, 4, 5.0]), np.array([2, 2, 2, 2.0])]})
    assert rp[0] == pytest.approx(np.mean([20 / 10, 20 / 8]))


def test_sample_efficiency_by_hand():
    lx = _lx([[1, 2, 3, 4, 3]])
    se = l2m.sample_efficiency(lx, {0: [np.array([1, 3, 2, 2, 2.0])]})
    # saturation 4 after 3 LXs vs expert 3 after 1 LX: (4/3) * (1/3)
    assert se[0] == pytest.approx((4 / 3) * (1 / 3))
    weak = l2m.sample_efficiency(_lx([[0.1, 0.2, 0.5, 0.4]]), {0: [np.array([1, 9, 9, 9.0])]})
    assert weak[0] == 0.0  # saturation below 20% of the expert's


def test_recovery_times_and_theil_sen_recovery():
    lx = _lx([list(range(1, 11)), [8, 9, 10, 11, 12, 12, 12, 12, 12, 12], [0, 0, 0, 0]])
    sched = pd.DataFrame({"task_id": [0, 0, 0], "start_step": [0, 10, 20]})
    times = l2m.recovery_times(lx, sched)
    assert times[0] == [2, 5]  # back at TLP 10 after 2 LXs; never back at 12 -> len + 1
    pr = l2m.performance_recovery({0: [5, 3, 1], 1: [4]})
    assert pr[0] == pytest.approx(2.0)
    assert 1 not in pr.index


def test_cumulative_gain_and_learn_burn():
    assert l2m.cumulative_gain(_lx([[0, 1, 2], [2, 1, 0], [1, 1, 1]])) == pytest.approx(0.0)
    assert l2m.learn_burn(_lx([[0, 1, 2], [0, 2, 4]])) == pytest.approx(2 / 0.6)
    assert np.isnan(l2m.learn_burn(_lx([[1, 1], [1, 1]])))


def test_learning_experiences_and_full_metrics(tmp_path):
    from .conftest import write_run

    run = load_run(write_run(tmp_path / "r", returns=lambda t, s, k: t + k / 100, cycles=3))
    lx = l2m.learning_experiences(run.episodes, run.schedule)
    assert lx.groupby("lb").size().tolist() == [10] * 9
    assert (lx.groupby("lb")["task_id"].first().to_numpy() == [0, 1, 2] * 3).all()
    ste = load_run(
        write_run(tmp_path / "ste", method="ste", returns=lambda t, s, k: 1.0, n_tasks=1)
    )
    values, _notes = l2m.l2m_metrics(run, [ste])
    assert set(values) == {
        "PM",
        "FT_contrast",
        "FT_ratio",
        "BT_contrast",
        "BT_ratio",
        "PR",
        "CG",
        "LB",
        "RP",
        "SE",
    }
    assert np.isfinite(values["PR"])  # three cycles -> two recovery times per task
    assert np.isfinite(values["RP"])


def test_clamp_is_opt_in_as_in_l2metrics(tmp_path):
    """l2metrics clamps outliers only with -x/--clamp-outliers; so do we (clamp=True)."""
    from .conftest import write_run

    run = load_run(
        write_run(
            tmp_path / "r",
            returns=lambda t, s, k: t + k / 100,
            cycles=2,
            episode_return=lambda t, seg, n: 1000.0 if n == 0 else float(n),
        )
    )
    log = l2m.lifetime_log(run)
    lx = log[log["block_type"] == "train"].rename(columns={"block": "lb"})
    eb = log[log["block_type"] == "test"].rename(columns={"block": "eb"})
    plain = l2m.l2m_preprocess(l2m.L2MData(lx, eb))
    clamped = l2m.l2m_preprocess(l2m.L2MData(lx, eb), clamp=True)
    assert plain.ranges[0][1] > 100  # the outlier episode (smoothed) sets the range
    assert clamped.ranges[0][1] < plain.ranges[0][1]
    default = pd.Series(l2m.l2m_metrics(run)[0])
    pd.testing.assert_series_equal(default, pd.Series(l2m.l2m_metrics(run, clamp=False)[0]))
    assert not default.equals(pd.Series(l2m.l2m_metrics(run, clamp=True)[0]))
