"""MEAL's AGEM on the JAX IPPO learner (``experiments/continual/agem.py`` and
``experiments/algos/on_policy.py`` ``apply_cl_gradient_step`` at 057f862; Chaudhry et al.
2019, "Efficient Lifelong Learning with A-GEM").

What happens, per seed (the learner vmaps it):

* after each update's epochs (``after_update``): ``agem_sample_size`` random transitions of
  the update's rollout, with that update's GAE advantages and value targets, go into the
  current task's slot of the episodic memory (:mod:`baselines_jax.cl.memory`; MEAL's
  ``update_agem_memory`` after ``_update_epoch``);
* on each minibatch's raw PPO gradient ``g``, before ``clip_by_global_norm`` and Adam
  (``transform_grads``), when a past task has data (``past_sizes``: the slot sizes with
  the current task's zeroed; ``lax.cond``, else ``g`` unchanged and zero statistics):

  - from every task ``t``'s slot, ``n = max(agem_sample_size // num_tasks, 1)``
    transitions (:func:`~baselines_jax.cl.memory.sample_slot`), and the gradient of
    ``-mean log pi_t(a) + vf_coef * 0.5 mean (V_t - target)^2 - ent_coef * mean H(pi_t)``
    with task ``t``'s head and task id (:func:`memory_loss`; behaviour cloning, no
    importance ratio, no value clipping); ``g_mem`` = the sum over tasks with past data
    (mask ``past_sizes[t] > 0``);
  - :func:`project`: if ``g . g_mem < 0``, ``g - (g . g_mem / (|g_mem|^2 + 1e-12)) g_mem``;
    then a second global-norm clip at 40.

Random keys: ``transform_grads(..., key)`` is MEAL's ``apply_cl_gradient_step(...,
agem_rng=key)``: ``_, sub = split(key)``, then for ``t = 0 .. num_tasks - 1``:
``sub, k_t = split(sub)``, ``k_t`` samples task ``t``'s slot. ``after_update(..., key)``
is ``update_agem_memory(..., rng=key)`` (:func:`~baselines_jax.cl.memory.store`). Given
the same keys, ours and MEAL's functions draw the same rows. Where the keys come from
differs from MEAL's runner: MEAL splits ``agem_rng`` off its runner key at every minibatch
(for every method, so its permutations depend on that) and draws the memory write from the
runner key after the epochs; ours are the learner's per-minibatch CL keys and its
after-update key, split from the update's key only for methods that draw
(``JaxIPPO._epochs``), so the PPO permutations are the same as without a method.

Ours computes the tasks' memory losses in one batched forward pass (each row with its own
task id) where MEAL loops over the tasks: the same gradient up to float32 summation order
(``benchmarks/parity/meal_cl_reference.py``). The statistics (``metric_names``, logged as
``cl/<name>``, means over the update's minibatches) are MEAL's ``agem_stats``:
``agem/is_proj`` (MEAL ``agem/agem_is_proj``), ``agem/dot_g``, ``agem/alpha``,
``agem/ppo_grad_norm``, ``agem/mem_grad_norm`` (also MEAL's ``mem_grad_norm_raw``, the
same number), ``agem/projected_grad_norm`` (before the clip at 40),
``agem/final_grad_norm``, ``agem/memory_fullness_pct`` (all slots, the current task's
included), and the memory loss's terms averaged over the past tasks ``agem/mem_total_loss``,
``agem/mem_value_loss``, ``agem/mem_actor_loss``, ``agem/mem_entropy`` (MEAL:
``agem/ppo_total_loss`` etc.).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from baselines_jax.cl import memory as mem_lib
from baselines_jax.cl.replay import ReplayMethod

Params = Any

PROJECTION_MAX_NORM = 40.0
"""The second global-norm clip after the projection (MEAL's ``agem_project(max_norm=40.)``)."""


def project(
    g: Params, g_mem: Params, max_norm: float = PROJECTION_MAX_NORM
) -> tuple[Params, dict[str, jax.Array]]:
    """MEAL's ``agem_project``: ``g`` projected off ``g_mem`` when ``g . g_mem < 0`` (else
    unchanged), then scaled to norm ``max_norm`` if longer. Returns the gradient and
    ``{is_proj, dot_g, alpha, ppo_grad_norm, mem_grad_norm, projected_grad_norm,
    final_grad_norm}`` (``alpha = g . g_mem / (|g_mem|^2 + 1e-12)``, also when not
    projected; ``projected_grad_norm`` before the clip)."""
    flat, unravel = ravel_pytree(g)
    flat_mem, _ = ravel_pytree(g_mem)
    dot = jnp.vdot(flat, flat_mem)
    alpha = dot / (jnp.vdot(flat_mem, flat_mem) + 1e-12)
    projected = jax.lax.cond(dot < 0, lambda: flat - alpha * flat_mem, lambda: flat)
    norm = jnp.linalg.norm(projected)
    projected = jnp.where(norm > max_norm, projected * (max_norm / norm), projected)
    stats = {
        "is_proj": (dot < 0).astype(jnp.float32),
        "dot_g": dot,
        "alpha": alpha,
        "ppo_grad_norm": jnp.linalg.norm(flat),
        "mem_grad_norm": jnp.linalg.norm(flat_mem),
        "projected_grad_norm": norm,
        "final_grad_norm": jnp.linalg.norm(projected),
    }
    return unravel(projected), stats


def memory_loss(
    network: nn.Module,
    params: Params,
    rows: mem_lib.Memory,
    task: jax.Array,
    vf_coef: float,
    ent_coef: float,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """MEAL's ``compute_memory_gradient`` loss on memory rows ``rows`` (``obs (B, D)``,
    the others ``(B,)``) with task ``task``'s head and id (scalar or per row)::

        -mean log pi(a) + vf_coef * 0.5 mean (V - target)^2 - ent_coef * mean H(pi)

    Returns ``(total, (value_loss, actor_loss, entropy))``, each ``(...)`` the mean over the
    trailing row axis (``rows`` may carry leading axes, e.g. ``(num_tasks, n, ...)``)."""
    lead = rows.actions.shape
    logits, values = network.apply(params, rows.obs.reshape(-1, rows.obs.shape[-1]), task)
    log_pi = jax.nn.log_softmax(logits).reshape(*lead, -1)
    values = values.reshape(lead)
    log_prob = jnp.take_along_axis(log_pi, rows.actions[..., None], -1)[..., 0]
    actor = -log_prob.mean(-1)
    critic = 0.5 * jnp.square(values - rows.targets).mean(-1)
    entropy = (-(jnp.exp(log_pi) * log_pi).sum(-1)).mean(-1)
    return actor + vf_coef * critic - ent_coef * entropy, (critic, actor, entropy)


class AGEM(ReplayMethod):
    """MEAL's AGEM (module docstring)."""

    metric_names = (
        "agem/is_proj",
        "agem/dot_g",
        "agem/alpha",
        "agem/ppo_grad_norm",
        "agem/mem_grad_norm",
        "agem/projected_grad_norm",
        "agem/final_grad_norm",
        "agem/memory_fullness_pct",
        "agem/mem_total_loss",
        "agem/mem_value_loss",
        "agem/mem_actor_loss",
        "agem/mem_entropy",
    )

    def memory_gradient(
        self, params: Params, state: mem_lib.Memory, past: jax.Array, key: jax.Array
    ) -> tuple[Params, dict[str, jax.Array]]:
        """``g_mem``: the sum over the tasks ``t`` with ``past[t] > 0`` of the gradient of
        :func:`memory_loss` on ``samples_per_task`` rows of slot ``t`` (``key``: MEAL's
        ``sub_rng``, see :meth:`sample_all`), and the loss terms averaged over those tasks."""
        cfg = self.cfg
        rows = self.sample_all(state, key)
        mask = (past > 0).astype(jnp.float32)

        def objective(p):
            total, terms = memory_loss(
                self.network, p, rows, self._task_rows(), cfg.vf_coef, cfg.ent_coef
            )
            return jnp.sum(mask * total), (total, *terms)

        grads, per_task = jax.grad(objective, has_aux=True)(params)
        active = jnp.sum(mask) + 1e-8
        names = ("mem_total_loss", "mem_value_loss", "mem_actor_loss", "mem_entropy")
        return grads, {n: jnp.sum(v * mask) / active for n, v in zip(names, per_task, strict=True)}

    def transform_grads(
        self,
        grads: Params,
        params: Params,
        state: mem_lib.Memory,
        task: jax.Array,
        key: jax.Array | None,
    ) -> tuple[Params, dict[str, jax.Array]]:
        _, sub = jax.random.split(self._key(key))
        past = mem_lib.past_sizes(state, task)
        capacity = self.num_tasks * self.rows_per_task

        def with_memory():
            g_mem, loss_stats = self.memory_gradient(params, state, past, sub)
            projected, stats = project(grads, g_mem)
            stats.update(loss_stats)
            stats["memory_fullness_pct"] = jnp.sum(state.sizes) / capacity * 100.0
            return projected, {f"agem/{k}": v.astype(jnp.float32) for k, v in stats.items()}

        def without():
            return grads, {name: jnp.float32(0.0) for name in self.metric_names}

        out, stats = jax.lax.cond(jnp.sum(past) > 0, with_memory, without)
        return out, {name: stats[name] for name in self.metric_names}
