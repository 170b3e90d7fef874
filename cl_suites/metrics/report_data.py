"""The report's numbers: runs grouped by suite and method, every metric, and the tables.

:func:`group_runs` splits loaded runs into lifelong learners (by suite) and single-task
experts; :func:`suite_result` computes one suite's CORA, MEAL and L2M metrics and the
comparison with the papers; :func:`summarise` joins the suites' rows into the summary
tables. Nothing here writes files or HTML (:mod:`~cl_suites.metrics.report_files`,
:mod:`~cl_suites.metrics.report_html`, :mod:`~cl_suites.metrics.report_figures` do).
Steps are the runs' step unit (agent steps; MEAL: env steps).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cl_suites.metrics import cora, l2m, meal, published
from cl_suites.metrics.runs import MetricsInputError, RunData, combined_eval, task_names
from cl_suites.metrics.stats import iqm_interval, mean_ci95, mean_sem
from cl_suites.metrics.tables import cora_text_table, fmt_interval, fmt_mean_sem, task_label

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
L2M_LABELS = {k: k.replace("_", " ") for k in L2M_KEYS}
"""Column labels of the L2M summary table (``"FT_contrast"`` -> ``"FT contrast"``)."""
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
FAMILIES = ("CORA", "MEAL", "L2M")
"""The metric families, one summary table each."""


@dataclass(frozen=True)
class Settings:
    """Options of one report (see :func:`~cl_suites.metrics.report.report_from_runs`)."""

    bootstrap_reps: int
    seed: int
    n_points: int | None
    meal_forgetting: str
    window: int | None = None
    """CORA's smoothing window in evaluation points, over which final performance is
    averaged (``None``: each suite's own, from its runs' metric settings)."""
    meal_ci: bool = False
    """Add MEAL's ``mean ± 1.96 SE`` over seeds (its tables' ``±``) beside each MEAL
    metric's mean ± SEM and bootstrap interval."""
    references: tuple[RunData, ...] = ()
    """Single-task reference runs for MEAL's forward transfer (MEAL-1 runs, matched to a
    learner's tasks by kitchen and seed)."""


@dataclass
class MethodResult:
    """One method of one suite.

    Attributes:
        method: the method's name.
        seeds: number of runs (seeds).
        cora: CORA ``"F"`` and ``"Z"`` tables (task x task, x10, mean and SEM over seeds).
        cora_text: the same as display tables (cells ``"mean ± SEM"``).
        rows: the method's summary row of each metric family (:data:`FAMILIES`).
    """

    method: str
    seeds: int
    cora: dict[str, cora.CoraTable]
    cora_text: dict[str, pd.DataFrame]
    rows: dict[str, dict]
    coordination: np.ndarray | None = None
    """MEAL's coordination matrix, the mean over the runs that have one (``None``: none)."""


@dataclass
class SuiteResult:
    """Everything the report shows for one suite.

    Attributes:
        suite: the suite's name.
        runs: its lifelong-learner runs.
        names: task names by task id.
        window: smoothing window (evaluation points).
        schedule: the (shared) task schedule.
        curves: continual-evaluation curves, mean and SEM over seeds per method.
        references: the papers' final returns drawn in the continual-evaluation figure.
        final_performance: task x "method (split)" cells ``"mean ± SEM"`` (``"n/a"``: no
            usable returns).
        methods: one entry per method, sorted by name.
        comparisons: the papers' values next to ours, one frame per method that a paper
            reports.
        finals: per-task final returns vs the paper (index task, split, method), or ``None``.
        baselines: every value the papers report for the suite, or ``None``.
        window_warning: set when the window spans most of a task's evaluations (short
            runs): final performance then averages most of the run, not its end.
    """

    suite: str
    runs: list[RunData]
    names: dict[int, str]
    window: int
    schedule: pd.DataFrame
    curves: pd.DataFrame
    references: pd.DataFrame
    final_performance: pd.DataFrame
    methods: list[MethodResult] = field(default_factory=list)
    comparisons: list[pd.DataFrame] = field(default_factory=list)
    finals: pd.DataFrame | None = None
    baselines: pd.DataFrame | None = None
    window_warning: str | None = None

    @property
    def final_title(self) -> str:
        """``"final performance (mean of the last 20 evaluations)"``."""
        last = "the last evaluation" if self.window == 1 else f"the last {self.window} evaluations"
        return f"final performance (mean of {last})"

    @property
    def step_unit(self) -> str:
        return self.runs[0].step_unit


