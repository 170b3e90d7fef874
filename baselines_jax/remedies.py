"""Plasticity remedies (issue 54) for ``ppo-jax``: pure, jittable functions on the flax
parameter tree of :class:`~baselines_jax.network.ActorCritic` (``{"params": {...}}``, one
seed's) and on the optax state of :func:`~baselines_jax.ppo.make_optimizer`. ``JaxIPPO``
calls them at the cadences of :class:`cl_suites.remedies.RemedyConfig`; the torch learners
run the same remedies through ``baselines_sb3.remedies``.

Units. A *unit* is one output ``j`` of a trunk ``Dense`` (``actor_dense{i}``,
``critic_dense{i}``, ``common_dense{i}``; :func:`layers_of`). Its activation outputs
``h`` are read after the activation and before the LayerNorm (as the plasticity
diagnostics read them): one per unit, two with CReLU (``relu(x)`` at ``j``, ``relu(-x)``
at ``width + j``). Its *incoming* weights are kernel column ``j`` and bias ``j`` (flax
kernels are ``(in, out)``; torch's ``weight (out, in)`` holds them in row ``j``); its
*outgoing* weights are the rows of its outputs in the kernels of the layers that read
them: the next trunk ``Dense``, after a trunk's last layer its head (actor trunk ->
``actor_head``, critic -> ``critic_head``, a shared backbone -> both).

Random draws enter as explicit arrays wherever they can (``uniforms``: ``U[0, 1)`` shaped
like the flax leaf they replace, a new weight being ``u * (hi - lo) + lo`` as torch's
``uniform_(lo, hi)`` computes it; ``fresh``: a whole new initialisation), so torch and JAX
can be given the same draws; :func:`draw_uniforms` makes them from a key.

Adam. ``make_optimizer``'s state is ``(EmptyState, (ScaleByAdamState(count, mu, nu),
ScaleByScheduleState | EmptyState))``; :func:`zero_moments` zeroes ``mu`` and ``nu`` at
given entries of every ``ScaleByAdamState`` in a state. optax keeps ONE step count per
tree: it stays, so the bias correction of a zeroed entry's next steps is the tree's
(``(1 - b1) / sqrt(1 - b2) ~ 3.2`` times the step of a fresh Adam at its first step, then
decaying), as torch's Adam with its per-tensor ``step`` (Plasticine, ReDo); GnT's
``AdamGnT`` restarts a per-entry count instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from baselines_jax.network import ActorCritic, activate

Params = Any
Masks = dict[str, jax.Array]
"""layer name -> ``(width,)`` bool: the units a remedy acts on."""

HEADS: tuple[str, ...] = ("actor_head", "critic_head")


@dataclass(frozen=True)
class Layer:
    """A trunk ``Dense`` -> activation layer: its module ``name``, ``width`` (units) and the
    modules that read its activation (``consumers``, whose kernel rows are its outgoing
    weights)."""

    name: str
    width: int
    consumers: tuple[str, ...]


def layers_of(network: ActorCritic) -> tuple[Layer, ...]:
    """Every trunk layer of ``network`` in forward order, trunk by trunk (actor, then critic;
    or the shared ``common`` trunk)."""
    trunks = ("common",) if network.shared_backbone else ("actor", "critic")
    sizes = tuple(network.hidden_sizes)
    out = []
    for trunk in trunks:
        for i, width in enumerate(sizes, start=1):
            if i < len(sizes):
                consumers: tuple[str, ...] = (f"{trunk}_dense{i + 1}",)
            elif trunk == "common":
                consumers = HEADS
            else:
                consumers = (f"{trunk}_head",)
            out.append(Layer(f"{trunk}_dense{i}", int(width), consumers))
    return tuple(out)


def outputs_per_unit(activation: str) -> int:
    """Activation outputs of one unit: 2 for CReLU, else 1."""
    return 2 if activation == "crelu" else 1


def _rows(mask: jax.Array, per_unit: int) -> jax.Array:
    """A unit mask ``(W,)`` as a mask of the activation's outputs ``(per_unit * W,)``."""
    return jnp.tile(mask, per_unit)


