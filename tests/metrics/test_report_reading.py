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
