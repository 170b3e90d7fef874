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

MEAL's later result scripts (TTomilin/MEAL@057f862, ``docs/metrics.md`` "MEAL's 2026
metrics"): both forgetting formulas at MEAL's end index (:func:`meal_end_index`), forward
transfer against single-task reference runs (:func:`forward_transfer`,
:func:`training_score_curves`), the role-heterogeneity index of the agents' greedy actions
(:func:`role_heterogeneity`, :func:`run_heterogeneity`), coordination forgetting
(:func:`coordination_forgetting`) and the coordination matrix
(:func:`coordination_matrix`, :func:`run_coordination_matrix`,
:func:`coordination_retention`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.ndimage import gaussian_filter1d

from cl_suites.core.heterogeneity import jensen_shannon, role_heterogeneity  # noqa: F401
from cl_suites.metrics.runs import (
    MetricsInputError,
    metric_split,
    metric_split_mask,
    metric_split_wide,
)
from cl_suites.rundir.runlog import read_metadata
from cl_suites.rundir.task_policies import TASK_POLICY_GLOB, task_policy_files


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

END_RULES = ("position", "step")
"""Where a task's training ends on its evaluation curve (``"weighted"`` forgetting): at
MEAL's positional index :func:`meal_end_index` (``"position"``, the default: MEAL
057f862's arithmetic), or at the last evaluation point at or before the end of its
segment (``"step"``: the task's own last evaluation)."""


def meal_end_index(position: int, n_tasks: int, curve_len: int) -> int:
    """MEAL's end-of-training index of the task at ``position`` (0-based) on a curve of
    ``curve_len`` evaluation points spanning the whole run:
    ``min(int((position + 1) / n_tasks * curve_len), curve_len - 1)``, in MEAL's float
    arithmetic (``TTomilin/MEAL@057f862 experiments/results/numerical/results_table.py:
    107-110``, ``plotting/utils/metrics.py:227-233``).

    On MEAL's own logs (``k`` evaluations per task, after updates ``5, 10, ...`` of each
    task, none at step 0) and on a cl-suites MEAL run (``k`` per task, the last at the
    task's end, none at step 0) it is ``(position + 1) * k``: the first evaluation of the
    next task's training, not the task's own last one (``end_rule="step"``). With an
    evaluation at step 0 as well, it is the evaluation at the task's end.
    """
    if n_tasks <= 0 or curve_len <= 0:
        raise ValueError(f"n_tasks and curve_len must be positive, got {n_tasks}, {curve_len}")
    return min(int(((position + 1) / n_tasks) * curve_len), curve_len - 1)


def _task_forgetting(
    method: str, curve: np.ndarray, end_idx: int, end_window: int, lambda_decay: float
) -> float:
    """Forgetting of one task from its score curve (see :func:`meal_forgetting`)."""
    c = np.asarray(curve, dtype=float)
    if method == "peak_final":
        if c.size == 0:
            return 0.0
        window = c[-end_window:] if end_window > 0 else c
        return max(float(np.nanmax(c)) - float(np.nanmean(window)), 0.0)
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
            ``"paper"`` (MEAL eq. 2): ``s_i(i) - s_N(i)``. ``"peak_final"`` (released code,
            ``plotting/utils/metrics.py:175-193``, the default of ``numerical/
            algorithm_comparison.py`` and the other comparison scripts):
            ``max(0, max(curve) - mean(last end_window points))`` over the whole curve, for
            every task, the last one included (``algorithm_comparison.py:71-78``).
        curves: ``task_id -> score curve`` over the whole run (for the code variants), in
            training order of the tasks.
        train_end_idx: ``task_id -> index`` of the last point of the task's training.
        end_window: points averaged as the final value (``peak_final``).
        lambda_decay: decay of the weights (``weighted``).

    Returns:
        Array of ``N - 1`` values (``"peak_final"``: ``N``; NaN where a task is skipped).
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
    tasks = list(curves) if method == "peak_final" else list(curves)[:-1]
    return np.array(
        [
            _task_forgetting(method, curves[t], ends.get(t, 0), end_window, lambda_decay)
            for t in tasks
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
    end_rule: str = "position",
    end_window: int = 10,
    lambda_decay: float = 2.0,
) -> pd.Series:
    """:func:`forgetting_values` of one run: ``task_id -> F_i`` for the tasks of ``cycle``
    in training order (``i < N``; ``"peak_final"``: all ``N``). The code variants use each
    task's unsmoothed score curve over the whole run; ``"weighted"`` puts the task's
    training end at MEAL's positional index (``end_rule="position"``, the default,
    :func:`meal_end_index`: on a MEAL run the first evaluation after the task's end) or at
    the last eval point of its segment (``"step"``)."""
    if method == "paper":
        s = score_matrix(eval_frame, schedule, normalizers, cycle)
        return pd.Series(forgetting_values(s, method="paper"), index=list(s.index)[:-1])
    if end_rule not in END_RULES:
        raise ValueError(f"end_rule must be one of {list(END_RULES)}, got {end_rule!r}")
    frame = normalize_scores(metric_split(eval_frame), normalizers)
    seg = schedule[schedule["cycle"] == cycle].sort_values("start_step")
    curves, ends = {}, {}
    for pos, (tid, end) in enumerate(zip(seg["task_id"], seg["end_step"], strict=False)):
        f = frame[frame["task_id"] == tid].sort_values("total_step")
        curves[int(tid)] = f["score"].to_numpy()
        if end_rule == "position" and len(f):
            ends[int(tid)] = meal_end_index(pos, len(seg), len(f))
        else:
            ends[int(tid)] = int(np.searchsorted(f["total_step"].to_numpy(), end, "right") - 1)
    vals = forgetting_values(
        method=method,
        curves=curves,
        train_end_idx=ends,
        end_window=end_window,
        lambda_decay=lambda_decay,
    )
    tasks = list(curves) if method == "peak_final" else list(curves)[:-1]
    return pd.Series(vals, index=tasks, dtype=float)


def meal_metrics(
    eval_frame: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float] | None,
    *,
    forgetting: str = "weighted",
    cycle: int = 0,
    end_rule: str = "position",
) -> dict[str, float]:
    """``A``, ``F`` and ``P`` of one run (MEAL section 4.5).

    ``forgetting`` selects the definition (:func:`forgetting_values`): ``"weighted"`` (the
    released code's, default), ``"paper"`` (eq. 2) or ``"peak_final"``; ``end_rule`` where
    ``"weighted"`` ends a task's training (:data:`END_RULES`).
    """
    s = score_matrix(eval_frame, schedule, normalizers, cycle)
    f = forgetting_per_task(
        eval_frame, schedule, normalizers, method=forgetting, cycle=cycle, end_rule=end_rule
    )
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


# ---------------------------------------------------------------- forward transfer (057f862)


def task_auc(curve: np.ndarray) -> float:
    """MEAL's area under one task's curve: ``trapz(curve) / len(curve)`` (unit spacing,
    divided by the number of points, not the number of intervals); the value itself for
    one point, 0 for none (``TTomilin/MEAL@057f862 experiments/results/plotting/utils/
    metrics.py:61-67``)."""
    c = np.asarray(curve, dtype=float)
    if c.size > 1:
        return float(_auc(c) / c.size)
    return float(c[0]) if c.size == 1 else 0.0


def forward_transfer_ratio(auc_cl: float, auc_ref: float, zero_threshold: float = 1e-8) -> float:
    """``(AUC_cl - AUC_ref) / AUC_ref``, or NaN (the task is skipped) for a non-finite
    input or result or a reference AUC below ``zero_threshold`` (MEAL's guards,
    ``plotting/utils/metrics.py:70-83``)."""
    if not (np.isfinite(auc_cl) and np.isfinite(auc_ref)) or auc_ref < zero_threshold:
        return float("nan")
    ft = (auc_cl - auc_ref) / auc_ref
    return float(ft) if np.isfinite(ft) else float("nan")


def forward_transfer_values(
    cl_curves: Mapping[int, np.ndarray], ref_curves: Mapping[int, np.ndarray | None]
) -> pd.Series:
    """Forward transfer of every task: :func:`forward_transfer_ratio` of the
    :func:`task_auc` of the continual learner's training curve on the task and of the
    single-task reference's (``plotting/utils/metrics.py:86-108``).

    Args:
        cl_curves: ``task_id -> training-score curve`` of the task's segment in the
            continual run, in training order.
        ref_curves: ``task_id -> training-score curve`` of the task's single-task reference
            run (missing or ``None``: no reference, NaN).

    Returns:
        ``task_id -> FT_i`` (NaN where skipped); ``FT`` is its mean over the finite values
        (:func:`forward_transfer`).
    """
    out = {}
    for tid, curve in cl_curves.items():
        ref = ref_curves.get(tid)
        if ref is None or len(ref) == 0 or not np.isfinite(np.asarray(ref, dtype=float)).any():
            out[tid] = float("nan")  # MEAL's loader drops empty and all-NaN/inf baselines
            continue
        out[tid] = forward_transfer_ratio(task_auc(curve), task_auc(ref))
    return pd.Series(out, dtype=float)


def forward_transfer(
    cl_curves: Mapping[int, np.ndarray], ref_curves: Mapping[int, np.ndarray | None]
) -> float:
    """``FT``: the mean of :func:`forward_transfer_values` over the tasks with a value, NaN
    when none has one."""
    vals = forward_transfer_values(cl_curves, ref_curves).to_numpy()
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else float("nan")


def training_score_curves(
    soups: pd.DataFrame,
    schedule: pd.DataFrame,
    normalizers: Mapping[int, float | None] | None,
    *,
    cycle: int = 0,
    episode_len: int | None = None,
) -> dict[int, np.ndarray]:
    """MEAL's training signal (``Soup/scaled``) of one run, one curve per segment of
    ``cycle``: at every step where training episodes ended, the mean over those episodes
    of ``soups / bound`` (MEAL: the mean over the envs that finished an episode in the
    logged update, ``experiments/algo_common.py:91-125``), in step order.

    Args:
        soups: ``episode_soups.csv`` (``total_step, task_id, soups, episode_length``).
        schedule: the run's schedule.
        normalizers: ``task_id -> bound`` (MEAL's max-soup bound; ``None``: soups as is).
        episode_len: when given, only episodes of this length count (an episode cut by a
            task switch is shorter; MEAL resets its envs at a switch and never logs one).

    Returns:
        ``task_id -> curve`` in training order; a segment without episodes gets an empty
        curve, a task without a bound an all-NaN one.
    """
    seg = schedule[schedule["cycle"] == cycle].sort_values("start_step")
    frame = soups
    if episode_len is not None and len(frame):
        frame = frame[frame["episode_length"] >= episode_len]
    steps = frame["total_step"].to_numpy() if len(frame) else np.array([])
    out: dict[int, np.ndarray] = {}
    for tid, start, end in zip(seg["task_id"], seg["start_step"], seg["end_step"], strict=False):
        part = frame[(steps > start) & (steps <= end) & (frame["task_id"].to_numpy() == tid)]
        vals = part["soups"].to_numpy(dtype=float)
        if normalizers is not None:
            vals = vals / task_bounds(normalizers, [int(tid)])[0]
        curve = pd.Series(vals).groupby(part["total_step"].to_numpy()).mean().sort_index()
        out[int(tid)] = curve.to_numpy(dtype=float)
    return out


KITCHEN_KEYS = ("difficulty", "layout_seed", "height", "width", "max_soups")
"""What identifies a MEAL kitchen across runs: a generated kitchen by its level and
seed (``layout_seed + i`` for task ``i``), a handmade one (``layout_seed`` None) by its
name, each with its size and soup bound."""


def kitchen_keys(metadata: Mapping) -> dict[int, tuple]:
    """``task_id -> kitchen key`` of a MEAL run's ``metadata["layouts"]`` (with the
    number of agents; empty for a run without layouts)."""
    agents = metadata.get("num_agents")
    out = {}
    for lay in metadata.get("layouts") or []:
        key = tuple(lay.get(k) for k in KITCHEN_KEYS)
        if lay.get("layout_seed") is None:
            key = (lay.get("task_name"), *key)
        out[int(lay.get("task_id", len(out)))] = (agents, *key)
    return out


# ---------------------------------------------------------------- role heterogeneity


def heterogeneity_per_task(het: pd.DataFrame, prefer_split: str = "test") -> pd.Series:
    """MEAL's heterogeneity of each task over a run: the mean of its finite
    ``heterogeneity.csv`` values over every evaluation point of the run
    (``TTomilin/MEAL@057f862 experiments/results/numerical/heterogeneity_table.py:79-86``).

    Returns:
        ``task_id -> value`` (sorted); empty when the run has no heterogeneity rows.
    """
    if het is None or not len(het):
        return pd.Series(dtype=float)
    frame = het.assign(run="_")
    frame = frame[metric_split_mask(frame, prefer_split)]
    vals = frame["heterogeneity"].astype(float)
    vals = vals[np.isfinite(vals.to_numpy())]
    return vals.groupby(frame.loc[vals.index, "task_id"].astype(int)).mean().sort_index()


def run_heterogeneity(het: pd.DataFrame) -> float:
    """One run's heterogeneity index: the mean over tasks of :func:`heterogeneity_per_task`
    (``heterogeneity_table.py:87-88``); NaN without rows."""
    per = heterogeneity_per_task(het)
    return float(per.mean()) if len(per) else float("nan")


def heterogeneity_curves(het: pd.DataFrame, prefer_split: str = "test") -> dict[int, pd.Series]:
    """``task_id -> heterogeneity`` by evaluation step (one split per task)."""
    frame = het.assign(run="_")
    frame = frame[metric_split_mask(frame, prefer_split)].sort_values("total_step")
    return {
        int(t): pd.Series(g["heterogeneity"].to_numpy(dtype=float), index=g["total_step"])
        for t, g in frame.groupby("task_id")
    }


def _tail_mean(series: np.ndarray, window: int) -> float:
    s = series[np.isfinite(series)]
    return float(np.mean(s[-window:])) if s.size else float("nan")


def drop_after_training(series: np.ndarray, end: int, window: int = 10) -> float:
    """MEAL's normalised drop of one curve after a task's training
    (``numerical/coordination_forgetting_table.py:62-94``): ``peak`` the mean of the last
    ``window`` finite values before index ``end``, ``final`` of the last ``window`` from
    ``end`` on; ``clip((peak - final) / peak, 0, 1)``, NaN when either is missing or
    ``peak < 1e-8``."""
    s = np.asarray(series, dtype=float)
    peak, final = _tail_mean(s[:end], window), _tail_mean(s[end:], window)
    if np.isnan(peak) or np.isnan(final) or peak < 1e-8:
        return float("nan")
    return float(np.clip((peak - final) / peak, 0.0, 1.0))


def coordination_forgetting(
    het_curves: Mapping[int, np.ndarray],
    score_curves: Mapping[int, np.ndarray],
    ends: Mapping[int, int] | None = None,
    window: int = 10,
) -> dict[str, float]:
    """MEAL's coordination forgetting of one run (``coordination_forgetting_table.py``):
    per task, :func:`drop_after_training` of its heterogeneity curve (``CF_i``) and of its
    score curve (``PF_i``); ``CF``, ``PF`` their means over the tasks where both are
    defined, ``Lead = CF - PF``.

    Args:
        het_curves, score_curves: ``task_id -> curve`` over the whole run in training
            order (cut to the shorter of the two, as MEAL).
        ends: ``task_id -> index`` where the task's training ends (the first point after
            it). ``None``: MEAL's ``min(round((i + 1) * L / N), L - 1)`` for the task at
            position ``i`` of ``N`` (``:70-73``).
    """
    cf, pf = [], []
    n = len(het_curves)
    for pos, tid in enumerate(het_curves):
        if tid not in score_curves:
            continue
        h = np.asarray(het_curves[tid], dtype=float)
        p = np.asarray(score_curves[tid], dtype=float)
        length = min(len(h), len(p))
        if length < 2:
            continue
        h, p = h[:length], p[:length]
        # MEAL's float arithmetic: chunk = L / N first
        mid = min(round((pos + 1) * (length / n)), length - 1)
        end = ends[tid] if ends is not None else mid
        c, f = drop_after_training(h, end, window), drop_after_training(p, end, window)
        if not (np.isnan(c) or np.isnan(f)):
            cf.append(c)
            pf.append(f)
    if not cf:
        return {"CF": float("nan"), "PF": float("nan"), "Lead": float("nan")}
    c, f = float(np.mean(cf)), float(np.mean(pf))
    return {"CF": c, "PF": f, "Lead": c - f}


# ---------------------------------------------------------------- coordination matrix


def coordination_matrix(
    score: Callable[[int, int], float], n_tasks: int, bounds: Sequence[float | None]
) -> np.ndarray:
    """MEAL's coordination compatibility matrix (``TTomilin/MEAL@057f862 experiments/
    results/coordination_matrix.py:175-252``): ``M[i, j]`` = the soups per evaluation
    episode when agent 0 plays with the policy saved at the end of task ``i`` and agent 1
    with the one saved at the end of task ``j``, both on task ``i``'s kitchen (and head),
    divided by task ``i``'s bound.

    Args:
        score: ``score(i, j) -> soups per episode`` of that pairing (greedy actions).
        bounds: task ``i``'s max-soup bound (``None``: no bound, the row is NaN).
    """
    m = np.full((n_tasks, n_tasks), np.nan)
    for i in range(n_tasks):
        b = bounds[i]
        for j in range(n_tasks):
            raw = float(score(i, j))
            m[i, j] = raw / b if b is not None and b > 0 else np.nan
    return m


TASK_CHECKPOINT_GLOB = TASK_POLICY_GLOB
"""Where the policy of every task's end is (``checkpoint/task-NNN.pt`` or ``.npz``, ``NNN``
the segment of the run's schedule; ``cl_suites.rundir.task_policies``): what the
coordination matrix needs."""


def task_checkpoints(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The run's per-task checkpoints (the policy of every task's end, job option
    ``keep_task_policies``) in schedule order, or a one-line :class:`MetricsInputError`
    naming what is missing."""
    run_dir = Path(run_dir)
    found = task_policy_files(run_dir)
    if not found:
        kept = sorted(p.name for p in (run_dir / "checkpoint").glob("*")) or ["none"]
        raise MetricsInputError(
            f"{run_dir}: no per-task checkpoints ({TASK_CHECKPOINT_GLOB}, the policy at the end "
            f"of every task), which the coordination matrix needs; the run kept "
            f"{', '.join(kept[:4])}; runs keep them with the job option keep_task_policies "
            "(on by default for MEAL suites since it exists; train again with it)"
        )
    return list(found.values())


def segment_tasks(run_dir: str | os.PathLike[str], num_tasks: int, count: int) -> list[int]:
    """The task of each of the run's first ``count`` schedule segments (its
    ``metadata.json``; without one, segment ``k`` plays task ``k mod num_tasks``)."""
    try:
        schedule = read_metadata(run_dir).get("schedule") or []
    except Exception:  # no metadata: an own loop's directory
        schedule = []
    if schedule:
        return [int(seg["task_id"]) for seg in schedule]
    return [k % num_tasks for k in range(count)]


COORDINATION_FILE = "coordination_matrix.csv"
"""A run's coordination matrix (:func:`run_coordination_matrix`): rows = agent 0's policy
``i`` and its kitchen, columns = agent 1's policy ``j``, normalised scores."""


