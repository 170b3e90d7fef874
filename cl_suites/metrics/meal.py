"""MEAL metrics (Tomilin et al., MEAL, section 4.5 and appendix C.2).

Scores are *normalised* scores ``s``: raw return divided by a per-task bound (MEAL: soups
delivered / single-agent upper bound). Every function takes the normaliser mapping
explicitly:

* ``normalizers={task_id: bound}`` -> ``s = mean_return / bound`` (bound must be > 0; a
  bound of ``None`` or NaN marks a task without one, e.g. a MEAL kitchen where one agent
  cannot make a soup alone: its scores are NaN, n/a in the report);
* ``normalizers=None`` -> the eval table already holds normalised scores (MEAL runs that
  log the score directly) and is used as is.

``s_i(j)`` (score on task ``j`` after training on task ``i``) is read at the last eval point
with ``total_step <= B_i`` (end of the ``i``-th segment of the chosen cycle), unsmoothed.

Section 4.5: ``A = mean_i s_N(i)`` (eq. 1), ``P = mean_i s_i(i)`` (eq. 3). Forgetting
``F`` defaults to the definition of MEAL's released result scripts (``"weighted"``: the
normalised, time-weighted drop below the end-of-training score, in [0, 1]), which is what
Table 2 reports (its F lies in [0, 1], e.g. FT 0.899 where eq. 2 would give about
P - A = 1.1); the paper's eq. 2, ``F = mean_{i<N} (s_i(i) - s_N(i))``, is
``forgetting="paper"`` and the released code's other formula ``"peak_final"``.

Appendix C.2: :func:`repetition_plasticity` computes AUC-loss, FPR and RAUC from the
training-score trace of a task repeated ``R`` times.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy.ndimage import gaussian_filter1d

from cl_suites.metrics.runs import MetricsInputError, metric_split, metric_split_wide


def task_bounds(normalizers: Mapping[int, float | None], task_ids) -> np.ndarray:
    """The normaliser of each of ``task_ids`` (float array; NaN for a task whose bound is
    ``None`` or NaN: a task without a bound).

    Raises:
        MetricsInputError: a task without a normaliser entry, or a bound ``<= 0``.
    """
    norms = {int(k): (np.nan if v is None else float(v)) for k, v in normalizers.items()}
    bad = {k: v for k, v in norms.items() if not (v > 0 or np.isnan(v))}
    if bad:
        raise MetricsInputError(f"score normalizer(s) must be > 0, got {bad}")
    ids = [int(t) for t in task_ids]
    missing = sorted(set(ids) - set(norms))
    if missing:
        raise MetricsInputError(f"no score normalizer for task id(s) {missing}")
    return np.array([norms[t] for t in ids], dtype=float)


def normalize_scores(
    eval_frame: pd.DataFrame, normalizers: Mapping[int, float | None] | None
) -> pd.DataFrame:
    """Add column ``score``: ``mean_return / normalizers[task_id]`` (or a copy when None;
    NaN for a task without a bound, see :func:`task_bounds`).

    Raises:
        MetricsInputError: a task without a normaliser entry or with a bound ``<= 0``.
    """
    frame = eval_frame.copy()
    if normalizers is None:
        frame["score"] = frame["mean_return"].astype(float)
        return frame
    ids = frame["task_id"].astype(int).to_numpy()
    frame["score"] = frame["mean_return"].to_numpy(dtype=float) / task_bounds(normalizers, ids)
    return frame


def score_matrix(
    eval_frame: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float | None] | None,
    cycle: int = 0,
    prefer_split: str = "test",
) -> pd.DataFrame:
    """``s_i(j)`` for one run: rows = segment position ``i`` of ``cycle``, columns = task ids.

    Returns:
        Frame indexed by the task id trained in segment ``i`` (in training order), columns
        task ids; NaN where the run ended before ``B_i``, a task has no eval point or no
        bound.
    """
    seg = schedule[schedule["cycle"] == cycle].sort_values("start_step")
    if seg.empty:
        raise MetricsInputError(f"schedule has no cycle {cycle}")
    steps, tasks, wide = metric_split_wide(eval_frame, prefer_split)
    if normalizers is not None:
        # same division as normalize_scores, per column (forward filling commutes with it)
        wide = wide / task_bounds(normalizers, tasks)
    row_ids = seg["task_id"].to_numpy()
    vals = np.full((len(row_ids), len(tasks)), np.nan)
    for tid, end in zip(row_ids, seg["end_step"], strict=False):
        if len(steps) == 0 or steps.max() < end:
            continue
        k = np.searchsorted(steps, end, side="right") - 1
        if k >= 0:
            vals[row_ids == tid] = wide[k]
    return pd.DataFrame(vals, index=row_ids, columns=pd.Index(tasks, name="task_id"))


def average_performance(s: pd.DataFrame) -> float:
    """``A = (1/N) sum_i s_N(i)`` (MEAL eq. 1): mean score over tasks after the last task."""
    return float(s.iloc[-1][s.index].mean(skipna=False))


def plasticity(s: pd.DataFrame) -> float:
    """``P = (1/N) sum_i s_i(i)`` (MEAL eq. 3): mean score on each task right after it."""
    return float(np.mean([s.loc[t, t] for t in s.index]))


FORGETTING_METHODS = ("weighted", "paper", "peak_final")
"""MEAL forgetting definitions; ``"weighted"`` (the released code's) is the default."""


def _task_forgetting(
    method: str, curve: np.ndarray, end_idx: int, end_window: int, lambda_decay: float
) -> float:
    """Forgetting of one task from its score curve (see :func:`meal_forgetting`)."""
    c = np.asarray(curve, dtype=float)
    if method == "peak_final":
        if c.size == 0:
            return 0.0
        return max(float(np.nanmax(c)) - float(np.nanmean(c[-end_window:])), 0.0)
    if method != "weighted":
        raise ValueError(f"unknown forgetting method {method!r}; known: {list(FORGETTING_METHODS)}")
    if not (c > 0).any():
        return float("nan")  # the released code skips tasks that never score
    k = min(int(end_idx), c.size - 1)
    e = c[k]
    post = c[k + 1 :]
    if e < 1e-8 or post.size == 0:
        return 0.0
    drop = np.maximum(e - post, 0.0) / e
    t = np.arange(post.size)
    w = np.exp(-lambda_decay * t / (post.size - 1)) if post.size > 1 else np.ones(1)
    return float(np.clip((drop * w).sum() / w.sum(), 0.0, 1.0))


def meal_forgetting(
    s: pd.DataFrame | None = None,
    *,
    method: str = "weighted",
    curves: Mapping[int, np.ndarray] | None = None,
    train_end_idx: Mapping[int, int] | None = None,
    end_window: int = 10,
    lambda_decay: float = 2.0,
) -> float:
    """Forgetting ``F``: the mean over tasks ``i < N`` of :func:`forgetting_values`."""
    vals = forgetting_values(
        s,
        method=method,
        curves=curves,
        train_end_idx=train_end_idx,
        end_window=end_window,
        lambda_decay=lambda_decay,
    )
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else float("nan")


def forgetting_values(
    s: pd.DataFrame | None = None,
    *,
    method: str = "weighted",
    curves: Mapping[int, np.ndarray] | None = None,
    train_end_idx: Mapping[int, int] | None = None,
    end_window: int = 10,
    lambda_decay: float = 2.0,
) -> np.ndarray:
    """Forgetting of each task ``i < N`` (training order; the last task has no later tasks).

    Args:
        s: score matrix from :func:`score_matrix` (for ``method="paper"``).
        method: ``"weighted"`` (default; MEAL's released code, ``experiments/results/
            plotting/utils/metrics.py`` ``calculate_curve_based_forgetting``, the
            definition behind Table 2's F): the drop below the end-of-training score ``e``
            after training, ``max(0, e - s_t) / e``, averaged over the later points with
            weights ``exp(-lambda_decay * t/T)``, clipped to [0, 1]; 0 when ``e < 1e-8``;
            NaN (skipped in the mean) for a task that never scores above 0.
            ``"paper"`` (MEAL eq. 2): ``s_i(i) - s_N(i)``. ``"peak_final"`` (released code
            option): ``max(0, max(curve) - mean(last end_window points))``.
        curves: ``task_id -> score curve`` over the whole run (for the code variants), in
            training order of the tasks.
        train_end_idx: ``task_id -> index`` of the last point of the task's training.
        end_window: points averaged as the final value (``peak_final``).
        lambda_decay: decay of the weights (``weighted``).

    Returns:
        Array of ``N - 1`` values (NaN where a task is skipped).
    """
    if method == "paper":
        if s is None:
            raise ValueError("method='paper' needs the score matrix s")
        tasks = list(s.index)[:-1]
        return np.array([s.loc[t, t] - s.iloc[-1][t] for t in tasks], dtype=float)
    if method not in FORGETTING_METHODS:
        raise ValueError(f"unknown forgetting method {method!r}; known: {list(FORGETTING_METHODS)}")
    if curves is None:
        raise ValueError(f"method={method!r} needs per-task score curves")
    if method == "weighted" and train_end_idx is None:
        raise ValueError("method='weighted' needs train_end_idx")
    ends = train_end_idx or {}
    return np.array(
        [
            _task_forgetting(method, curves[t], ends.get(t, 0), end_window, lambda_decay)
            for t in list(curves)[:-1]
        ],
        dtype=float,
    )


def forgetting_per_task(
    eval_frame: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float] | None,
    *,
    method: str = "weighted",
    cycle: int = 0,
) -> pd.Series:
    """:func:`forgetting_values` of one run: ``task_id -> F_i`` for the tasks ``i < N`` of
    ``cycle`` in training order (the code variants use each task's unsmoothed score curve
    over the whole run, its training end at the last eval point of its segment)."""
    if method == "paper":
        s = score_matrix(eval_frame, schedule, normalizers, cycle)
        return pd.Series(forgetting_values(s, method="paper"), index=list(s.index)[:-1])
    frame = normalize_scores(metric_split(eval_frame), normalizers)
    seg = schedule[schedule["cycle"] == cycle].sort_values("start_step")
    curves, ends = {}, {}
    for tid, end in zip(seg["task_id"], seg["end_step"], strict=False):
        f = frame[frame["task_id"] == tid].sort_values("total_step")
        curves[int(tid)] = f["score"].to_numpy()
        ends[int(tid)] = int(np.searchsorted(f["total_step"].to_numpy(), end, "right") - 1)
    vals = forgetting_values(method=method, curves=curves, train_end_idx=ends)
    return pd.Series(vals, index=list(curves)[:-1], dtype=float)


