"""The ``cl-suites report`` command: every metric, table and figure for a set of runs.

:func:`build_report` loads run directories, groups them by suite and method, and writes
into ``out_dir``::

    report.html                       one page: figures embedded (base64 PNG), evaluation
                                      videos linked relative to the page
    summary.{md,csv,tex}              one row per (suite, method): every metric
    summary_{cora,meal,l2m}.{md,csv,tex}   the same, one table per metric family
    published.{md,csv,tex}            the run next to the papers' values, with agreement
                                      and protocol differences (when a paper reports it)
    <suite>/continual_eval.png        CORA continual-evaluation figure
    <suite>/final_performance.{md,csv,tex}
    <suite>/<method>_F.{png,md,csv,tex}, <suite>/<method>_Z.{...}   diagnostic tables
    notes.md                          every data issue and n/a explained

Suite and method names become file names only through
:func:`~cl_suites.metrics.safe_names.safe_name` (no path can leave ``out_dir``), and CSV
cells are neutralised against spreadsheet formulas. Single-task-expert runs (method
``"ste"`` or a one-task schedule) are not reported as methods; they feed the L2M RP and SE
metrics (matched by task name).
"""

from __future__ import annotations

import base64
import html
import multiprocessing
import os
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cl_suites.core.video import poster_path
from cl_suites.metrics import cora, l2m, meal, published
from cl_suites.metrics.plots import figure_png, plot_continual_eval, plot_heat_table
from cl_suites.metrics.runs import MetricsInputError, RunData, combined_eval, load_run, task_names
from cl_suites.metrics.safe_names import md_escape, path_inside, safe_name
from cl_suites.metrics.stats import iqm_interval, mean_sem
from cl_suites.metrics.tables import (
    cora_text_table,
    fmt_interval,
    fmt_mean_sem,
    task_label,
    write_table,
)
from cl_suites.metrics.videos import find_videos, latest_per_task

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


L2M_LABELS = {
    "PM": "PM",
    "FT_contrast": "FT contrast",
    "FT_ratio": "FT ratio",
    "BT_contrast": "BT contrast",
    "BT_ratio": "BT ratio",
    "PR": "PR",
    "CG": "CG",
    "LB": "LB",
    "RP": "RP",
    "SE": "SE",
}
PLASTICITY_BINS = 100
"""Points per repetition of the training-score trace behind MEAL's AUC-loss/FPR/RAUC."""
SUMMARY_TITLES = {
    "CORA": "CORA: forgetting F and zero-shot transfer Z (x10, first cycle; mean ± SEM)",
    "MEAL": "MEAL: A, F, P on normalised scores (mean ± SEM; IQM with 95% bootstrap CI)",
    "L2M": "DARPA L2M lifetime metrics (appendix-A preprocessing; mean ± SEM)",
    "Published": (
        f"Published results: paper vs this report (agreement = |difference| <= "
        f"{published.AGREEMENT_Z:g} x combined error)"
    ),
}


@dataclass
class ReportResult:
    """Paths written by :func:`build_report` and the summary frames.

    Attributes:
        out_dir: the report directory.
        html: ``report.html``.
        files: every file written.
        summary: all summary columns, one row per (suite, method).
        notes: data issues and explanations of every ``n/a``.
        tables: the summary split by metric family: ``"CORA"``, ``"MEAL"``, ``"L2M"``, and
            ``"Published"`` (the papers' values next to ours, per-task final returns folded
            into one row; absent when no paper reports a suite and method of the report).
        comparison: every published value next to ours (per-task final returns included).
    """

    out_dir: Path
    html: Path
    files: list[Path] = field(default_factory=list)
    summary: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    comparison: pd.DataFrame | None = None


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


def _meal_per_task(run: RunData, norms: dict[int, float] | None, forgetting: str) -> pd.DataFrame:
    """Per-task ``A`` (final score), ``P`` (score right after training) and ``F``
    (:func:`~cl_suites.metrics.meal.forgetting_per_task`; NaN for the last task)."""
    s = meal.score_matrix(run.eval, run.schedule, norms)
    tasks = list(s.index)
    last = s.iloc[-1]
    f = meal.forgetting_per_task(run.eval, run.schedule, norms, method=forgetting)
    return pd.DataFrame(
        {
            "A": [last[t] for t in tasks],
            "P": [s.loc[t, t] for t in tasks],
            "F": f.reindex(tasks).to_numpy(dtype=float),
        },
        index=tasks,
    )


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"/>'


