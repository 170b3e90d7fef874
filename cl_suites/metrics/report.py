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
    <suite>/plasticity.png, <suite>/plasticity_task_end.{md,csv,tex}   plasticity
                                      diagnostics (runs with plasticity.csv)
    notes.md                          every data issue and n/a explained

Suite and method names become file names only through
:func:`~cl_suites.metrics.safe_names.safe_name` (no path can leave ``out_dir``), and CSV
cells are neutralised against spreadsheet formulas. Single-task-expert runs (method
``"ste"`` or a one-task schedule) are not reported as methods; they feed the L2M RP and SE
metrics (matched by task name).

This module ties the report's parts together: :mod:`~cl_suites.metrics.report_data`
(runs -> metrics and tables), :mod:`~cl_suites.metrics.report_figures` (PNGs),
:mod:`~cl_suites.metrics.report_files` (Markdown/CSV/LaTeX tables and notes) and
:mod:`~cl_suites.metrics.report_html` (the page, from a Jinja2 template).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cl_suites.metrics import l2m, meal
from cl_suites.metrics.report_data import (
    L2M_KEYS,
    L2M_LABELS,
    PLASTICITY_BINS,
    SUMMARY_TITLES,
    Settings,
    group_runs,
    suite_result,
    summarise,
)
from cl_suites.metrics.report_figures import FigureRenderer, suite_figures
from cl_suites.metrics.report_files import (
    suite_dir,
    write_notes,
    write_suite_tables,
    write_summary_tables,
)
from cl_suites.metrics.report_html import render_html
from cl_suites.metrics.runs import MetricsInputError, RunData, expand_run_dirs, load_run
from cl_suites.metrics.tables import write_table

__all__ = [
    "L2M_KEYS",
    "L2M_LABELS",
    "PLASTICITY_BINS",
    "SUMMARY_TITLES",
    "ReportResult",
    "build_report",
    "report_from_runs",
]


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
    window: int | None = None,
    meal_ci: bool = False,
    references: Sequence[RunData] = (),
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
        window: CORA's smoothing window in evaluation points, over which the continual
            evaluation curves are smoothed and final performance is averaged (``None``:
            each suite's own, 20 on CORA's suites, 1 on MEAL; ``1``: the last evaluation).
            The report notes where it spans more than half of a task's evaluations.
        meal_ci: also give MEAL's ``mean ± 1.96 SE`` over seeds (its tables' ``±``) of
            every MEAL metric, beside mean ± SEM and the bootstrap interval.
        references: single-task reference runs (MEAL-1 runs on one kitchen of the
            learners' sequences) for MEAL's forward transfer ``FT``.

    Raises:
        MetricsInputError: unusable runs, or an output directory that cannot be written
            (the message names the path and the reason).
    """
    if meal_forgetting not in meal.FORGETTING_METHODS:
        raise ValueError(
            f"meal_forgetting must be one of {list(meal.FORGETTING_METHODS)}, "
            f"got {meal_forgetting!r}"
        )
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 1
    ):
        raise ValueError(f"window must be an integer >= 1 (evaluation points), got {window!r}")
    settings = Settings(
        bootstrap_reps, seed, n_points, meal_forgetting, window, bool(meal_ci), tuple(references)
    )
    renderer = FigureRenderer(1 if figure_workers is None else int(figure_workers))
    try:
        return _report(runs, Path(out_dir), settings, progress, renderer)
    except OSError as e:
        where = e.filename or out_dir
        raise MetricsInputError(f"cannot write the report to {where}: {e.strerror or e}") from e
    finally:
        renderer.close()


def _report(
    runs: Sequence[RunData],
    out: Path,
    settings: Settings,
    progress: bool,
    renderer: FigureRenderer,
) -> ReportResult:
    out.mkdir(parents=True, exist_ok=True)
    by_suite, experts, notes = group_runs(runs)
    files: list[Path] = []
    suites = []
    with _progress(progress) as bar:
        job = bar.add_task(
            "report", total=sum(len({r.method for r in v}) for v in by_suite.values())
        )
        for suite, suite_runs in by_suite.items():
            folder = suite_dir(out, suite)
            # the suite's experts' LX blocks (matched to tasks by name), shared by its runs
            ste_lx = l2m.ste_curves([e for e in experts if e.suite == suite])
            res = suite_result(
                suite,
                suite_runs,
                ste_lx,
                notes,
                settings,
                lambda method, suite=suite: bar.update(
                    job, advance=1, description=f"{suite} / {method}"
                ),
            )
            figs = suite_figures(renderer, res, folder)
            files += figs.paths + write_suite_tables(res, folder)
            if figs.plasticity_tables.get("task_end") is not None:
                files += write_table(
                    figs.plasticity_tables["task_end"],
                    folder / "plasticity_task_end",
                    f"{suite}: plasticity diagnostics at each task's end (mean ± SEM over seeds)",
                )
            suites.append((res, figs))
    summary = summarise([res for res, _ in suites])
    files += write_summary_tables(summary, out)
    files.append(write_notes(notes, out))
    html_path = out / "report.html"
    html_path.write_text(render_html(summary, suites, notes, out))
    files.append(html_path)
    return ReportResult(
        out, html_path, files, summary.summary, notes, summary.tables, summary.comparison
    )


def build_report(
    run_dirs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] = "report",
    *,
    bootstrap_reps: int = 1000,
    seed: int = 0,
    progress: bool = False,
    meal_forgetting: str = "weighted",
    window: int | None = None,
    meal_ci: bool = False,
    reference_runs: Iterable[str | os.PathLike[str]] = (),
) -> ReportResult:
    """Entry point of ``cl-suites report RUN_DIR [RUN_DIR ...] [--out DIR]``.

    Loads every run directory (single-task-expert runs included; a directory holding run
    directories, such as a ``--seeds`` run's or a sweep's ``runs/``, stands for all of
    them: :func:`expand_run_dirs`) and calls :func:`report_from_runs`. Raises
    :class:`MetricsInputError` naming the bad run/value or the output path that cannot be
    written. ``progress=True`` shows a rich progress bar. ``reference_runs``
    (``--reference-runs``): run directories (or directories holding them) of single-task
    reference runs for MEAL's forward transfer; ``meal_ci`` (``--meal-ci``): MEAL's
    ``mean ± 1.96 SE`` beside the other intervals.
    """
    dirs = expand_run_dirs(run_dirs)
    if not dirs:
        raise MetricsInputError("no run directories given")
    ref_dirs = expand_run_dirs(reference_runs) if reference_runs else []
    with _progress(progress) as bar:
        runs = [load_run(d) for d in bar.track(dirs, description="loading runs")]
        references = [load_run(d) for d in ref_dirs]
    for ref in references:
        if len(ref.schedule) == 0 or ref.schedule["task_id"].nunique() != 1:
            raise MetricsInputError(
                f"{ref.path}: a reference run must train one task (a MEAL-1 run), it trains "
                f"{ref.schedule['task_id'].nunique()}"
            )
    return report_from_runs(
        runs,
        out_dir,
        bootstrap_reps=bootstrap_reps,
        seed=seed,
        progress=progress,
        meal_forgetting=meal_forgetting,
        window=window,
        meal_ci=meal_ci,
        references=references,
    )
