"""DARPA L2M lifelong-learning metrics (New et al., "Lifelong Learning Metrics", 2022).

Blocks come from the run log's schedule (all steps are agent steps):

* Learning Block (LB) ``k`` = schedule segment ``k``; its Learning Experiences (LXs) are the
  training episodes (``episodes.csv``) that ended in ``[start_step, end_step)`` on its task,
  performance = episode return.
* Evaluation Block (EB) ``k`` sits at the boundary before LB ``k`` (EB ``K`` after the last
  LB). Its Evaluation Performance for a task is the eval row at the last eval point with
  ``total_step <= boundary`` (the mean over that point's episodes; test split where the task
  has one). An EB the run never reached is missing (NaN).

Metrics (section 3.4 and appendix B); the lifetime value is the mean over tasks (or task
pairs), NaN entries skipped:

* :func:`performance_maintenance` (PM, 3.4.1), :func:`transfer` (FT 3.4.2 / BT 3.4.3, contrast
  and ratio), :func:`relative_performance` (RP, 3.4.4), :func:`sample_efficiency` (SE, 3.4.5),
  :func:`recovery_times` + :func:`performance_recovery` (PR, B.1, Theil-Sen),
  :func:`cumulative_gain` (CG, B.2), :func:`learn_burn` (LB, B.3).

Reference-code (``l2metrics``) choices kept as defaults: PM against the most recent learning
evaluation performance (``"mrlep"``; ``"mrtlp"`` is the option), terminal learning
performance = mean of the last 10% of a block, SE set to 0 when the lifelong learner's
saturation is below 20% of the expert's or its trend is negative, contrasts/ratios with a
zero denominator skipped, preprocessing without outlier clamping (``clamp=True`` applies
appendix A's 10/90-percentile clamp).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from cl_suites.metrics.preprocess import l2m_block_smooth, l2m_clamp, l2m_normalize, l2m_smooth
from cl_suites.metrics.runs import MetricsInputError, RunData, metric_split_wide

TERMINAL_FRACTION = 0.1
"""Section 2.4: terminal learning performance = mean of the last 10% of a Learning Block."""


def contrast(a: float, b: float) -> float:
    """``Contrast(a, b) = (a - b) / (a + b)`` (section 3.3); NaN when ``a + b == 0``."""
    return (a - b) / (a + b) if (a + b) != 0 else float("nan")


def ratio(a: float, b: float) -> float:
    """``Ratio(a, b) = a / b`` (section 3.3); NaN when ``b == 0``."""
    return a / b if b != 0 else float("nan")


# ------------------------------------------------------------------------------- blocks


def eval_blocks(
    eval_frame: pd.DataFrame, schedule: pd.DataFrame, prefer_split: str = "test"
) -> pd.DataFrame:
    """Evaluation Performance of every task in every Evaluation Block of one run.

    Returns:
        Frame ``eb, step, task_id, perf``; ``eb`` 0..K (K = number of segments), ``step`` the
        boundary in agent steps; ``perf`` NaN when the run ended before the boundary.
    """
    _steps, tasks, vals = _eval_block_matrix(eval_frame, schedule, prefer_split)
    n_eb, n_tasks = vals.shape
    bounds = _eb_bounds(schedule)
    return pd.DataFrame(
        {
            "eb": np.repeat(np.arange(n_eb), n_tasks),
            "step": np.repeat(bounds, n_tasks),
            "task_id": np.tile(np.asarray(tasks).astype(int), n_eb),
            "perf": vals.ravel(),
        }
    )


def _eb_bounds(schedule: pd.DataFrame) -> np.ndarray:
    seg = schedule.sort_values("start_step")
    return np.r_[seg["start_step"].to_numpy(), seg["end_step"].to_numpy()[-1:]]


def _eval_block_matrix(
    eval_frame: pd.DataFrame, schedule: pd.DataFrame, prefer_split: str = "test"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluation Performance as a matrix: ``(steps, task_ids, perf (n_eb, n_tasks))``."""
    bounds = _eb_bounds(schedule)
    steps, tasks, wide = metric_split_wide(eval_frame, prefer_split)
    last = steps.max() if len(steps) else -1
    k = np.searchsorted(steps, bounds, side="right") - 1
    vals = wide[np.clip(k, 0, None)]
    vals[(k < 0) | (bounds > last)] = np.nan
    return steps, tasks, vals