def _render_continual(
    curves: pd.DataFrame,
    schedule: pd.DataFrame,
    names,
    title: str,
    step_unit: str,
    references=None,
) -> bytes:
    return figure_png(
        plot_continual_eval(
            curves, schedule, names, title=title, step_unit=step_unit, references=references
        )
    )


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


@dataclass(frozen=True)
class _Settings:
    """Options of one report (see :func:`report_from_runs`)."""

    bootstrap_reps: int
    seed: int
    n_points: int | None
    meal_forgetting: str


def _html_table(frame: pd.DataFrame, wrap: bool = False) -> str:
    """An escaped HTML table; ``wrap=True`` lets cells break before ``±`` and at spaces, so
    wide summaries fit the page instead of overflowing it."""
    text = frame.to_html(classes="tbl wrap" if wrap else "tbl", border=0, escape=True)
    return text.replace(" ± ", " ±&nbsp;") if wrap else text


_CSS = """
body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:24px;max-width:1500px;color:#222}
h1{font-size:22px}h2{font-size:19px;border-bottom:1px solid #ccc;padding-bottom:4px}
h3{font-size:15px}img{max-width:100%;height:auto;margin:6px 0}
table.tbl{border-collapse:collapse;font-size:12px;margin:8px 0;max-width:100%}
table.tbl td,table.tbl th{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
table.tbl th{background:#f3f3f3}table.wrap td,table.wrap th{white-space:normal}
.note{color:#7a4b00;font-size:13px}.agrees{color:#216e2f}.differs{color:#a3261c}
.videos{display:flex;flex-wrap:wrap;gap:10px}.videos figure{margin:0;font-size:12px}
.videos video{width:256px;max-width:100%;background:#000}
details{margin:6px 0}
"""


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not enabled,
        transient=True,
    )


def report_from_runs(
    runs: Sequence[RunData],
    out_dir: str | os.PathLike[str],
    *,
    bootstrap_reps: int = 1000,
    seed: int = 0,
    n_points: int | None = None,
    progress: bool = False,
    figure_workers: int | None = None,
    meal_forgetting: str = "weighted",
) -> ReportResult:
    """Compute every metric for loaded runs and write the report (see module docstring).

    Args:
        runs: loaded runs (lifelong learners and optional single-task experts).
        out_dir: output directory (created).
        bootstrap_reps: stratified-bootstrap replicates for the IQM intervals.
        seed: bootstrap seed (the report is deterministic).
        n_points: common grid size for curves (``None``: union of logged steps).
        progress: show a (rich) progress bar.
        figure_workers: processes that render the figures while the metrics are computed
            (``None`` or ``1``: render in this process; on a shared 2-core machine a pool of
            2 measured no faster).
        meal_forgetting: MEAL ``F`` definition (:data:`~cl_suites.metrics.meal.
            FORGETTING_METHODS`): ``"weighted"`` (released code, Table 2), ``"paper"``
            (eq. 2) or ``"peak_final"``.

    Raises:
        MetricsInputError: unusable runs, or an output directory that cannot be written
            (the message names the path and the reason).
    """
    if meal_forgetting not in meal.FORGETTING_METHODS:
        raise ValueError(
            f"meal_forgetting must be one of {list(meal.FORGETTING_METHODS)}, "
            f"got {meal_forgetting!r}"
        )
    settings = _Settings(bootstrap_reps, seed, n_points, meal_forgetting)
    workers = 1 if figure_workers is None else int(figure_workers)
    figures = _Figures(workers)
    try:
        return _report(runs, out_dir, settings, progress, figures)
    except OSError as e:
        where = e.filename or out_dir
        raise MetricsInputError(f"cannot write the report to {where}: {e.strerror or e}") from e
    finally:
        figures.close()


def _final_frame(fp: pd.DataFrame, method: str, names: dict[int, str]) -> pd.DataFrame:
    """Final performance of one method as ``task_name, split, mean, sem``."""
    rows = fp[fp["method"] == method]
    return pd.DataFrame(
        {
            "task_name": [names.get(int(t), str(t)) for t in rows["task_id"]],
            "split": rows["split"].astype(str).to_numpy(),
            "mean": rows["mean"].to_numpy(dtype=float),
            "sem": rows["sem"].to_numpy(dtype=float),
        }
    )


