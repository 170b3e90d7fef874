"""MEAL's PackNet (``experiments/continual/packnet.py`` at 057f862) on the JAX IPPO network.

Each task trains, then keeps a share of every prunable layer's free weights (the largest
by magnitude), zeroes the rest and fine-tunes only what it kept; later tasks train the
weights no earlier task kept. The state (:class:`PackNetState`, per seed) holds one bool
mask per task and parameter (``masks``: leaves ``(num_tasks, *param.shape)``), the
number of tasks whose fine-tuning ended (``current_task``) and the phase (``train_mode``).

Which parameters the masks cover follows MEAL's name rules on MEAL's layer names
(:func:`meal_layer_name` maps ours: ``actor_dense1`` -> ``actor_Dense_1``, ``actor_ln1``
-> ``actor_LayerNorm_1``, ``actor_head`` -> ``actor_Dense_multi_head`` with a multi-head
network, else ``actor_Dense_single_head``):

* prunable: the kernels of Dense layers whose name holds neither ``critic`` nor
  ``multi_head`` (the actor's or the shared trunk's; the single-head policy head too);
* frozen into task 0's mask when its fine-tuning ends: the biases of those layers and
  every parameter of the LayerNorms whose name holds neither ``critic`` nor
  ``multi_head``;
* never masked: the critic, the multi-head heads.

The phases, as MEAL's ``run_packnet_train_then_finetune``:

* training (``train_mode``): gradients of weights kept by earlier tasks are zeroed before
  the optimizer (:meth:`PackNet.transform_grads`);
* :meth:`PackNet.end_train` (MEAL's ``on_train_end`` without the optimizer, which the
  learner rebuilds): task ``t`` of ``T`` keeps, per layer, the free weights with
  ``|w| > nanquantile(|free w|, k / (k + 1))``, ``k = T - t - 1`` tasks left, and zeroes
  the other free weights; the last task keeps every free weight and zeroes nothing;
* fine-tuning (not ``train_mode``): only the weights in the task's own mask train (the
  critic, heads, biases and norms get zero gradients);
* :meth:`PackNet.end_task` (MEAL's ``on_finetune_end``): after task 0 the biases and
  norms join task 0's mask; ``current_task + 1``, back to training.

Evaluation (:meth:`PackNet.eval_params`, MEAL's ``get_eval_mask`` / ``apply_eval_mask``):
a task already trained (``task < current_task``) acts with the weights in the masks of
tasks ``<= task`` plus the multi-head heads (everything else zeroed); a task not yet
trained acts with every parameter.

MEAL ignores its ``prune_instructions`` (0.4 at every call site) and
``train_finetune_split``; so do we (the schedule above is the one its code runs).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from baselines_jax.cl.base import JaxCLMethod
from baselines_jax.config import IPPOConfig

Params = Any

PRUNABLE_TYPES: tuple[str, ...] = ("Dense", "Conv")
"""MEAL's ``prunable_layers`` (``nn.Dense, nn.Conv`` at every call site), by type name."""
NORM_TYPES: tuple[str, ...] = ("BatchNorm", "LayerNorm")
"""MEAL's ``norm_layer_types`` (its default)."""
FORBIDDEN_LAYER: tuple[str, ...] = ("critic", "multi_head")
"""Layer-name parts MEAL never prunes, freezes or masks (``forbidden_layer_strings``)."""
SPARSITY_EPS = 1e-7
"""MEAL's ``_compute_sparsity``: a kernel entry with ``|w| < 1e-7`` counts as zero."""

_OURS = re.compile(r"(actor|critic|common)_(dense|ln)(\d+)|(actor|critic)_head")


class PackNetState(NamedTuple):
    """One seed's PackNet state: ``masks`` (the parameter tree, each leaf bool
    ``(num_tasks, *shape)``: row ``t`` the weights task ``t`` keeps), ``current_task``
    (int32: tasks whose fine-tuning ended) and ``train_mode`` (bool: training, not
    fine-tuning)."""

    masks: Params
    current_task: jax.Array
    train_mode: jax.Array


def meal_layer_name(name: str, multi_head: bool) -> str:
    """MEAL's name (``get_layer_name``) of our layer ``name``: ``actor_dense1`` ->
    ``actor_Dense_1``, ``critic_ln2`` -> ``critic_LayerNorm_2``, ``actor_head`` ->
    ``actor_Dense_multi_head`` (``single_head`` without ``multi_head``)."""
    m = _OURS.fullmatch(name)
    if m is None:
        raise ValueError(f"packnet: no MEAL name for layer {name!r} of the IPPO network")
    if m.group(4):
        return f"{m.group(4)}_Dense_{'multi_head' if multi_head else 'single_head'}"
    kind = "Dense" if m.group(2) == "dense" else "LayerNorm"
    return f"{m.group(1)}_{kind}_{m.group(3)}"


def _allowed(layer: str) -> bool:
    return not any(s in layer for s in FORBIDDEN_LAYER)


