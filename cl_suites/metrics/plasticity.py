"""Plasticity diagnostics of a network: one definition each, numpy only.

Every function takes plain arrays (``float32`` or ``float64``; computed in ``float64``),
so the torch learners (``baselines_sb3.plasticity``), the JAX MEAL learner
(``baselines_jax.plasticity``) and an own loop (``cl_suites.recorder``) share one
definition. The sources, and where two reference implementations differ, are in
``docs/metrics.md`` ("Plasticity diagnostics") and ``docs/fidelity.md``.

Shapes: an *activation* is one layer's post-activation output on the probe batch,
``(B, ..., U)`` with the units last (a conv layer's channels last: ``(B, H, W, C)``);
*features* are the penultimate layer's output ``(B, F)`` (the input of the output head).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

DEFAULT_TAU = 0.025
"""Default dormant threshold ``tau`` of the normalised ReDo score (see :func:`unit_scores`)."""

REDO_EPS = 1e-9
"""Added to a layer's mean score before normalising (ReDo ``weight_recyclers.py:324``)."""

SRANK_DELTA = 0.01
"""``delta`` of Kumar et al.'s ``srank`` (singular values up to 99% of their sum)."""

DORMANT_POOLINGS = ("redo", "plasticine")
"""How a network's dormant ratio pools its layers: ``"redo"``, dormant units over all
units (ReDo's ``log_dead_neurons_count``); ``"plasticine"``, the mean of the layers'
ratios (Plasticine's ``compute_dormant_units``)."""

STABLE_RANKS = ("srank", "frobenius")
"""``"srank"``: Kumar et al. (2021)'s ``srank_delta`` (Plasticine's ``compute_stable_rank``);
``"frobenius"``: ``sum(s^2) / max(s)^2`` (Rudelson and Vershynin's stable rank)."""

WEIGHT_SCALES = ("rms", "l2")
"""Weight norm and change as ``"rms"`` (``sqrt(sum w^2 / n)``, Plasticine's
``compute_l2_norm_difference``) or ``"l2"`` (the Euclidean norm ``sqrt(sum w^2)``)."""

ACTIVATIONS = ("relu", "tanh", "sigmoid", "other")
"""Activation kinds :func:`active_fraction` knows (Plasticine's ``compute_active_units``
rules; ``"other"``: non-zero)."""


def _units_last(act: np.ndarray) -> np.ndarray:
    a = np.asarray(act, dtype=np.float64)
    if a.ndim < 2:
        raise ValueError(f"an activation needs shape (B, ..., units), got shape {a.shape}")
    return a.reshape(-1, a.shape[-1])


def unit_scores(act: np.ndarray) -> np.ndarray:
    """ReDo's normalised score of each unit: ``s_i = E|h_i| / (mean_k E|h_k| + 1e-9)``.

    ``act (B, ..., U)``: the expectation runs over the batch and every axis but the last
    (a conv channel's score averages its spatial positions, ReDo's ``estimate_neuron_score``).
    Returns ``(U,)``, dimensionless (mean 1 for a layer with any activity).
    """
    score = np.abs(_units_last(act)).mean(axis=0)
    return score / (score.mean() + REDO_EPS)


def check_tau(tau: float) -> float:
    """``tau`` as a float, or ``ValueError`` naming it and the allowed range (0, 1)."""
    if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0.0 < tau < 1.0:
        raise ValueError(f"plasticity_tau must be a number in (0, 1), got {tau!r}")
    return float(tau)


def dormant_mask(act: np.ndarray, tau: float = DEFAULT_TAU) -> np.ndarray:
    """``(U,)`` bool: unit ``i`` is tau-dormant when ``s_i <= tau`` (ReDo, Definition 3.1)."""
    return unit_scores(act) <= check_tau(tau)


def dormant_ratios(
    activations: Mapping[str, np.ndarray], tau: float = DEFAULT_TAU, pooling: str = "redo"
) -> tuple[float, dict[str, float]]:
    """The network's dormant-unit ratio and each layer's, fractions in [0, 1].

    ``activations``: layer name -> ``(B, ..., U)`` post-activation outputs of the hidden
    layers (not the output head, as ReDo skips ``final_layer``). ``pooling``: see
    :data:`DORMANT_POOLINGS`. NaN for a network without a layer.
    """
    if pooling not in DORMANT_POOLINGS:
        raise ValueError(f"dormant pooling must be one of {DORMANT_POOLINGS}, got {pooling!r}")
    masks = {name: dormant_mask(a, tau) for name, a in activations.items()}
    per_layer = {name: float(m.mean()) for name, m in masks.items()}
    if not masks:
        return math.nan, per_layer
    if pooling == "redo":
        whole = sum(int(m.sum()) for m in masks.values()) / sum(m.size for m in masks.values())
    else:
        whole = float(np.mean(list(per_layer.values())))
    return float(whole), per_layer


def active_fraction(features: np.ndarray, activation: str = "relu") -> float:
    """Fraction of active entries of ``features (B, F)`` (or any activation), in [0, 1]:
    Plasticine's rules: relu not zero, tanh ``|h| <= 0.99``, sigmoid in ``[0.01, 0.99]``;
    ``"other"`` not zero."""
    h = np.asarray(features, dtype=np.float64)
    if activation in ("relu", "other"):
        inactive = h == 0
    elif activation == "tanh":
        inactive = np.abs(h) > 0.99
    elif activation == "sigmoid":
        inactive = (h < 0.01) | (h > 0.99)
    else:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    return float(1.0 - inactive.mean())


