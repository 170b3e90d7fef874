"""Bad input: each case gets a defined result or an error naming the bad value."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.metrics import build_report, cora
from cl_suites.metrics.runs import MetricsInputError, load_run

from .conftest import HAND, write_run


def test_empty_log_is_an_error(tmp_path):
    run_dir = write_run(tmp_path / "r", returns=HAND)
    (run_dir / "eval.csv").write_text(
        ",".join(
            [
                "total_step",
                "task_id",
                "task_name",
                "split",
                "mean_return",
                "std_return",
                "episodes",
                "wall_time",
            ]
        )
        + "\n"
    )
    with pytest.raises(MetricsInputError, match="no evaluation rows"):
        load_run(run_dir)


def test_truncated_last_row_is_dropped(tmp_path):
    run_dir = write_run(tmp_path / "r", returns=HAND)
    with (run_dir / "eval.csv").open("a") as f:
        f.write("400,0,task0,tr")
    run = load_run(run_dir)
    assert run.last_step == 300
    assert any("truncated last row" in i for i in run.issues)


def test_nan_returns_are_dropped_and_reported(tmp_path):
    vals = HAND.copy()
    vals[0, 2] = np.nan
    run = load_run(write_run(tmp_path / "r", returns=vals))
    assert any("NaN/inf mean_return" in i for i in run.issues)
    v = cora.cora_matrices(run.eval, run.schedule, 1).values.set_index(["metric", "i", "j"])
    # r_0(B_1) falls back to the last valid point (10 at step 100): F_01 = 0, F_02 = (10-2)/10
    assert v.loc[("F", 0, 1), "value"] == pytest.approx(0.0)
    assert v.loc[("F", 0, 2), "value"] == pytest.approx(0.8)


def test_run_ended_mid_sequence(tmp_path):
    run = load_run(write_run(tmp_path / "r", returns=HAND, stop_step=200))
    assert any("ended mid-sequence" in i for i in run.issues)
    m = cora.cora_matrices(run.eval, run.schedule, 1)
    v = m.values.set_index(["metric", "i", "j"])["value"]
    assert v["F", 0, 1] == pytest.approx(0.6)
    assert np.isnan(v["F", 0, 2]) and np.isnan(v["F", 1, 2])  # need B_2 = 300
    assert v["Z", 2, 1] == pytest.approx(0.0)  # needs only B_1 = 200
    assert any("ended before" in n for n in m.notes)
    t = cora.cora_table(m.values, "F", m.order)
    assert t.mean.loc["Avg", "Avg"] == pytest.approx(6.0)  # only the available entry


def test_all_zero_task_is_defined_as_zero(tmp_path):
    vals = HAND.copy()
    vals[1] = 0.0
    m = cora.cora_matrices(
        load_run(write_run(tmp_path / "r", returns=vals)).eval, load_run(tmp_path / "r").schedule, 1
    )
    v = m.values.set_index(["metric", "i", "j"])["value"]
    assert v["F", 1, 2] == 0.0 and v["Z", 1, 0] == 0.0
    assert any("all-zero" in n for n in m.notes)


def test_unknown_split_is_named(tmp_path):
    run_dir = write_run(tmp_path / "r", returns=HAND)
    text = (run_dir / "eval.csv").read_text().replace(",train,", ",valid,", 1)
    (run_dir / "eval.csv").write_text(text)
    with pytest.raises(MetricsInputError, match="valid"):
        load_run(run_dir)


def test_missing_test_split_and_single_seed_in_report(tmp_path):
    a = write_run(tmp_path / "a", returns=HAND, splits=("train", "test"))
    text = (a / "eval.csv").read_text().splitlines()
    (a / "eval.csv").write_text(
        "\n".join(line for line in text if ",task1,test," not in line) + "\n"
    )
    res = build_report([a], tmp_path / "out", bootstrap_reps=50, progress=False)
    notes = "\n".join(res.notes)
    assert "single seed" in notes
    assert "task 1 declares a test split but has no test rows" in notes
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "nan" not in summary.lower() and "±" not in summary.split("\n")[-2]


def test_clip_min_applies(tmp_path):
    vals = HAND.copy()
    vals[2, 0] = -50.0
    run = load_run(write_run(tmp_path / "r", returns=vals, clip_min=-10.0))
    assert run.eval["mean_return"].min() == -10.0
