"""The ``cl-suites report`` command: every metric, table and figure for a set of runs.

:func:`build_report` loads run directories, groups them by suite and method, and writes
into ``out_dir``::

    report.html                       self-contained page (PNGs embedded as base64)
    summary.{md,csv,tex}              one row per (suite, method): CORA, MEAL, L2M metrics
    <suite>/continual_eval.png        CORA continual-evaluation figure
    <suite>/final_performance.{md,csv,tex}
    <suite>/<method>_F.{png,md,csv,tex}, <suite>/<method>_Z.{...}   diagnostic tables
    notes.md                          every data issue and n/a explained

Single-task-expert runs (method ``"ste"`` or a one-task schedule) are not reported as
methods; they feed the L2M RP and SE metrics of the suite they belong to.
"""

from __future__ import annotations

import base64
import html
import multiprocessing
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from cl_suites.metrics import cora, l2m, meal
from cl_suites.metrics.plots import figure_png, plot_continual_eval, plot_heat_table
from cl_suites.metrics.runs import MetricsInputError, RunData, combined_eval, load_run, task_names
from cl_suites.metrics.stats import iqm_interval, mean_sem
from cl_suites.metrics.tables import (
    cora_text_table,
    fmt_interval,
    fmt_mean_sem,
    task_label,
    to_markdown,
    write_table,
)

L2M_KEYS = (
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
)


@dataclass
class ReportResult:
    """Paths written by :func:`build_report` and the summary frame."""

    out_dir: Path
    html: Path
    files: list[Path] = field(default_factory=list)
    summary: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)


def _normalizers(run: RunData) -> tuple[dict[int, float] | None, str | None]:
    norms = run.metadata.get("score_normalizers")
    if norms:
        return {int(k): float(v) for k, v in norms.items()}, None
    if run.suite.upper().startswith("MEAL"):
        return None, None
    # max |return| per task without copying the whole eval frame
    mx = run.eval["mean_return"].abs().groupby(run.eval["task_id"], observed=True).max()
    zero = sorted(int(t) for t in mx[mx == 0].index)
    norms = {int(t): (float(v) if v > 0 else 1.0) for t, v in mx.items()}
    note = (
        f"{run.suite}: MEAL A/F/P use returns divided by each task's max |return| in the run "
        "(no 'score_normalizers' in metadata)"
    )
    if zero:
        note += f"; task(s) {zero} have all-zero returns and keep raw scores (0)"
    return norms, note


def _meal_per_task(run: RunData, norms: dict[int, float] | None) -> pd.DataFrame:
    s = meal.score_matrix(run.eval, run.schedule, norms)
    tasks = list(s.index)
    last = s.iloc[-1]
    return pd.DataFrame(
        {
            "A": [last[t] for t in tasks],
            "P": [s.loc[t, t] for t in tasks],
            "F": [
                s.loc[t, t] - last[t] if k < len(tasks) - 1 else np.nan for k, t in enumerate(tasks)
            ],
        },
        index=tasks,
    )


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"/>'


def _render_continual(curves: pd.DataFrame, schedule: pd.DataFrame, names, title: str) -> bytes:
    return figure_png(plot_continual_eval(curves, schedule, names, title=title))


def _render_heat(table: cora.CoraTable, names, title: str) -> bytes:
    return figure_png(plot_heat_table(table, names, title=title))


class _Figures:
    """Renders the report's PNGs, in worker processes when ``workers > 1``.

    Figures are independent of each other and of the MEAL/L2M metrics, so rendering them
    in a process pool overlaps matplotlib's rasterisation with the metric computation.
    Each submitted figure gets a placeholder that :meth:`resolve` turns into its PNG (and
    writes the file).
    """

    def __init__(self, workers: int) -> None:
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            # fork: the workers inherit the imported modules (no re-import of pandas and
            # matplotlib); the jobs only touch their own arguments
            self._pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork")
            )

    def submit(self, path: Path, alt: str, fn: Callable[..., bytes], *args) -> dict:
        job = self._pool.submit(fn, *args) if self._pool else None
        return {"path": path, "alt": alt, "job": job, "fn": fn, "args": args}

    @staticmethod
    def resolve(item: dict) -> str:
        job: Future | None = item["job"]
        png = job.result() if job is not None else item["fn"](*item["args"])
        item["path"].write_bytes(png)
        return _img(png, item["alt"])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _html_table(frame: pd.DataFrame) -> str:
    return frame.to_html(classes="tbl", border=0, escape=True)


_CSS = """
body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:24px;max-width:1500px;color:#222}
h1{font-size:22px}h2{font-size:19px;border-bottom:1px solid #ccc;padding-bottom:4px}
h3{font-size:15px}img{max-width:100%;height:auto;margin:6px 0}
table.tbl{border-collapse:collapse;font-size:12px;margin:8px 0}
table.tbl td,table.tbl th{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
table.tbl th{background:#f3f3f3}.note{color:#7a4b00;font-size:13px}
"""