def learning_experiences(episodes: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """Learning Experiences per Learning Block of one run.

    Returns:
        Frame ``lb, task_id, exp, perf`` (``lb`` = segment position, ``exp`` = index of the
        LX within its block), ordered by ``lb`` then time. Episodes of another task than the
        segment's are ignored.
    """
    seg = schedule.sort_values("start_step").reset_index(drop=True)
    ep = episodes.sort_values("total_step", kind="stable")
    pos = np.searchsorted(seg["start_step"].to_numpy(), ep["total_step"].to_numpy(), "right") - 1
    inside = (pos >= 0) & (
        ep["total_step"].to_numpy() < seg["end_step"].to_numpy()[np.clip(pos, 0, None)]
    )
    ep = ep[inside].assign(lb=pos[inside])
    ep = ep[ep["task_id"].to_numpy() == seg["task_id"].to_numpy()[ep["lb"].to_numpy()]]
    out = pd.DataFrame(
        {
            "lb": ep["lb"].to_numpy(),
            "task_id": ep["task_id"].astype(int).to_numpy(),
            "perf": ep["episode_return"].to_numpy(dtype=float),
        }
    )
    out["exp"] = out.groupby("lb", observed=True).cumcount()
    return out[["lb", "task_id", "exp", "perf"]]


# ------------------------------------------------------------------------- preprocessing


@dataclass
class L2MData:
    """Block data of one lifelong-learner run plus single-task-expert LX curves.

    ``ste``: ``task_id -> list of 1-D arrays`` (one LX curve per expert run).
    """

    lx: pd.DataFrame
    eb: pd.DataFrame
    ste: dict[int, list[np.ndarray]] = field(default_factory=dict)
    ranges: dict[int, tuple[float, float]] = field(default_factory=dict)


def l2m_preprocess(
    data: L2MData,
    *,
    smooth: bool = True,
    clamp: bool = False,
    normalize: bool = True,
    scale: float = 100.0,
    offset: float = 1.0,
) -> L2MData:
    """Appendix A preprocessing: smooth LBs -> (optionally) clamp -> normalise to [1, 101].

    Smoothing applies :func:`~cl_suites.metrics.preprocess.l2m_smooth` to each Learning
    Block and each expert curve (not to Evaluation Blocks, as ``l2metrics`` by default).
    Clamping and the normalisation range are per task over the learner's LXs and EB values
    and the experts' LXs.

    Returns:
        A new :class:`L2MData` with processed ``perf`` values and the per-task ``ranges``.
    """
    lx = data.lx.copy()
    eb = data.eb.copy()
    ste = {t: [np.asarray(c, dtype=float) for c in cs] for t, cs in data.ste.items()}
    lx_perf = lx["perf"].to_numpy(dtype=float).copy()
    eb_perf = eb["perf"].to_numpy(dtype=float).copy()
    lx_task = lx["task_id"].to_numpy()
    eb_task = eb["task_id"].to_numpy()
    if smooth and len(lx):
        lx_perf = l2m_block_smooth(lx_perf, lx["lb"].to_numpy())
        ste = {t: [l2m_smooth(c) for c in cs] for t, cs in ste.items()}
    ranges: dict[int, tuple[float, float]] = {}
    tasks = sorted(set(lx["task_id"]) | set(eb["task_id"]) | set(ste))
    eb_ok = ~np.isnan(eb_perf)
    for t in tasks:
        m_lx = lx_task == t
        m_eb = (eb_task == t) & eb_ok
        ref = np.concatenate([lx_perf[m_lx], eb_perf[m_eb], *ste.get(t, [])])
        if ref.size == 0:
            continue
        if clamp:
            lx_perf[m_lx], _ = l2m_clamp(lx_perf[m_lx], ref)
            eb_perf[m_eb], _ = l2m_clamp(eb_perf[m_eb], ref)
            ste[t] = [l2m_clamp(c, ref)[0] for c in ste.get(t, [])]
            ref = l2m_clamp(ref, ref)[0]
        lo, hi = float(ref.min()), float(ref.max())
        ranges[t] = (lo, hi)
        if normalize:
            lx_perf[m_lx] = l2m_normalize(lx_perf[m_lx], lo, hi, scale, offset)
            eb_perf[m_eb] = l2m_normalize(eb_perf[m_eb], lo, hi, scale, offset)
            if t in ste:
                ste[t] = [l2m_normalize(c, lo, hi, scale, offset) for c in ste[t]]
    lx["perf"] = lx_perf
    eb["perf"] = eb_perf
    return L2MData(lx, eb, ste, ranges)


# ------------------------------------------------------------------------------ metrics


def _task_lbs(schedule: pd.DataFrame) -> dict[int, list[int]]:
    seg = schedule.sort_values("start_step").reset_index(drop=True)
    out: dict[int, list[int]] = {}
    for pos, tid in enumerate(seg["task_id"]):
        out.setdefault(int(tid), []).append(pos)
    return out


def _blocks(lx: pd.DataFrame) -> dict[int, np.ndarray]:
    """``lb -> performance array`` in experience order."""
    x = lx.sort_values(["lb", "exp"], kind="stable")
    lbv = x["lb"].to_numpy()
    perf = x["perf"].to_numpy(dtype=float)
    cuts = np.flatnonzero(lbv[1:] != lbv[:-1]) + 1
    return {
        int(lbv[lo]): perf[lo:hi]
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, lbv.size], strict=False)
        if hi > lo
    }


