"""Preprocessing steps, each a pure, separately testable function.

CORA (section 4, "we further smooth the returns by using a moving average with a rolling
window of size w"): :func:`causal_moving_average`, :func:`smooth_eval`,
:func:`interpolate_to_grid`.

DARPA L2M (``l2m_metrics.txt`` appendix A, the order is smooth -> clamp -> normalize):
:func:`l2m_smooth`, :func:`l2m_clamp`, :func:`l2m_normalize`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

DEFAULT_L2M_MAX_WINDOW = 100
"""L2M appendix A: the flat window is min(20% of the block, 100) experiences."""


def causal_moving_average(
    values: np.ndarray, window: int, groups: np.ndarray | None = None
) -> np.ndarray:
    """Causal (trailing) moving average of ``window`` points, restarted at every group.

    Point ``k`` becomes the mean of points ``max(start, k - window + 1) .. k`` of its group,
    so the first points average over fewer values (as CORA's rolling accumulator does).

    Args:
        values: 1-D array, sorted so that each group is contiguous and in time order.
        window: number of points ``w`` (CORA: 20 for Atari/Procgen/MiniHack, 5 for CHORES).
        groups: 1-D array of group labels, same length (``None``: one group).
            NaN values are left out of their windows (all-NaN window: NaN).

    Returns:
        Array of the same shape, float64. Vectorised (cumulative sums), no Python loop.
    """
    x = np.asarray(values, dtype=float)
    if window < 1:
        raise ValueError(f"smoothing window must be >= 1, got {window}")
    n = x.size
    if n == 0:
        return x.copy()
    if groups is None:
        start_of_group = np.zeros(n, dtype=np.int64)
    else:
        g = np.asarray(groups)
        new = np.empty(n, dtype=bool)
        new[0] = True
        new[1:] = g[1:] != g[:-1]
        start_of_group = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    idx = np.arange(n)
    lo = np.maximum(idx - window + 1, start_of_group)
    missing = np.isnan(x)
    if not missing.any():
        csum = np.concatenate([[0.0], np.cumsum(x)])
        return (csum[idx + 1] - csum[lo]) / (idx + 1 - lo)
    # NaN points (a task without usable returns) are left out of their windows, and do
    # not leak into later groups; a window of NaN only is NaN
    csum = np.concatenate([[0.0], np.cumsum(np.where(missing, 0.0, x))])
    count = np.concatenate([[0], np.cumsum(~missing)])
    valid = count[idx + 1] - count[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(valid > 0, (csum[idx + 1] - csum[lo]) / valid, np.nan)


def _sorted_groups(eval_frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Frame sorted by (run, task_id, split, total_step) and the group code of each row."""
    run_codes = pd.factorize(eval_frame["run"])[0]
    split_codes = (eval_frame["split"].to_numpy() == "test").astype(np.int64)
    task = eval_frame["task_id"].to_numpy()
    step = eval_frame["total_step"].to_numpy()
    order = _group_order(run_codes, task, split_codes, step)
    if order is None:
        order = np.lexsort((step, split_codes, task, run_codes))
    if np.array_equal(order, np.arange(len(order))):
        frame = eval_frame.reset_index(drop=True)
    else:
        frame = eval_frame.iloc[order].reset_index(drop=True)
    keys = np.stack([run_codes[order], frame["task_id"].to_numpy(), split_codes[order]], axis=1)
    new = np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)]
    return frame, np.cumsum(new) - 1


def _group_order(
    run: np.ndarray, task: np.ndarray, split: np.ndarray, step: np.ndarray
) -> np.ndarray | None:
    """The stable lexsort order of (run, task, split, step) when every (run, task, split)
    group is already contiguous with non-decreasing steps (how run logs are stored): only
    the groups are reordered. ``None`` when the rows are not laid out like that."""
    n = run.size
    if n == 0:
        return np.arange(0)
    new = np.r_[True, (run[1:] != run[:-1]) | (task[1:] != task[:-1]) | (split[1:] != split[:-1])]
    inner = ~new[1:]
    if (step[1:][inner] < step[:-1][inner]).any():
        return None
    starts = np.flatnonzero(new)
    g_order = np.lexsort((split[starts], task[starts], run[starts]))
    gs = starts[g_order]
    gk = np.stack([run[gs], task[gs], split[gs]], axis=1)
    if (gk[1:] == gk[:-1]).all(axis=1).any():  # a group appears twice (not contiguous)
        return None
    lengths = np.diff(np.r_[starts, n])[g_order]
    offsets = np.repeat(gs - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return offsets + np.arange(n)


def smooth_eval(eval_frame: pd.DataFrame, window: int) -> pd.DataFrame:
    """Add ``smoothed_return``: causal moving average of ``mean_return`` per (run, task, split).

    Args:
        eval_frame: cleaned eval rows (see :func:`cl_suites.metrics.runs.clean_eval`).
        window: points per window (``w``).

    Returns:
        Copy sorted by ``run, task_id, split, total_step`` with the new column.
    """
    frame, codes = _sorted_groups(eval_frame)
    return frame.assign(
        smoothed_return=causal_moving_average(frame["mean_return"].to_numpy(), window, codes)
    )


def common_grid(eval_frame: pd.DataFrame, n_points: int | None = None) -> np.ndarray:
    """A common step grid (agent steps) for aligning runs.

    With ``n_points=None`` the union of all logged eval steps is used (runs that evaluate at
    the same steps are then not resampled at all); otherwise ``n_points`` evenly spaced
    steps between the smallest and largest logged step.
    """
    steps = eval_frame["total_step"].to_numpy()
    if n_points is None:
        return np.unique(steps)
    return np.linspace(steps.min(), steps.max(), int(n_points))


def interpolate_matrix(
    eval_frame: pd.DataFrame, grid: np.ndarray, value: str = "smoothed_return"
) -> tuple[pd.DataFrame, np.ndarray]:
    """Every (run, task, split) curve linearly interpolated onto ``grid`` (CORA 4.1).

    No extrapolation: grid steps after a run's last eval (a run that ended early) are NaN.

    Returns:
        ``(keys, values)``: ``keys`` frame ``run, method, task_id, split`` (one row per
        curve) and ``values`` array ``(n_curves, len(grid))``.
    """
    grid = np.asarray(grid, dtype=float)
    frame, codes = _sorted_groups(eval_frame)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(frame)]
    xs = frame["total_step"].to_numpy(dtype=float)
    ys = frame[value].to_numpy(dtype=float)
    out = np.empty((len(starts), grid.size))
    for g, (lo, hi) in enumerate(zip(starts, ends, strict=False)):
        x = xs[lo:hi]
        if x.size == grid.size and np.array_equal(x, grid):
            out[g] = ys[lo:hi]
        else:
            out[g] = np.interp(grid, x, ys[lo:hi], left=np.nan, right=np.nan)
    keys = frame.iloc[starts][["run", "method", "task_id", "split"]].reset_index(drop=True)
    return keys, out