def is_prunable(layer: str, variable: str) -> bool:
    """MEAL's ``_param_path_is_prunable`` for a three-level path (``params``, layer,
    variable), on MEAL's layer name: a Dense/Conv layer not of the critic or a multi-head
    head, and not a bias."""
    return "bias" not in variable and any(t in layer for t in PRUNABLE_TYPES) and _allowed(layer)


def is_frozen_after_task0(layer: str, variable: str) -> bool:
    """Joins task 0's mask when its fine-tuning ends (MEAL's
    ``_fix_biases_and_normalization``): the biases of prunable layers and every
    parameter of the allowed norm layers."""
    if any(t in layer for t in NORM_TYPES) and _allowed(layer):
        return True
    return "bias" in variable and any(t in layer for t in PRUNABLE_TYPES) and _allowed(layer)


def _roles(params: Params, multi_head: bool, rule) -> Params:
    """A bool per leaf of ``params`` (``{"params": {layer: {variable: ...}}}``)."""

    def mark(path, _):
        keys = [str(getattr(k, "key", k)) for k in path]
        return bool(rule(meal_layer_name(keys[-2], multi_head), keys[-1]))

    return jax.tree_util.tree_map_with_path(mark, params)


def prunable_layers(params: Params, multi_head: bool) -> dict[str, tuple[int, ...]]:
    """``{our layer name: kernel shape}`` of the prunable kernels."""
    return {
        name: tuple(v["kernel"].shape)
        for name, v in params["params"].items()
        if "kernel" in v and is_prunable(meal_layer_name(name, multi_head), "kernel")
    }


def check_config(cfg: IPPOConfig, template: Params, num_tasks: int, cycles: int = 1) -> None:
    """``ValueError`` (one line) when MEAL's PackNet cannot run ``cfg`` on a sequence of
    ``num_tasks`` tasks played ``cycles`` times with the network ``template`` (its
    parameters or their shapes)."""
    if cycles != 1:
        raise ValueError(
            f"packnet keeps one mask per task of one pass through the sequence; got "
            f"cycles={cycles} (limit 1)"
        )
    if cfg.remedy.enabled:
        raise ValueError(
            f"packnet freezes the weights earlier tasks kept; a plasticity remedy "
            f"({cfg.remedy.remedy!r}) would change them (use packnet without a remedy)"
        )
    layers = prunable_layers(template, cfg.multi_head)
    if not layers:
        raise ValueError("packnet: the network has no prunable layer")
    name, shape = min(layers.items(), key=lambda kv: int(np.prod(kv[1])))
    size = int(np.prod(shape))
    if size < num_tasks:
        raise ValueError(
            f"packnet: layer {name} has {size} prunable weights, fewer than the sequence's "
            f"{num_tasks} tasks: MEAL's prune schedule (each task keeps 1/(tasks left + 1) "
            f"of the free weights) would leave a task none (limit: at least {num_tasks})"
        )


