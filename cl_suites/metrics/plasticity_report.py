"""The report's plasticity part: each diagnostic over the run, and its value at each
task's end (from ``RUN_DIR/plasticity.csv``, whole-network rows).

:func:`plasticity_frame` pools a suite's runs; :func:`plot_plasticity` draws one panel
per diagnostic (mean over seeds per method and network, shaded ± SEM, task boundaries as
dotted lines); :func:`task_end_table` gives the value at the last evaluation point of
each training segment (mean ± SEM over seeds); :func:`meal_plasticity_table` puts MEAL's
own plasticity metrics (AUC-loss, FPR, RAUC over the repeated sequence) beside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from cl_suites.metrics.plasticity_tracker import METRICS
from cl_suites.metrics.runs import MetricsInputError, RunData
from cl_suites.rundir.runlog import read_plasticity

UNITS = {
    "dormant_ratio": "fraction",
    "active_fraction": "fraction",
    "stable_rank": "directions",
    "effective_rank": "directions",
    "feature_norm": "feature units",
    "weight_norm": "weight units",
    "weight_change_task": "weight units",
    "weight_change_run": "weight units",
    "grad_norm": "gradient units",
    "churn": "actor: TV; critic: |dV|",
}


def plasticity_frame(runs: Sequence[RunData]) -> pd.DataFrame:
    """Whole-network rows of every run that has ``plasticity.csv``: columns ``method,
    seed, run, network, metric, total_step, task_id, value`` (empty when none has)."""
    parts = []
    for run in runs:
        try:
            rows = read_plasticity(run.path)
        except Exception:  # a run without a readable table is left out of this part
            continue
        rows = rows[rows.layer == "all"]
        if rows.empty:
            continue
        parts.append(
            rows.assign(method=run.method, seed=run.seed, run=str(run.path))[
                ["method", "seed", "run", "network", "metric", "total_step", "task_id", "value"]
            ]
        )
    if not parts:
        return pd.DataFrame(
            columns=["method", "seed", "run", "network", "metric", "total_step", "task_id", "value"]
        )
    return pd.concat(parts, ignore_index=True)


def _mean_sem(values: pd.Series) -> tuple[float, float]:
    """Mean and SEM over seeds; the SEM of one seed is NaN (there is no spread to show)."""
    v = values.dropna().to_numpy(dtype=float)
    if len(v) == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan


def _cell(mean: float, sem: float, value_format: str, sem_format: str) -> str:
    """``"m ± s"``, ``"m"`` for one seed (no ±), ``"n/a"`` without a value."""
    if math.isnan(mean):
        return "n/a"
    if math.isnan(sem):
        return format(mean, value_format)
    return f"{mean:{value_format}} ± {sem:{sem_format}}"


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean and SEM over seeds per (method, network, metric, step)."""
    if frame.empty:
        return pd.DataFrame(
            columns=["method", "network", "metric", "total_step", "mean", "sem", "n"]
        )
    g = frame.groupby(["method", "network", "metric", "total_step"])["value"]
    out = g.agg(["mean", "count", "std"]).reset_index()
    out["sem"] = (out["std"] / np.sqrt(out["count"])).where(out["count"] > 1, 0.0)
    return out.rename(columns={"count": "n"}).drop(columns="std")


def task_end_table(
    frame: pd.DataFrame, schedule: pd.DataFrame, names: dict[int, str]
) -> pd.DataFrame:
    """Rows ``(method, network, diagnostic)``, one column per training segment
    (``"<index>: <task>"``): the value at the segment's last evaluation point (the
    greatest ``total_step`` in ``(start_step, end_step]``), ``"mean ± SEM"`` over seeds
    (``n/a`` when no point falls in the segment)."""
    if frame.empty:
        return pd.DataFrame()
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for seg in schedule.itertuples():
        label = f"{int(seg.index)}: {names.get(int(seg.task_id), seg.task_id)}"
        inside = frame[(frame.total_step > seg.start_step) & (frame.total_step <= seg.end_step)]
        last = inside.groupby("run").total_step.transform("max")
        at_end = inside[inside.total_step == last]
        for (method, network, metric), g in at_end.groupby(["method", "network", "metric"]):
            m, s = _mean_sem(g.value)
            cell = _cell(m, s, ".4g", ".2g")
            cells.setdefault((method, network, metric), {})[label] = cell
    table = pd.DataFrame.from_dict(cells, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["method", "network", "diagnostic"])
    order = {m: i for i, m in enumerate(METRICS)}
    table = table.iloc[
        sorted(
            range(len(table)),
            key=lambda i: (table.index[i][0], table.index[i][1], order.get(table.index[i][2], 99)),
        )
    ]
    return table.fillna("n/a")