def interpolate_to_grid(
    eval_frame: pd.DataFrame, grid: np.ndarray, value: str = "smoothed_return"
) -> pd.DataFrame:
    """Long-format version of :func:`interpolate_matrix`.

    Returns:
        Frame ``run, method, task_id, split, total_step, value``.
    """
    keys, vals = interpolate_matrix(eval_frame, grid, value)
    long = keys.loc[keys.index.repeat(len(grid))].reset_index(drop=True)
    long["total_step"] = np.tile(np.asarray(grid, dtype=float), len(keys))
    long["value"] = vals.ravel()
    return long


# --------------------------------------------------------------------------- L2M appendix A


def l2m_window(n: int, max_window: int = DEFAULT_L2M_MAX_WINDOW) -> int:
    """Flat-window length for a block of ``n`` experiences: ``min(int(0.2 n), max_window)``."""
    return min(int(0.2 * n), max_window)


def l2m_smooth(values: np.ndarray, window: int | None = None) -> np.ndarray:
    """Flat (moving-average) smoothing of one Learning Block, same length as the input.

    L2M appendix A step 1. Default window :func:`l2m_window`. As in ``l2metrics`` 3.1.0
    (``_localutil.smooth``): the ends are padded with reflected copies of the block, the
    padded block is convolved (``np.convolve(..., mode="valid")``) with a flat window of
    weights ``1 / window``, the window is centred, and blocks whose window would be shorter
    than 3 experiences are returned unchanged. A window longer than the block falls back to
    the default. The same ``np.convolve`` arithmetic as the reference keeps the results
    bit-identical, so ties in the saturation argmax break the same way (a cumulative-sum
    moving average rounds differently).

    Args:
        values: performance of each experience (LX) in the block, 1-D.
        window: window length in experiences.

    Returns:
        Smoothed array of the same length.
    """
    x = np.asarray(values, dtype=float)
    if window is None or x.size < window:
        window = l2m_window(x.size)
    if window < 3:
        return x.copy()
    padded = np.pad(x, window - 1, mode="reflect")
    weights = np.ones(window)
    full = np.convolve(weights / weights.sum(), padded, mode="valid")
    start = int(np.floor(window / 2 - 1))
    return full[start : start + x.size]


def l2m_clamp(
    values: np.ndarray,
    reference: np.ndarray | None = None,
    quantiles: tuple[float, float] = (0.1, 0.9),
) -> tuple[np.ndarray, tuple[float, float]]:
    """Clamp outliers to the 10% / 90% percentiles (L2M appendix A steps 2-3).

    Args:
        values: values of one task variant to clamp.
        reference: values the percentiles are computed from (the lifelong learner's and the
            single-task experts' values of that task); ``None``: ``values`` itself.
        quantiles: lower and upper quantile.

    Returns:
        ``(clamped values, (low, high))``.
    """
    x = np.asarray(values, dtype=float)
    ref = x if reference is None else np.asarray(reference, dtype=float)
    lo, hi = np.quantile(ref, quantiles)
    return np.clip(x, lo, hi), (float(lo), float(hi))


def l2m_normalize(
    values: np.ndarray, low: float, high: float, scale: float = 100.0, offset: float = 1.0
) -> np.ndarray:
    """Scale values from ``[low, high]`` to ``[offset, offset + scale]`` (default [1, 101]).

    L2M appendix A step 3 / ``l2metrics`` Normalizer: ``(x - low) / (high - low) * scale +
    offset``. A task without variance (``high == low``) is mapped to ``offset`` (as the
    reference code does), not divided by zero.
    """
    x = np.asarray(values, dtype=float)
    if high == low:
        return np.full_like(x, offset)
    return (x - low) / (high - low) * scale + offset


def l2m_block_smooth(values: np.ndarray, block_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """:func:`l2m_smooth` applied to each contiguous block of ``values`` separately."""
    x = np.asarray(values, dtype=float)
    ids = np.asarray(block_ids)
    out = np.empty_like(x)
    if x.size == 0:
        return out
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, x.size], strict=False):
        out[lo:hi] = l2m_smooth(x[lo:hi])
    return out