def run_coordination_matrix(
    run_dir: str | os.PathLike[str],
    suite: Any,
    load_policy: Callable[[Path], Callable[..., np.ndarray]],
    *,
    episodes: int = 64,
    seed: int = 0,
) -> np.ndarray:
    """MEAL's coordination matrix of a run, written to ``RUN_DIR/coordination_matrix.csv``.

    One row and column per segment of the run's schedule (its tasks; with ``cycles > 1``
    every repetition, as MEAL's script takes every ``model_env_k`` it finds): ``M[i, j]``
    has agent 0 play the policy of segment ``i``'s end and agent 1 segment ``j``'s, on
    segment ``i``'s kitchen, over that kitchen's bound.

    Args:
        run_dir: the run; refused in one line without the policy of every segment's end
            (:func:`task_checkpoints`; a run killed before its last task has only some).
        suite: the run's ``MealSuite`` (its kitchens and bounds).
        load_policy: ``path -> policy(obs, task_ids) -> greedy actions`` of a per-task
            checkpoint.
        episodes, seed: envs (one episode each) of every cell (MEAL: 64, seed 0).
    """
    from cl_suites.meal.evaluation import cross_play

    files = task_checkpoints(run_dir)
    n = len(suite.layouts)
    tasks = segment_tasks(run_dir, n, len(files))
    found = task_policy_files(run_dir)
    missing = [k for k in range(len(tasks)) if k not in found]
    if missing or len(found) != len(tasks):
        what = f"task-{missing[0]:03d}" if missing else f"{len(found) - len(tasks)} too many"
        raise MetricsInputError(
            f"{run_dir}: {len(found)} per-task checkpoint(s) for {len(tasks)} segments "
            f"({what}); the coordination matrix needs one per segment (an unfinished run?)"
        )
    policies = [load_policy(found[k]) for k in range(len(tasks))]
    normalizers = suite.score_normalizers()
    bounds = [normalizers[t] / REWARD_SCALE if normalizers[t] else None for t in tasks]
    m = coordination_matrix(
        lambda i, j: cross_play(
            suite, tasks[i], [policies[i], policies[j]], episodes=episodes, seed=seed
        ),
        len(tasks),
        bounds,
    )
    write_coordination_matrix(run_dir, m)
    return m


