"""Where the report's files go, and its tables and notes written as Markdown, CSV and LaTeX.

Suite and method names become file names only through
:func:`~cl_suites.metrics.safe_names.safe_name` (no path can leave the report directory);
:func:`~cl_suites.metrics.tables.write_table` escapes every cell for its format and
neutralises CSV formulas.
"""

from __future__ import annotations

from pathlib import Path

from cl_suites.metrics.report_data import FAMILIES, SUMMARY_TITLES, SuiteResult, Summary
from cl_suites.metrics.safe_names import md_text, path_inside, safe_name
from cl_suites.metrics.tables import write_table


def suite_dir(out: Path, suite: str) -> Path:
    """``out/<suite>`` (created), the suite's name made a safe path component."""
    path = path_inside(out, safe_name(suite, what="suite"))
    path.mkdir(exist_ok=True)
    return path


def cora_stem(suite_dir: Path, method: str, metric: str, ext: str = "") -> Path:
    """``suite_dir/<method>_<metric><ext>``: a method's CORA F or Z table (``ext`` ``""``)
    or figure (``".png"``). Appends ``ext``; never replaces a dotted name's "suffix"."""
    return suite_dir / f"{safe_name(method, what='method')}_{metric}{ext}"


def write_suite_tables(res: SuiteResult, suite_dir: Path) -> list[Path]:
    """A suite's final performance, its methods' CORA F/Z tables and the papers'
    baselines for it; returns the paths."""
    files = write_table(
        res.final_performance, suite_dir / "final_performance", f"{res.suite}: {res.final_title}"
    )
    for m in res.methods:
        for metric, table in m.cora_text.items():
            caption = f"{res.suite} {m.method}: {metric} (x10)"
            files += write_table(table, cora_stem(suite_dir, m.method, metric), caption)
    if res.baselines is not None:
        files += write_table(
            res.baselines, suite_dir / "published_baselines", f"{res.suite}: published baselines"
        )
    return files


def write_summary_tables(summary: Summary, out: Path) -> list[Path]:
    """``summary``, ``summary_{cora,meal,l2m}`` and (when a paper reports a run)
    ``published``, each as ``.md``, ``.csv`` and ``.tex``; returns the paths."""
    files = write_table(summary.summary, out / "summary", "Summary (mean ± SEM over seeds)")
    for key in FAMILIES:
        files += write_table(
            summary.tables[key], out / f"summary_{key.lower()}", SUMMARY_TITLES[key]
        )
    if len(summary.comparison):
        files += write_table(
            summary.comparison.set_index(["suite", "method", "metric", "task", "split"]),
            out / "published",
            SUMMARY_TITLES["Published"],
        )
    return files


def write_notes(notes: list[str], out: Path) -> Path:
    """``out/notes.md``: every note as a Markdown bullet that reads as written
    (:func:`~cl_suites.metrics.safe_names.md_text`), or "None."."""
    path = out / "notes.md"
    path.write_text(
        "# Notes\n\n" + "".join(f"* {md_text(n)}\n" for n in notes)
        if notes
        else "# Notes\n\nNone.\n"
    )
    return path