def meal_plasticity_table(runs: Sequence[RunData]) -> pd.DataFrame | None:
    """MEAL's AUC-loss, FPR and RAUC per method (mean ± SEM over seeds; released-code
    variant, ``cl_suites.metrics.meal.sequence_plasticity``), or ``None`` when the runs do
    not repeat their sequence."""
    from cl_suites.metrics import meal
    from cl_suites.metrics.report_data import PLASTICITY_BINS

    by_method: dict[str, list[RunData]] = {}
    for run in runs:
        if int(run.schedule["cycle"].max()) < 1:  # no repetition: nothing to compare
            continue
        by_method.setdefault(run.method, []).append(run)
    rows = {}
    for method, mruns in sorted(by_method.items()):
        per_seed = []
        for run in mruns:
            try:
                traces = meal.training_traces(run.episodes, run.schedule, None, PLASTICITY_BINS)
                per_seed.append(meal.sequence_plasticity(traces))
            except (MetricsInputError, KeyError, ValueError):
                per_seed = []
                break
        if not per_seed:
            continue
        rows[method] = {}
        for key, name in (("auc_loss", "AUC-loss"), ("fpr", "FPR"), ("rauc", "RAUC")):
            m, s = _mean_sem(pd.Series([p[key] for p in per_seed], dtype=float))
            rows[method][name] = _cell(m, s, ".3f", ".3f")
    return pd.DataFrame.from_dict(rows, orient="index") if rows else None


def _compact(x: float, _pos: int = 0) -> str:
    """Tick label: ``250k``, ``1.5M``."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def plot_plasticity(
    frame: pd.DataFrame,
    schedule: pd.DataFrame,
    names: dict[int, str],
    title: str,
    step_unit: str = "steps",
):
    """A figure with one panel per diagnostic: per method (colour) and network (actor
    solid, critic dashed, other networks dotted) the mean over seeds, shaded ± SEM; dotted
    vertical lines at the task boundaries, the tasks named along the top panels."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    data = curves(frame)
    metrics = [m for m in METRICS if m in set(data.metric)]
    cols = 5
    rows = max(1, math.ceil(len(metrics) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows + 0.6), squeeze=False)
    methods = sorted(data.method.unique())
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    styles = {"actor": "-", "critic": "--"}
    bounds = schedule["end_step"].to_numpy()[:-1]
    for ax, metric in zip(axes.flat, metrics, strict=False):
        for (method, network), g in data[data.metric == metric].groupby(["method", "network"]):
            g = g.sort_values("total_step")
            x, y, s = g.total_step.to_numpy(), g["mean"].to_numpy(), g["sem"].to_numpy()
            ax.plot(
                x,
                y,
                styles.get(network, ":"),
                color=colours[method],
                lw=1.3,
                label=f"{method} {network}",
            )
            ax.fill_between(x, y - s, y + s, color=colours[method], alpha=0.15, lw=0)
        for b in bounds:
            ax.axvline(b, color="0.5", ls=":", lw=0.8)
        ax.set_title(f"{metric}\n({UNITS.get(metric, '')})", fontsize=9)
        ax.xaxis.set_major_formatter(FuncFormatter(_compact))
        ax.tick_params(labelsize=7)
        ax.set_xlabel(step_unit, fontsize=7)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    if len(schedule) <= 12:  # the tasks named inside the first panel, one per segment
        first = axes[0, 0]
        for seg in schedule.itertuples():
            mid = (seg.start_step + seg.end_step) / 2
            first.text(mid, 0.97, str(names.get(int(seg.task_id), seg.task_id))[:12],
                       transform=first.get_xaxis_transform(), ha="center", va="top",
                       fontsize=5, rotation=90, color="0.35")  # fmt: skip
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, max(1, len(labels))), fontsize=8)
    fig.suptitle(title + " (mean ± SEM over seeds; dotted: task boundaries)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def render_plasticity(
    frame: pd.DataFrame, schedule: pd.DataFrame, names: dict[int, str], title: str, unit: str
) -> bytes:
    """:func:`plot_plasticity` as PNG bytes (for the report's figure renderer)."""
    from cl_suites.metrics.plots import figure_png

    return figure_png(plot_plasticity(frame, schedule, names, title, unit))


def suite_tables(runs: Sequence[RunData], schedule: pd.DataFrame, names: dict[int, str]) -> dict:
    """``{"frame", "task_end", "meal"}`` of a suite's runs (``frame`` empty when no run
    has plasticity diagnostics; ``meal`` ``None`` without a repeated sequence)."""
    frame = plasticity_frame(runs)
    if frame.empty:
        return {"frame": frame, "task_end": None, "meal": None}
    try:
        meal_table = meal_plasticity_table(runs)
    except Exception:  # MEAL's metrics need a repeated sequence; the rest stands alone
        meal_table = None
    return {"frame": frame, "task_end": task_end_table(frame, schedule, names), "meal": meal_table}
