"""PackNet sequences on which our PackNet (``baselines_jax.cl.packnet``) is compared with
MEAL 057f862's (``benchmarks/parity/meal_packnet_reference.py``) and pinned
(``tests/baselines/test_jax_packnet.py::test_reference_pins``), and our values of each case.

A case is our IPPO network (a small configuration: multi-head with separate trunks, or
single-head with a shared backbone) on a sequence of ``num_tasks`` tasks. One driver
(:func:`run_case`) plays the sequence against a *side* (ours, or MEAL's through its
parameter names) and records every stage, on inputs drawn from seeded generators:

* per task ``t``: "training" (the free weights move: a seeded perturbation of 70% of them,
  the others keep their value, exact zeros of earlier pruning included, so the quantiles
  meet ties), a training-mode gradient and its mask, the pruning (parameters and masks;
  the last task's rule on the last), a fine-tune-mode gradient and its mask,
  "fine-tuning" (the task's own weights move), the eval mask of every task and the
  eval-masked parameters of task ``t`` (trained and untrained tasks both), the
  fine-tune end (task 0: biases and norms join its mask) and the eval masks again.

The network cases (:data:`NETWORK_CASES`) compare the actor-critic PackNet trains: our
``mlp-packnet`` network (PackNet's default) on MEAL's initial parameters must have exactly
MEAL's layers and give its log-probabilities and values (:func:`our_network_outputs`).

Both sides receive the same arrays at every stage (the driver draws them from the side's
own masks, which must agree). :func:`summary` turns a record into hashes of the bits
(masks) or the float32 bytes (parameters, gradients) and per-leaf counts or sums: the pins.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from baselines_jax.cl.packnet import PackNet
from baselines_jax.config import IPPOConfig
from baselines_jax.learner import actor_critic

CASES: dict[str, dict[str, Any]] = {
    "multi_head_3": dict(
        num_tasks=3, hidden_sizes=(8, 8), multi_head=True, shared_backbone=False,
        obs_dim=12, seed=0,
    ),
    "single_head_shared_4": dict(
        num_tasks=4, hidden_sizes=(6, 5), multi_head=False, shared_backbone=True,
        obs_dim=10, seed=1,
    ),
}  # fmt: skip
"""``multi_head_3``: MEAL's default network shape (separate trunks, a head slice per task),
3 tasks; ``single_head_shared_4``: a shared backbone (``common_*``) and one head (MEAL
prunes a single head's kernel), 4 tasks."""


class Side(Protocol):
    """One PackNet implementation on parameter trees in our names."""

    def init(self, params: Any) -> Any: ...
    def mask_grads(self, state: Any, grads: Any) -> Any: ...
    def prune(self, params: Any, state: Any) -> tuple[Any, Any]: ...
    def finetune_end(self, params: Any, state: Any) -> Any: ...
    def eval_mask(self, state: Any, task: int) -> Any: ...
    def eval_params(self, params: Any, state: Any, task: int) -> Any: ...
    def masks(self, state: Any) -> Any: ...


def config_of(case: dict[str, Any]) -> IPPOConfig:
    return IPPOConfig(
        cl_method="packnet",
        hidden_sizes=tuple(case["hidden_sizes"]),
        multi_head=case["multi_head"],
        shared_backbone=case["shared_backbone"],
        num_envs=2,
        num_steps=8,
        num_minibatches=2,
    )


def network_of(case: dict[str, Any]) -> tuple[Any, Any]:
    """``(network, initial params)`` of the case."""
    net = actor_critic(config_of(case), case["num_tasks"])
    params = net.init(jax.random.PRNGKey(case["seed"]), jnp.zeros((1, case["obs_dim"])))
    return net, params


class OurSide:
    """``baselines_jax.cl.packnet.PackNet`` as the learner calls it (jitted)."""

    def __init__(self, case: dict[str, Any]):
        net, params = network_of(case)
        self.method = PackNet(config_of(case), net, params, case["num_tasks"])
        m = self.method
        self._grads = jax.jit(lambda s, g: m.transform_grads(g, g, s, jnp.int32(0), None)[0])
        self._prune = jax.jit(m.end_train)
        self._end = jax.jit(lambda p, s: m.end_task(s, p, None, jnp.int32(0)))
        self._eval_mask = jax.jit(m.eval_mask)
        self._eval_params = jax.jit(m.eval_params)

    def init(self, params):
        return self.method.init_state(params)

    def mask_grads(self, state, grads):
        return self._grads(state, grads)

    def prune(self, params, state):
        return self._prune(params, state)

    def finetune_end(self, params, state):
        return self._end(params, state)

    def eval_mask(self, state, task):
        return self._eval_mask(state, jnp.int32(task))

    def eval_params(self, params, state, task):
        return self._eval_params(params, state, jnp.int32(task))

    def masks(self, state):
        return state.masks


def _np(tree: Any) -> Any:
    return jax.tree.map(np.asarray, tree)


def _union_before(masks: Any, task: int) -> Any:
    return jax.tree.map(lambda m: np.asarray(m)[:task].any(0), masks)


def run_case(case: dict[str, Any], side: Side) -> list[tuple[str, Any]]:
    """``[(stage, tree of numpy arrays in our names)]`` of the case played on ``side``."""
    _, params = network_of(case)
    params = _np(params)
    state = side.init(params)
    key = jax.random.PRNGKey(1000 + case["seed"])
    out: list[tuple[str, Any]] = []
    n = case["num_tasks"]

    def draw(tree, k, scale):
        leaves, treedef = jax.tree.flatten(tree)
        keys = jax.random.split(k, len(leaves))
        new = [
            np.asarray(scale * jax.random.normal(kk, np.shape(x)), np.float32)
            for kk, x in zip(keys, leaves, strict=True)
        ]
        return jax.tree.unflatten(treedef, new)

    def moved(tree, k):
        leaves, treedef = jax.tree.flatten(tree)
        keys = jax.random.split(k, len(leaves))
        new = [np.asarray(jax.random.bernoulli(kk, 0.7, np.shape(x))) for kk, x in
               zip(keys, leaves, strict=True)]  # fmt: skip
        return jax.tree.unflatten(treedef, new)

    for t in range(n):
        key, k_noise, k_move, k_g1, k_g2, k_ft = jax.random.split(key, 6)
        held = _union_before(_np(side.masks(state)), t)
        noise, move = draw(params, k_noise, 0.5), moved(params, k_move)
        params = jax.tree.map(
            lambda p, h, z, mv: np.where(h | ~mv, p, p + z).astype(np.float32),
            params, held, noise, move,
        )  # fmt: skip
        out.append((f"task{t}/trained_params", params))
        out.append((f"task{t}/train_grads", _np(side.mask_grads(state, draw(params, k_g1, 1.0)))))
        new_params, state = side.prune(params, state)
        params = _np(new_params)
        out.append((f"task{t}/pruned_params", params))
        out.append((f"task{t}/masks_after_prune", _np(side.masks(state))))
        out.append(
            (f"task{t}/finetune_grads", _np(side.mask_grads(state, draw(params, k_g2, 1.0))))
        )
        own = jax.tree.map(lambda m, t=t: np.asarray(m)[t], _np(side.masks(state)))
        params = jax.tree.map(
            lambda p, o, z: np.where(o, p + z, p).astype(np.float32),
            params, own, draw(params, k_ft, 0.1),
        )  # fmt: skip
        out.append((f"task{t}/finetuned_params", params))
        for when in ("before_end", "after_end"):
            if when == "after_end":
                state = side.finetune_end(params, state)
                out.append((f"task{t}/masks_after_end", _np(side.masks(state))))
            for e in range(n):
                out.append((f"task{t}/{when}/eval_mask{e}", _np(side.eval_mask(state, e))))
            out.append((f"task{t}/{when}/eval_params{t}", _np(side.eval_params(params, state, t))))
    return out


def digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        h.update(np.packbits(a.reshape(-1)).tobytes() if a.dtype == bool else
                 np.ascontiguousarray(a, np.float32).tobytes())  # fmt: skip
    return h.hexdigest()[:16]


NETWORK_CASES: dict[str, dict[str, Any]] = {
    "separate_multi_head": dict(shared_backbone=False, multi_head=True, num_tasks=3),
    "shared_single_head": dict(shared_backbone=True, multi_head=False, num_tasks=2),
}
"""The networks compared: MEAL's default shape, and a shared trunk with one head (its
LayerNorm is ``common_LayerNorm_0`` in MEAL's names, ``common_ln1`` in ours)."""
NETWORK_WIDTH, NETWORK_OBS, NETWORK_ROWS = 8, 12, 16
"""Two trunk layers of 8, 12 observation values, 16 rows per task."""


def network_config(case: dict[str, Any]) -> IPPOConfig:
    """PackNet's ``IPPOConfig`` for a network case (``network`` left to its default)."""
    return IPPOConfig(
        cl_method="packnet", hidden_sizes=(NETWORK_WIDTH, NETWORK_WIDTH),
        multi_head=case["multi_head"], shared_backbone=case["shared_backbone"],
        num_envs=2, num_steps=8, num_minibatches=2,
    )  # fmt: skip


def network_inputs() -> jax.Array:
    """The observations ``(NETWORK_ROWS, NETWORK_OBS)`` both networks read."""
    return jax.random.normal(jax.random.PRNGKey(7), (NETWORK_ROWS, NETWORK_OBS))


def our_network(case: dict[str, Any], config: IPPOConfig | None = None) -> tuple[Any, Any]:
    """``(network, its parameters' shapes)`` of a network case (``config``:
    :func:`network_config` by default)."""
    net = actor_critic(config or network_config(case), case["num_tasks"])
    return net, jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.zeros((1, NETWORK_OBS)))


