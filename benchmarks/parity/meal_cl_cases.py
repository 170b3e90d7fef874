"""Inputs on which our JAX CL methods are compared with MEAL 057f862's own functions
(``benchmarks/parity/meal_cl_reference.py``) and pinned
(``tests/baselines/test_jax_cl_replay.py::test_reference_pins``), and our values of each
case (:func:`our_values`, what the pins check).

Everything is built from fixed seeds, so the script and the test build the same arrays: a
small network of ours (MEAL's architecture, :func:`network`) over ``NUM_TASKS`` tasks, its
parameters, a memory written by :data:`STORES` updates' rollouts, a PPO minibatch of the
current task :data:`CURRENT` and its PPO gradient.

Cases are grouped by section (:data:`SECTIONS`; ``--only SECTION`` of the script): a new
method adds its section, its case names, ``our_values`` branches and the MEAL side's
functions in the script. Each case's values are flat float64/int arrays by name; the
tolerance of a case is :data:`TOLERANCE` (``None``: bit for bit).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from baselines_jax.cl import memory as M
from baselines_jax.cl.agem import AGEM, memory_loss
from baselines_jax.cl.er_ace import ERACE
from baselines_jax.config import IPPOConfig
from baselines_jax.network import ActorCritic
from baselines_jax.ppo import Transition, make_optimizer, ppo_loss

NUM_TASKS = 3
OBS_DIM = 10
NUM_ACTIONS = 6
T, N = 4, 6
"""Rollout of a store: ``T`` steps x ``N`` actors."""
STORES = (0, 0, 1, 2)
"""Task of each stored update (task 0's slot wraps: 24 rows written into 16)."""
CURRENT = 2
"""The task being trained in the gradient cases: tasks 0 and 1 are past, 2's slot is
masked out."""
SLOT_SAMPLES = 5
CONFIG = IPPOConfig(
    hidden_sizes=(8, 8),
    cl_method="agem",
    agem_memory_size=48,  # 16 rows per task
    agem_sample_size=12,  # 12 rows stored per update, 4 per task per gradient
    er_ace_coef=0.7,
    anneal_lr=False,
    learning_rate=3e-4,
    max_grad_norm=0.5,
)
"""Our config of the cases (MEAL's ``cfg``: the same values)."""

SECTIONS: dict[str, tuple[str, ...]] = {
    "agem": (
        "memory_after_stores",
        "sampled_slots",
        "memory_gradient_task0",
        "memory_gradient_task1",
        "agem_projection_active",
        "agem_projection_inactive",
        "agem_projection_clipped",
        "agem_update",
    ),
    "er-ace": ("er_ace_gradient", "er_ace_step", "er_ace_update"),
}
"""Section -> its cases (script: ``--only SECTION``)."""

TOLERANCE: dict[str, tuple[float, float] | None] = {
    "memory_after_stores": None,
    "sampled_slots": None,
}
"""Case -> ``(atol, rtol)`` (:func:`within`); ``None``: equal bit for bit; cases not named:
:data:`FLOAT_TOLERANCE`."""
FLOAT_TOLERANCE = (1e-6, 1e-5)
"""float32 results of different summation orders (our batched memory loss against MEAL's
per-task loop; ``ravel_pytree`` dot products)."""

PROJECTION = {
    "agem_projection_active": ("active", 1.0),
    "agem_projection_inactive": ("inactive", 1.0),
    "agem_projection_clipped": ("active", 1000.0),
    "agem_update": ("active", 1.0),
}
"""Case -> (whether the PPO gradient is turned to make ``g . g_mem < 0``, its scale; x1000
takes the projected gradient past the clip at 40)."""


def config(method: str = "agem") -> IPPOConfig:
    return dataclasses.replace(CONFIG, cl_method=method)


def network() -> ActorCritic:
    c = CONFIG
    return ActorCritic(
        action_dim=NUM_ACTIONS,
        num_tasks=NUM_TASKS,
        hidden_sizes=c.hidden_sizes,
        activation=c.activation,
        layer_norm=c.layer_norm,
        shared_backbone=c.shared_backbone,
        multi_head=c.multi_head,
        task_id_input=c.task_id_input,
    )


@functools.cache
def params() -> Any:
    """The network's parameters: its initialisation from ``PRNGKey(7)`` with noise of scale
    0.1 on every leaf (heads of gain 0.01 alone would give near-uniform policies)."""
    p = network().init(jax.random.PRNGKey(7), jnp.zeros((1, OBS_DIM)))
    leaves, tree = jax.tree.flatten(p)
    keys = jax.random.split(jax.random.PRNGKey(8), len(leaves))
    noisy = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, noisy)