def meal_metrics(
    eval_frame: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float] | None,
    *,
    forgetting: str = "weighted",
    cycle: int = 0,
) -> dict[str, float]:
    """``A``, ``F`` and ``P`` of one run (MEAL section 4.5).

    ``forgetting`` selects the definition (:func:`forgetting_values`): ``"weighted"`` (the
    released code's, default), ``"paper"`` (eq. 2) or ``"peak_final"``.
    """
    s = score_matrix(eval_frame, schedule, normalizers, cycle)
    f = forgetting_per_task(eval_frame, schedule, normalizers, method=forgetting, cycle=cycle)
    f = f[np.isfinite(f)]
    return {
        "A": average_performance(s),
        "F": float(f.mean()) if len(f) else float("nan"),
        "P": plasticity(s),
    }


# ---------------------------------------------------------------- appendix C.2: plasticity


def training_traces(
    episodes: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float] | None,
    bins_per_segment: int,
) -> dict[int, np.ndarray]:
    """Training-score trace of each task, one row per repetition: ``task_id -> (R, L)``.

    Each training segment of a task is cut into ``bins_per_segment`` equal step intervals;
    a bin holds the mean normalised return of the training episodes that ended in it (empty
    bins are linearly interpolated). Segments are the task's occurrences (cycles) in order.

    Raises:
        MetricsInputError: a segment without any training episode.
    """
    ep = episodes.sort_values("total_step")
    steps = ep["total_step"].to_numpy()
    out: dict[int, list[np.ndarray]] = {}
    for _, seg in schedule.sort_values("start_step").iterrows():
        tid = int(seg["task_id"])
        lo, hi = np.searchsorted(steps, [seg["start_step"], seg["end_step"]], side="left")
        part = ep.iloc[lo:hi]
        part = part[part["task_id"] == tid]
        if part.empty:
            raise MetricsInputError(
                f"no training episodes for task {tid} in segment {int(seg['index'])} "
                f"(steps {int(seg['start_step'])}-{int(seg['end_step'])})"
            )
        ret = part["episode_return"].to_numpy(dtype=float)
        if normalizers is not None:
            ret = ret / task_bounds(normalizers, [tid])[0]
        edges = np.linspace(seg["start_step"], seg["end_step"], bins_per_segment + 1)
        b = np.clip(np.searchsorted(edges, part["total_step"], side="right") - 1, 0, None)
        b = np.minimum(b, bins_per_segment - 1)
        sums = np.bincount(b, weights=ret, minlength=bins_per_segment)
        cnts = np.bincount(b, minlength=bins_per_segment)
        vals = np.where(cnts > 0, sums / np.maximum(cnts, 1), np.nan)
        ok = np.flatnonzero(cnts > 0)
        vals = np.interp(np.arange(bins_per_segment), ok, vals[ok])
        out.setdefault(tid, []).append(vals)
    return {t: np.vstack(v) for t, v in out.items()}


