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

Reference-code (``l2metrics`` 3.1.0) choices kept as defaults: PM against the most recent
learning evaluation performance (``"mrlep"``; ``"mrtlp"`` is the option), terminal learning
performance = mean of the last 10% of a block, SE set to 0 when the lifelong learner's
saturation is below 20% of the expert's or its trend (a least-squares line against the
lifetime's global experience counter ``exp_num``) is negative, contrasts/ratios with a zero
denominator skipped, preprocessing without outlier clamping (``clamp=True`` applies appendix
A's 10/90-percentile clamp). One default departs from it: transfer ratios whose denominator
is near the normalised floor are left out (:data:`RATIO_FLOOR`; ``ratio_floor=0`` is the
reference code's handling). Single-task experts are matched to the learner's tasks by task
name (:func:`l2m_task_name`), and each of their Learning Blocks is smoothed on its own.
:func:`lifetime_log` lays the run out as l2logger does (EB 0, LB 0, EB 1, ...); the export to
``l2metrics`` (:mod:`~cl_suites.metrics.l2logger_export`) writes exactly that log, so both
tools see the same experiences (checked against ``python -m l2metrics`` in
``tests/metrics/test_l2metrics_agreement.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from cl_suites.metrics.preprocess import l2m_block_smooth, l2m_clamp, l2m_normalize, l2m_smooth
from cl_suites.metrics.runs import RunData, metric_split_wide

TERMINAL_FRACTION = 0.1
"""Section 2.4: terminal learning performance = mean of the last 10% of a Learning Block."""
RATIO_FLOOR = 0.05
"""A transfer ratio ``a / b`` whose denominator ``b`` (the target task's normalised
Evaluation Performance before the block, in ``[1, 101]``) lies within this fraction of the
normalisation range above its floor (``b < 1 + 0.05 * 100 = 6``) is undefined: ``b`` is then
the offset that appendix A adds to avoid dividing by zero, not a performance, and the
"ratio" is the numerator (a random agent's FT/BT ratios near 100). ``l2m_metrics`` leaves
such pairs out (``ratio_floor``; ``0`` keeps them, as l2metrics does)."""


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
        Frame ``lb, task_id, exp, perf, total_step`` (``lb`` = segment position, ``exp`` =
        index of the LX within its block, ``total_step`` the agent step the episode ended
        at), ordered by ``lb`` then time. Episodes of another task than the segment's are
        ignored.
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
            "total_step": ep["total_step"].to_numpy().astype(np.int64),
        }
    )
    out["exp"] = out.groupby("lb", observed=True).cumcount()
    return out[["lb", "task_id", "exp", "perf", "total_step"]]


def l2m_task_name(name: object) -> str:
    """A task name as l2logger stores it: lower case, ``_`` and spaces replaced by ``-``.

    l2metrics splits names on ``_`` (task label vs variant), and matches single-task-expert
    data to the learner's tasks by this name.
    """
    return str(name).lower().replace("_", "-").replace(" ", "-")


LIFETIME_COLUMNS = (
    "block_num",
    "block_type",
    "block",
    "task_id",
    "split",
    "exp",
    "exp_num",
    "perf",
    "total_step",
    "wall_time",
)


def lifetime_log(run: RunData, prefer_split: str = "test") -> pd.DataFrame:
    """The run as an L2M lifetime: EB 0, LB 0, EB 1, LB 1, ..., LB K-1, EB K.

    Evaluation Block ``k`` holds one Evaluation Experience per task (:func:`eval_blocks`; an
    EB the run never reached is left out); Learning Block ``k`` the Learning Experiences of
    segment ``k`` (:func:`learning_experiences`; a segment without a finished training
    episode has no LB). ``block_num`` numbers the blocks that are present, ``exp_num`` every
    experience over the whole lifetime (l2logger's counters).

    Returns:
        Frame with :data:`LIFETIME_COLUMNS`: ``block_type`` ``"test"``/``"train"``,
        ``block`` the EB or LB index, ``exp`` the index within the block, ``perf`` the
        return (eval mean return or episode return), ``total_step`` agent steps,
        ``wall_time`` seconds since the run started (interpolated over steps for LXs).
    """
    steps, tasks, vals = _eval_block_matrix(run.eval, run.schedule, prefer_split)
    tasks = np.asarray(tasks).astype(int)
    ev = run.eval
    with_test = np.unique(ev.loc[ev["split"].to_numpy() == "test", "task_id"].to_numpy())
    wall = ev.groupby("total_step", observed=True)["wall_time"].max().sort_index()
    wall_steps, wall_vals = wall.index.to_numpy(dtype=float), wall.to_numpy(dtype=float)
    # Evaluation Blocks: one row per (EB, task) with a value, EBs in order, tasks sorted
    at = np.searchsorted(steps, _eb_bounds(run.schedule), side="right") - 1
    reached = np.isfinite(vals)
    eb_k, eb_t = np.nonzero(reached)
    eb_step = steps[at[eb_k]].astype(np.int64) if eb_k.size else np.empty(0, np.int64)
    eb_split = np.where(np.isin(tasks[eb_t], with_test) & (prefer_split == "test"), "test", "train")
    # Learning Blocks: the segment's finished episodes in time order
    lx = learning_experiences(run.episodes, run.schedule)
    lx_step = lx["total_step"].to_numpy()
    log = pd.DataFrame(
        {
            "key": np.r_[2 * eb_k, 2 * lx["lb"].to_numpy() + 1],
            "block_type": np.r_[np.full(eb_k.size, "test"), np.full(len(lx), "train")],
            "block": np.r_[eb_k, lx["lb"].to_numpy()],
            "task_id": np.r_[tasks[eb_t], lx["task_id"].to_numpy()].astype(int),
            "split": np.r_[eb_split, np.full(len(lx), "train")],
            "exp": np.r_[(np.cumsum(reached, axis=1) - 1)[reached], lx["exp"].to_numpy()],
            "perf": np.r_[vals[reached], lx["perf"].to_numpy(dtype=float)],
            "total_step": np.r_[eb_step, lx_step].astype(np.int64),
        }
    )
    log["wall_time"] = (
        np.interp(log["total_step"].to_numpy(dtype=float), wall_steps, wall_vals)
        if wall_steps.size
        else 0.0
    )
    log = log.sort_values("key", kind="stable").reset_index(drop=True)
    key = log["key"].to_numpy()
    log["block_num"] = np.cumsum(np.r_[True, key[1:] != key[:-1]]) - 1 if len(log) else 0
    log["exp_num"] = np.arange(len(log))
    return log[list(LIFETIME_COLUMNS)]


# ------------------------------------------------------------------------- preprocessing


ExpertCurve = np.ndarray | Sequence[np.ndarray]
"""One single-task-expert run: a 1-D LX curve (one Learning Block) or a list of its Learning
Blocks (1-D arrays, in order)."""


def expert_blocks(curve: ExpertCurve) -> list[np.ndarray]:
    """The Learning Blocks of one expert run (a 1-D curve is one block)."""
    if isinstance(curve, np.ndarray) or not len(curve) or np.ndim(curve[0]) == 0:
        return [np.asarray(curve, dtype=float)]
    return [np.asarray(b, dtype=float) for b in curve]


@dataclass
class L2MData:
    """Block data of one lifelong-learner run plus single-task-expert LX curves.

    ``lx``: :func:`learning_experiences` rows (optionally with the lifetime's ``exp_num``);
    ``eb``: :func:`eval_blocks` rows; ``ste``: ``task_id -> list of expert runs`` (each an
    :data:`ExpertCurve`; after :func:`l2m_preprocess` one 1-D array per run, its blocks
    smoothed separately and concatenated).
    """

    lx: pd.DataFrame
    eb: pd.DataFrame
    ste: dict[int, list[ExpertCurve]] = field(default_factory=dict)
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
    Block of the learner and of every expert run (not to Evaluation Blocks, as ``l2metrics``
    by default). Clamping and the normalisation range are per task over the learner's LXs
    and EB values and the experts' LXs (``l2metrics``' ``Normalizer`` with
    ``method="task"``).

    Returns:
        A new :class:`L2MData` with processed ``perf`` values and the per-task ``ranges``.
    """
    lx = data.lx.copy()
    eb = data.eb.copy()
    ste_blocks = {t: [expert_blocks(c) for c in cs] for t, cs in data.ste.items()}
    lx_perf = lx["perf"].to_numpy(dtype=float).copy()
    eb_perf = eb["perf"].to_numpy(dtype=float).copy()
    lx_task = lx["task_id"].to_numpy()
    eb_task = eb["task_id"].to_numpy()
    if smooth and len(lx):
        lx_perf = l2m_block_smooth(lx_perf, lx["lb"].to_numpy())
    ste = {
        t: [
            np.concatenate([l2m_smooth(b) if smooth else b for b in blocks])
            if blocks
            else np.empty(0)
            for blocks in runs
        ]
        for t, runs in ste_blocks.items()
    }
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


def _task_curves(lx: pd.DataFrame, column: str = "perf") -> dict[int, np.ndarray]:
    """``task_id -> column`` of the task's LXs over all its LBs, in time order.

    ``column="exp_num"`` gives the lifetime's experience counter of those LXs (the x of
    l2metrics' trend line); a frame without it falls back to each task's own LX index.
    """
    x = lx.sort_values(["lb", "exp"], kind="stable")
    task = x["task_id"].to_numpy()
    if column not in x:
        return {int(t): np.arange(int((task == t).sum()), dtype=float) for t in np.unique(task)}
    vals = x[column].to_numpy(dtype=float)
    return {int(t): vals[task == t] for t in np.unique(task)}


def _concat_experts(ste: Mapping[int, Sequence[ExpertCurve]]) -> dict[int, list[np.ndarray]]:
    return {t: [np.concatenate(expert_blocks(c)) for c in cs] for t, cs in ste.items()}


def relative_performance(lx: pd.DataFrame, ste: Mapping[int, Sequence[ExpertCurve]]) -> pd.Series:
    """Performance relative to single-task experts per task (3.4.4).

    ``RP_t`` = mean over expert runs of ``sum(LL[:m]) / sum(STE[:m])`` with ``LL`` the task's
    LXs over all its LBs in order, ``STE`` the expert's LXs over all its LBs and ``m`` the
    shorter length.
    """
    return _relative_performance(_task_curves(lx), _concat_experts(ste))


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


def sample_efficiency(lx: pd.DataFrame, ste: Mapping[int, Sequence[ExpertCurve]]) -> pd.Series:
    """Sample efficiency per task (3.4.5): ``(sat_LL / sat_STE) * (ETS_STE / ETS_LL)``.

    As the reference code: a task (or expert) that saturates at its first experience
    (``ETS == 0``) is skipped; the value is 0 when the learner's saturation is below 20% of
    the expert's or its trend is negative. The trend is a least-squares line through the
    task's LXs against the lifetime's experience counter (``lx["exp_num"]``, see
    :func:`lifetime_log`; l2metrics fits against its global ``exp_num``); without that
    column, against the task's own LX index. Averaged over expert runs.
    """
    return _sample_efficiency(_task_curves(lx), _concat_experts(ste), _task_curves(lx, "exp_num"))


def _sample_efficiency(
    task_curves: Mapping[int, np.ndarray],
    ste: Mapping[int, Sequence[np.ndarray]],
    task_exp: Mapping[int, np.ndarray],
) -> pd.Series:
    out = {}
    for t, curves in ste.items():
        ll = task_curves.get(int(t), np.empty(0))
        if ll.size < 2:
            continue
        slope = np.polyfit(task_exp[int(t)], ll, 1)[0]
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


def _drop_small_denominators(
    tr: pd.DataFrame, ratio_floor: float, scale: float = 100.0, offset: float = 1.0
) -> list[str]:
    """Set to NaN the ratios of :func:`transfer`'s frame ``tr`` (normalised to
    ``[offset, offset + scale]``) whose denominator is below ``offset + ratio_floor *
    scale`` (:data:`RATIO_FLOOR`); returns a note per kind (FT, BT) that lost pairs."""
    if ratio_floor <= 0 or tr.empty:
        return []
    floor = offset + ratio_floor * scale
    small = tr["before"].to_numpy(dtype=float) < floor
    notes = []
    for kind in ("FT", "BT"):
        rows = (tr["kind"] == kind).to_numpy() & np.isfinite(tr["ratio"].to_numpy(dtype=float))
        pairs = tr.loc[rows, ["source", "target"]].drop_duplicates()
        kept = tr.loc[rows & ~small, ["source", "target"]].drop_duplicates()
        if len(kept) == len(pairs):
            continue
        why = (
            f"denominator below {floor:g} (the target's performance before the block is "
            f"within {ratio_floor:.0%} of its floor on L2M's [{offset:g}, {offset + scale:g}] "
            "scale, where a ratio reads the numerator)"
        )
        if len(kept) == 0:
            notes.append(
                f"{kind} ratio is n/a: undefined: every one of its {len(pairs)} task pair(s) "
                f"has a {why}; {kind} contrast is reported"
            )
        else:
            notes.append(
                f"{kind} ratio leaves out {len(pairs) - len(kept)} of {len(pairs)} task "
                f"pair(s) whose blocks all have a {why}"
            )
    tr.loc[small, "ratio"] = np.nan
    return notes


# ---------------------------------------------------------------------------- one run


def ste_curves(ste_runs: Sequence[RunData]) -> dict[str, list[list[np.ndarray]]]:
    """Learning Blocks of single-task-expert runs keyed by task name (:func:`l2m_task_name`).

    Returns:
        ``name -> [run's blocks]``, one entry per expert run of that task, each a list of
        the run's Learning Blocks (1-D arrays of episode returns, in order). As in
        l2metrics, experts are matched to a learner's tasks by name, not by task id (an
        expert trained on one task numbers it 0), and each block is smoothed on its own.
    """
    out: dict[str, list[list[np.ndarray]]] = {}
    for run in ste_runs:
        names = dict(zip(run.schedule["task_id"], run.schedule["task_name"], strict=False))
        lx = learning_experiences(run.episodes, run.schedule)
        for t, g in lx.groupby("task_id", observed=True, sort=True):
            g = g.sort_values(["lb", "exp"], kind="stable")
            lbs = g["lb"].to_numpy()
            perf = g["perf"].to_numpy(dtype=float)
            blocks = [perf[lbs == b] for b in np.unique(lbs)]
            out.setdefault(l2m_task_name(names.get(t, t)), []).append(blocks)
    return out


def l2m_metrics(
    run: RunData,
    ste_runs: Sequence[RunData] = (),
    *,
    clamp: bool = False,
    maintenance: str = "mrlep",
    ste_lx: Mapping[str, Sequence[ExpertCurve]] | None = None,
    ratio_floor: float = RATIO_FLOOR,
) -> tuple[dict[str, float], list[str]]:
    """All lifetime L2M metrics of one run (after :func:`l2m_preprocess`).

    Args:
        run: the lifelong learner's run.
        ste_runs: single-task-expert runs (for RP and SE), matched to the run's tasks by
            task name.
        clamp: apply appendix A's outlier clamp.
        maintenance: PM reference, ``"mrlep"`` or ``"mrtlp"``.
        ste_lx: ``ste_curves(ste_runs)`` computed once by the caller (a report scores many
            runs against the same experts); ``None``: computed here from ``ste_runs``.
        ratio_floor: FT/BT ratios whose denominator is below ``1 + 100 * ratio_floor`` on
            the normalised scale are left out (:data:`RATIO_FLOOR`); a lifetime ratio with
            no pair left is NaN and a note says why. ``0``: only a zero denominator is
            skipped (l2metrics 3.1.0).

    Returns:
        ``(metrics, notes)``: metrics ``PM, FT_contrast, FT_ratio, BT_contrast, BT_ratio, PR,
        CG, LB, RP, SE`` (NaN where not computable) and notes saying why.
    """
    if maintenance not in {"mrlep", "mrtlp"}:
        raise ValueError(f"method must be 'mrlep' or 'mrtlp', got {maintenance!r}")
    notes: list[str] = []
    if run.episodes.empty:
        notes.append("no training episodes: LB-based L2M metrics are n/a")
    log = lifetime_log(run)
    lx = log[log["block_type"] == "train"].rename(columns={"block": "lb"})
    eb = log[log["block_type"] == "test"].rename(columns={"block": "eb"})
    experts = ste_lx if ste_lx is not None else ste_curves(ste_runs)
    names = {
        int(t): l2m_task_name(n)
        for t, n in zip(run.schedule["task_id"], run.schedule["task_name"], strict=False)
    }
    ste = {t: list(experts[n]) for t, n in sorted(names.items()) if n in experts}
    missing = sorted(t for t, n in names.items() if n not in experts)
    if ste and missing:
        notes.append(f"no single-task-expert run for task(s) {missing}: RP and SE skip them")
    data = l2m_preprocess(L2MData(lx, eb, ste), clamp=clamp)
    # derived once and shared by the metrics below
    perf = _eb_perf(data.eb)
    blocks = _blocks(data.lx)
    out: dict[str, float] = {}
    pm = _performance_maintenance(perf, run.schedule, maintenance, blocks)
    out["PM"] = float(pm.mean()) if len(pm) else float("nan")
    tr = _transfer(perf, run.schedule)
    notes += _drop_small_denominators(tr, ratio_floor)
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
        se = _sample_efficiency(curves, data.ste, _task_curves(data.lx, "exp_num"))
        out["RP"] = float(rp.mean()) if len(rp) else float("nan")
        out["SE"] = float(se.mean()) if len(se) else float("nan")
    else:
        out["RP"] = out["SE"] = float("nan")
        if experts:
            notes.append("RP and SE: no single-task-expert run has one of the run's task names")
        else:
            notes.append("RP and SE need single-task-expert runs (none given)")
    return out, notes
