"""Formatting metric tables as text and writing them as Markdown, CSV and LaTeX.

Cell conventions used by every table of the report:

* ``"3.8 ± 0.3"`` mean ± standard error over seeds;
* ``"3.8"`` a mean from a single seed (no error bar; the report says so);
* ``"-"`` a cell the metric does not define (e.g. ``F_ij`` with ``i >= j``);
* ``"n/a"`` a defined cell without data (a run ended early, no expert runs, ...); the
  report's notes say why. A NaN is never printed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
from rich.markup import escape
from rich.table import Table

from cl_suites.metrics.cora import CoraTable
from cl_suites.metrics.safe_names import md_escape, neutralize_frame, tex_escape

NA = "n/a"
UNDEFINED = "-"


def fmt_mean_sem(mean: float, sem: float | None = None, digits: int = 1) -> str:
    """``"m ± s"``; ``"m"`` when ``sem`` is NaN/None; ``"n/a"`` when ``mean`` is NaN."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return NA
    if sem is None or (isinstance(sem, float) and math.isnan(sem)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sem:.{digits}f}"


def fmt_interval(point: float, low: float, high: float, digits: int = 2) -> str:
    """``"p [lo, hi]"`` or ``"n/a"``."""
    if any(math.isnan(v) for v in (point, low, high)):
        return NA
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def task_label(task_id: int, names: dict[int, str]) -> str:
    """CORA-style label ``"<id>-<name>"``."""
    return f"{task_id}-{names.get(task_id, task_id)}"


def cora_text_table(table: CoraTable, names: dict[int, str], digits: int = 1) -> pd.DataFrame:
    """A :class:`CoraTable` as strings, CORA appendix E layout (F: columns 1..N-1, rows
    0..N-2; Z: columns 0..N-2, rows 1..N-1; plus ``Avg ± SEM``)."""
    order = [c for c in table.mean.columns if c != "Avg"]
    if table.metric == "F":
        rows, cols = order[:-1], order[1:]
    else:
        rows, cols = order[1:], order[:-1]
    pos = {t: k for k, t in enumerate(order)}
    out = pd.DataFrame(index=[*rows, "Avg"], columns=[*cols, "Avg"], dtype=object)
    for i in out.index:
        for j in out.columns:
            defined = (
                i == "Avg"
                or j == "Avg"
                or (table.metric == "F" and pos[i] < pos[j])
                or (table.metric == "Z" and pos[i] > pos[j])
            )
            if not defined:
                out.loc[i, j] = UNDEFINED
            elif i == "Avg" and j != "Avg" and table.n.loc[i, j] == 0:
                out.loc[i, j] = NA
            else:
                out.loc[i, j] = fmt_mean_sem(table.mean.loc[i, j], table.sem.loc[i, j], digits)
    out.index = [task_label(i, names) if i != "Avg" else "Avg ± SEM" for i in out.index]
    out.columns = [task_label(j, names) if j != "Avg" else "Avg ± SEM" for j in out.columns]
    return out


def to_markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """GitHub-flavoured Markdown table (no extra dependency); every cell and label escaped
    (:func:`~cl_suites.metrics.safe_names.md_escape`), so names render as text."""
    df = frame.reset_index() if index else frame
    cols = [md_escape(c) if str(c) != "index" else "" for c in df.columns]
    esc = [[md_escape(v) for v in row] for row in df.astype(str).to_numpy()]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines) + "\n"


def to_latex(frame: pd.DataFrame, caption: str | None = None) -> str:
    """A ``tabular`` (booktabs) with ``±`` as ``$\\pm$`` and every LaTeX special escaped
    (:func:`~cl_suites.metrics.safe_names.tex_escape`: names typeset as text, run nothing).
    """
    df = frame.reset_index()
    head = [tex_escape(c) if str(c) != "index" else "" for c in df.columns]
    lines = []
    if caption:
        lines.append(f"% {tex_escape(caption)}")
    lines += [
        r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}",
        r"\toprule",
        " & ".join(head) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(tex_escape(v) for v in row) + r" \\" for row in df.astype(str).to_numpy()]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(frame: pd.DataFrame, stem: str | os.PathLike[str], caption: str = "") -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.tex``; returns the paths.

    CSV cells (and labels) that a spreadsheet would run as a formula are neutralised
    (:func:`~cl_suites.metrics.safe_names.neutralize_frame`).
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    # names may contain dots ("ewc.v2_F"): append the extension, never replace a "suffix"
    paths = [stem.parent / f"{stem.name}.{ext}" for ext in ("md", "csv", "tex")]
    md = (f"**{md_escape(caption)}**\n\n" if caption else "") + to_markdown(frame)
    paths[0].write_text(md)
    neutralize_frame(frame).to_csv(paths[1])
    paths[2].write_text(to_latex(frame, caption))
    return paths


def rich_table(frame: pd.DataFrame, title: str = "") -> Table:
    """A :class:`rich.table.Table` of ``frame`` (index levels as the first columns).

    Markup characters in the cells are escaped, so names like ``[red]`` print as text.
    """
    df = frame.reset_index()
    table = Table(title=escape(title) if title else None, title_justify="left")
    for k, col in enumerate(df.columns):
        table.add_column(escape(str(col)), justify="left" if k < frame.index.nlevels else "right")
    for row in df.astype(str).to_numpy():
        table.add_row(*(escape(v) for v in row))
    return table