def _plasticity(
    runs: Sequence[RunData], norms: Sequence[dict[int, float] | None]
) -> tuple[dict[str, tuple[float, float]], str | None]:
    """MEAL Table 3 metrics (AUC-loss, FPR, RAUC; released-code variant) per seed from the
    training-episode returns over the repeated sequence, as mean and SEM over seeds."""
    per_seed = []
    for run, norm in zip(runs, norms, strict=True):
        try:
            traces = meal.training_traces(run.episodes, run.schedule, norm, PLASTICITY_BINS)
        except (MetricsInputError, KeyError) as e:
            return {}, f"AUC-loss/FPR/RAUC are n/a: {run.path.name}: {e}"
        per_seed.append(meal.sequence_plasticity(traces))
    out = {}
    for key, name in (("auc_loss", "AUC-loss"), ("fpr", "FPR"), ("rauc", "RAUC")):
        m, s, _ = mean_sem([p[key] for p in per_seed])
        out[name] = (m, s)
    return out, None


def _video_section(runs: Sequence[RunData], names: dict[int, str], out: Path) -> list[str]:
    """HTML embedding the latest evaluation video of every task and split of each run and
    linking the others (paths relative to the report)."""
    sec: list[str] = []
    for run in runs:
        videos = find_videos(run.path)
        if not videos:
            continue

        def src(path: Path) -> str:
            rel = os.path.relpath(path.resolve(), out.resolve())
            return html.escape(urllib.parse.quote(Path(rel).as_posix()), quote=True)

        def label(v) -> str:
            if v.task_id is None:
                return v.path.name
            return f"{task_label(v.task_id, names)} ({v.split}), step {v.total_step:,}"

        latest = latest_per_task(videos)
        sec.append(
            f"<h4>{html.escape(run.path.name)} (seed {run.seed}): {len(videos)} video(s)</h4>"
        )
        sec.append("<div class='videos'>")
        for v in latest:
            poster = poster_path(v.path)  # older runs have none: the browser's first frame
            shown = (
                f"preload='none' poster='{src(poster)}'"
                if poster.exists()
                else "preload='metadata'"
            )
            sec.append(
                f"<figure><video controls {shown} src='{src(v.path)}'></video>"
                f"<figcaption>{html.escape(label(v))}</figcaption></figure>"
            )
        sec.append("</div>")
        others = [v for v in videos if v not in latest]
        if others:
            items = "".join(
                f"<li><a href='{src(v.path)}'>{html.escape(label(v))}</a></li>" for v in others
            )
            sec.append(
                f"<details><summary>{len(others)} earlier video(s)</summary><ul>{items}</ul>"
                "</details>"
            )
    if sec:
        sec.insert(0, "<h3>Evaluation videos</h3>")
    return sec