def rollout(i: int) -> tuple[Transition, np.ndarray, np.ndarray]:
    """Rollout ``i``: ``(traj (T, N, ...), advantages (T, N), targets (T, N))``; uint8
    observations in 0..3 (counts, as MEAL's)."""
    rng = np.random.default_rng(2026 + i)
    values = rng.normal(0, 1, (T, N)).astype(np.float32)
    adv = rng.normal(0, 1, (T, N)).astype(np.float32)
    traj = Transition(
        done=np.zeros((T, N), np.float32),
        action=rng.integers(0, NUM_ACTIONS, (T, N)).astype(np.int32),
        value=values,
        reward=rng.normal(0, 1, (T, N)).astype(np.float32),
        log_prob=-rng.uniform(0.5, 3.0, (T, N)).astype(np.float32),
        obs=rng.integers(0, 4, (T, N, OBS_DIM)).astype(np.uint8),
    )
    return traj, adv, (adv + values).astype(np.float32)


def store_key(i: int) -> jax.Array:
    return jax.random.PRNGKey(100 + i)


def slot_key(t: int) -> jax.Array:
    return jax.random.PRNGKey(200 + t)


STEP_KEY = jax.random.PRNGKey(300)
"""The key of the gradient cases: ``transform_grads``'s ``key``, MEAL's ``agem_rng``."""


@functools.cache
def our_memory() -> M.Memory:
    mem = M.init(CONFIG.agem_memory_size, NUM_TASKS, OBS_DIM, jnp.uint8)
    store = jax.jit(M.store, static_argnums=5)
    for i, task in enumerate(STORES):
        traj, adv, tgt = rollout(i)
        traj = jax.tree.map(jnp.asarray, traj)
        mem = store(
            mem, traj, jnp.asarray(adv), jnp.asarray(tgt), jnp.int32(task),
            CONFIG.agem_sample_size, store_key(i),
        )  # fmt: skip
    return mem


def minibatch() -> tuple[Transition, np.ndarray, np.ndarray]:
    """The PPO minibatch of the current task: rollout 9's ``T * N`` rows, flat."""
    traj, adv, tgt = rollout(9)
    return jax.tree.map(lambda a: a.reshape(T * N, *a.shape[2:]), traj), adv.ravel(), tgt.ravel()


@functools.cache
def ppo_gradient() -> Any:
    """Our PPO loss's gradient on :func:`minibatch` with task :data:`CURRENT`'s head."""
    net, cfg = network(), CONFIG
    batch, adv, tgt = minibatch()

    def loss(p):
        logits, values = net.apply(p, jnp.asarray(batch.obs), CURRENT)
        return ppo_loss(logits, values, jax.tree.map(jnp.asarray, batch), adv, tgt, cfg)[0]

    return jax.jit(jax.grad(loss))(params())


def ppo_input(case: str) -> Any:
    """The PPO gradient a projection case starts from: :func:`ppo_gradient`, its sign
    chosen so that ``g . g_mem`` is negative (``active``) or positive (``inactive``), by
    our memory gradient, and scaled (:data:`PROJECTION`)."""
    kind, scale = PROJECTION[case]
    g = ppo_gradient()
    method = method_of("agem")
    mem = our_memory()
    _, sub = jax.random.split(STEP_KEY)
    past = M.past_sizes(mem, CURRENT)
    g_mem, _ = jax.jit(method.memory_gradient)(params(), mem, past, sub)
    dot = float(jnp.vdot(ravel_pytree(g)[0], ravel_pytree(g_mem)[0]))
    sign = (-1.0 if dot > 0 else 1.0) if kind == "active" else (1.0 if dot > 0 else -1.0)
    return jax.tree.map(lambda x: sign * scale * x, g)


@functools.cache
def method_of(name: str) -> AGEM | ERACE:
    cfg = config(name)
    net = network()
    template = net.init(jax.random.PRNGKey(0), jnp.zeros((1, OBS_DIM)))
    return (AGEM if name == "agem" else ERACE)(cfg, net, template, NUM_TASKS)


def flat(tree: Any) -> np.ndarray:
    """A gradient or parameter tree as one vector (``ravel_pytree``'s order)."""
    return np.asarray(ravel_pytree(tree)[0], np.float64)


def memory_values(mem: Any) -> dict[str, np.ndarray]:
    """A memory's arrays (MEAL's ``AGEMMemory`` or ours) by field; observations as float."""
    names = ("obs", "actions", "log_probs", "advantages", "targets", "values", "ptrs", "sizes")
    return {n: np.asarray(getattr(mem, n)).astype(np.float64) for n in names}


