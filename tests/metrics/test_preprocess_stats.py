"""Preprocessing steps and statistics across seeds."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.metrics import preprocess as pp
from cl_suites.metrics import stats


def test_causal_moving_average_restarts_per_group():
    x = np.array([1.0, 2, 3, 4])
    np.testing.assert_allclose(pp.causal_moving_average(x, 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(
        pp.causal_moving_average(x, 2, np.array([0, 0, 1, 1])), [1, 1.5, 3, 3.5]
    )
    np.testing.assert_allclose(pp.causal_moving_average(x, 20), [1, 1.5, 2, 2.5])


def test_l2m_window_is_min_of_20_percent_and_100():
    assert pp.l2m_window(1000) == 100
    assert pp.l2m_window(250) == 50
    assert pp.l2m_window(12) == 2


def test_l2m_flat_smoothing_reflect_padded_same_length():
    x = np.arange(20.0)  # window 4
    y = pp.l2m_smooth(x)
    assert y.shape == x.shape
    assert y[5] == pytest.approx(np.mean(x[3:7]))
    assert y[0] == pytest.approx(np.mean([2, 1, 0, 1]))  # reflected copies at the start
    short = np.array([1.0, 5.0, 2.0])
    np.testing.assert_array_equal(pp.l2m_smooth(short), short)  # window < 3: unchanged


def test_l2m_clamp_and_normalise():
    x = np.arange(101.0)
    c, (lo, hi) = pp.l2m_clamp(x)
    assert (lo, hi) == (10.0, 90.0)
    assert c.min() == 10 and c.max() == 90
    np.testing.assert_allclose(pp.l2m_normalize([10, 50, 90], 10, 90), [1, 51, 101])
    np.testing.assert_allclose(pp.l2m_normalize([3, 3], 3, 3), [1, 1])  # no variance -> offset


def test_mean_sem_and_single_seed():
    m, s, n = stats.mean_sem([1.0, 3.0, np.nan])
    assert (m, n) == (2.0, 2)
    assert s == pytest.approx(np.std([1, 3], ddof=1) / np.sqrt(2))
    m, s, n = stats.mean_sem([4.0])
    assert m == 4.0 and np.isnan(s) and n == 1


def test_iqm_interval_deterministic_and_brackets_point():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 6))
    a = stats.iqm_interval(x, reps=300, seed=3)
    b = stats.iqm_interval(x, reps=300, seed=3)
    assert a == b
    assert a[1] <= a[0] <= a[2]
    from scipy.stats import trim_mean

    assert a[0] == pytest.approx(trim_mean(x.ravel(), 0.25))
    point, low, high = stats.iqm_interval(x[:1], reps=50)  # one run: no interval
    assert low == point == high