def _eb_perf(eb: pd.DataFrame) -> pd.DataFrame:
    """EB x task table of ``perf`` (``pivot_table(..., dropna=False)``, built with numpy)."""
    ebs, e_idx = np.unique(eb["eb"].to_numpy(), return_inverse=True)
    tasks, t_idx = np.unique(eb["task_id"].to_numpy(), return_inverse=True)
    flat = e_idx.astype(np.int64) * len(tasks) + t_idx
    if np.unique(flat).size != flat.size:  # repeated (eb, task) rows: pandas averages them
        return eb.pivot_table(
            index="eb", columns="task_id", values="perf", dropna=False, observed=False
        )
    p = np.full((len(ebs), len(tasks)), np.nan)
    p.ravel()[flat] = eb["perf"].to_numpy(dtype=float)
    return pd.DataFrame(p, index=pd.Index(ebs, name="eb"), columns=pd.Index(tasks, name="task_id"))


def terminal_performance(values: np.ndarray, fraction: float = TERMINAL_FRACTION) -> float:
    """Terminal learning performance: mean of the last ``fraction`` of a block (2.4)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan")
    return float(x[int((1 - fraction) * x.size) :].mean())


def performance_maintenance(
    eb: pd.DataFrame,
    schedule: pd.DataFrame,
    *,
    method: str = "mrlep",
    lx: pd.DataFrame | None = None,
) -> pd.Series:
    """Performance Maintenance per task (section 3.4.1).

    Maintenance values: for every EB of task ``t`` that comes after ``t``'s first learning
    block and is not the EB right after one of ``t``'s learning blocks, its Evaluation
    Performance minus the reference: ``"mrlep"`` (default) the EB right after ``t``'s most
    recent LB, ``"mrtlp"`` that LB's terminal learning performance (needs ``lx``).

    Returns:
        Series ``task_id -> PM`` (mean maintenance value; tasks without any are absent).
    """
    if method not in {"mrlep", "mrtlp"}:
        raise ValueError(f"method must be 'mrlep' or 'mrtlp', got {method!r}")
    blocks = None
    if method == "mrtlp":
        if lx is None:
            raise ValueError("method='mrtlp' needs the LX frame")
        blocks = _blocks(lx)
    return _performance_maintenance(_eb_perf(eb), schedule, method, blocks)


def _performance_maintenance(
    perf: pd.DataFrame,
    schedule: pd.DataFrame,
    method: str,
    blocks: dict[int, np.ndarray] | None,
) -> pd.Series:
    """:func:`performance_maintenance` on the EB x task table (:func:`_eb_perf`)."""
    col = {t: k for k, t in enumerate(perf.columns)}
    row = {e: k for k, e in enumerate(perf.index)}
    p = perf.to_numpy()
    out = {}
    for t, lbs in _task_lbs(schedule).items():
        if t not in col:
            continue
        ref_ebs = [k + 1 for k in lbs]
        vals = []
        for e in perf.index:
            if e <= ref_ebs[0] or e in ref_ebs:
                continue
            ref_e = max(r for r in ref_ebs if r < e)
            if method == "mrlep":
                ref = p[row[ref_e], col[t]] if ref_e in row else np.nan
            else:
                ref = terminal_performance(blocks.get(ref_e - 1, np.empty(0)))  # type: ignore[union-attr]
            vals.append(p[row[e], col[t]] - ref)
        vals = [v for v in vals if np.isfinite(v)]
        if vals:
            out[t] = float(np.mean(vals))
    return pd.Series(out, dtype=float, name="PM")


def transfer(eb: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """Forward and backward transfer values of every (source, target) task pair (3.4.2-3).

    For each LB ``k`` of a source task ``s`` and each other task ``t``: if ``k`` comes before
    ``t``'s first LB it is forward transfer, after it backward transfer; the value compares
    ``t``'s Evaluation Performance in the EB after LB ``k`` (``a``) with the EB before (``b``)
    as ``contrast(a, b)`` and ``ratio(a, b)``.

    Returns:
        Frame ``kind ("FT"/"BT"), source, target, lb, after, before, contrast, ratio``
        in LB order (NaN where an EB is missing or a denominator is zero).
    """
    return _transfer(_eb_perf(eb), schedule)


def _transfer(perf: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """:func:`transfer` on the EB x task table (:func:`_eb_perf`)."""
    col = {t: k for k, t in enumerate(perf.columns)}
    row = {e: k for k, e in enumerate(perf.index)}
    p = perf.to_numpy()
    lbs = _task_lbs(schedule)
    rows = []
    for s, s_lbs in lbs.items():
        for t, t_lbs in lbs.items():
            if s == t or t not in col:
                continue
            for k in s_lbs:
                kind = "FT" if k < t_lbs[0] else "BT"
                a = p[row[k + 1], col[t]] if k + 1 in row else np.nan
                b = p[row[k], col[t]] if k in row else np.nan
                rows.append((kind, s, t, k, a, b, contrast(a, b), ratio(a, b)))
    cols = ["kind", "source", "target", "lb", "after", "before", "contrast", "ratio"]
    return pd.DataFrame(rows, columns=cols).sort_values(["lb", "target"]).reset_index(drop=True)


def lifetime_transfer(values: pd.DataFrame, kind: str, measure: str = "contrast") -> float:
    """Lifetime FT or BT: mean over task pairs of each pair's first computable value."""
    x = values[measure].to_numpy(dtype=float)
    keep = (values["kind"].to_numpy() == kind) & ~np.isnan(x)
    if not keep.any():
        return float("nan")
    src = values["source"].to_numpy()[keep]
    tgt = values["target"].to_numpy()[keep]
    x = x[keep]
    # first value of each (source, target) pair in row order, pairs in sorted order (as a
    # sorted groupby(...).first()); lexsort is stable
    order = np.lexsort((tgt, src))
    src, tgt, x = src[order], tgt[order], x[order]
    first = np.r_[True, (src[1:] != src[:-1]) | (tgt[1:] != tgt[:-1])]
    return float(pd.Series(x[first]).mean())