def _update(grads: Any) -> np.ndarray:
    """The parameters after one optimizer step (our ``clip_by_global_norm`` then Adam) on
    ``grads`` from :func:`params`."""
    tx = make_optimizer(CONFIG, 1)

    @jax.jit
    def step(p, g):
        updates, _ = tx.update(g, tx.init(p), p)
        return optax.apply_updates(p, updates)

    return flat(step(params(), grads))


def our_values(case: str) -> dict[str, np.ndarray]:
    """Our values of ``case`` (flat arrays by name)."""
    p, mem = params(), our_memory()
    task = jnp.int32(CURRENT)
    if case == "memory_after_stores":
        return memory_values(mem)
    if case == "sampled_slots":
        out = {}
        for t in range(NUM_TASKS):
            rows = M.sample_slot(mem, t, SLOT_SAMPLES, slot_key(t))
            out.update({f"task{t}/{k}": v for k, v in memory_values(rows).items()})
        return out
    if case.startswith("memory_gradient_task"):
        t = int(case[-1])
        rows = M.sample_slot(mem, t, CONFIG.agem_sample_size // NUM_TASKS, slot_key(t))
        cfg = CONFIG

        def loss(q):
            total, terms = memory_loss(network(), q, rows, t, cfg.vf_coef, cfg.ent_coef)
            return total, (total, *terms)

        grads, (total, value, actor, entropy) = jax.jit(jax.grad(loss, has_aux=True))(p)
        return {
            "grads": flat(grads),
            "total_loss": np.float64(total),
            "value_loss": np.float64(value),
            "actor_loss": np.float64(actor),
            "entropy": np.float64(entropy),
        }
    if case.startswith("agem_"):
        method = method_of("agem")
        out, stats = jax.jit(method.transform_grads)(ppo_input(case), p, mem, task, STEP_KEY)
        values = {k: np.float64(v) for k, v in stats.items()}
        if case == "agem_update":
            return {"params": _update(out), **values}
        return {"grads": flat(out), **values}
    if case.startswith("er_ace_"):
        method = method_of("er-ace")
        if case == "er_ace_gradient":
            _, sub = jax.random.split(STEP_KEY)
            past = M.past_sizes(mem, task)
            return {"grads": flat(jax.jit(method.replay_gradient)(p, mem, past, sub))}
        out, stats = jax.jit(method.transform_grads)(ppo_gradient(), p, mem, task, STEP_KEY)
        values = {k: np.float64(v) for k, v in stats.items()}
        if case == "er_ace_update":
            return {"params": _update(out), **values}
        return {"grads": flat(out), **values}
    raise KeyError(f"unknown case {case!r}")


def compare(mine: dict[str, np.ndarray], theirs: dict[str, Any]) -> tuple[float, float, bool]:
    """``(max abs difference, max relative difference, exactly equal)`` over the values
    both name; relative: ``max |a - b| / max |b|`` per value (the difference against the
    value's scale; 0 where ``b`` is all zero)."""
    worst_abs = worst_rel = 0.0
    exact = set(mine) == set(theirs)
    for key in set(mine) & set(theirs):
        a = np.asarray(mine[key], np.float64).ravel()
        b = np.asarray(theirs[key], np.float64).ravel()
        if a.shape != b.shape:
            return np.inf, np.inf, False
        d = float(np.abs(a - b).max(initial=0.0))
        scale = float(np.abs(b).max(initial=0.0))
        exact = exact and bool(np.array_equal(a, b))
        worst_abs = max(worst_abs, d)
        worst_rel = max(worst_rel, d / scale if scale > 0 else 0.0)
    return worst_abs, worst_rel, exact


def within(case: str, mine: dict[str, np.ndarray], theirs: dict[str, Any]) -> bool:
    """Whether ``case``'s values match to its :data:`TOLERANCE`: every value ``a`` of ours
    and ``b`` of MEAL's with ``max |a - b| <= atol + rtol * max |b|`` (against the value's
    scale: float32 rounding of a gradient vector is relative to its largest entries), or
    equal bit for bit."""
    tol = TOLERANCE.get(case, FLOAT_TOLERANCE)
    if set(mine) != set(theirs):
        return False
    if tol is None:
        return compare(mine, theirs)[2]
    atol, rtol = tol
    for key in mine:
        a = np.asarray(mine[key], np.float64).ravel()
        b = np.asarray(theirs[key], np.float64).ravel()
        if a.shape != b.shape or np.abs(a - b).max(initial=0.0) > atol + rtol * np.abs(b).max(
            initial=0.0
        ):
            return False
    return True