def report_from_runs(
    runs: Sequence[RunData],
    out_dir: str | os.PathLike[str],
    *,
    bootstrap_reps: int = 1000,
    seed: int = 0,
    n_points: int | None = None,
    progress: bool = True,
    figure_workers: int | None = None,
) -> ReportResult:
    """Compute every metric for loaded runs and write the report (see module docstring).

    Args:
        runs: loaded runs (lifelong learners and optional single-task experts).
        out_dir: output directory (created).
        bootstrap_reps: stratified-bootstrap replicates for the IQM intervals.
        seed: bootstrap seed (the report is deterministic).
        n_points: common grid size for curves (``None``: union of logged steps).
        progress: show tqdm progress bars.
        figure_workers: processes that render the figures while the metrics are computed
            (``None`` or ``1``: render in this process; on a shared 2-core machine a pool of
            2 measured no faster).
    """
    workers = 1 if figure_workers is None else int(figure_workers)
    figures = _Figures(workers)
    try:
        return _report(runs, out_dir, bootstrap_reps, seed, n_points, progress, figures)
    finally:
        figures.close()


def _report(
    runs: Sequence[RunData],
    out_dir: str | os.PathLike[str],
    bootstrap_reps: int,
    seed: int,
    n_points: int | None,
    progress: bool,
    figures: _Figures,
) -> ReportResult:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    notes: list[str] = []
    for run in runs:
        notes += [f"{run.path.name} ({run.method}, seed {run.seed}): {msg}" for msg in run.issues]
    learners = [r for r in runs if not r.is_single_task_expert]
    experts = [r for r in runs if r.is_single_task_expert]
    if not learners:
        raise MetricsInputError("no lifelong-learner runs given (only single-task experts)")
    by_suite: dict[str, list[RunData]] = defaultdict(list)
    for r in learners:
        by_suite[r.suite].append(r)
    summary_rows = []
    sections: list[list] = []
    for suite, suite_runs in tqdm(sorted(by_suite.items()), desc="suites", disable=not progress):
        suite_dir = out / "".join(c if c.isalnum() or c in "-_." else "_" for c in suite)
        suite_dir.mkdir(exist_ok=True)
        schedule = suite_runs[0].schedule
        for r in suite_runs[1:]:
            if not r.schedule[["task_id", "start_step", "end_step"]].equals(
                schedule[["task_id", "start_step", "end_step"]]
            ):
                raise MetricsInputError(
                    f"{r.path}: schedule differs from {suite_runs[0].path} in suite {suite}; "
                    "runs of one suite must share a schedule"
                )
        names = task_names(suite_runs)
        window = suite_runs[0].smoothing_window
        frame = combined_eval(suite_runs)
        sec = [f"<h2>{html.escape(suite)}</h2>"]
        sec.append(
            f"<p>{len(suite_runs)} runs; smoothing window w = {window} eval points; "
            f"metrics use the test split where a task has one.</p>"
        )
        # --- continual evaluation
        curves = cora.continual_eval_curves(frame, window, n_points)
        p = suite_dir / "continual_eval.png"
        fig = figures.submit(
            p,
            "continual evaluation",
            _render_continual,
            curves,
            schedule,
            names,
            f"{suite}: continual evaluation",
        )
        files.append(p)
        sec += ["<h3>Continual evaluation</h3>", fig]
        fp = cora.final_performance(curves)
        fp_tab = fp.assign(
            cell=[fmt_mean_sem(m, s, 2) for m, s in zip(fp["mean"], fp["sem"], strict=False)],
            task=[task_label(int(t), names) for t in fp["task_id"]],
        ).pivot_table(
            index="task",
            columns=["method", "split"],
            values="cell",
            aggfunc="first",
            observed=False,
        )
        fp_tab.columns = [f"{m} ({s})" for m, s in fp_tab.columns]
        fp_tab = fp_tab.fillna("n/a")
        files += write_table(fp_tab, suite_dir / "final_performance", f"{suite}: final performance")
        sec += ["<h3>Final performance (mean ± SEM)</h3>", _html_table(fp_tab)]
        # --- CORA F / Z
        cm = cora.cora_matrices(frame, schedule, window)
        notes += [f"{suite}: {n}" for n in cm.notes]
        methods = sorted({r.method for r in suite_runs})
        ste = [e for e in experts if e.suite == suite]
        ste_lx = l2m.ste_curves(ste)  # the experts' LX curves, shared by every run
        for method in tqdm(methods, desc=f"{suite} methods", disable=not progress, leave=False):
            mruns = [r for r in suite_runs if r.method == method]
            seeds = len(mruns)
            if seeds == 1:
                notes.append(f"{suite}/{method}: a single seed - no error bars (± SEM) are shown")
            vals = cm.values[cm.values["method"] == method]
            rec: dict[str, object] = {"suite": suite, "method": method, "seeds": seeds}
            sec.append(f"<h3>{html.escape(method)} ({seeds} seed{'s' if seeds != 1 else ''})</h3>")
            for metric in ("F", "Z"):
                tab = cora.cora_table(vals, metric, cm.order)
                rec[f"CORA {metric}"] = fmt_mean_sem(
                    tab.mean.loc["Avg", "Avg"], tab.sem.loc["Avg", "Avg"]
                )
                text = cora_text_table(tab, names)
                stem = suite_dir / f"{method}_{metric}"
                files += write_table(text, stem, f"{suite} {method}: {metric} (x10)")
                p = stem.with_suffix(".png")
                sec.append(
                    figures.submit(
                        p, f"{method} {metric}", _render_heat, tab, names, f"{suite} - {method}"
                    )
                )
                files.append(p)
            # --- MEAL
            per_run_tasks = []
            for r in mruns:
                norms, note = _normalizers(r)
                if note and note not in notes:
                    notes.append(note)
                per_run_tasks.append(_meal_per_task(r, norms))
            for key in ("A", "F", "P"):
                # F is undefined for the last task (eq. 2 sums over i < N)
                run_vals = [
                    (t[key].iloc[:-1] if key == "F" else t[key]).mean(skipna=False)
                    for t in per_run_tasks
                ]
                m, s, _ = mean_sem(run_vals)
                rec[f"MEAL {key}"] = fmt_mean_sem(m, s, 3)
                # IQM over (run, task) scores; F is undefined for the last task
                cols = per_run_tasks[0].index[:-1] if key == "F" else per_run_tasks[0].index
                rows = [t.loc[cols, key].to_numpy(dtype=float) for t in per_run_tasks]
                rows = [x for x in rows if x.size and np.isfinite(x).all()]
                mat = np.vstack(rows) if rows else np.empty((0, 0))
                if mat.size:
                    rec[f"MEAL {key} IQM [95% CI]"] = fmt_interval(
                        *iqm_interval(mat, reps=bootstrap_reps, seed=seed), digits=3
                    )
                else:
                    rec[f"MEAL {key} IQM [95% CI]"] = "n/a"
            # --- L2M
            l2 = defaultdict(list)
            for r in mruns:
                values, l2notes = l2m.l2m_metrics(r, ste, ste_lx=ste_lx)
                for n in l2notes:
                    msg = f"{suite}/{method}: L2M {n}"
                    if msg not in notes:
                        notes.append(msg)
                for k in L2M_KEYS:
                    l2[k].append(values[k])
            for k in L2M_KEYS:
                m, s, _ = mean_sem(l2[k])
                rec[f"L2M {k}"] = fmt_mean_sem(m, s, 3)
            summary_rows.append(rec)
        sections.append(sec)
    summary = pd.DataFrame(summary_rows).set_index(["suite", "method"])
    files += write_table(summary, out / "summary", "Summary (mean ± SEM over seeds)")
    notes_md = out / "notes.md"
    notes_md.write_text(
        "# Notes\n\n" + "".join(f"* {n}\n" for n in notes) if notes else "# Notes\n\nNone.\n"
    )
    files.append(notes_md)
    page = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>cl-suites report</title>",
        f"<style>{_CSS}</style></head><body><h1>cl-suites report</h1>",
        "<p>CORA F and Z are x10 (F: positive = forgetting; Z: positive = forward transfer). "
        "MEAL A/F/P are on normalised scores. L2M metrics use appendix-A preprocessing "
        "(smoothing, scaling to [1, 101]). Cells: mean ± SEM over seeds; 'n/a' = not "
        "computable (see notes); '-' = undefined by the metric.</p>",
        "<h2>Summary</h2>",
        _html_table(summary),
        "<h2>Notes</h2>",
        "<ul>" + "".join(f"<li class='note'>{html.escape(n)}</li>" for n in notes) + "</ul>"
        if notes
        else "<p>None.</p>",
        *(
            "\n".join(x if isinstance(x, str) else figures.resolve(x) for x in sec)
            for sec in sections
        ),
        "</body></html>",
    ]
    html_path = out / "report.html"
    html_path.write_text("\n".join(page))
    files.append(html_path)
    return ReportResult(out, html_path, files, summary, notes)


def build_report(
    run_dirs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] = "report",
    *,
    bootstrap_reps: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> ReportResult:
    """Entry point of ``cl-suites report RUN_DIR [RUN_DIR ...] [--out DIR]``.

    Loads every run directory (single-task-expert runs included) and calls
    :func:`report_from_runs`. Raises :class:`MetricsInputError` naming the bad run/value.
    """
    dirs = list(run_dirs)
    if not dirs:
        raise MetricsInputError("no run directories given")
    runs = [load_run(d) for d in tqdm(dirs, desc="loading runs", disable=not progress)]
    return report_from_runs(
        runs, out_dir, bootstrap_reps=bootstrap_reps, seed=seed, progress=progress
    )


def format_summary_markdown(result: ReportResult) -> str:
    """The summary table of a report as Markdown (for printing by the CLI)."""
    return to_markdown(result.summary) if result.summary is not None else ""