def _task_curve(lx: pd.DataFrame, t: int) -> np.ndarray:
    return lx.loc[lx["task_id"] == t].sort_values(["lb", "exp"])["perf"].to_numpy(dtype=float)


def _task_curves(lx: pd.DataFrame) -> dict[int, np.ndarray]:
    """:func:`_task_curve` of every task of ``lx`` from one sort."""
    x = lx.sort_values(["lb", "exp"], kind="stable")
    task = x["task_id"].to_numpy()
    perf = x["perf"].to_numpy(dtype=float)
    return {int(t): perf[task == t] for t in np.unique(task)}


def relative_performance(lx: pd.DataFrame, ste: Mapping[int, Sequence[np.ndarray]]) -> pd.Series:
    """Performance relative to single-task experts per task (3.4.4).

    ``RP_t`` = mean over expert runs of ``sum(LL[:m]) / sum(STE[:m])`` with ``LL`` the task's
    LXs over all its LBs in order and ``m`` the shorter length.
    """
    return _relative_performance(_task_curves(lx), ste)


def _relative_performance(
    task_curves: Mapping[int, np.ndarray], ste: Mapping[int, Sequence[np.ndarray]]
) -> pd.Series:
    out = {}
    for t, curves in ste.items():
        ll = task_curves.get(int(t), np.empty(0))
        vals = []
        for c in curves:
            m = min(ll.size, len(c))
            if m == 0:
                continue
            denom = np.nansum(np.asarray(c[:m], dtype=float))
            vals.append(np.nansum(ll[:m]) / denom if denom != 0 else np.nan)
        vals = [v for v in vals if np.isfinite(v)]
        if vals:
            out[t] = float(np.mean(vals))
    return pd.Series(out, dtype=float, name="RP")