class PackNet(JaxCLMethod):
    """MEAL 057f862's PackNet (module docstring)."""

    finetunes = True
    masks_eval = True

    def __init__(self, cfg: IPPOConfig, network: nn.Module, template: Params, num_tasks: int):
        super().__init__(cfg, network, template, num_tasks)
        check_config(cfg, template, num_tasks)
        self.finetune_steps = int(cfg.packnet_finetune_steps)
        mh = bool(cfg.multi_head)
        self.prunable = _roles(template, mh, is_prunable)
        self.frozen0 = _roles(template, mh, is_frozen_after_task0)
        self.full_in_eval = _roles(template, mh, lambda layer, _: "multi_head" in layer)
        self.layers = prunable_layers(template, mh)
        self.template_shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype),
                                            template)  # fmt: skip

    def check_sequence(self, cycles: int) -> None:
        check_config(self.cfg, self.template_shapes, self.num_tasks, cycles)

    # -- state ---------------------------------------------------------------------------
    def init_state(self, params: Params) -> PackNetState:
        masks = jax.tree.map(lambda p: jnp.zeros((self.num_tasks, *p.shape), bool), params)
        return PackNetState(masks, jnp.zeros((), jnp.int32), jnp.ones((), bool))

    def _before(self, masks: Params, task: jax.Array) -> Params:
        """Union of the masks of tasks ``< task`` (MEAL's ``_combine_masks``)."""
        rows = jnp.arange(self.num_tasks) < task

        def union(m):
            return jnp.any(m & rows.reshape((-1,) + (1,) * (m.ndim - 1)), axis=0)

        return jax.tree.map(union, masks)

    def _row(self, masks: Params, task: jax.Array) -> Params:
        return jax.tree.map(lambda m: m[task], masks)

    def _set_row(self, masks: Params, row: Params, task: jax.Array) -> Params:
        return jax.tree.map(lambda m, r: m.at[task].set(r), masks, row)

    # -- hooks ---------------------------------------------------------------------------
    def transform_grads(self, grads, params, state: PackNetState, task, key):
        """MEAL's ``mask_gradients``: training zeroes the gradients of weights kept by
        earlier tasks; fine-tuning keeps only those of the task's own mask."""

        def train(_):
            held = self._before(state.masks, state.current_task)
            return jax.tree.map(lambda g, m: jnp.where(m, jnp.zeros_like(g), g), grads, held)

        def finetune(_):
            own = self._row(state.masks, state.current_task)
            return jax.tree.map(lambda g, m: jnp.where(m, g, jnp.zeros_like(g)), grads, own)

        return jax.lax.cond(state.train_mode, train, finetune, None), {}

    def end_train(self, params: Params, state: PackNetState) -> tuple[Params, PackNetState]:
        """MEAL's ``on_train_end`` (``_dispatch_prune``) without the optimizer: prune
        (the last task: keep every free weight), then fine-tuning mode."""
        task = state.current_task
        held = self._before(state.masks, task)
        left = self.num_tasks - task - 1
        q = left / (left + 1)  # int32 / int32: float32, as MEAL's prune percentage

        def prune(p):
            def one(w, h, prunable):
                if not prunable:
                    return w, jnp.zeros(w.shape, bool)
                free = jnp.where(h, jnp.nan, jnp.abs(w)).reshape(-1)
                cutoff = jnp.nanquantile(free, q)
                keep = (jnp.abs(w) > cutoff) & ~h
                return jnp.where(h | keep, w, 0), keep

            return self._split(jax.tree.map(one, p, held, self.prunable))

        def keep_rest(p):
            rows = jax.tree.map(lambda h, pr: ~h if pr else jnp.zeros(h.shape, bool), held,
                                self.prunable)  # fmt: skip
            return p, rows

        params, row = jax.lax.cond(task == self.num_tasks - 1, keep_rest, prune, params)
        masks = self._set_row(state.masks, row, task)
        return params, state._replace(masks=masks, train_mode=jnp.zeros((), bool))

    def _split(self, pairs: Params) -> tuple[Params, Params]:
        is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
        first = jax.tree.map(lambda x: x[0], pairs, is_leaf=is_pair)
        second = jax.tree.map(lambda x: x[1], pairs, is_leaf=is_pair)
        return first, second

    def end_task(self, state: PackNetState, params: Params, importance, task) -> PackNetState:
        """MEAL's ``on_finetune_end``: after task 0 its mask takes the biases of the
        prunable layers and the norms; the next task trains."""

        def freeze(masks):
            row = self._row(masks, 0)
            row = jax.tree.map(lambda m, f: jnp.ones_like(m) if f else m, row, self.frozen0)
            return self._set_row(masks, row, 0)

        masks = jax.lax.cond(state.current_task == 0, freeze, lambda m: m, state.masks)
        return PackNetState(masks, state.current_task + 1, jnp.ones((), bool))

    def eval_mask(self, state: PackNetState, task: jax.Array) -> Params:
        """MEAL's ``get_eval_mask``: a trained task (``task < current_task``) the masks
        of tasks ``<= task`` and the multi-head heads; else every parameter."""
        held = self._before(state.masks, task + 1)
        trained = task < state.current_task
        return jax.tree.map(lambda h, full: (h | full) | ~trained, held, self.full_in_eval)

    def eval_params(self, params: Params, state: PackNetState, task: jax.Array) -> Params:
        """The parameters task ``task`` is evaluated with (MEAL's ``apply_eval_mask``)."""
        mask = self.eval_mask(state, jnp.asarray(task, jnp.int32))
        return jax.tree.map(lambda p, m: jnp.where(m, p, 0), params, mask)

    # -- host-side report ----------------------------------------------------------------
    def task_rows(self, state: PackNetState, params: Params) -> list[dict[str, Any]]:
        """``packnet.csv`` rows of one seed (numpy arrays, no seed axis): per prunable
        layer and for ``all`` of them, ``weights`` (prunable weights), ``kept`` (weights
        some task's mask holds), ``capacity_left`` (``1 - kept / weights``) and
        ``sparsity`` (share of kernel entries with ``|w| < 1e-7``; ``all``: over every
        kernel, critic and heads included, MEAL's ``_compute_sparsity``)."""
        rows, total, kept_total = [], 0, 0
        zeros, entries = 0, 0
        for name, layer in params["params"].items():
            if "kernel" not in layer:
                continue
            kernel = np.asarray(layer["kernel"])
            z = int((np.abs(kernel) < SPARSITY_EPS).sum())
            zeros, entries = zeros + z, entries + kernel.size
            if name not in self.layers:
                continue
            kept = int(np.asarray(state.masks["params"][name]["kernel"]).any(0).sum())
            total, kept_total = total + kernel.size, kept_total + kept
            rows.append(self._row_of(name, kernel.size, kept, z / kernel.size))
        rows.append(self._row_of("all", total, kept_total, zeros / max(entries, 1)))
        return rows

    @staticmethod
    def _row_of(layer: str, weights: int, kept: int, sparsity: float) -> dict[str, Any]:
        return {
            "layer": layer,
            "weights": int(weights),
            "kept": int(kept),
            "capacity_left": 1.0 - kept / weights if weights else 0.0,
            "sparsity": float(sparsity),
        }
