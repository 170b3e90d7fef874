"""The episodic memory both of MEAL's replay methods keep (AGEM, ER-ACE; 057f862
``experiments/continual/agem.py`` ``update_agem_memory`` and ``sample_memory``), as a base
class: :class:`ReplayMethod` holds a :class:`~baselines_jax.cl.memory.Memory` of
``num_tasks`` slots (``agem_memory_size`` split evenly), stores ``agem_sample_size`` rows
of each update's rollout after its epochs, and samples ``max(agem_sample_size //
num_tasks, 1)`` rows of every slot with MEAL's per-task keys; each method's
``transform_grads`` uses them (:mod:`baselines_jax.cl.agem`, :mod:`baselines_jax.cl.er_ace`).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from baselines_jax.cl import memory as mem_lib
from baselines_jax.cl.base import JaxCLMethod
from baselines_jax.config import IPPOConfig
from baselines_jax.ppo import Transition

Params = Any


def obs_dim_of(cfg: IPPOConfig, template: Params, num_tasks: int) -> int:
    """The flat observation's length ``D`` of a network with parameters ``template``: the
    first trunk layer's inputs less the one-hot task id."""
    first = "common_dense1" if cfg.shared_backbone else "actor_dense1"
    width = template["params"][first]["kernel"].shape[0]
    return int(width) - (int(num_tasks) if cfg.task_id_input else 0)


class ReplayMethod(JaxCLMethod):
    """The memory both replay methods keep (AGEM, ER-ACE): its state is a
    :class:`~baselines_jax.cl.memory.Memory` of ``num_tasks`` slots, filled after every
    update; ``transform_grads`` is the method's."""

    needs_key = True
    obs_dtype = jnp.uint8
    """The rollout's observation dtype (the MEAL suite's counts); another is refused when
    the program is traced (:func:`~baselines_jax.cl.memory.store`)."""

    def __init__(self, cfg: IPPOConfig, network: nn.Module, template: Params, num_tasks: int):
        super().__init__(cfg, network, template, num_tasks)
        self.obs_dim = obs_dim_of(cfg, template, num_tasks)
        self.rows_per_task = mem_lib.per_task(cfg.agem_memory_size, num_tasks)
        self.samples_per_task = max(cfg.agem_sample_size // num_tasks, 1)

    def init_state(self, params: Params) -> mem_lib.Memory:
        return mem_lib.init(self.cfg.agem_memory_size, self.num_tasks, self.obs_dim, self.obs_dtype)

    def after_update(
        self,
        state: mem_lib.Memory,
        traj: Transition,
        advantages: jax.Array,
        targets: jax.Array,
        task: jax.Array,
        key: jax.Array | None,
    ) -> mem_lib.Memory:
        key = self._key(key)
        return mem_lib.store(state, traj, advantages, targets, task, self.cfg.agem_sample_size, key)

    def _key(self, key: jax.Array | None) -> jax.Array:
        if key is None:
            raise ValueError(f"{self.cfg.cl_method} samples its memory: it needs a key")
        return key

    def sample_all(self, state: mem_lib.Memory, key: jax.Array) -> mem_lib.Memory:
        """``samples_per_task`` rows of every slot, ``(num_tasks, n, ...)``: task ``t``
        with the ``t``-th key of ``key, k_t = split(key)`` (MEAL's loop)."""
        keys = []
        for _ in range(self.num_tasks):
            key, k = jax.random.split(key)
            keys.append(k)
        tasks = jnp.arange(self.num_tasks)
        return jax.vmap(lambda t, k: mem_lib.sample_slot(state, t, self.samples_per_task, k))(
            tasks, jnp.stack(keys)
        )

    def _task_rows(self) -> jax.Array:
        """The task id of every sampled row, ``(num_tasks * n,)``."""
        return jnp.repeat(jnp.arange(self.num_tasks), self.samples_per_task)