def _auc(x: np.ndarray) -> np.ndarray:
    """Trapezoid area of each row (unit spacing)."""
    return np.trapezoid(x, axis=-1) if hasattr(np, "trapezoid") else np.trapz(x, axis=-1)


def repetition_plasticity(
    traces: np.ndarray, sigma: float = 1.5, variant: str = "code", fpr_cap: float = 1.25
) -> dict[str, float]:
    """AUC-loss, FPR and RAUC of one task repeated ``R`` times (MEAL appendix C.2).

    Args:
        traces: array ``(n_seeds, R, L)`` (or ``(R, L)`` for one seed) of training scores.
        sigma: Gaussian smoothing bandwidth in trace points (released code: 1.5).
        variant: ``"code"`` (released code, default): AUC is the trapezoid area of the
            Gaussian-smoothed trace; ``loss_j = max(0, 1 - AUC_j / mean_seeds(AUC_0))``;
            ``FPR_j = min(r_j[L-1] / r_0[L-1], fpr_cap)`` on the raw trace; ``RAUC_j =
            AUC_j / AUC_0`` per seed. ``"paper"`` (eqs. 4-6): AUC of the cumulative average
            of the smoothed trace, ``loss_j = 1 - AUC_j/AUC_0``, ``FPR_j`` the ratio of the
            cumulative averages at ``L-1``, ``RAUC`` the ratio of AUCs of the cumulative
            average of the unsmoothed trace; all per seed.
        fpr_cap: cap of FPR in the code variant.

    Returns:
        ``{"auc_loss", "fpr", "rauc"}``, each the mean over repetitions ``j >= 1`` and seeds;
        NaN (with a ``"note"`` key) when ``R < 2`` or a baseline is zero.
    """
    x = np.asarray(traces, dtype=float)
    if x.ndim == 2:
        x = x[None]
    _n_seeds, reps, length = x.shape
    if reps < 2:
        return {"auc_loss": np.nan, "fpr": np.nan, "rauc": np.nan, "note": "needs >= 2 repeats"}
    smooth = gaussian_filter1d(x, sigma=sigma, axis=-1) if sigma > 0 else x
    with np.errstate(divide="ignore", invalid="ignore"):
        if variant == "code":
            auc = _auc(smooth)  # (n_seeds, R)
            base = np.nanmean(auc[:, 0])
            loss = (
                np.maximum(0.0, 1.0 - auc[:, 1:] / base)
                if base
                else np.full_like(auc[:, 1:], np.nan)
            )
            fpr = np.minimum(x[:, 1:, -1] / x[:, :1, -1], fpr_cap)
            fpr[~np.isfinite(fpr)] = np.nan
            rauc = auc[:, 1:] / auc[:, :1]
        elif variant == "paper":
            t = np.arange(1, length + 1)
            cum_s = np.cumsum(smooth, axis=-1) / t
            cum_r = np.cumsum(x, axis=-1) / t
            auc = _auc(cum_s)
            loss = 1.0 - auc[:, 1:] / auc[:, :1]
            fpr = cum_s[:, 1:, -1] / cum_s[:, :1, -1]
            raw = _auc(cum_r)
            rauc = raw[:, 1:] / raw[:, :1]
        else:
            raise ValueError(f"variant must be 'code' or 'paper', got {variant!r}")
    out: dict[str, float] = {}
    for name, arr in (("auc_loss", loss), ("fpr", fpr), ("rauc", rauc)):
        arr = np.where(np.isfinite(arr), arr, np.nan)
        out[name] = float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")
    if any(np.isnan(v) for v in out.values()):
        out["note"] = "a repetition-0 baseline is zero"
    return out


def sequence_plasticity(traces_by_task: Mapping[int, np.ndarray], **kwargs) -> dict[str, float]:
    """Sequence-level AUC-loss/FPR/RAUC: per-task values averaged over tasks (C.2)."""
    per = [repetition_plasticity(t, **kwargs) for t in traces_by_task.values()]
    return {
        k: float(np.nanmean([p[k] for p in per])) if per else float("nan")
        for k in ("auc_loss", "fpr", "rauc")
    }
