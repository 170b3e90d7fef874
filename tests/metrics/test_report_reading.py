"""What a reader of a report sees (issue 55): notes that read as plain Markdown, no spread
from one seed, ratios on a near-zero denominator flagged, a live run called live."""

from __future__ import annotations

import re

from cl_suites.metrics import build_report
from cl_suites.metrics.report_files import write_notes

from .conftest import HAND, write_run


def test_notes_md_reads_as_plain_markdown(tmp_path):
    """Issue 55 item 1: ``>=``, ``[0, 1]`` and ``score_normalizers`` as written, not
    ``&gt;=``, ``\\[0, 1\\]``; what could render as HTML or a link is still defused."""
    notes = [
        "L2M PR needs >= 3 learning blocks of a task (>= 3 cycles)",
        "F lies in [0, 1] (no 'score_normalizers' in metadata), |return| <= 1",
        "run `cl-suites report --window 1` for the last evaluation",
        "method <img src=x onerror=alert(1)> and [a link](http://x) and ![i](http://y)",
        "[ref]: http://evil and a &amp; entity",
    ]
    text = write_notes(notes, tmp_path).read_text()
    assert "L2M PR needs >= 3 learning blocks of a task (>= 3 cycles)" in text
    assert "F lies in [0, 1] (no 'score_normalizers' in metadata), |return| <= 1" in text
    assert "`cl-suites report --window 1`" in text
    assert "&gt;=" not in text and "\\[0, 1\\]" not in text
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert not re.search(r"(?<!\\)\][(:]", text)  # no link, image or definition
    assert "&amp;amp; entity" in text  # an entity shows as written


def test_report_notes_md_has_no_escaped_comparisons(tmp_path):
    run = write_run(tmp_path / "run", returns=HAND)
    out = build_report([run], tmp_path / "out", bootstrap_reps=20).out_dir
    notes = (out / "notes.md").read_text()
    assert "needs >= 3 learning blocks" in notes and "&gt;" not in notes
    assert "score_normalizers" in notes and "|return|" in notes
    page = (out / "report.html").read_text()
    assert "needs &gt;= 3 learning blocks" in page  # the page escapes for HTML


def test_one_seed_prints_no_spread(tmp_path):
    """Issue 55 item 2: a single seed has no ± (not ``± 0``) and no degenerate interval,
    in the plasticity tables and the summary's IQM cells alike."""
    import pandas as pd

    from cl_suites.metrics.plasticity_report import task_end_table

    frame = pd.DataFrame(
        {
            "method": "ft",
            "seed": 0,
            "run": "r0",
            "network": "actor",
            "metric": "dormant_ratio",
            "total_step": [50, 100],
            "task_id": 0,
            "value": [0.25, 0.5],
        }
    )
    schedule = pd.DataFrame(
        {"index": [0], "cycle": [0], "task_id": [0], "start_step": [0], "end_step": [100]}
    )
    table = task_end_table(frame, schedule, {0: "t0"})
    assert table.iloc[0, 0] == "0.5"
    run = write_run(tmp_path / "run", returns=HAND)
    res = build_report([run], tmp_path / "out", bootstrap_reps=20)
    row = res.summary.iloc[0]
    for col in ("MEAL A IQM [95% CI]", "MEAL P IQM [95% CI]"):
        assert "[" not in row[col] and "±" not in row[col], (col, row[col])
    for path in (tmp_path / "out").rglob("*.md"):
        assert "± 0.0" not in path.read_text(), path


def _untrained_at_zero(task: int, split: str, step: int) -> float:
    """10 once task ``task`` was trained (segments of 100 steps), 0.4 before it (0 at the
    start): every forward-transfer ratio divides by a performance at the task's floor."""
    if step >= (task + 1) * 100:
        return 10.0
    return 0.4 if step > 0 else 0.0


def test_a_ratio_on_a_near_zero_denominator_is_flagged_not_reported(tmp_path):
    """Issue 55 item 3: L2M's FT ratio divides the target's performance after a block by
    its performance before; at the task's floor (normalised 1 of [1, 101]) that reads the
    numerator as a ratio. Such pairs are left out, and a lifetime ratio with none left is
    n/a with the reason, in ``l2m_metrics`` and in the report."""
    from cl_suites.metrics import l2m
    from cl_suites.metrics.runs import load_run

    run = write_run(tmp_path / "run", returns=_untrained_at_zero)
    reference, _ = l2m.l2m_metrics(load_run(run), ratio_floor=0.0)  # l2metrics' handling
    assert reference["FT_ratio"] > 3  # a "ratio" that is the numerator over ~1
    values, notes = l2m.l2m_metrics(load_run(run))
    assert values["FT_ratio"] != values["FT_ratio"]  # NaN: undefined
    assert values["FT_contrast"] == reference["FT_contrast"]  # contrasts are untouched
    assert values["BT_ratio"] == values["BT_ratio"]  # its denominators are sound
    (note,) = [n for n in notes if n.startswith("FT ratio")]
    assert "undefined" in note and "denominator below 6" in note, note
    res = build_report([run], tmp_path / "out", bootstrap_reps=20)
    assert res.tables["L2M"].iloc[0]["FT ratio"] == "n/a"
    assert "FT ratio" in (tmp_path / "out" / "notes.md").read_text()


def test_a_report_on_a_live_run_says_it_is_still_running(tmp_path):
    """Issue 55 item 5: a run whose writer still holds its lock (and whose progress.json
    says running) is not "ended mid-sequence": the note says it is running, and where."""
    import json

    from cl_suites.metrics.runs import load_run
    from cl_suites.rundir.runlock import RunDirLock

    run = write_run(tmp_path / "run", returns=HAND, stop_step=200)
    progress = {"state": "running", "phase": "training", "total_step": 250, "total_steps": 300}
    (run / "progress.json").write_text(json.dumps(progress))
    with RunDirLock(run):
        (issue,) = [i for i in load_run(run).issues if "step" in i]
        assert "still running" in issue and "at step 250 of 300" in issue, issue
        assert "ended mid-sequence" not in issue
        notes = build_report([run], tmp_path / "out", bootstrap_reps=20).notes
        assert any("still running" in n for n in notes)
    # the writer gone (killed: progress.json still says running): it ended mid-sequence
    (issue,) = [i for i in load_run(run).issues if "step" in i]
    assert "ended mid-sequence at step 200 of 300" in issue and "still running" not in issue
