"""MEAL's regularisation methods (``cl_methods/{EWC,MAS,L2,FT}.py`` at 7d81858) on flax
parameter trees.

* mask (``build_reg_weights``): 1 for every parameter but those whose path holds
  ``critic`` (unless ``regularize_critic``) or ``actor_head``/``critic_head`` (unless
  ``regularize_heads``); importances are computed over the whole tree.
* penalty: ``0.5 * lam * sum(mask * F * (theta - anchor)^2) / (sum(mask) + 1e-8)``
  (``F = 1`` for L2; zero for FT; L2's anchor starts at the initial parameters).
* ``update``: by ``IPPOConfig.mode`` (MEAL 057f862's ``importance_mode``): ``multi``
  ``F + F_new`` (EWC's own), ``online`` ``decay F + (1 - decay) F_new`` (online EWC's),
  ``last`` ``F_new`` (MAS's: replaced per task); the anchor becomes the task's final
  parameters.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from baselines_jax.config import IPPOConfig

Params = Any


class CLState(NamedTuple):
    """``anchor``: parameters at the end of the last task (L2: the initial ones first);
    ``importance``: per-parameter weights (zeros until a task ends; ones for L2)."""

    anchor: Params
    importance: Params


def reg_mask(params: Params, regularize_critic: bool, regularize_heads: bool) -> Params:
    """MEAL's ``build_reg_weights`` (module docstring)."""

    def mark(path: tuple, x: jax.Array) -> jax.Array:
        name = "/".join(str(getattr(k, "key", k)) for k in path).lower()
        if not regularize_heads and ("actor_head" in name or "critic_head" in name):
            return jnp.zeros_like(x)
        if not regularize_critic and "critic" in name:
            return jnp.zeros_like(x)
        return jnp.ones_like(x)

    return jax.tree_util.tree_map_with_path(mark, params)


def init_cl_state(params: Params, cfg: IPPOConfig) -> CLState:
    fill = jnp.ones_like if cfg.cl_method == "l2" else jnp.zeros_like
    return CLState(jax.tree.map(jnp.array, params), jax.tree.map(fill, params))


def _tree_sum(tree: Params) -> jax.Array:
    return sum(jnp.sum(x) for x in jax.tree.leaves(tree))


def penalty(params: Params, cl: CLState, mask: Params, cfg: IPPOConfig) -> jax.Array:
    """The CL penalty (module docstring); 0 for ``ft``."""
    if cfg.cl_method == "ft":
        return jnp.zeros((), jnp.float32)
    terms = jax.tree.map(
        lambda p, o, f, m: m * f * (p - o) ** 2, params, cl.anchor, cl.importance, mask
    )
    return 0.5 * cfg.lam * _tree_sum(terms) / (_tree_sum(mask) + 1e-8)


def normalize(importance: Params) -> Params:
    """MEAL's ``normalize_importance``: divided by the mean absolute value over the whole
    tree (+1e-8)."""
    leaves = jax.tree.leaves(importance)
    mean = sum(jnp.abs(x).sum() for x in leaves) / (sum(x.size for x in leaves) + 1e-8)
    return jax.tree.map(lambda x: x / (mean + 1e-8), importance)


def update(cl: CLState, params: Params, new: Params | None, cfg: IPPOConfig) -> CLState:
    """Fold a finished task's importance ``new`` (``None`` for ft / l2) into the state."""
    if cfg.cl_method == "ft":
        return cl
    anchor = jax.tree.map(jnp.array, params)
    if cfg.cl_method == "l2":
        return CLState(anchor, cl.importance)
    if cfg.mode == "multi":
        importance = jax.tree.map(jnp.add, cl.importance, new)
    elif cfg.mode == "online":
        d = cfg.ewc_decay
        importance = jax.tree.map(lambda a, b: d * a + (1.0 - d) * b, cl.importance, new)
    else:  # last: replaced
        importance = new
    return CLState(anchor, importance)


# -- per-step importance terms (the env loops are in baselines_jax.importance) ----------
def fisher_term(
    apply_fn: Any, params: Params, obs0: jax.Array, action: jax.Array, task: jax.Array
) -> Params:
    """``(d log pi(a | o) / d theta)^2`` of one observation ``obs0 (D,)`` (MEAL's EWC
    Fisher uses agent 0's observation and action)."""

    def log_prob(p: Params) -> jax.Array:
        logits, _ = apply_fn(p, obs0[None], task)
        return jax.nn.log_softmax(logits)[0, action]

    return jax.tree.map(jnp.square, jax.grad(log_prob)(params))


def mas_term(apply_fn: Any, params: Params, obs: jax.Array, task: jax.Array) -> Params:
    """``(d sum_agents 1/2 ||[log pi(.|o_i), V(o_i)]||^2 / d theta)^2`` of one step's
    observations ``obs (A, D)`` (MEAL's MAS: normalised logits and the value)."""

    def half_sq_norm(p: Params) -> jax.Array:
        logits, values = apply_fn(p, obs, task)
        vec = jnp.concatenate([jax.nn.log_softmax(logits), values[:, None]], -1)
        return 0.5 * jnp.sum(vec**2)

    return jax.tree.map(jnp.square, jax.grad(half_sq_norm)(params))