def _report(
    runs: Sequence[RunData],
    out_dir: str | os.PathLike[str],
    settings: _Settings,
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
    rows: dict[str, list[dict]] = {"CORA": [], "MEAL": [], "L2M": []}
    comparisons: list[pd.DataFrame] = []
    sections: list[list] = []
    n_jobs = sum(len({r.method for r in v}) for v in by_suite.values())
    with _progress(progress) as bar:
        job = bar.add_task("report", total=n_jobs)
        for suite, suite_runs in sorted(by_suite.items()):
            suite_dir = path_inside(out, safe_name(suite, what="suite"))
            suite_dir.mkdir(exist_ok=True)
            # the suite's experts' LX blocks (matched to tasks by name), shared by its runs
            ste_lx = l2m.ste_curves([e for e in experts if e.suite == suite])
            sec = _suite_section(
                suite,
                suite_runs,
                suite_dir,
                out,
                ste_lx,
                rows,
                comparisons,
                notes,
                files,
                figures,
                settings,
                lambda method, suite=suite: bar.update(
                    job, advance=1, description=f"{suite} / {method}"
                ),
            )
            sections.append(sec)
    index = ["suite", "method"]
    tables = {k: pd.DataFrame(v).set_index(index) for k, v in rows.items()}
    summary = pd.concat(
        [
            tables["CORA"][["seeds", "CORA F", "CORA Z"]],
            tables["MEAL"].drop(columns="seeds"),
            tables["L2M"].drop(columns="seeds").add_prefix("L2M "),
        ],
        axis=1,
    )
    tables["CORA"] = tables["CORA"].rename(columns={"CORA F": "F (x10)", "CORA Z": "Z (x10)"})
    tables["MEAL"] = tables["MEAL"].rename(columns=lambda c: c.removeprefix("MEAL "))
    tables["L2M"] = tables["L2M"].rename(columns=L2M_LABELS)
    comparison = (
        pd.concat(comparisons, ignore_index=True)
        if comparisons
        else pd.DataFrame(columns=list(published.COMPARISON_COLUMNS))
    )
    files += write_table(summary, out / "summary", "Summary (mean ± SEM over seeds)")
    for key, stem in (("CORA", "summary_cora"), ("MEAL", "summary_meal"), ("L2M", "summary_l2m")):
        files += write_table(tables[key], out / stem, SUMMARY_TITLES[key])
    if len(comparison):
        tables["Published"] = published.comparison_summary(comparison).set_index(
            ["suite", "method", "metric"]
        )
        files += write_table(
            comparison.set_index(["suite", "method", "metric", "task", "split"]),
            out / "published",
            SUMMARY_TITLES["Published"],
        )
    notes_md = out / "notes.md"
    notes_md.write_text(
        "# Notes\n\n" + "".join(f"* {md_escape(n)}\n" for n in notes)
        if notes
        else "# Notes\n\nNone.\n"
    )
    files.append(notes_md)
    page = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>cl-suites report</title>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<style>{_CSS}</style></head><body><h1>cl-suites report</h1>",
        "<p>CORA F and Z are x10 (F: positive = forgetting; Z: positive = forward transfer). "
        "MEAL A/F/P are on normalised scores. L2M metrics use appendix-A preprocessing "
        "(smoothing, scaling to [1, 101]). Cells: mean ± SEM over seeds; 'n/a' = not "
        "computable (see notes); '-' = undefined by the metric.</p>",
        "<h2>Summary</h2>",
    ]
    for key in ("CORA", "MEAL", "L2M"):
        page += [f"<h3>{html.escape(SUMMARY_TITLES[key])}</h3>", _html_table(tables[key], True)]
    if "Published" in tables:
        page += _published_html(tables["Published"])
    page += [
        "<h2>Notes</h2>",
        "<ul>" + "".join(f"<li class='note'>{html.escape(n)}</li>" for n in notes) + "</ul>"
        if notes
        else "<p>None.</p>",
    ]
    page += [
        "\n".join(x if isinstance(x, str) else figures.resolve(x) for x in sec) for sec in sections
    ]
    page.append("</body></html>")
    html_path = out / "report.html"
    html_path.write_text("\n".join(page))
    files.append(html_path)
    return ReportResult(out, html_path, files, summary, notes, tables, comparison)


def _published_html(table: pd.DataFrame) -> list[str]:
    """The published-results table (agreement coloured) and the protocol differences."""
    shown = table.drop(columns=["protocol differences", "task", "split"])
    text = _html_table(shown, True)
    for verdict in ("agrees", "differs"):
        text = text.replace(f"<td>{verdict}</td>", f"<td class='{verdict}'>{verdict}</td>")
    diffs = table.reset_index().drop_duplicates(["suite", "method"])
    items = "".join(
        f"<li><b>{html.escape(f'{s} / {m}')}</b>: {html.escape(str(d))}</li>"
        for s, m, d in zip(
            diffs["suite"], diffs["method"], diffs["protocol differences"], strict=True
        )
    )
    return [
        f"<h3>{html.escape(SUMMARY_TITLES['Published'])}</h3>",
        "<p>Errors: CORA values are mean ± SEM over seeds; MEAL Table 2's ± is a 95% "
        "confidence half-width (1.96 SEM, MEAL's results_table.py), converted to a SEM "
        "here; Table 3 gives none. A printed error is at least half a unit of its last "
        "digit. Per-task final returns are in each suite's section.</p>",
        text,
        "<p>Protocol differences between these runs and the paper's:</p>",
        f"<ul>{items}</ul>",
    ]


