"""MEAL's ER-ACE on the JAX IPPO learner (``experiments/continual/er_ace.py``
``compute_er_ace_gradient`` and ``experiments/algos/on_policy.py``
``apply_cl_gradient_step`` at 057f862).

The memory is AGEM's (:class:`~baselines_jax.cl.replay.ReplayMethod`: ``agem_memory_size``
split over the tasks, ``agem_sample_size`` transitions stored after each update). On each
minibatch's raw PPO gradient ``g``, before ``clip_by_global_norm`` and Adam::

    g + er_ace_coef * sum_{t: past_sizes[t] > 0} grad(-mean log pi_t(a))

on ``max(agem_sample_size // num_tasks, 1)`` rows of each task ``t``'s slot, with task
``t``'s head and id (behaviour cloning only: no value or entropy term, no projection; the
replay term is exactly zero while no past task has data). MEAL's code names it ER-ACE; it
has no asymmetric cross-entropy on the current task's data (Caccia et al. 2022's ACE).

Random keys are AGEM's (``transform_grads(..., key)`` = MEAL's ``apply_cl_gradient_step(
..., agem_rng=key)``: ``_, sub = split(key)``, then ``sub, k_t = split(sub)`` per task;
:mod:`baselines_jax.cl.agem` for the memory write and for how the keys reach the method).
Statistic: ``er_ace/total_past_samples`` (MEAL's name), the rows in past tasks' slots.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from baselines_jax.cl import memory as mem_lib
from baselines_jax.cl.replay import ReplayMethod

Params = Any


def bc_loss(network: nn.Module, params: Params, rows: mem_lib.Memory, task: jax.Array):
    """ER-ACE's behaviour cloning on memory rows: ``-mean log pi(a)`` over the trailing row
    axis (MEAL's ``compute_er_ace_gradient``'s ``bc_loss``)."""
    lead = rows.actions.shape
    logits, _ = network.apply(params, rows.obs.reshape(-1, rows.obs.shape[-1]), task)
    log_pi = jax.nn.log_softmax(logits).reshape(*lead, -1)
    return -jnp.take_along_axis(log_pi, rows.actions[..., None], -1)[..., 0].mean(-1)


class ERACE(ReplayMethod):
    """MEAL's ER-ACE (module docstring)."""

    metric_names = ("er_ace/total_past_samples",)

    def replay_gradient(
        self, params: Params, state: mem_lib.Memory, past: jax.Array, key: jax.Array
    ) -> Params:
        """MEAL's ``compute_er_ace_gradient(network, params, state, agem_sample_size, key,
        past)``: the masked sum over tasks of the behaviour-cloning gradients (zeros when
        ``past`` is all zero)."""
        rows = self.sample_all(state, key)
        mask = (past > 0).astype(jnp.float32)

        def objective(p):
            return jnp.sum(mask * bc_loss(self.network, p, rows, self._task_rows()))

        grads = jax.grad(objective)(params)
        return jax.lax.cond(
            jnp.sum(past) > 0, lambda: grads, lambda: jax.tree.map(jnp.zeros_like, grads)
        )

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
        replay = self.replay_gradient(params, state, past, sub)
        coef = self.cfg.er_ace_coef
        out = jax.tree.map(lambda g, r: g + coef * r, grads, replay)
        return out, {"er_ace/total_past_samples": jnp.sum(past).astype(jnp.float32)}