def saturation(values: np.ndarray) -> tuple[float, int]:
    """Saturation value (max of the flat-smoothed curve) and experiences to reach it (3.4.5)."""
    sm = l2m_smooth(np.asarray(values, dtype=float))
    sm = sm[np.isfinite(sm)]
    if sm.size == 0:
        return float("nan"), -1
    return float(sm.max()), int(np.argmax(sm))


def sample_efficiency(lx: pd.DataFrame, ste: Mapping[int, Sequence[np.ndarray]]) -> pd.Series:
    """Sample efficiency per task (3.4.5): ``(sat_LL / sat_STE) * (ETS_STE / ETS_LL)``.

    As the reference code: a task (or expert) that saturates at its first experience
    (``ETS == 0``) is skipped; the value is 0 when the learner's saturation is below 20% of
    the expert's or its linear trend is negative. Averaged over expert runs.
    """
    return _sample_efficiency(_task_curves(lx), ste)


def _sample_efficiency(
    task_curves: Mapping[int, np.ndarray], ste: Mapping[int, Sequence[np.ndarray]]
) -> pd.Series:
    out = {}
    for t, curves in ste.items():
        ll = task_curves.get(int(t), np.empty(0))
        if ll.size < 2:
            continue
        slope = np.polyfit(np.arange(ll.size), ll, 1)[0]
        sat, ets = saturation(ll)
        if ets <= 0:
            continue
        vals = []
        for c in curves:
            s_sat, s_ets = saturation(c)
            if s_ets <= 0:
                continue
            if sat < 0.2 * s_sat or slope < 0:
                vals.append(0.0)
            else:
                vals.append((sat / s_sat) * (s_ets / ets))
        if vals:
            out[t] = float(np.mean(vals))
    return pd.Series(out, dtype=float, name="SE")


def recovery_times(lx: pd.DataFrame, schedule: pd.DataFrame) -> dict[int, list[int]]:
    """Recovery time of each task's LBs from the second on (appendix B.1).

    Number of LXs until the performance is back at the previous LB's terminal learning
    performance: 0 if it starts there, ``len(block) + 1`` if it never gets there.
    """
    return _recovery_times(_blocks(lx), schedule)


def _recovery_times(blocks: dict[int, np.ndarray], schedule: pd.DataFrame) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for t, lbs in _task_lbs(schedule).items():
        times = []
        for prev, cur in itertools.pairwise(lbs):
            ref = terminal_performance(blocks.get(prev, np.empty(0)))
            block = blocks.get(cur, np.empty(0))
            if not np.isfinite(ref) or block.size == 0:
                continue
            hit = np.flatnonzero(block >= ref)
            times.append(int(hit[0]) if hit.size else int(block.size + 1))
        out[t] = times
    return out


def performance_recovery(times: Mapping[int, Sequence[int]]) -> pd.Series:
    """PR per task: minus the Theil-Sen slope of (block index, recovery time) (B.1).

    Needs at least two recovery times (three LBs of the task); other tasks are absent.
    """
    out = {}
    for t, y in times.items():
        if len(y) > 1:
            out[t] = -float(sps.theilslopes(np.asarray(y, dtype=float))[0])
    return pd.Series(out, dtype=float, name="PR")


def _slope(y: np.ndarray) -> float:
    """Least-squares slope of ``y`` against its index (performance per LX)."""
    if y.size < 2:
        return float("nan")
    x = np.arange(y.size) - (y.size - 1) / 2
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def cumulative_gain(lx: pd.DataFrame, tol: float = 0.0) -> float:
    """Cumulative gain (B.2): mean over LBs of ``sign(slope)`` of a least-squares trend line.

    A slope with ``|slope| <= tol`` (performance units per LX) counts as zero gain.
    """
    return _cumulative_gain(_blocks(lx), tol)


def _cumulative_gain(blocks: dict[int, np.ndarray], tol: float = 0.0) -> float:
    gains = []
    for block in blocks.values():
        s = _slope(block)
        if np.isfinite(s):
            gains.append(0.0 if abs(s) <= tol else float(np.sign(s)))
    return float(np.mean(gains)) if gains else float("nan")


def learn_burn(lx: pd.DataFrame) -> float:
    """Learn burn (B.3): mean burn rate / average learn rate.

    Burn rate of a change = least-squares slope of the LB that follows it (every LB but the
    first); average learn rate = slope of the trend line over all LXs of the lifetime.
    NaN when the average learn rate is 0 (undefined).
    """
    return _learn_burn(_blocks(lx))


