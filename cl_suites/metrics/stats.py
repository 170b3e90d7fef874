"""Statistics across seeds: mean with standard error, and IQM with bootstrap intervals.

* :func:`mean_sem` - mean and standard error of the mean (``ddof=1``), as CORA reports.
* :func:`mean_ci95` - mean and MEAL's 95% half-width ``1.96 * SEM``, as MEAL's tables.
* :func:`iqm_interval` - interquartile mean (rliable's ``aggregate_iqm``) with rliable's
  stratified-bootstrap percentile confidence interval (Agarwal et al. 2021,
  ``rliable.library.get_interval_estimates``): runs are resampled with replacement within
  each task (the strata), from a seeded generator so intervals are reproducible.
"""

from __future__ import annotations

import warnings

import numpy as np
from rliable import library as rly_library
from rliable import metrics as rly_metrics


def mean_sem(values: np.ndarray | list[float]) -> tuple[float, float, int]:
    """Mean, standard error (``std(ddof=1)/sqrt(n)``) and count of the finite values.

    One value: SEM is NaN (no error bar; the report says so). No finite value: ``(nan, nan,
    0)``.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return float("nan"), float("nan"), 0
    if n == 1:
        return float(x[0]), float("nan"), 1
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(n)), n


def mean_ci95(values: np.ndarray | list[float]) -> tuple[float, float, int]:
    """Mean, MEAL's 95% confidence half-width ``1.96 * std(ddof=1) / sqrt(n)`` and count of
    the finite values (``TTomilin/MEAL@057f862 experiments/results/plotting/utils/
    metrics.py:20-29``, the ``±`` of its tables).

    One value: the half-width is NaN here (MEAL prints 0: no interval from one seed). No
    finite value: ``(nan, nan, 0)``.
    """
    mean, sem, n = mean_sem(values)
    return mean, (1.96 * sem if n > 1 else float("nan")), n


def fast_iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all entries: the same arithmetic as rliable's ``aggregate_iqm``.

    ``aggregate_iqm`` is ``scipy.stats.trim_mean(scores, 0.25, axis=None)``; scipy's
    array-API and NaN-policy wrapper costs ~0.5 ms per call, which dominates a bootstrap that
    calls it once per replicate. This is the body of ``trim_mean`` (partition at the two cut
    points, mean of the middle half), so the result is bit-for-bit identical.
    """
    a = np.asarray(scores, dtype=float).ravel()
    nobs = a.size
    if nobs == 0:
        return float("nan")
    lowercut = int(0.25 * nobs)
    uppercut = nobs - lowercut
    return np.partition(a, (lowercut, uppercut - 1))[lowercut:uppercut].mean()


def iqm_interval(
    scores: np.ndarray, reps: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Interquartile mean with a stratified-bootstrap percentile interval.

    Args:
        scores: array ``(n_runs, n_tasks)`` of per-run, per-task scores (NaN-free).
        reps: bootstrap replicates (keep modest: the report uses 1000).
        confidence: interval coverage.
        seed: seed of the generator (same seed -> same interval).

    Returns:
        ``(iqm, low, high)``; with one run the interval collapses to the point estimate.

    The point estimate uses ``rliable.metrics.aggregate_iqm``; the ``reps`` bootstrap
    replicates use :func:`fast_iqm` (identical values, without scipy's per-call overhead).
    """
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("iqm_interval needs a non-empty, finite (n_runs, n_tasks) array")
    point = float(rly_metrics.aggregate_iqm(x))
    n_runs = x.shape[0]
    if n_runs == 1:
        return point, point, point
    # rliable 1.2's StratifiedBootstrap draws its indices from numpy's *global* RNG and
    # ignores ``random_state``: seed the global RNG for the call and restore it after.
    # arch (under rliable) warns that ``random_state`` is deprecated: nothing a user can
    # act on, so it is silenced here
    global_state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
            _, intervals = rly_library.get_interval_estimates(
                {"scores": x},
                fast_iqm,
                reps=reps,
                confidence_interval_size=confidence,
                random_state=np.random.RandomState(seed),
            )
    finally:
        np.random.set_state(global_state)
    low, high = intervals["scores"][:, 0]
    return point, float(low), float(high)
