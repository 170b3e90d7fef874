"""The episodic memory of MEAL's replay methods (AGEM, ER-ACE; ``experiments/continual/
agem.py`` at 057f862: ``AGEMMemory``, ``init_agem_memory``, ``update_agem_memory``,
``sample_task_slot``), as pure functions on a pytree.

One circular slot per task: ``memory_size // num_tasks`` transitions each (MEAL's
``max_size_per_task``; the remainder of the division is never used). After each update's
epochs, ``sample_size`` (step, actor) pairs of that update's rollout, drawn uniformly with
replacement, are written into the current task's slot from its write pointer on,
overwriting the oldest once the slot is full.

Shapes (``S = memory_size // num_tasks``, ``D`` the flat observation's length):
``obs (num_tasks, S, D)``; ``actions`` int32, ``log_probs``, ``advantages``, ``targets``
(GAE's value targets), ``values`` float32, each ``(num_tasks, S)``; ``ptrs`` (next row to
write) and ``sizes`` (valid rows, at most ``S``) int32 ``(num_tasks,)``. One memory per
seed (the learner's ``TrainState.cl``, vmapped).

Observations keep the rollout's dtype (MEAL's suite: uint8 counts), where MEAL stores
float32: the same numbers (a uint8 converts to float32 exactly; the network casts its
input to float32), in a quarter of the bytes. Everything else is MEAL's dtype.

:func:`memory_bytes` / :func:`check_memory` size the memory before anything is built (the
job and ``JaxIPPO.__init__`` call them).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from baselines_jax.config import IPPOConfig
from baselines_jax.ppo import Transition
from cl_suites.rundir.resources import available_memory

REPLAY_METHODS: tuple[str, ...] = ("agem", "er-ace")
"""The ``cl_method`` values that keep this memory."""


class Memory(NamedTuple):
    """One seed's memory (module docstring for shapes and dtypes)."""

    obs: jax.Array
    actions: jax.Array
    log_probs: jax.Array
    advantages: jax.Array
    targets: jax.Array
    values: jax.Array
    ptrs: jax.Array
    sizes: jax.Array


def per_task(memory_size: int, num_tasks: int) -> int:
    """Rows of a task's slot: ``memory_size // num_tasks`` (MEAL's ``max_size_per_task``);
    ``ValueError`` when that is 0."""
    rows = int(memory_size) // int(num_tasks)
    if rows < 1:
        raise ValueError(
            f"agem_memory_size={memory_size} leaves no row per task over {num_tasks} tasks "
            f"(memory_size // num_tasks); raise it to at least {num_tasks}"
        )
    return rows


def init(memory_size: int, num_tasks: int, obs_dim: int, obs_dtype=jnp.uint8) -> Memory:
    """An empty memory (zeros; pointers and sizes 0), MEAL's ``init_agem_memory(memory_size,
    (obs_dim,), max_tasks=num_tasks)`` but for the observations' dtype."""
    s = per_task(memory_size, num_tasks)
    f32 = jnp.zeros((num_tasks, s), jnp.float32)
    return Memory(
        obs=jnp.zeros((num_tasks, s, obs_dim), obs_dtype),
        actions=jnp.zeros((num_tasks, s), jnp.int32),
        log_probs=f32,
        advantages=f32,
        targets=f32,
        values=f32,
        ptrs=jnp.zeros((num_tasks,), jnp.int32),
        sizes=jnp.zeros((num_tasks,), jnp.int32),
    )


def store(
    mem: Memory,
    traj: Transition,
    advantages: jax.Array,
    targets: jax.Array,
    task: jax.Array,
    sample_size: int,
    key: jax.Array,
) -> Memory:
    """MEAL's ``update_agem_memory(sample_size, task, advantages, mem, key, targets, traj)``:
    ``sample_size`` indices ``randint(split(key)[1], (sample_size,), 0, T * N)`` into the
    flattened ``(T, N)`` rollout (``traj`` fields ``(T, N, ...)``, GAE ``(T, N)``), written
    at rows ``(ptr + arange(sample_size)) % S`` of slot ``clip(task, 0, num_tasks - 1)``;
    then ``ptr = (ptr + sample_size) % S``, ``size = min(size + sample_size, S)``.

    ``key`` plays MEAL's ``rng`` argument (MEAL splits it and draws from the second half):
    the same key gives the same rows as MEAL's function. Observations are stored in the
    memory's dtype, which must be the rollout's (a float rollout into a uint8 memory would
    truncate). With ``sample_size > S`` one write visits a row more than once and XLA's
    scatter decides which value stays (MEAL's too); the defaults write 1024 of 5000 rows
    per task at 20 tasks."""
    if traj.obs.dtype != mem.obs.dtype:
        raise TypeError(
            f"rollout observations are {traj.obs.dtype}, the memory keeps {mem.obs.dtype}"
        )
    _, draw = jax.random.split(key)
    total = advantages.shape[0] * advantages.shape[1]
    idx = jax.random.randint(draw, (sample_size,), 0, total)
    num_tasks, s = mem.actions.shape
    slot = jnp.clip(task, 0, num_tasks - 1)
    ptr, size = mem.ptrs[slot], mem.sizes[slot]
    rows = (ptr + jnp.arange(sample_size)) % s

    def put(buf: jax.Array, new: jax.Array) -> jax.Array:
        flat = new.reshape(total, *new.shape[2:])[idx]
        return buf.at[slot, rows].set(flat.astype(buf.dtype))

    return Memory(
        obs=put(mem.obs, traj.obs),
        actions=put(mem.actions, traj.action),
        log_probs=put(mem.log_probs, traj.log_prob),
        advantages=put(mem.advantages, advantages),
        targets=put(mem.targets, targets),
        values=put(mem.values, traj.value),
        ptrs=mem.ptrs.at[slot].set((ptr + sample_size) % s),
        sizes=mem.sizes.at[slot].set(jnp.minimum(size + sample_size, s)),
    )


