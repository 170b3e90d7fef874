"""IPPO's pieces as MEAL's trainer computes them (``baselines/IPPO_CL.py`` at 7d81858):
GAE, the clipped PPO loss, the optimizer and its per-task learning-rate schedule.

Shapes: ``T`` env steps per env per update, ``N = num_agents * num_envs`` actors (agent-
major, MEAL's ``batchify``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from baselines_jax.config import IPPOConfig


class Transition(NamedTuple):
    """One rollout step of ``N`` actors: ``done (N,)`` (the episode ended at this step),
    ``action (N,)``, ``value (N,)``, ``reward (N,)``, ``log_prob (N,)``, ``obs (N, D)``."""

    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array


def gae(
    done: jax.Array,
    value: jax.Array,
    reward: jax.Array,
    last_value: jax.Array,
    gamma: float,
    lam: float,
) -> tuple[jax.Array, jax.Array]:
    """``(advantages, targets)`` ``(T, N)`` from time-major ``(T, N)`` arrays and the
    bootstrap ``last_value (N,)``: ``delta_t = r_t + gamma V_{t+1} (1 - d_t) - V_t``,
    ``A_t = delta_t + gamma lam (1 - d_t) A_{t+1}``, targets ``A + V`` (MEAL's
    ``_calculate_gae``)."""

    def step(carry, xs):
        adv, next_value = carry
        d, v, r = xs
        delta = r + gamma * next_value * (1 - d) - v
        adv = delta + gamma * lam * (1 - d) * adv
        return (adv, v), adv

    _, advantages = jax.lax.scan(
        step, (jnp.zeros_like(last_value), last_value), (done, value, reward), reverse=True
    )
    return advantages, advantages + value


def ppo_loss(
    logits: jax.Array,
    values: jax.Array,
    batch: Transition,
    advantages: jax.Array,
    targets: jax.Array,
    cfg: IPPOConfig,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """MEAL's minibatch loss without the CL penalty: ``actor + vf_coef * value -
    ent_coef * entropy`` with the value clipped around the old value by ``clip_eps``
    (``0.5 max(...)``), advantages normalised over the minibatch (biased std + 1e-8;
    raw with ``advantage_normalization="none"``).
    Returns ``(loss, (value_loss, actor_loss, entropy))``."""
    log_pi = jax.nn.log_softmax(logits)
    log_prob = jnp.take_along_axis(log_pi, batch.action[:, None].astype(jnp.int32), 1)[:, 0]
    clipped = batch.value + jnp.clip(values - batch.value, -cfg.clip_eps, cfg.clip_eps)
    value_loss = (
        0.5 * jnp.maximum(jnp.square(values - targets), jnp.square(clipped - targets)).mean()
    )
    ratio = jnp.exp(log_prob - batch.log_prob)
    adv = advantages
    if cfg.advantage_normalization == "minibatch-biased":
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    actor_loss = -jnp.minimum(
        ratio * adv, jnp.clip(ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * adv
    ).mean()
    entropy = -(jnp.exp(log_pi) * log_pi).sum(-1).mean()
    loss = actor_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
    return loss, (value_loss, actor_loss, entropy)


def lr_schedule(
    cfg: IPPOConfig, updates_per_task: int, floor: bool = False
) -> Callable[[jax.Array], jax.Array]:
    """MEAL's ``linear_schedule``: ``lr * (1 - k / updates_per_task)`` for the ``k``-th
    update of a task (``count`` = optimizer steps since the per-task reset). ``floor``:
    held at 0 past ``updates_per_task`` updates (a PackNet fine-tune phase longer than the
    training, restarted at the pruning: optax's ``linear_schedule`` of MEAL 057f862 holds
    its end value)."""
    per_update = cfg.num_minibatches * cfg.update_epochs

    def schedule(count: jax.Array) -> jax.Array:
        lr = cfg.learning_rate * (1.0 - (count // per_update) / updates_per_task)
        return jnp.maximum(lr, 0.0) if floor else lr

    return schedule


def make_optimizer(
    cfg: IPPOConfig, updates_per_task: int, floor: bool = False
) -> optax.GradientTransformation:
    """``clip_by_global_norm(max_grad_norm)`` then Adam (eps 1e-5) with the per-task
    schedule, as MEAL's ``tx``; its state is rebuilt at every task (``JaxIPPO.end_task``)
    and, with a fine-tune phase, at the pruning (``JaxIPPO.end_train``)."""
    lr = lr_schedule(cfg, updates_per_task, floor) if cfg.anneal_lr else cfg.learning_rate
    return optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(learning_rate=lr, eps=cfg.adam_eps)
    )