def singular_values(features: np.ndarray) -> np.ndarray:
    """Singular values of ``features (B, F)``, descending, ``(min(B, F),)``.

    Computed as the square roots of the eigenvalues of the smaller Gram matrix (``H^T H``
    or ``H H^T``, float64): one small symmetric eigenproblem instead of an SVD of the
    whole batch (50-100x faster on a busy 2-core machine, where a threaded SVD stalls).
    A singular value ``s_i`` carries an absolute error of about ``1e-16 s_1^2 / s_i``:
    nothing the ranks below can see.
    """
    h = np.asarray(features, dtype=np.float64)
    if h.ndim != 2:
        raise ValueError(f"features need shape (B, F), got shape {h.shape}")
    gram = h.T @ h if h.shape[0] >= h.shape[1] else h @ h.T
    if gram.size == 0:
        return np.zeros(0)
    eig = np.linalg.eigvalsh(gram)[::-1]
    return np.sqrt(np.clip(eig, 0.0, None))


def stable_rank(
    features: np.ndarray, definition: str = "srank", delta: float = SRANK_DELTA
) -> float:
    """Stable rank of ``features (B, F)`` (a count of directions, in [1, min(B, F)]);
    see :func:`stable_rank_of`."""
    return stable_rank_of(singular_values(features), definition, delta)


def stable_rank_of(s: np.ndarray, definition: str = "srank", delta: float = SRANK_DELTA) -> float:
    """Stable rank from the singular values ``s`` (descending).

    ``"srank"`` (Kumar et al. 2021, eq. 2; Plasticine ``rank.py:16-18``): the smallest
    ``k`` with ``sum_{i<=k} s_i >= (1 - delta) sum_i s_i``, as Plasticine counts it
    (``1 +`` the number of cumulative fractions below ``1 - delta``). ``"frobenius"``:
    ``sum_i s_i^2 / s_1^2``. NaN for all-zero features.
    """
    if definition not in STABLE_RANKS:
        raise ValueError(f"stable rank must be one of {STABLE_RANKS}, got {definition!r}")
    if s.size == 0 or s[0] == 0:
        return math.nan
    if definition == "frobenius":
        return float((s**2).sum() / s[0] ** 2)
    cumulative = np.cumsum(s) / s.sum()
    return float(np.sum(cumulative < 1.0 - delta) + 1)


def effective_rank(features: np.ndarray) -> float:
    """Effective rank of ``features (B, F)``; see :func:`effective_rank_of`."""
    return effective_rank_of(singular_values(features))


def effective_rank_of(s: np.ndarray) -> float:
    """Effective rank (Roy and Vetterli 2007) from the singular values ``s``:
    ``exp(H(p))`` with ``p_i = s_i / sum_k s_k`` and zero ``p_i`` left out. In
    [1, min(B, F)]; NaN for all-zero features."""
    if s.size == 0 or s.sum() == 0:
        return math.nan
    p = s / np.abs(s).sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def feature_norm(features: np.ndarray) -> float:
    """Mean over the batch of each row's Euclidean norm, ``mean_b ||h_b||_2``
    (Plasticine ``norm.py:45``), in the features' units."""
    h = np.asarray(features, dtype=np.float64)
    if h.ndim != 2:
        raise ValueError(f"features need shape (B, F), got shape {h.shape}")
    return float(np.linalg.norm(h, axis=1).mean())


def _norm(squares: float, count: int, scale: str) -> float:
    if scale not in WEIGHT_SCALES:
        raise ValueError(f"weight scale must be one of {WEIGHT_SCALES}, got {scale!r}")
    if count == 0:
        return math.nan
    return math.sqrt(squares / count) if scale == "rms" else math.sqrt(squares)


def layer_of(name: str) -> str:
    """The layer a parameter belongs to: its name without the last dotted part
    (``"mlp_extractor.policy_net.0.weight"`` -> ``"mlp_extractor.policy_net.0"``)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def weight_norms(
    params: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None = None,
    scale: str = "rms",
) -> tuple[float, dict[str, float]]:
    """The norm of ``params`` (or of ``params - reference`` when given: the weight
    change), whole network and per layer (:func:`layer_of`), in weight units.

    ``scale``: :data:`WEIGHT_SCALES`. A parameter missing from ``reference`` (or of
    another shape) raises ``ValueError`` naming it.
    """
    per_layer: dict[str, list[float]] = {}
    total_sq, total_n = 0.0, 0
    for name, value in params.items():
        w = np.asarray(value, dtype=np.float64)
        if reference is not None:
            if name not in reference or np.shape(reference[name]) != w.shape:
                raise ValueError(
                    f"the reference weights have no parameter {name!r} of shape {w.shape}"
                )
            w = w - np.asarray(reference[name], dtype=np.float64)
        sq = float((w**2).sum())
        entry = per_layer.setdefault(layer_of(name), [0.0, 0])
        entry[0] += sq
        entry[1] += w.size
        total_sq += sq
        total_n += w.size
    layers = {k: _norm(sq, int(n), scale) for k, (sq, n) in per_layer.items()}
    return _norm(total_sq, total_n, scale), layers


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def policy_churn(logits: np.ndarray, previous: np.ndarray) -> float:
    """Mean over the rows of the total-variation distance between the action
    distributions ``softmax(logits)`` and ``softmax(previous)`` (both ``(B, A)``), in
    [0, 1]: how much the policy changed on the probe batch between two points."""
    p, q = _softmax(logits), _softmax(previous)
    return float(0.5 * np.abs(p - q).sum(axis=-1).mean())


def value_churn(values: np.ndarray, previous: np.ndarray) -> float:
    """Mean absolute change of the values ``(B,)`` between two points, in return units."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return float(np.abs(v - np.asarray(previous, dtype=np.float64).reshape(-1)).mean())