@dataclass
class Summary:
    """The summary over all suites.

    Attributes:
        summary: every summary column, one row per (suite, method).
        tables: the summary split by family: ``"CORA"``, ``"MEAL"``, ``"L2M"``, and
            ``"Published"`` (absent when no paper reports a suite and method of the report).
        comparison: every published value next to ours (per-task final returns included).
    """

    summary: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    comparison: pd.DataFrame


def group_runs(
    runs: Sequence[RunData],
) -> tuple[dict[str, list[RunData]], list[RunData], list[str]]:
    """Lifelong-learner runs by suite (sorted), the single-task experts, and the runs'
    data issues as notes.

    Raises:
        MetricsInputError: only single-task experts were given.
    """
    notes = [
        f"{run.path.name} ({run.method}, seed {run.seed}): {msg}"
        for run in runs
        for msg in run.issues
    ]
    learners = [r for r in runs if not r.is_single_task_expert]
    experts = [r for r in runs if r.is_single_task_expert]
    if not learners:
        raise MetricsInputError("no lifelong-learner runs given (only single-task experts)")
    by_suite: dict[str, list[RunData]] = defaultdict(list)
    for r in learners:
        by_suite[r.suite].append(r)
    return dict(sorted(by_suite.items())), experts, notes


def _normalizers(run: RunData) -> tuple[dict[int, float | None] | None, str | None]:
    norms = run.metadata.get("score_normalizers")
    if norms:
        bounds = {int(k): (None if v is None else float(v)) for k, v in norms.items()}
        return bounds, _unbounded_note(run, bounds)
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


def _unbounded_note(run: RunData, bounds: dict[int, float | None]) -> str | None:
    """The note naming each task of ``run`` without a score bound, with the reason the
    run's metadata gives (``layouts[i]["no_bound"]``)."""
    missing = sorted(t for t, v in bounds.items() if v is None)
    if not missing:
        return None
    layouts = {int(x.get("task_id", -1)): x for x in run.metadata.get("layouts") or []}
    parts = []
    for t in missing:
        layout = layouts.get(t, {})
        name = layout.get("task_name", str(t))
        reason = layout.get("no_bound") or "the run's metadata gives it no score bound"
        parts.append(f"task {t} ({name}): n/a, {reason}")
    return (
        f"{run.suite} {run.run_id}: MEAL A/F/P are over the tasks with a score bound; "
        + "; ".join(parts)
    )


def _meal_per_task(
    run: RunData, norms: dict[int, float | None] | None, forgetting: str
) -> pd.DataFrame:
    """Per-task ``A`` (final score), ``P`` (score right after training) and ``F``
    (:func:`~cl_suites.metrics.meal.forgetting_per_task`; NaN for the last task), and
    ``bounded``: whether the task has a score bound (its scores are NaN otherwise)."""
    s = meal.score_matrix(run.eval, run.schedule, norms)
    tasks = list(s.index)
    last = s.iloc[-1]
    f = meal.forgetting_per_task(run.eval, run.schedule, norms, method=forgetting)
    return pd.DataFrame(
        {
            "A": [last[t] for t in tasks],
            "P": [s.loc[t, t] for t in tasks],
            "F": f.reindex(tasks).to_numpy(dtype=float),
            "bounded": [norms is None or norms.get(int(t)) is not None for t in tasks],
        },
        index=tasks,
    )


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


