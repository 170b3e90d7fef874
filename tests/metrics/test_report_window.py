"""What the report says is what was measured (issue 41 item 4): the final-performance
window is named beside every final-performance figure, is a ``report`` option, and a
window spanning most of a task's evaluations (a short run) is warned about; the comparison
with published rows says which window each side uses; the console shows the notes and
stays readable when piped."""

from __future__ import annotations

import pytest

from cl_suites.cli import main
from cl_suites.metrics import build_report

from .conftest import write_run

PROCGEN = ["bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun"]


def _short(root, window=20):
    """A short Procgen6-like run: 4 evaluations per task, CORA's 20-point window; the
    last evaluation of each task differs from the ones before."""
    return write_run(
        root / "short", suite="Procgen6", n_tasks=6, task_names=PROCGEN, steps_per_task=100,
        eval_every=25, window=window, returns=lambda t, split, step: 0.0 if step == 600 else 1.0,
        extra_meta={"learner": "vtrace"},
    )  # fmt: skip


def test_a_window_spanning_most_of_a_task_is_warned_about_and_named(tmp_path):
    result = build_report([_short(tmp_path)], tmp_path / "out", bootstrap_reps=20)
    warning = [n for n in result.notes if "final performance averages the last 20" in n]
    assert len(warning) == 1 and "more than half of the 4 evaluation(s)" in warning[0]
    assert "--window 1" in warning[0]
    table = (tmp_path / "out" / "Procgen6" / "final_performance.md").read_text()
    assert "final performance (mean of the last 20 evaluations)" in table
    page = result.html.read_text()
    assert "Final performance (mean of the last 20 evaluations)" in page
    assert (
        warning[0] in page.replace("&#39;", "'").replace("&#x60;", "`") or "more than half" in page
    )
    finals = result.comparison[result.comparison["metric"] == "final return"]
    assert set(finals["final window"]) == {
        "ours: last 20 eval(s) (500 steps); paper: last 20 (5,000,000 steps)"
    }


def test_the_window_is_a_report_option(tmp_path):
    run = _short(tmp_path)
    result = build_report([run], tmp_path / "out", bootstrap_reps=20, window=1)
    assert not [n for n in result.notes if "final performance averages" in n]
    table = (tmp_path / "out" / "Procgen6" / "final_performance.md").read_text()
    assert "mean of the last evaluation" in table
    assert "0.00 ± " in table or "0.0" in table  # the last evaluation, not the average
    finals = result.comparison[result.comparison["metric"] == "final return"]
    assert finals["final window"].str.startswith("ours: last 1 eval(s) (25 steps)").all()
    assert "smoothing window 1 vs paper 20" in finals["protocol differences"].iloc[0]
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        build_report([run], tmp_path / "bad", window=0)


def test_the_console_report_is_readable_when_piped_and_prints_the_notes(tmp_path, capsys):
    run = _short(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert "…" not in out  # nothing cut
    assert "  Procgen6 / ft" in out and "F (x10)" in out
    assert "final window" in out and "ours: last 20 eval(s)" in out
    notes = " ".join(err.split())
    assert "note: Procgen6: final performance averages the last 20 evaluations" in notes
    assert main(["report", str(run), "--out", str(tmp_path / "out1"), "--window", "1"]) == 0
    assert "ours: last 1 eval(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["report", str(run), "--window", "0"])
    assert "must be an integer >= 1, got '0'" in capsys.readouterr().err