REWARD_SCALE = 20.0
"""MEAL's delivery reward per soup (score normalisers are in return units)."""


def write_coordination_matrix(run_dir: str | os.PathLike[str], matrix: np.ndarray) -> Path:
    """Store a run's coordination matrix as ``RUN_DIR/coordination_matrix.csv``."""
    m = np.asarray(matrix, dtype=float)
    frame = pd.DataFrame(m, index=pd.Index(range(len(m)), name="segment"), columns=range(len(m)))
    path = Path(run_dir) / COORDINATION_FILE
    frame.to_csv(path)
    return path


def read_coordination_matrix(run_dir: str | os.PathLike[str]) -> np.ndarray | None:
    """A run's stored coordination matrix, or ``None`` when it has none."""
    path = Path(run_dir) / COORDINATION_FILE
    if not path.exists():
        return None
    frame = pd.read_csv(path, index_col=0)
    m = frame.to_numpy(dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise MetricsInputError(f"{path} is not a square matrix (shape {m.shape})")
    return m


def coordination_retention(matrix: np.ndarray) -> dict[str, float]:
    """MEAL's summary of a coordination matrix (``coordination_matrix.py:259-282``):
    ``diagonal_mean``, ``upper_tri_mean`` (``j > i``: later checkpoints as partners),
    ``retention_ratio`` = upper / diagonal (NaN when the diagonal mean is ``<= 1e-8``)
    and ``coord_forgetting = 1 - retention_ratio``."""
    m = np.asarray(matrix, dtype=float)
    n = m.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN
        diag = float(np.nanmean(np.diag(m)))
        upper = float(np.nanmean(m[np.triu_indices(n, k=1)])) if n > 1 else float("nan")
    ratio = upper / diag if diag > 1e-8 else float("nan")
    return {
        "diagonal_mean": diag,
        "upper_tri_mean": upper,
        "retention_ratio": ratio,
        "coord_forgetting": 1.0 - ratio if not np.isnan(ratio) else float("nan"),
    }
