"""CORA metrics (Powers et al., CoLLAs 2022, section 4 and appendix E).

* Continual evaluation curves ``C_i`` (section 4.1): causal moving average of ``w`` eval
  points, runs interpolated to a common step grid, mean and SEM over seeds.
* Isolated forgetting ``F_ij`` (eq. 4) and zero-shot forward transfer ``Z_ij`` (eq. 5) over
  the first cycle, normalised by the task's largest absolute smoothed return, x10 in tables.
* Row, column and table averages with the standard errors of appendix E.1.

Conventions (all steps are agent steps):

* ``r_{i,j,end}`` (eq. 2) is the smoothed return of task ``i`` at the last eval point with
  ``total_step <= B_j``, the end of the ``j``-th segment of the first cycle; ``r_{i,-1,end}``
  is the value at the first eval point (step 0), as in the reference code.
* Rows and columns are task ids in first-cycle order; ``F`` is defined for ``i < j``, ``Z``
  for ``i > j`` (positions in the first cycle).
* Where the paper and the reference code (``continual_rl``) disagree, the code is the
  default and the paper is an option:

  - ``norm_scope="method"`` (code): the normaliser ``|r_{i,all,max}|`` is the largest
    absolute smoothed return of task ``i`` over all runs of the same method and the whole
    run; ``norm_scope="run"`` (paper, eq. 3): within the run only.
  - ``aggregate_sem="seeds"`` (code): row/column/table SEMs are ``std(ddof=1)/sqrt(#seeds)``
    of the per-seed averages; ``aggregate_sem="tasks"`` divides by ``sqrt(N)`` with ``N`` the
    number of tasks, as appendix E.1's text states.

* ``isolated=False`` gives the non-isolated forgetting variant: the reference value is the
  maximum smoothed return of task ``i`` up to the end of its own training, not
  ``r_{i,j-1,end}``.
* A task whose smoothed returns are all zero has normaliser 0: its ``F``/``Z`` entries are
  defined as 0 (nothing changed) and :func:`cora_matrices` reports the task in ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cl_suites.metrics.preprocess import common_grid, interpolate_matrix, smooth_eval
from cl_suites.metrics.runs import MetricsInputError, compact, metric_split

TABLE_SCALE = 10.0
"""CORA section 4.1(c): F and Z are multiplied by 10 in tables."""


def continual_eval_curves(
    eval_frame: pd.DataFrame, window: int, n_points: int | None = None
) -> pd.DataFrame:
    """Continual-evaluation curves ``C_i(t)`` per method, task and split.

    Args:
        eval_frame: cleaned eval rows of many runs (``runs.combined_eval``).
        window: causal moving-average window ``w`` in eval points.
        n_points: size of the common grid (``None``: union of logged steps).

    Returns:
        Frame ``method, task_id, split, total_step, mean, sem, n`` where ``mean``/``sem``
        are over the runs (seeds) that have data at that step; ``sem`` is NaN with one run.
    """
    smoothed = smooth_eval(compact(eval_frame), window)
    grid = common_grid(smoothed, n_points)
    keys, vals = interpolate_matrix(smoothed, grid)
    wide = pd.DataFrame(vals, columns=grid)
    by = [keys["method"], keys["task_id"], keys["split"]]
    grouped = wide.groupby(by, sort=True, observed=True)
    mean, std, cnt = grouped.mean(), grouped.std(ddof=1), grouped.count()
    out = mean.stack().rename("mean").to_frame()
    out["sem"] = (std / np.sqrt(cnt)).stack()
    out["n"] = cnt.stack()
    out = out.reset_index()
    out.columns = ["method", "task_id", "split", "total_step", "mean", "sem", "n"]
    out = out[out["n"] > 0].reset_index(drop=True)
    out["n"] = out["n"].astype(int)
    return out


def _first_cycle(schedule: pd.DataFrame) -> pd.DataFrame:
    first = schedule[schedule["cycle"] == schedule["cycle"].min()].sort_values("start_step")
    if first["task_id"].duplicated().any():
        raise MetricsInputError("a task appears twice in the first cycle of the schedule")
    return first.reset_index(drop=True)


def boundary_values(smoothed: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """Smoothed return of every task at the end of every first-cycle segment.

    Args:
        smoothed: output of :func:`smooth_eval` restricted to one split per task.
        schedule: the run schedule (same for all runs in ``smoothed``).

    Returns:
        Frame ``run, task_id, pos, value`` where ``pos`` is ``-1`` for the value at the
        first eval point and ``j`` for ``B_j`` (end of the ``j``-th first-cycle segment).
        ``value`` is NaN where the run ended before the boundary.
    """
    first = _first_cycle(schedule)
    bounds = np.r_[-1, first["end_step"].to_numpy()]
    runs = smoothed[["run", "task_id"]].drop_duplicates()
    last = smoothed.groupby("run", observed=True)["total_step"].max()
    query = runs.merge(
        pd.DataFrame({"pos": np.arange(-1, len(first)), "bound": bounds}), how="cross"
    )
    query["bound"] = query["bound"].astype(np.int64)
    first_step = smoothed.groupby("run", observed=True)["total_step"].min()
    query.loc[query["pos"] == -1, "bound"] = (
        query.loc[query["pos"] == -1, "run"].map(first_step).astype(np.int64)
    )
    query = query.sort_values("bound", kind="stable")
    right = smoothed[["run", "task_id", "total_step", "smoothed_return"]].sort_values(
        "total_step", kind="stable"
    )
    merged = pd.merge_asof(
        query,
        right,
        left_on="bound",
        right_on="total_step",
        by=["run", "task_id"],
        direction="backward",
    )
    reached = merged["bound"].to_numpy() <= merged["run"].map(last).astype(np.int64).to_numpy()
    merged["value"] = merged["smoothed_return"].where(reached)
    return merged[["run", "task_id", "pos", "value"]].sort_values(["run", "task_id", "pos"])


@dataclass
class CoraMatrices:
    """Per-seed ``F_ij`` and ``Z_ij`` (unscaled) in long format plus notes.

    ``values`` columns: ``run, method, seed, metric ("F" or "Z"), i, j, value`` where ``i``
    (row, impacted task) and ``j`` (column, trained task) are task ids.
    """

    values: pd.DataFrame
    order: list[int]
    notes: list[str] = field(default_factory=list)


def cora_matrices(
    eval_frame: pd.DataFrame,
    schedule: pd.DataFrame,
    window: int,
    *,
    isolated: bool = True,
    norm_scope: str = "method",
    prefer_split: str = "test",
) -> CoraMatrices:
    """Isolated forgetting ``F_ij`` (eq. 4) and zero-shot transfer ``Z_ij`` (eq. 5) per run.

    Args:
        eval_frame: cleaned eval rows of one or many runs sharing ``schedule``.
        schedule: schedule frame (agent steps).
        window: causal moving-average window ``w`` in eval points.
        isolated: ``False`` -> forgetting against the maximum up to the end of task ``i``.
        norm_scope: ``"method"`` (reference code, default) or ``"run"`` (paper eq. 3).
        prefer_split: split used where a task has it (CORA 4.1(b): test).

    Returns:
        :class:`CoraMatrices` (values unscaled; multiply by :data:`TABLE_SCALE` for tables).
    """
    if norm_scope not in {"method", "run"}:
        raise ValueError(f"norm_scope must be 'method' or 'run', got {norm_scope!r}")
    notes: list[str] = []
    smoothed = smooth_eval(metric_split(compact(eval_frame), prefer_split), window)
    first = _first_cycle(schedule)
    order = [int(t) for t in first["task_id"]]
    pos_of = {t: p for p, t in enumerate(order)}
    smoothed = smoothed[smoothed["task_id"].isin(order)]
    bv = boundary_values(smoothed, schedule)
    wide = bv.pivot_table(
        index=["run", "task_id"], columns="pos", values="value", dropna=False, observed=False
    )
    wide = wide.reindex(columns=range(-1, len(order)))
    absval = smoothed.assign(a=smoothed["smoothed_return"].abs())
    if norm_scope == "method":
        norm_m = absval.groupby(["method", "task_id"], observed=True)["a"].max()
        run_method = smoothed.groupby("run", observed=True)["method"].first()
        keys = pd.MultiIndex.from_arrays(
            [wide.index.get_level_values("run").map(run_method), wide.index.get_level_values(1)]
        )
        norm = pd.Series(norm_m.reindex(keys).to_numpy(), index=wide.index)
    else:
        norm = absval.groupby(["run", "task_id"], observed=True)["a"].max().reindex(wide.index)
    zero = norm.to_numpy() == 0
    if zero.any():
        zero_tasks = sorted({int(t) for t in wide.index.get_level_values(1)[zero]})
        notes.append(
            f"task(s) {zero_tasks} have all-zero smoothed returns: normaliser |max return| = 0, "
            "their F and Z entries are defined as 0"
        )
    r = wide.to_numpy()  # (n_run_task, n_pos + 1); column k holds pos k - 1
    denom = np.where(zero, np.inf, norm.to_numpy())[:, None]
    rows = wide.index.get_level_values(1).map(pos_of).to_numpy()
    n = len(order)
    # value after segment j (col j + 1) and before it (col j)
    after = r[:, 1:]
    before = r[:, :-1]
    if not isolated:
        task_max = (
            smoothed.merge(first[["task_id", "end_step"]], on="task_id")
            .query("total_step <= end_step")
            .groupby(["run", "task_id"], observed=True)["smoothed_return"]
            .max()
            .reindex(wide.index)
            .to_numpy()
        )
        before_f = np.repeat(task_max[:, None], n, axis=1)
    else:
        before_f = before
    f_vals = (before_f - after) / denom
    z_vals = (after - before) / denom
    jj = np.arange(n)[None, :]
    f_mask = jj > rows[:, None]
    z_mask = jj < rows[:, None]
    meta = smoothed.groupby("run", observed=True)[["method", "seed"]].first()
    frames = []
    for name, vals, mask in (("F", f_vals, f_mask), ("Z", z_vals, z_mask)):
        ri, ci = np.nonzero(mask)
        part = pd.DataFrame(
            {
                "run": wide.index.get_level_values("run")[ri],
                "metric": name,
                "i": wide.index.get_level_values(1)[ri].astype(int),
                "j": np.asarray(order)[ci],
                "value": vals[ri, ci],
            }
        )
        frames.append(part)
    values = pd.concat(frames, ignore_index=True)
    values = values.join(meta, on="run")
    missing = values["value"].isna().to_numpy()
    counts = smoothed.groupby(["run", "task_id"], observed=True)["smoothed_return"].count()
    no_data = {key for key, k in counts.items() if k == 0}  # no usable return at all
    dead = np.array([key in no_data for key in zip(values["run"], values["i"], strict=True)])
    if (missing & dead).any():
        tasks = sorted({int(i) for i in values.loc[missing & dead, "i"]})
        notes.append(
            f"{int((missing & dead).sum())} F/Z entries are n/a because task(s) {tasks} have "
            "no usable evaluation return in some run"
        )
    if (missing & ~dead).any():
        notes.append(
            f"{int((missing & ~dead).sum())} F/Z entries are n/a because a run ended before "
            "the segment they need"
        )
    cols = ["run", "method", "seed", "metric", "i", "j", "value"]
    return CoraMatrices(values[cols], order, notes)


@dataclass
class CoraTable:
    """A diagnostic table (CORA appendix E): ``mean``/``sem``/``n`` frames.

    Index: task ids then ``"Avg"``; columns: task ids then ``"Avg"``. Values are scaled by
    ``scale`` (x10). Cells outside the metric's triangle are NaN (shown as "-").
    """

    metric: str
    mean: pd.DataFrame
    sem: pd.DataFrame
    n: pd.DataFrame


def cora_table(
    values: pd.DataFrame,
    metric: str,
    order: list[int],
    *,
    scale: float = TABLE_SCALE,
    aggregate_sem: str = "seeds",
) -> CoraTable:
    """Diagnostic table with row, column and table averages (CORA appendix E.1).

    Per cell: mean and SEM (``ddof=1``) over seeds. Aggregates: for each seed, average its
    entries over the row (or column, or whole table), then take mean and SEM of those
    per-seed averages, so the aggregated values are independent across seeds.

    Args:
        values: ``CoraMatrices.values`` of one method.
        metric: ``"F"`` or ``"Z"``.
        order: task ids in first-cycle order.
        scale: multiplier (10 in the paper).
        aggregate_sem: ``"seeds"`` (reference code) or ``"tasks"`` (appendix E.1 text).
    """
    if aggregate_sem not in {"seeds", "tasks"}:
        raise ValueError(f"aggregate_sem must be 'seeds' or 'tasks', got {aggregate_sem!r}")
    v = values[values["metric"] == metric].dropna(subset=["value"])
    labels: list[object] = [*order, "Avg"]
    mean = pd.DataFrame(np.nan, index=labels, columns=labels, dtype=float)
    sem = mean.copy()
    cnt = pd.DataFrame(0, index=labels, columns=labels, dtype=int)
    if len(v) == 0:
        return CoraTable(metric, mean, sem, cnt)
    cell = v.groupby(["i", "j"], observed=True)["value"].agg(["mean", "std", "count"])
    pos = {label: k for k, label in enumerate(labels)}
    ri = np.array([pos[i] for i in cell.index.get_level_values(0)], dtype=np.intp)
    ci = np.array([pos[j] for j in cell.index.get_level_values(1)], dtype=np.intp)
    count = cell["count"].to_numpy()
    m_arr, s_arr, c_arr = mean.to_numpy().copy(), sem.to_numpy().copy(), cnt.to_numpy().copy()
    m_arr[ri, ci] = cell["mean"].to_numpy(dtype=float) * scale
    s_arr[ri, ci] = cell["std"].to_numpy(dtype=float) / np.sqrt(count.astype(float)) * scale
    c_arr[ri, ci] = count.astype(int)
    mean = pd.DataFrame(m_arr, index=labels, columns=labels)
    sem = pd.DataFrame(s_arr, index=labels, columns=labels)
    cnt = pd.DataFrame(c_arr, index=labels, columns=labels)
    n_tasks = len(order)

    def _agg(per_seed: pd.Series) -> tuple[float, float, int]:
        k = int(per_seed.count())
        m = per_seed.mean()
        denom = np.sqrt(k) if aggregate_sem == "seeds" else np.sqrt(n_tasks)
        s = per_seed.std(ddof=1) / denom if k > 1 else np.nan
        return m * scale, s * scale, k

    for key, axis in (("i", "row"), ("j", "col")):
        per_seed = v.groupby([key, "run"], observed=True)["value"].mean()
        for label, grp in per_seed.groupby(level=0, observed=True):
            m, s, k = _agg(grp)
            if axis == "row":
                mean.loc[label, "Avg"], sem.loc[label, "Avg"], cnt.loc[label, "Avg"] = m, s, k
            else:
                mean.loc["Avg", label], sem.loc["Avg", label], cnt.loc["Avg", label] = m, s, k
    m, s, k = _agg(v.groupby("run", observed=True)["value"].mean())
    mean.loc["Avg", "Avg"], sem.loc["Avg", "Avg"], cnt.loc["Avg", "Avg"] = m, s, k
    return CoraTable(metric, mean, sem, cnt)


def cora_summary(values: pd.DataFrame, order: list[int], **kwargs) -> pd.DataFrame:
    """Summary statistics ``F-bar`` and ``Z-bar`` per method (CORA Table 1).

    Returns:
        Frame indexed by method with columns ``F, F_sem, Z, Z_sem, n_seeds`` (x10), the
        table-average cells of :func:`cora_table`.
    """
    rows = []
    for method, grp in values.groupby("method", sort=True, observed=True):
        rec: dict[str, object] = {"method": method}
        for metric in ("F", "Z"):
            t = cora_table(grp, metric, order, **kwargs)
            rec[metric] = t.mean.loc["Avg", "Avg"]
            rec[f"{metric}_sem"] = t.sem.loc["Avg", "Avg"]
        rec["n_seeds"] = int(grp["run"].nunique())
        rows.append(rec)
    return pd.DataFrame(rows).set_index("method")


def final_performance(curves: pd.DataFrame) -> pd.DataFrame:
    """Final smoothed performance per method, task and split (CORA appendix C.10).

    Args:
        curves: output of :func:`continual_eval_curves`.

    Returns:
        Frame ``method, task_id, split, total_step, mean, sem, n`` at each curve's last step.
    """
    idx = curves.groupby(["method", "task_id", "split"], observed=True)["total_step"].idxmax()
    return curves.loc[idx].reset_index(drop=True)
