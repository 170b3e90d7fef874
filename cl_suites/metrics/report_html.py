"""``report.html``: the report's tables, figures and videos on one page, rendered from the
Jinja2 template ``templates/report.html.j2`` (package data) with autoescaping on.

Every name and note reaches the page through the template, so autoescaping turns markup
in it (``<script>``, ``<img onerror>``) into text; the tables come escaped from pandas
(:meth:`pandas.DataFrame.to_html` with ``escape=True``) and the figures are base64 PNGs.
"""

from __future__ import annotations

import base64
import functools
import os
import urllib.parse
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from cl_suites.core.video import poster_path
from cl_suites.metrics.published import protocol_notes, table_protocols
from cl_suites.metrics.report_data import FAMILIES, SUMMARY_TITLES, SuiteResult, Summary
from cl_suites.metrics.report_figures import PendingFigure, SuiteFigures
from cl_suites.metrics.runs import RunData
from cl_suites.metrics.tables import task_label
from cl_suites.metrics.videos import find_videos, latest_per_task

TEMPLATE = "templates/report.html.j2"
"""The page's template, relative to the :mod:`cl_suites.metrics` package."""


@functools.cache
def _template() -> jinja2.Template:
    text = resources.files("cl_suites.metrics").joinpath(TEMPLATE).read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    return env.from_string(text)


def html_table(frame: pd.DataFrame, verdicts: bool = False) -> Markup:
    """``frame`` as an escaped HTML table whose cells may break before ``±`` and at spaces,
    so wide tables fit the page instead of overflowing it; ``verdicts=True`` colours the
    ``agrees`` / ``differs`` cells."""
    text = frame.to_html(classes="tbl wrap", border=0, escape=True).replace(" ± ", " ±&nbsp;")
    for verdict in ("agrees", "differs") if verdicts else ():
        text = text.replace(f"<td>{verdict}</td>", f"<td class='{verdict}'>{verdict}</td>")
    return Markup(text)  # pandas escaped every cell and label


def _image(fig: PendingFigure) -> dict[str, str]:
    return {"alt": fig.alt, "data": base64.b64encode(fig.png()).decode("ascii")}


def _videos(runs: Sequence[RunData], names: dict[int, str], out: Path) -> list[dict]:
    """Per run with videos: the latest evaluation video of every task and split (embedded)
    and the others (linked), paths relative to the report."""

    def src(path: Path) -> str:
        return urllib.parse.quote(Path(os.path.relpath(path.resolve(), out.resolve())).as_posix())

    def label(v) -> str:
        if v.task_id is None:
            return v.path.name
        return f"{task_label(v.task_id, names)} ({v.split}), step {v.total_step:,}"

    groups = []
    for run in runs:
        videos = find_videos(run.path)
        if not videos:
            continue
        latest = latest_per_task(videos)
        shown = []
        for v in latest:
            poster = poster_path(v.path)  # older runs have none: the browser's first frame
            shown.append(
                {
                    "src": src(v.path),
                    "label": label(v),
                    "poster": src(poster) if poster.exists() else None,
                }
            )
        others = [{"src": src(v.path), "label": label(v)} for v in videos if v not in latest]
        groups.append(
            {
                "run": run.path.name,
                "seed": run.seed,
                "n": len(videos),
                "latest": shown,
                "others": others,
            }
        )
    return groups


def _suite(res: SuiteResult, figs: SuiteFigures, out: Path) -> dict:
    return {
        "name": res.suite,
        "runs": len(res.runs),
        "window": res.window,
        "final_title": res.final_title,
        "window_warning": res.window_warning,
        "continual": _image(figs.continual),
        "final_performance": html_table(res.final_performance),
        "methods": [
            {
                "name": m.method,
                "seeds": m.seeds,
                "figures": [_image(f) for f in figs.heat[m.method].values()],
            }
            for m in res.methods
        ],
        "finals": None if res.finals is None else html_table(res.finals, verdicts=True),
        "baselines": None if res.baselines is None else html_table(res.baselines),
        "n_baselines": 0 if res.baselines is None else len(res.baselines),
        "baseline_protocols": [{"source": s, "text": t} for s, t in table_protocols(res.suite)],
        "videos": _videos(res.runs, res.names, out),
        "plasticity": None if figs.plasticity is None else _image(figs.plasticity),
        "plasticity_task_end": _maybe_table(figs.plasticity_tables.get("task_end")),
        "plasticity_meal": _maybe_table(figs.plasticity_tables.get("meal")),
    }


def _maybe_table(frame: pd.DataFrame | None) -> str | None:
    return None if frame is None or frame.empty else html_table(frame)


def _published(table: pd.DataFrame) -> dict:
    """The published-results table, the protocol behind each published table where its
    authors have described it, and each (suite, method)'s protocol differences."""
    diffs = table.reset_index().drop_duplicates(["suite", "method"])
    return {
        "title": SUMMARY_TITLES["Published"],
        "table": html_table(
            table.drop(columns=["protocol differences", "paper protocol", "task", "split"]),
            verdicts=True,
        ),
        "protocols": [{"source": s, "text": t} for s, t in protocol_notes(table)],
        "differences": [
            {"run": f"{s} / {m}", "text": str(d)}
            for s, m, d in zip(
                diffs["suite"], diffs["method"], diffs["protocol differences"], strict=True
            )
        ],
    }


def render_html(
    summary: Summary,
    suites: Sequence[tuple[SuiteResult, SuiteFigures]],
    notes: Sequence[str],
    out: Path,
) -> str:
    """The page of a report written to ``out`` (video links are relative to ``out``);
    renders (or waits for) every figure and writes its PNG."""
    published = summary.tables.get("Published")
    return _template().render(
        summary=[
            {"title": SUMMARY_TITLES[key], "table": html_table(summary.tables[key])}
            for key in FAMILIES
        ],
        published=None if published is None else _published(published),
        notes=notes,
        suites=[_suite(res, figs, out) for res, figs in suites],
    )