def _final_performance_table(fp: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """Task x ``"method (split)"`` cells ``"mean ± SEM"``; a task without usable returns
    is ``"n/a"``."""
    tab = fp.assign(
        cell=[fmt_mean_sem(m, s, 2) for m, s in zip(fp["mean"], fp["sem"], strict=False)],
        task=[task_label(int(t), names) for t in fp["task_id"]],
    ).pivot_table(
        index="task", columns=["method", "split"], values="cell", aggfunc="first", observed=False
    )
    tab.columns = [f"{m} ({s})" for m, s in tab.columns]
    order = [task_label(t, names) for t in sorted(names)]
    return tab.reindex(order).fillna("n/a")


def _cora_part(
    vals: pd.DataFrame,
    cm: cora.CoraMatrices,
    names: dict[int, str],
    rec: dict,
    numbers: dict | None,
) -> tuple[dict[str, cora.CoraTable], dict[str, pd.DataFrame]]:
    """CORA F and Z of one method's per-seed values: the tables and their display forms;
    the averages (mean ± SEM) into ``rec`` and, when given, ``numbers``."""
    tables, texts = {}, {}
    for metric in ("F", "Z"):
        tab = cora.cora_table(vals, metric, cm.order)
        m, s = tab.mean.loc["Avg", "Avg"], tab.sem.loc["Avg", "Avg"]
        rec[f"CORA {metric}"] = fmt_mean_sem(m, s)
        if numbers is not None:
            numbers[metric] = (float(m), float(s))
        tables[metric], texts[metric] = tab, cora_text_table(tab, names)
    return tables, texts


def _meal_part(
    suite: str,
    method: str,
    mruns: list[RunData],
    rec: dict,
    numbers: dict | None,
    notes: list[str],
    settings: Settings,
) -> None:
    """MEAL A, F, P of one method (mean ± SEM over runs, and IQM over (run, task) with a
    bootstrap CI) into ``rec``, with forward transfer ``FT`` (runs given single-task
    references), the role-heterogeneity index ``H`` (runs with ``heterogeneity.csv``) and,
    with ``settings.meal_ci``, MEAL's ``mean ± 1.96 SE`` of each; when given, ``numbers``
    gets the means and SEMs and, where a paper reports them, AUC-loss/FPR/RAUC."""
    per_run_tasks, run_norms = [], []
    for r in mruns:
        norms, note = _normalizers(r)
        if note:
            _add_note(notes, note)
        run_norms.append(norms)
        per_run_tasks.append(_meal_per_task(r, norms, settings.meal_forgetting))
    for key in ("A", "F", "P"):
        # F is undefined for the last task (sums over i < N); the code's definitions
        # skip tasks that never score (NaN), eq. 2 has NaN only where a run ended early;
        # a task without a score bound is left out (the notes name it)
        skip = key == "F" and settings.meal_forgetting != "paper"
        # peak_final covers every task, the last one too (MEAL's comparison scripts)
        drop_last = key == "F" and settings.meal_forgetting != "peak_final"
        per_run = [(t.iloc[:-1] if drop_last else t) for t in per_run_tasks]
        run_vals = [t.loc[t["bounded"], key].mean(skipna=skip) for t in per_run]
        m, s, _ = mean_sem(run_vals)
        rec[f"MEAL {key}"] = fmt_mean_sem(m, s, 3)
        if settings.meal_ci:
            rec[f"MEAL {key} ± 1.96 SE"] = _ci_cell(run_vals)
        if numbers is not None:
            numbers[key] = (m, s)
        # IQM over (run, task) scores, the tasks every run has a bound for
        bounded = np.logical_and.reduce([t["bounded"].to_numpy() for t in per_run])
        mats = [t.loc[bounded, key].to_numpy(dtype=float) for t in per_run]
        mats = [x for x in mats if x.size and np.isfinite(x).all()]
        mat = np.vstack(mats) if mats else np.empty((0, 0))
        rec[f"MEAL {key} IQM [95% CI]"] = _iqm_cell(mat, settings)
    _transfer_part(suite, method, mruns, run_norms, rec, notes, settings)
    _heterogeneity_part(mruns, rec, settings)
    cycles = mruns[0].metadata.get("cycles")
    if numbers is not None and published.published(suite, method, "FPR", repeats=cycles):
        plast, note = _plasticity(mruns, run_norms)
        numbers.update(plast)
        if note:
            notes.append(f"{suite}/{method}: {note}")


def _ci_cell(values: Sequence[float]) -> str:
    """``"mean ± 1.96 SE"`` over runs (MEAL's tables' ``±``); the mean alone for one run."""
    m, ci, _ = mean_ci95(values)
    return fmt_mean_sem(m, ci, 3)


def _episode_len(run: RunData) -> int | None:
    """The MEAL run's episode length (its suite kwargs', else MEAL's 400)."""
    kwargs = run.metadata.get("env_kwargs") or {}
    value = kwargs.get("episode_len") if isinstance(kwargs, dict) else None
    return int(value) if isinstance(value, int | float) else 400


def reference_curve(
    run: RunData, task_id: int, references: Sequence[RunData]
) -> tuple[np.ndarray | None, str | None]:
    """The training-score curve of ``run``'s task ``task_id`` in its single-task reference:
    a run in ``references`` of the same seed whose one kitchen is that task's (kitchen keys
    of ``metadata["layouts"]``, :func:`~cl_suites.metrics.meal.kitchen_keys`); ``(None,
    reason)`` when there is none or it has no ``episode_soups.csv``."""
    key = meal.kitchen_keys(run.metadata).get(int(task_id))
    if key is None:
        return None, "the run's metadata has no kitchens (layouts)"
    for ref in references:
        ref_keys = meal.kitchen_keys(ref.metadata)
        if ref.seed != run.seed or len(ref_keys) != 1 or key not in ref_keys.values():
            continue
        if not len(ref.episode_soups):
            return None, f"reference {ref.path.name} has no episode_soups.csv"
        norms, _ = _normalizers(ref)
        curves = meal.training_score_curves(
            ref.episode_soups, ref.schedule, norms, episode_len=_episode_len(ref)
        )
        return next(iter(curves.values())), None
    return None, f"no reference run of seed {run.seed} on its kitchen"


def _transfer_part(
    suite: str,
    method: str,
    mruns: list[RunData],
    run_norms: list,
    rec: dict,
    notes: list[str],
    settings: Settings,
) -> None:
    """MEAL's forward transfer ``FT`` of one method (mean ± SEM over runs) into ``rec``,
    when the report was given single-task reference runs."""
    if not settings.references:
        return
    values = []
    for run, norms in zip(mruns, run_norms, strict=True):
        if not len(run.episode_soups):
            _add_note(notes, f"{suite}/{method}: FT n/a for {run.path.name}: no episode_soups.csv")
            values.append(float("nan"))
            continue
        cl = meal.training_score_curves(
            run.episode_soups, run.schedule, norms, episode_len=_episode_len(run)
        )
        refs = {}
        for tid in cl:
            refs[tid], why = reference_curve(run, tid, settings.references)
            if why:
                _add_note(
                    notes, f"{suite}/{method}: FT leaves out task {tid} of {run.path.name}: {why}"
                )
        values.append(meal.forward_transfer(cl, refs))
    m, s, _ = mean_sem(values)
    rec["MEAL FT"] = fmt_mean_sem(m, s, 3)
    if settings.meal_ci:
        rec["MEAL FT ± 1.96 SE"] = _ci_cell(values)


def _heterogeneity_part(mruns: list[RunData], rec: dict, settings: Settings) -> None:
    """MEAL's role-heterogeneity index ``H`` of one method (mean ± SEM over runs) into
    ``rec``, when its runs have ``heterogeneity.csv``."""
    if not any(len(r.heterogeneity) for r in mruns):
        return
    values = [meal.run_heterogeneity(r.heterogeneity) for r in mruns]
    m, s, _ = mean_sem(values)
    rec["MEAL H"] = fmt_mean_sem(m, s, 3)
    if settings.meal_ci:
        rec["MEAL H ± 1.96 SE"] = _ci_cell(values)


def _coordination_part(
    suite: str, method: str, mruns: list[RunData], rec: dict, notes: list[str]
) -> np.ndarray | None:
    """The mean coordination matrix of the runs that stored one
    (``coordination_matrix.csv``) and MEAL's coordination forgetting of each (``1 -``
    upper-triangle mean / diagonal mean, mean ± SEM) into ``rec``; without any, one note
    naming what is missing."""
    mats = [m for m in (meal.read_coordination_matrix(r.path) for r in mruns) if m is not None]
    if not mats:
        missing = []
        for r in mruns[:1]:
            try:
                meal.task_checkpoints(r.path)
            except MetricsInputError as e:
                missing.append(str(e))
        why = missing[0] if missing else "no run has coordination_matrix.csv"
        _add_note(notes, f"{suite}/{method}: coordination matrix n/a: {why}")
        return None
    shapes = {m.shape for m in mats}
    if len(shapes) != 1:
        _add_note(notes, f"{suite}/{method}: coordination matrices of different shapes {shapes}")
        return None
    cf = [meal.coordination_retention(m)["coord_forgetting"] for m in mats]
    mean, sem, _ = mean_sem(cf)
    rec["MEAL coord. F"] = fmt_mean_sem(mean, sem, 3)
    return np.nanmean(np.stack(mats), axis=0)


def _iqm_cell(mat: np.ndarray, settings: Settings) -> str:
    """``"iqm [lo, hi]"`` over (run, task) scores; one run has no interval across seeds
    (the bootstrap resamples runs), so its cell is the IQM alone; ``"n/a"`` without
    scores."""
    if not mat.size:
        return "n/a"
    point, low, high = iqm_interval(mat, reps=settings.bootstrap_reps, seed=settings.seed)
    if mat.shape[0] == 1:
        return fmt_mean_sem(point, None, 3)
    return fmt_interval(point, low, high, digits=3)


def _l2m_part(
    suite: str, method: str, mruns: list[RunData], ste_lx: dict, rec: dict, notes: list[str]
) -> None:
    """DARPA L2M metrics of one method (mean ± SEM over runs) into ``rec``."""
    l2 = defaultdict(list)
    for r in mruns:
        values, l2notes = l2m.l2m_metrics(r, ste_lx=ste_lx)
        for n in l2notes:
            _add_note(notes, f"{suite}/{method}: L2M {n}")
        for k in L2M_KEYS:
            l2[k].append(values[k])
    for k in L2M_KEYS:
        m, s, _ = mean_sem(l2[k])
        rec[k] = fmt_mean_sem(m, s, 3)


def _add_note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _method_result(
    suite: str,
    method: str,
    mruns: list[RunData],
    cm: cora.CoraMatrices,
    names: dict[int, str],
    ste_lx: dict,
    notes: list[str],
    settings: Settings,
) -> tuple[MethodResult, dict[str, tuple[float, float]]]:
    """One method's CORA tables and summary rows, and its numbers for the paper that
    reports the suite (CORA's F/Z or MEAL's A/F/P and plasticity metrics)."""
    seeds = len(mruns)
    if seeds == 1:
        notes.append(f"{suite}/{method}: a single seed - no error bars (± SEM) are shown")
    paper = published.protocol(suite)
    family = paper[0] if paper else None
    base = {"suite": suite, "method": method, "seeds": seeds}
    rows = {key: dict(base) for key in FAMILIES}
    numbers: dict[str, tuple[float, float]] = {}
    vals = cm.values[cm.values["method"] == method]
    tables, texts = _cora_part(vals, cm, names, rows["CORA"], numbers if family == "CORA" else None)
    _meal_part(
        suite, method, mruns, rows["MEAL"], numbers if family == "MEAL" else None, notes, settings
    )
    _l2m_part(suite, method, mruns, ste_lx, rows["L2M"], notes)
    result = MethodResult(method, seeds, tables, texts, rows)
    if suite.upper().startswith("MEAL"):
        result.coordination = _coordination_part(suite, method, mruns, rows["MEAL"], notes)
    return result, numbers


def _check_schedules(suite: str, suite_runs: list[RunData]) -> None:
    cols = ["task_id", "start_step", "end_step"]
    first = suite_runs[0]
    for r in suite_runs[1:]:
        if not r.schedule[cols].equals(first.schedule[cols]):
            raise MetricsInputError(
                f"{r.path}: schedule differs from {first.path} in suite {suite}; "
                "runs of one suite must share a schedule"
            )


def suite_result(
    suite: str,
    suite_runs: list[RunData],
    ste_lx: dict,
    notes: list[str],
    settings: Settings,
    advance: Callable[[str], None],
) -> SuiteResult:
    """Every metric and table of one suite; appends its notes to ``notes`` and calls
    ``advance(method)`` before each method.

    Args:
        ste_lx: the suite's single-task experts' learning blocks
            (:func:`~cl_suites.metrics.l2m.ste_curves`).

    Raises:
        MetricsInputError: the runs do not share one schedule.
    """
    _check_schedules(suite, suite_runs)
    schedule = suite_runs[0].schedule
    names = task_names(suite_runs)
    window = settings.window or suite_runs[0].smoothing_window
    frame = combined_eval(suite_runs)
    methods = sorted({r.method for r in suite_runs})
    curves = cora.continual_eval_curves(frame, window, settings.n_points)
    fp = cora.final_performance(curves)
    res = SuiteResult(
        suite=suite,
        runs=suite_runs,
        names=names,
        window=window,
        schedule=schedule,
        curves=curves,
        references=published.reference_finals(suite, methods, names),
        final_performance=_final_performance_table(fp, names),
    )
    res.window_warning = window_warning(suite, window, suite_runs[0], settings.window)
    if res.window_warning:
        notes.append(res.window_warning)
    cm = cora.cora_matrices(frame, schedule, window)
    notes += [f"{suite}: {n}" for n in cm.notes]
    final_rows: list[pd.DataFrame] = []
    for method in methods:
        advance(method)
        mruns = [r for r in suite_runs if r.method == method]
        result, numbers = _method_result(suite, method, mruns, cm, names, ste_lx, notes, settings)
        res.methods.append(result)
        comp = published.compare(
            suite,
            method,
            mruns,
            numbers,
            _final_frame(fp, method, names),
            repeats=mruns[0].metadata.get("cycles"),
            window=window,
        )
        if len(comp):
            res.comparisons.append(comp)
            finals = comp[comp["metric"] == "final return"]
            if len(finals):
                final_rows.append(finals)
    if final_rows:
        res.finals = pd.concat(final_rows, ignore_index=True).set_index(
            ["task", "split", "method"]
        )[["source", "paper", "ours", "difference", "tolerance", "agreement"]]
    baselines = published.suite_baselines(suite)
    if len(baselines):
        res.baselines = baselines.set_index(["paper", "table", "method", "metric", "task", "split"])
    return res


def evaluations_per_task(run: RunData) -> int | None:
    """Evaluation points within one task's training (its budget over ``eval_every``; the
    shortest task's), or ``None`` when the metadata does not say."""
    steps = run.metadata.get("steps_per_task")
    every = run.metadata.get("eval_every")
    if isinstance(steps, list | tuple):
        steps = min(steps) if steps else None
    if not isinstance(steps, int | float) or not isinstance(every, int | float) or every <= 0:
        return None
    return max(1, int(steps // every))


def window_warning(suite: str, window: int, run: RunData, chosen: int | None) -> str | None:
    """The warning when the final-performance ``window`` spans more than half of a task's
    evaluations: a short run's "final performance" then averages most of it, not its last
    evaluation (``None`` otherwise). ``chosen``: the window the report was asked for."""
    per_task = evaluations_per_task(run)
    if window <= 1 or per_task is None or 2 * window <= per_task:
        return None
    where = "the report's --window" if chosen else "the suite's smoothing window (CORA's)"
    return (
        f"{suite}: final performance averages the last {window} evaluations ({where}), "
        f"more than half of the {per_task} evaluation(s) of a task's training: on this "
        "short run it is not the performance at the end; `cl-suites report --window 1` "
        "takes the last evaluation alone"
    )


def summarise(suites: Sequence[SuiteResult]) -> Summary:
    """The summary tables of all suites (rows in suite, then method order)."""
    index = ["suite", "method"]
    tables = {  # a column only some methods have (MEAL's FT, H) is n/a for the others
        key: pd.DataFrame([m.rows[key] for s in suites for m in s.methods])
        .set_index(index)
        .fillna("n/a")
        for key in FAMILIES
    }
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
    comparisons = [c for s in suites for c in s.comparisons]
    comparison = (
        pd.concat(comparisons, ignore_index=True)
        if comparisons
        else pd.DataFrame(columns=list(published.COMPARISON_COLUMNS))
    )
    if len(comparison):
        tables["Published"] = published.comparison_summary(comparison).set_index(
            ["suite", "method", "metric"]
        )
    return Summary(summary, tables, comparison)