def sample_slot(mem: Memory, task: int | jax.Array, n: int, key: jax.Array) -> Memory:
    """MEAL's ``sample_task_slot(mem, task, n, key)``: ``n`` rows of task ``task``'s slot,
    ``idx = min(randint(key, (n,), 0, max(size, 1)), max(size - 1, 0))`` (uniform with
    replacement over the valid rows; row 0, zeros, from an empty slot). Returns a ``Memory``
    whose array fields are the rows (``obs (n, D)``, the others ``(n,)``) and whose
    ``ptrs``/``sizes`` are the slot's scalars. Same key, same rows as MEAL's."""
    size = mem.sizes[task]
    idx = jax.random.randint(key, (n,), 0, jnp.maximum(size, 1))
    idx = jnp.minimum(idx, jnp.maximum(size - 1, 0))
    return Memory(
        obs=mem.obs[task, idx],
        actions=mem.actions[task, idx],
        log_probs=mem.log_probs[task, idx],
        advantages=mem.advantages[task, idx],
        targets=mem.targets[task, idx],
        values=mem.values[task, idx],
        ptrs=mem.ptrs[task],
        sizes=size,
    )


def past_sizes(mem: Memory, task: jax.Array) -> jax.Array:
    """``sizes`` with the current task's slot zeroed (MEAL's ``past_sizes``): the slots a
    replay method learns from while training ``task``."""
    return mem.sizes.at[task].set(0)


# -- size guard ----------------------------------------------------------------------------
def memory_bytes(
    cfg: IPPOConfig, num_tasks: int, obs_dim: int, num_seeds: int, obs_itemsize: int = 1
) -> int:
    """Bytes of the memories of ``num_seeds`` seeds (0 for a method without one):
    ``num_tasks * S`` rows of ``obs_dim * obs_itemsize`` observation bytes and 5 x 4 bytes
    (action, log-prob, advantage, target, value), plus 8 bytes of pointer and size per
    task; ``S = agem_memory_size // num_tasks``. The compiled program may hold a second copy
    while it writes the memory."""
    if cfg.cl_method not in REPLAY_METHODS:
        return 0
    rows = num_tasks * per_task(cfg.agem_memory_size, num_tasks)
    one = rows * (obs_dim * obs_itemsize + 5 * 4) + num_tasks * 8
    return int(num_seeds) * one


def check_memory(
    cfg: IPPOConfig,
    num_tasks: int,
    obs_dim: int,
    num_seeds: int,
    obs_itemsize: int = 1,
    limit: int | None = None,
) -> int:
    """:func:`memory_bytes`, or a one-line ``ValueError`` naming ``agem_memory_size``, the
    bytes and the limit when they exceed ``limit`` (default: the memory this process may
    still allocate, ``cl_suites.rundir.resources.available_memory``: cgroup-aware; no
    check where that is unknown). Call it before anything is built."""
    need = memory_bytes(cfg, num_tasks, obs_dim, num_seeds, obs_itemsize)
    limit = available_memory() if limit is None else int(limit)
    if need and limit is not None and need > limit:
        per_seed = need // max(int(num_seeds), 1)
        raise ValueError(
            f"agem_memory_size={cfg.agem_memory_size}: the {cfg.cl_method} memory of "
            f"{num_seeds} seed(s) needs {need:,} bytes ({per_seed:,} per seed, obs dim "
            f"{obs_dim}, {num_tasks} tasks), more than the {limit:,} bytes of RAM available; "
            "lower agem_memory_size or the seeds"
        )
    return need
