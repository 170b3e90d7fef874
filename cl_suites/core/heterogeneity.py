"""MEAL's role-heterogeneity index: how differently the agents of one env act.

During an evaluation every agent's greedy actions are counted per eval env; each count
vector, divided by its sum, is that agent's empirical action distribution in that env.
The index is the Jensen-Shannon divergence (base-2 logarithm, so in [0, 1]) between two
agents' distributions, averaged over the eval envs, then over all agent pairs: 0 when the
agents act alike, 1 when they never take the same action. This is the arithmetic of
MEAL's evaluator (``TTomilin/MEAL@057f862 experiments/evaluation.py:9-17`` for the
divergence, ``:97-112`` for the distributions and the averages), in float64 here.

numpy only: the core evaluator computes it (``cl_suites.core.evaluation``), the metrics
re-export it (``cl_suites.metrics.meal``).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-10
"""MEAL's guard: probabilities at or below it are left out of the sums, it is added to
the mixture in the logarithm's denominator and to the count totals."""


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence in bits of the distributions in the last axis of ``p`` and
    ``q`` (broadcast over the leading axes), clipped to [0, 1].

    ``0.5 (KL(p || m) + KL(q || m))`` with ``m = (p + q) / 2``, each ``KL`` summing
    ``p log2(p / (m + EPS))`` over the entries with ``p > EPS`` (MEAL's arithmetic).
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_pm = np.where(p > EPS, p * np.log2(p / (m + EPS)), 0.0).sum(axis=-1)
        kl_qm = np.where(q > EPS, q * np.log2(q / (m + EPS)), 0.0).sum(axis=-1)
    return np.clip(0.5 * (kl_pm + kl_qm), 0.0, 1.0)


def action_distributions(counts: np.ndarray) -> np.ndarray:
    """``counts / (counts.sum(-1) + EPS)``: each agent's empirical action distribution."""
    counts = np.asarray(counts, dtype=float)
    return counts / (counts.sum(axis=-1, keepdims=True) + EPS)


def role_heterogeneity(counts: np.ndarray) -> float:
    """The role-heterogeneity index of one evaluation of one task.

    Args:
        counts: ``(n_agents, n_envs, n_actions)`` greedy-action counts of every agent in
            every eval env (MEAL's layout).

    Returns:
        The mean over agent pairs ``i < j`` of the mean over envs of the Jensen-Shannon
        divergence of their action distributions; NaN with fewer than two agents (MEAL
        writes 0 there; with one agent there is no pair to compare) or no env.
    """
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 3:
        raise ValueError(f"counts must be (n_agents, n_envs, n_actions), got {counts.shape}")
    n_agents, n_envs = counts.shape[:2]
    if n_agents < 2 or n_envs == 0:
        return float("nan")
    probs = action_distributions(counts)
    pairs = [
        jensen_shannon(probs[i], probs[j]).mean()
        for i in range(n_agents)
        for j in range(i + 1, n_agents)
    ]
    return float(np.mean(pairs))