def _suite_section(
    suite: str,
    suite_runs: list[RunData],
    suite_dir: Path,
    out: Path,
    ste_lx: dict,
    rows: dict[str, list[dict]],
    comparisons: list[pd.DataFrame],
    notes: list[str],
    files: list[Path],
    figures: _Figures,
    settings: _Settings,
    advance: Callable[[str], None],
) -> list:
    """Metrics, tables and figures of one suite; appends its summary rows and comparisons."""
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
    sec: list = [f"<h2>{html.escape(suite)}</h2>"]
    sec.append(
        f"<p>{len(suite_runs)} runs; smoothing window w = {window} eval points; "
        f"metrics use the test split where a task has one.</p>"
    )
    # --- continual evaluation
    curves = cora.continual_eval_curves(frame, window, settings.n_points)
    p = suite_dir / "continual_eval.png"
    fig = figures.submit(
        p,
        "continual evaluation",
        _render_continual,
        curves,
        schedule,
        names,
        f"{suite}: continual evaluation",
        suite_runs[0].step_unit,
        published.reference_finals(suite, sorted({r.method for r in suite_runs}), names),
    )
    files.append(p)
    sec += ["<h3>Continual evaluation</h3>", fig]
    fp = cora.final_performance(curves)
    fp_tab = fp.assign(
        cell=[fmt_mean_sem(m, s, 2) for m, s in zip(fp["mean"], fp["sem"], strict=False)],
        task=[task_label(int(t), names) for t in fp["task_id"]],
    ).pivot_table(
        index="task", columns=["method", "split"], values="cell", aggfunc="first", observed=False
    )
    fp_tab.columns = [f"{m} ({s})" for m, s in fp_tab.columns]
    order = [task_label(t, names) for t in sorted(names)]
    fp_tab = fp_tab.reindex(order).fillna("n/a")  # a task without usable returns: n/a
    files += write_table(fp_tab, suite_dir / "final_performance", f"{suite}: final performance")
    sec += ["<h3>Final performance (mean ± SEM)</h3>", _html_table(fp_tab, True)]
    # --- CORA F / Z
    cm = cora.cora_matrices(frame, schedule, window)
    notes += [f"{suite}: {n}" for n in cm.notes]
    paper = published.protocol(suite)
    final_rows: list[pd.DataFrame] = []
    for method in sorted({r.method for r in suite_runs}):
        advance(method)
        mruns = [r for r in suite_runs if r.method == method]
        seeds = len(mruns)
        if seeds == 1:
            notes.append(f"{suite}/{method}: a single seed - no error bars (± SEM) are shown")
        vals = cm.values[cm.values["method"] == method]
        base = {"suite": suite, "method": method, "seeds": seeds}
        cora_rec, meal_rec, l2m_rec = dict(base), dict(base), dict(base)
        numbers: dict[str, tuple[float, float]] = {}
        sec.append(f"<h3>{html.escape(method)} ({seeds} seed{'s' if seeds != 1 else ''})</h3>")
        stem_name = safe_name(method, what="method")
        for metric in ("F", "Z"):
            tab = cora.cora_table(vals, metric, cm.order)
            m, s = tab.mean.loc["Avg", "Avg"], tab.sem.loc["Avg", "Avg"]
            cora_rec[f"CORA {metric}"] = fmt_mean_sem(m, s)
            if paper and paper[0] == "CORA":
                numbers[metric] = (float(m), float(s))
            stem = suite_dir / f"{stem_name}_{metric}"
            files += write_table(
                cora_text_table(tab, names), stem, f"{suite} {method}: {metric} (x10)"
            )
            png = stem.parent / f"{stem.name}.png"
            sec.append(
                figures.submit(
                    png, f"{method} {metric}", _render_heat, tab, names, f"{suite} - {method}"
                )
            )
            files.append(png)
        # --- MEAL
        per_run_tasks, run_norms = [], []
        for r in mruns:
            norms, note = _normalizers(r)
            if note and note not in notes:
                notes.append(note)
            run_norms.append(norms)
            per_run_tasks.append(_meal_per_task(r, norms, settings.meal_forgetting))
        for key in ("A", "F", "P"):
            # F is undefined for the last task (sums over i < N); the code's definitions
            # skip tasks that never score (NaN), eq. 2 has NaN only where a run ended early
            skip = key == "F" and settings.meal_forgetting != "paper"
            run_vals = [
                (t[key].iloc[:-1] if key == "F" else t[key]).mean(skipna=skip)
                for t in per_run_tasks
            ]
            m, s, _ = mean_sem(run_vals)
            meal_rec[f"MEAL {key}"] = fmt_mean_sem(m, s, 3)
            if paper and paper[0] == "MEAL":
                numbers[key] = (m, s)
            # IQM over (run, task) scores; F is undefined for the last task
            cols = per_run_tasks[0].index[:-1] if key == "F" else per_run_tasks[0].index
            mats = [t.loc[cols, key].to_numpy(dtype=float) for t in per_run_tasks]
            mats = [x for x in mats if x.size and np.isfinite(x).all()]
            mat = np.vstack(mats) if mats else np.empty((0, 0))
            meal_rec[f"MEAL {key} IQM [95% CI]"] = (
                fmt_interval(
                    *iqm_interval(mat, reps=settings.bootstrap_reps, seed=settings.seed),
                    digits=3,
                )
                if mat.size
                else "n/a"
            )
        cycles = mruns[0].metadata.get("cycles")
        if (
            paper
            and paper[0] == "MEAL"
            and published.published(suite, method, "FPR", repeats=cycles)
        ):
            plast, note = _plasticity(mruns, run_norms)
            numbers.update(plast)
            if note:
                notes.append(f"{suite}/{method}: {note}")
        # --- L2M
        l2 = defaultdict(list)
        for r in mruns:
            values, l2notes = l2m.l2m_metrics(r, ste_lx=ste_lx)
            for n in l2notes:
                msg = f"{suite}/{method}: L2M {n}"
                if msg not in notes:
                    notes.append(msg)
            for k in L2M_KEYS:
                l2[k].append(values[k])
        for k in L2M_KEYS:
            m, s, _ = mean_sem(l2[k])
            l2m_rec[k] = fmt_mean_sem(m, s, 3)
        rows["CORA"].append(cora_rec)
        rows["MEAL"].append(meal_rec)
        rows["L2M"].append(l2m_rec)
        # --- published results
        comp = published.compare(
            suite, method, mruns, numbers, _final_frame(fp, method, names), repeats=cycles
        )
        if len(comp):
            comparisons.append(comp)
            finals = comp[comp["metric"] == "final return"]
            if len(finals):
                final_rows.append(finals)
    if final_rows:
        finals = pd.concat(final_rows, ignore_index=True)
        shown = finals.set_index(["task", "split", "method"])[
            ["source", "paper", "ours", "difference", "tolerance", "agreement"]
        ]
        text = _html_table(shown, True)
        for verdict in ("agrees", "differs"):
            text = text.replace(f"<td>{verdict}</td>", f"<td class='{verdict}'>{verdict}</td>")
        sec += [
            "<h3>Final returns vs the paper</h3>",
            "<details open><summary>per task and split (paper: mean ± SEM over its seeds; "
            "ours: the final-performance values above)</summary>",
            text,
            "</details>",
        ]
    baselines = published.suite_baselines(suite)
    if len(baselines):
        table = baselines.set_index(["paper", "table", "method", "metric", "task", "split"])
        files += write_table(
            table, suite_dir / "published_baselines", f"{suite}: published baselines"
        )
        sec += [
            "<h3>Published baselines</h3>",
            f"<details><summary>every value the papers report for {html.escape(suite)} "
            f"({len(baselines)} rows; dotted lines in the continual evaluation figure: "
            "their final returns)</summary>",
            _html_table(table, True),
            "</details>",
        ]
    sec += _video_section(suite_runs, names, out)
    return sec


def build_report(
    run_dirs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] = "report",
    *,
    bootstrap_reps: int = 1000,
    seed: int = 0,
    progress: bool = False,
    meal_forgetting: str = "weighted",
) -> ReportResult:
    """Entry point of ``cl-suites report RUN_DIR [RUN_DIR ...] [--out DIR]``.

    Loads every run directory (single-task-expert runs included) and calls
    :func:`report_from_runs`. Raises :class:`MetricsInputError` naming the bad run/value
    or the output path that cannot be written. ``progress=True`` shows a rich progress bar.
    """
    dirs = list(run_dirs)
    if not dirs:
        raise MetricsInputError("no run directories given")
    with _progress(progress) as bar:
        runs = [load_run(d) for d in bar.track(dirs, description="loading runs")]
    return report_from_runs(
        runs,
        out_dir,
        bootstrap_reps=bootstrap_reps,
        seed=seed,
        progress=progress,
        meal_forgetting=meal_forgetting,
    )