def trunk_activations(
    network: ActorCritic, params: Params, x: jax.Array, task: jax.Array | int
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """``(logits, values, {layer: h (B, per_unit * W)})``: the network's outputs on ``x``
    and every trunk layer's activation outputs (flax's ``capture_intermediates``, as
    ``baselines_jax.plasticity`` reads them)."""
    (logits, values), state = network.apply(
        params, x, task, capture_intermediates=True, mutable=["intermediates"]
    )
    inter = state["intermediates"]
    acts = {
        layer.name: activate(inter[layer.name]["__call__"][0], network.activation)
        for layer in layers_of(network)
    }
    return logits, values, acts


# -- Adam moments ------------------------------------------------------------------------
def _set_moments(opt_state: Any, fn: Any) -> Any:
    """``opt_state`` with ``mu`` and ``nu`` of every ``ScaleByAdamState`` mapped by ``fn``."""

    def visit(node: Any) -> Any:
        if isinstance(node, optax.ScaleByAdamState):
            return node._replace(mu=fn(node.mu), nu=fn(node.nu))
        return node

    return jax.tree.map(visit, opt_state, is_leaf=lambda n: isinstance(n, optax.ScaleByAdamState))


def zero_moments(opt_state: Any, touched: Params) -> Any:
    """``opt_state`` with Adam's ``mu`` and ``nu`` zero where ``touched`` (a bool tree shaped
    like the parameters) is True; the step count stays (module docstring)."""
    return _set_moments(
        opt_state,
        lambda m: jax.tree.map(lambda v, t: jnp.where(t, jnp.zeros_like(v), v), m, touched),
    )


def _untouched(params: Params) -> Params:
    return jax.tree.map(lambda p: jnp.zeros(p.shape, bool), params)


def _copy(params: Params) -> dict[str, dict[str, dict[str, jax.Array]]]:
    """A two-level copy of ``{"params": {module: {leaf: array}}}`` to rebuild leaves in."""
    return {"params": {m: dict(leaves) for m, leaves in params["params"].items()}}


# -- random draws ------------------------------------------------------------------------
def draw_uniforms(key: jax.Array, params: Params, layers: tuple[Layer, ...]) -> dict:
    """``{layer: (kernel_u (in, out), bias_u (out,))}``, ``U[0, 1)`` float32; layer ``i``
    (in ``layers`` order) draws from ``split(fold_in(key, i))``: the kernel from the first
    key, the bias from the second."""
    out = {}
    for i, layer in enumerate(layers):
        k_kernel, k_bias = jax.random.split(jax.random.fold_in(key, i))
        module = params["params"][layer.name]
        out[layer.name] = (
            jax.random.uniform(k_kernel, module["kernel"].shape, jnp.float32),
            jax.random.uniform(k_bias, module["bias"].shape, jnp.float32),
        )
    return out


def _uniform(u: jax.Array, bound: float) -> jax.Array:
    """torch's ``uniform_(-bound, bound)`` from ``u ~ U[0, 1)``: ``u * (hi - lo) + lo``."""
    lo, hi = jnp.float32(-bound), jnp.float32(bound)
    return u * (hi - lo) + lo


# -- ReDo --------------------------------------------------------------------------------
REDO_GAIN = math.sqrt(2.0)
"""The gain of Plasticine's ReDo re-draw: ``calculate_gain(nonlinearity="relu",
param=np.sqrt(5))`` (``plasticine/ppo_continual_procgen_base.py:332``), and torch ignores
``param`` for ``relu``: ``sqrt(2)``, not the ``sqrt(2 / (1 + 5))`` of torch's default
``Linear`` init that the name suggests. The kernel bound is ``sqrt(3) * gain / sqrt(fan_in)
= sqrt(6 / fan_in)``."""


def redo_bounds(fan_in: int) -> tuple[float, float]:
    """``(kernel bound, bias bound)`` of a ReDo re-draw of a unit of a layer with ``fan_in``
    inputs: ``sqrt(3) * (gain / sqrt(fan_in))`` (:data:`REDO_GAIN`, computed in that order
    as Plasticine does) and ``1 / sqrt(fan_in)``."""
    return math.sqrt(3.0) * (REDO_GAIN / math.sqrt(fan_in)), 1 / math.sqrt(fan_in)


def unit_scores(acts: Mapping[str, jax.Array], per_unit: int = 1) -> dict[str, jax.Array]:
    """ReDo's normalised scores ``{layer: (W,)}``: each unit's mean ``|h|`` over the batch
    (and over CReLU's two outputs), divided by its layer's mean score ``+ 1e-9``
    (Plasticine's ``_get_redo_masks``)."""
    out = {}
    for name, h in acts.items():
        h = jnp.abs(h.reshape(-1, h.shape[-1]))
        score = h.reshape(h.shape[0], per_unit, -1).mean((0, 1))
        out[name] = score / (score.mean() + 1e-9)
    return out


def dormant_masks(acts: Mapping[str, jax.Array], tau: float, per_unit: int = 1) -> Masks:
    """ReDo's dormant units ``{layer: (W,) bool}``: normalised score (:func:`unit_scores`)
    ``<= tau``."""
    return {k: s <= tau for k, s in unit_scores(acts, per_unit).items()}


def recycle(
    params: Params,
    masks: Masks,
    uniforms: Mapping[str, tuple[jax.Array, jax.Array]],
    layers: tuple[Layer, ...],
    per_unit: int = 1,
) -> tuple[Params, Params]:
    """ReDo's recycling of the units in ``masks``: ``(params, touched)``.

    Layer by layer in ``layers`` order (Plasticine's ``_reset_dormant_neurons``): the
    incoming kernel column and bias of each masked unit re-drawn from ``uniforms``
    (:func:`redo_bounds`; ``value = u * (hi - lo) + lo``), then its outgoing rows in every
    consumer zeroed. A later
    layer's re-draw overwrites the zeros an earlier layer left in its kernel (the entries
    joining two recycled units are new draws). ``touched``: the entries changed (their
    Adam moments are what ReDo zeroes)."""
    new, touched = _copy(params), _copy(_untouched(params))
    for layer in layers:
        mask = masks[layer.name]
        module = new["params"][layer.name]
        kernel_u, bias_u = uniforms[layer.name]
        k_bound, b_bound = redo_bounds(module["kernel"].shape[0])
        module["kernel"] = jnp.where(mask[None, :], _uniform(kernel_u, k_bound), module["kernel"])
        module["bias"] = jnp.where(mask, _uniform(bias_u, b_bound), module["bias"])
        t = touched["params"][layer.name]
        t["kernel"] = t["kernel"] | mask[None, :]
        t["bias"] = t["bias"] | mask
        rows = _rows(mask, per_unit)[:, None]
        for consumer in layer.consumers:
            kernel = new["params"][consumer]["kernel"]
            new["params"][consumer]["kernel"] = jnp.where(rows, jnp.zeros_like(kernel), kernel)
            tc = touched["params"][consumer]
            tc["kernel"] = tc["kernel"] | rows
    return new, touched


def redo(
    network: ActorCritic,
    params: Params,
    opt_state: Any,
    x: jax.Array,
    task: jax.Array | int,
    key: jax.Array,
    tau: float,
    reset_moments: bool,
) -> tuple[Params, Any, dict[str, jax.Array]]:
    """One ReDo step on the batch ``x (B, D)`` of task ``task``: dormant units
    (:func:`dormant_masks`) recycled (:func:`recycle`, draws :func:`draw_uniforms` of
    ``key``), their Adam moments zeroed with ``reset_moments``. Returns ``(params,
    opt_state, {layer: units recycled})``."""
    layers = layers_of(network)
    per_unit = outputs_per_unit(network.activation)
    _, _, acts = trunk_activations(network, params, x, task)
    masks = dormant_masks(acts, tau, per_unit)
    params, touched = recycle(params, masks, draw_uniforms(key, params, layers), layers, per_unit)
    if reset_moments:
        opt_state = zero_moments(opt_state, touched)
    return params, opt_state, {k: m.sum().astype(jnp.int32) for k, m in masks.items()}


# -- shrink-and-perturb ------------------------------------------------------------------
def shrink_perturb(params: Params, noise: Params, shrink: float, perturb: float) -> Params:
    """``shrink * theta + perturb * noise`` leaf by leaf (``noise``: the initial parameters,
    or a fresh initialisation). Every leaf, LayerNorms and heads included (Plasticine's
    ``plasticine_shrink_and_perturb`` shrinks every parameter); Adam's state untouched."""
    s, e = jnp.float32(shrink), jnp.float32(perturb)
    return jax.tree.map(lambda p, n: p * s + e * n, params, noise)


# -- reset -------------------------------------------------------------------------------
def _head_columns(width: int, heads: int, task: jax.Array | int, multi_head: bool) -> jax.Array:
    """``(width,)`` bool: the head outputs of ``task``'s slice (all of them, single head)."""
    if not multi_head:
        return jnp.ones(width, bool)
    per_task = width // heads
    return jnp.arange(width) // per_task == jnp.asarray(task, jnp.int32)


def reset(
    params: Params,
    fresh: Params,
    which: str,
    task: jax.Array | int,
    num_tasks: int,
    multi_head: bool,
) -> tuple[Params, Params]:
    """Re-initialisation from ``fresh`` (a new ``ActorCritic.init``, the network's own
    initialisers): ``which="heads"``: the heads; ``"all"``: every leaf. A multi-head
    network's heads keep the other tasks' slices: only ``task``'s columns (and bias
    entries) are reset. Returns ``(params, touched)``."""
    new, touched = _copy(params), _copy(_untouched(params))
    for module, leaves in params["params"].items():
        is_head = module in HEADS
        if which == "heads" and not is_head:
            continue
        for leaf, value in leaves.items():
            if is_head:
                cols = _head_columns(value.shape[-1], num_tasks, task, multi_head)
                mask = jnp.broadcast_to(cols, value.shape)
            else:
                mask = jnp.ones(value.shape, bool)
            new["params"][module][leaf] = jnp.where(mask, fresh["params"][module][leaf], value)
            touched["params"][module][leaf] = mask
    return new, touched


# -- plasticity injection ----------------------------------------------------------------
def inject(opt_state: Any) -> Any:
    """Plasticity injection on the linear heads: their Adam ``mu``/``nu`` zeroed.

    Plasticine's ``Injector`` makes a head ``original(x) + new_a(x) - new_b(x).detach()``
    with ``new_b = copy(new_a)`` and the original frozen (the paper): the output is
    unchanged, and ``new_a`` trains with a new optimizer state. The sum of linear maps is
    one linear map whose gradient is ``new_a``'s: that is the head itself trained on from
    fresh moments. Here the step count is the tree's (module docstring)."""

    def heads_only(tree: Any) -> Any:
        return {
            "params": {
                m: jax.tree.map(jnp.zeros_like, v) if m in HEADS else v
                for m, v in tree["params"].items()
            }
        }

    return _set_moments(opt_state, heads_only)


# -- continual backprop ------------------------------------------------------------------
class CBPState(NamedTuple):
    """Continual backprop's running statistics, per trunk layer (``lop/algos/gnt.py``
    ``GnT``): ``util (W,)`` running contribution utility, ``mean_act (per_unit * W,)``
    running mean activation, ``age (W,)`` int32 optimizer steps since the unit was (re)made,
    ``accumulated ()`` the fractional replacements carried to the next step (with
    ``accumulate=False`` a sum GnT keeps and never reads)."""

    util: dict[str, jax.Array]
    mean_act: dict[str, jax.Array]
    age: dict[str, jax.Array]
    accumulated: dict[str, jax.Array]


def init_cbp(layers: tuple[Layer, ...], per_unit: int = 1) -> CBPState:
    """All zero (``GnT.__init__``)."""
    return CBPState(
        util={ly.name: jnp.zeros(ly.width, jnp.float32) for ly in layers},
        mean_act={ly.name: jnp.zeros(per_unit * ly.width, jnp.float32) for ly in layers},
        age={ly.name: jnp.zeros(ly.width, jnp.int32) for ly in layers},
        accumulated={ly.name: jnp.zeros((), jnp.float32) for ly in layers},
    )


ACTIVATION_GAINS: dict[str, float] = {
    "relu": math.sqrt(2.0),
    "crelu": math.sqrt(2.0),
    "tanh": 5 / 3,
}
"""``torch.nn.init.calculate_gain`` of each activation (CReLU: ReLU's)."""

CBP_INITS: tuple[str, ...] = ("lecun", "kaiming", "default")
"""GnT's bounds of a new unit's incoming weights (``compute_bounds``), as
``baselines_sb3.remedies.cbp.INITS``."""


def cbp_bound(fan_in: int, activation: str, init: str = "lecun") -> float:
    """GnT's bound of a new unit's incoming weights: ``sqrt(3 / fan_in)`` (``lecun``: the
    RL code's, ``lop/rl/run_ppo.py`` ``cfg.setdefault('init', 'lecun')``), ``gain *
    sqrt(3 / fan_in)`` (``kaiming``: GnT's own default, ``gain = calculate_gain(act)``) or
    ``sqrt(1 / fan_in)`` (``default``)."""
    if init == "lecun":
        return math.sqrt(3 / fan_in)
    if init == "kaiming":
        return ACTIVATION_GAINS[activation] * math.sqrt(3 / fan_in)
    if init == "default":
        return math.sqrt(1 / fan_in)
    raise ValueError(f"unknown init {init!r}; valid: {', '.join(CBP_INITS)}")


def _out_magnitude(params: Params, layer: Layer, per_unit: int) -> jax.Array:
    """``(W,)``: each unit's mean ``|w|`` over its outgoing weights in every consumer, every
    output and (CReLU) both rows (GnT: ``next_layer.weight.abs().mean(dim=0)``)."""
    kernels = [params["params"][c]["kernel"] for c in layer.consumers]
    total = sum(k.shape[1] for k in kernels)
    per_row = sum(jnp.abs(k).sum(1) for k in kernels)  # (per_unit * W,)
    return per_row.reshape(per_unit, -1).sum(0) / (per_unit * total)


def draw_counts(key: jax.Array, layers: tuple[Layer, ...]) -> dict[str, jax.Array]:
    """``{layer: U[0, 1) ()}``: the draws that round a fractional replacement count
    (``accumulate=False``), layer ``i`` from ``fold_in(key, i)``."""
    return {ly.name: jax.random.uniform(jax.random.fold_in(key, i)) for i, ly in enumerate(layers)}


def cbp_step(
    params: Params,
    opt_state: Any,
    state: CBPState,
    acts: Mapping[str, jax.Array],
    uniforms: Mapping[str, jax.Array],
    layers: tuple[Layer, ...],
    activation: str,
    replacement_rate: float,
    maturity: int,
    decay: float,
    *,
    count_uniforms: Mapping[str, jax.Array] | None = None,
    init: str = "lecun",
    accumulate: bool = False,
    correct_bias: bool = False,
    reset_moments: bool = True,
) -> tuple[Params, Any, CBPState, dict[str, jax.Array]]:
    """One generate-and-test step after an optimizer step (``GnT.gen_and_test``), with the
    options and defaults of ``baselines_sb3.remedies.ContinualBackprop``.

    Args:
        params, opt_state: after the optimizer step.
        acts: ``{layer: h (B, per_unit * W)}`` of the minibatch's forward pass (before the
            step), as ``lop/algos/rl/ppo.py`` passes ``get_activations()``.
        uniforms: ``{layer: U[0, 1) (in, out)}``: the new incoming kernels' draws.
        count_uniforms: ``{layer: U[0, 1) ()}``: with ``accumulate=False``, a fraction
            ``c < 1`` of a unit is one unit when its draw is ``<= c`` (GnT's ``torch.rand(1)``;
            required then).
        init: the new weights' bound (:func:`cbp_bound`; the RL code's ``lecun``).
        accumulate: carry fractional counts over (``True``) or draw them (``False``: GnT's
            default, which the RL code uses).
        correct_bias: add the replaced units' bias-corrected mean activation times their
            outgoing weights to the consumers' biases (``False``: what ``gnt.py`` does in
            effect: it zeroes ``mean_feature_act`` before reading it).
        reset_moments: zero Adam's ``mu``/``nu`` of the replaced weights (the incoming
            column and bias, the outgoing rows; GnT with ``AdamGnT``; the RL code steps
            torch's Adam and leaves it).

    Test (every layer, with the stepped weights): ``age += 1``, ``bc = 1 - decay^age``;
    ``mean_act = decay mean_act + (1 - decay) mean(h)`` per output; ``util = decay util +
    (1 - decay) mean|w_out| * mean|h|`` (CReLU: both means over the unit's two outputs);
    eligible: ``age > maturity``; ``c = replacement_rate * n_eligible`` (float32), ``n`` =
    ``floor(accumulated + c)`` carried (``accumulate``) or ``floor(c)``, a fraction below
    1 drawn; the ``n`` eligible units of lowest ``util / bc`` (ties: the lower index)
    replaced, their ``util`` and ``mean_act`` zeroed.

    Generate (layer by layer in ``layers`` order): incoming kernel column ``U(-bound,
    bound)`` from ``uniforms`` (``u * (hi - lo) + lo``), incoming bias 0; with
    ``correct_bias`` each consumer's bias ``+=`` the outgoing weights times the
    bias-corrected mean activation (read before it was zeroed); the outgoing weights 0;
    ``age = 0``.

    Returns ``(params, opt_state, state, {layer: units replaced})``.
    """
    if not accumulate and count_uniforms is None:
        raise ValueError("cbp_step(accumulate=False) needs count_uniforms")
    per_unit = outputs_per_unit(activation)
    d = jnp.float32(decay)
    util, mean_act, age, acc = (dict(x) for x in state)
    replace, corrected = {}, {}
    for layer in layers:
        name = layer.name
        h = acts[name].reshape(-1, acts[name].shape[-1])
        a = age[name] + 1
        bc = 1.0 - d ** a.astype(jnp.float32)
        m = mean_act[name] * d + (1.0 - d) * h.mean(0)
        unit_abs = jnp.abs(h).mean(0).reshape(per_unit, -1).mean(0)
        u = util[name] * d + (1.0 - d) * (_out_magnitude(params, layer, per_unit) * unit_abs)
        eligible = a > maturity
        count = jnp.float32(replacement_rate) * eligible.sum().astype(jnp.float32)
        total = acc[name] + count
        if accumulate:
            n = jnp.floor(total)
            acc[name] = total - n
        else:
            drawn = jnp.where(count_uniforms[name] <= count, 1.0, 0.0)
            n = jnp.where(count < 1, drawn, jnp.floor(count))
            acc[name] = total  # GnT adds to it and never reads it
        order = jnp.argsort(jnp.where(eligible, u / bc, jnp.inf), stable=True)
        rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0]))
        chosen = eligible & (rank < n.astype(jnp.int32))
        replace[name] = chosen
        corrected[name] = m / jnp.tile(bc, per_unit)  # read before it is zeroed
        util[name] = jnp.where(chosen, 0.0, u)
        mean_act[name] = jnp.where(_rows(chosen, per_unit), 0.0, m)
        age[name] = a
    new, touched = _copy(params), _copy(_untouched(params))
    for layer in layers:
        name, chosen = layer.name, replace[layer.name]
        module = new["params"][name]
        bound = cbp_bound(module["kernel"].shape[0], activation, init)
        fresh = _uniform(uniforms[name], bound)
        module["kernel"] = jnp.where(chosen[None, :], fresh, module["kernel"])
        module["bias"] = jnp.where(chosen, 0.0, module["bias"])
        t = touched["params"][name]
        t["kernel"], t["bias"] = t["kernel"] | chosen[None, :], t["bias"] | chosen
        rows = _rows(chosen, per_unit)
        for consumer in layer.consumers:
            c = new["params"][consumer]
            if correct_bias:
                shift = jnp.where(rows, corrected[name], 0.0)
                c["bias"] = c["bias"] + (c["kernel"] * shift[:, None]).sum(0)
            c["kernel"] = jnp.where(rows[:, None], 0.0, c["kernel"])
            tc = touched["params"][consumer]
            tc["kernel"] = tc["kernel"] | rows[:, None]
        age[name] = jnp.where(chosen, 0, age[name])
    if reset_moments:
        opt_state = zero_moments(opt_state, touched)
    counts = {k: v.sum().astype(jnp.int32) for k, v in replace.items()}
    return new, opt_state, CBPState(util, mean_act, age, acc), counts


# -- the remedy's state in a TrainState --------------------------------------------------
class RemedyState(NamedTuple):
    """One seed's remedy state: ``initial`` (shrink-and-perturb's ``theta_0``, the initial
    parameters; ``None`` otherwise) and ``cbp`` (:class:`CBPState`; ``None`` otherwise).
    Leafless for the other remedies and for none: a run without a remedy has the
    checkpoint it had."""

    initial: Any = None
    cbp: Any = None