def our_network_outputs(
    case: dict[str, Any], params: Any, config: IPPOConfig | None = None
) -> list[np.ndarray] | None:
    """Per task: our network's log-probabilities ``(rows, A)`` and values ``(rows,)`` on
    ``params`` (our names); ``None`` when ``params`` does not fill our tree exactly.
    ``config``: :func:`network_config` by default."""
    net, shape = our_network(case, config)
    params = jax.tree.map(jnp.asarray, params)
    if jax.tree.structure(params) != jax.tree.structure(shape) or any(
        a.shape != b.shape
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(shape), strict=True)
    ):
        return None
    out = []
    for task in range(case["num_tasks"]):
        logits, values = net.apply(params, network_inputs(), jnp.full((NETWORK_ROWS,), task))
        out += [np.asarray(jax.nn.log_softmax(logits)), np.asarray(values)]
    return out


def leaf_names(tree: Any) -> list[str]:
    return [
        "/".join(str(getattr(k, "key", k)) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def summary(record: list[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """``stage -> {"hash": digest of every leaf, "leaves": {leaf: count (bool: True
    entries) or sum (float32, as a float)}}``."""
    out: dict[str, dict[str, Any]] = {}
    for stage, tree in record:
        leaves = jax.tree.leaves(tree)
        values = {
            name: int(np.sum(x)) if np.asarray(x).dtype == bool else float(np.sum(x, dtype=float))
            for name, x in zip(leaf_names(tree), leaves, strict=True)
        }
        out[stage] = {"hash": digest(leaves), "leaves": values}
    return out


def our_values(name: str) -> dict[str, dict[str, Any]]:
    """The summary of case ``name`` played on our PackNet."""
    case = CASES[name]
    return summary(run_case(case, OurSide(case)))