def _learn_burn(blocks: dict[int, np.ndarray]) -> float:
    """:func:`learn_burn` on :func:`_blocks` (blocks in LB order, LXs in time order)."""
    arrays = list(blocks.values())
    burns = [_slope(b) for b in arrays[1:]]
    burns = [b for b in burns if np.isfinite(b)]
    alr = _slope(np.concatenate(arrays) if arrays else np.empty(0))
    if not burns or not np.isfinite(alr) or alr == 0:
        return float("nan")
    return float(np.mean(burns) / alr)


# ---------------------------------------------------------------------------- one run


def ste_curves(ste_runs: Sequence[RunData]) -> dict[int, list[np.ndarray]]:
    """LX curves of single-task-expert runs keyed by task id."""
    out: dict[int, list[np.ndarray]] = {}
    for run in ste_runs:
        lx = learning_experiences(run.episodes, run.schedule)
        for t, g in lx.groupby("task_id", observed=True):
            out.setdefault(int(t), []).append(g.sort_values(["lb", "exp"])["perf"].to_numpy())
    return out


def l2m_metrics(
    run: RunData,
    ste_runs: Sequence[RunData] = (),
    *,
    clamp: bool = False,
    maintenance: str = "mrlep",
    ste_lx: Mapping[int, Sequence[np.ndarray]] | None = None,
) -> tuple[dict[str, float], list[str]]:
    """All lifetime L2M metrics of one run (after :func:`l2m_preprocess`).

    Args:
        run: the lifelong learner's run.
        ste_runs: single-task-expert runs of the same suite (for RP and SE).
        clamp: apply appendix A's outlier clamp.
        maintenance: PM reference, ``"mrlep"`` or ``"mrtlp"``.
        ste_lx: ``ste_curves(ste_runs)`` computed once by the caller (a report scores many
            runs against the same experts); ``None``: computed here from ``ste_runs``.

    Returns:
        ``(metrics, notes)``: metrics ``PM, FT_contrast, FT_ratio, BT_contrast, BT_ratio, PR,
        CG, LB, RP, SE`` (NaN where not computable) and notes saying why.
    """
    if maintenance not in {"mrlep", "mrtlp"}:
        raise ValueError(f"method must be 'mrlep' or 'mrtlp', got {maintenance!r}")
    notes: list[str] = []
    if run.episodes.empty:
        notes.append("no training episodes: LB-based L2M metrics are n/a")
    data = L2MData(
        learning_experiences(run.episodes, run.schedule),
        eval_blocks(run.eval, run.schedule),
        {int(t): list(cs) for t, cs in ste_lx.items()}
        if ste_lx is not None
        else ste_curves(ste_runs),
    )
    data = l2m_preprocess(data, clamp=clamp)
    # derived once and shared by the metrics below
    perf = _eb_perf(data.eb)
    blocks = _blocks(data.lx)
    out: dict[str, float] = {}
    pm = _performance_maintenance(perf, run.schedule, maintenance, blocks)
    out["PM"] = float(pm.mean()) if len(pm) else float("nan")
    tr = _transfer(perf, run.schedule)
    for kind in ("FT", "BT"):
        for measure in ("contrast", "ratio"):
            out[f"{kind}_{measure}"] = lifetime_transfer(tr, kind, measure)
    pr = performance_recovery(_recovery_times(blocks, run.schedule))
    out["PR"] = float(pr.mean()) if len(pr) else float("nan")
    if not len(pr):
        notes.append("PR needs >= 3 learning blocks of a task (>= 3 cycles)")
    out["CG"] = _cumulative_gain(blocks)
    out["LB"] = _learn_burn(blocks)
    if data.ste:
        curves = _task_curves(data.lx)
        rp = _relative_performance(curves, data.ste)
        se = _sample_efficiency(curves, data.ste)
        out["RP"] = float(rp.mean()) if len(rp) else float("nan")
        out["SE"] = float(se.mean()) if len(se) else float("nan")
    else:
        out["RP"] = out["SE"] = float("nan")
        notes.append("RP and SE need single-task-expert runs (none given)")
    return out, notes


def check_blocks(schedule: pd.DataFrame) -> None:
    """Raise :class:`MetricsInputError` when the schedule cannot form L2M blocks."""
    if schedule.empty:
        raise MetricsInputError("empty schedule: no Learning Blocks")
