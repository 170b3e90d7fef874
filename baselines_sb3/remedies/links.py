"""Which units of a network can be recycled, and the unit bookkeeping every remedy shares.

A :class:`Link` is one recyclable layer: the output units of ``source`` go through
``activation`` (and only through it) into the inputs of each of ``targets``. ReDo
(:mod:`.redo`) and continual backprop (:mod:`.cbp`) re-initialise a unit's incoming
weights (a row of ``source``) and zero its outgoing weights (the columns of every target
that read it), so a unit may only be linked where nothing else reads it: a unit that also
feeds a residual stream is left out.

:func:`policy_links` finds the links of the package's SB3 policies; :func:`sequential_links`
those of an ``nn.Sequential``; an explicit list of :class:`Link` s (a reference network's
own layout) is accepted by every function that takes a policy.

Shapes: a source has ``n`` units (``out_features`` of a Linear, ``out_channels`` of a
Conv2d); its activation gives ``k * n`` (``k = width_factor(activation)``: 1, or 2 for
CReLU, whose output unit ``h * n + j`` is unit ``j``'s half ``h``); a Linear target reads
unit ``j`` at columns ``(h * n + j) * repeat + s`` (``s < repeat``: the spatial positions
of a conv source flattened channels-first), a Conv2d target at input channels ``h * n + j``.
Columns of a Linear target past ``k * n * repeat`` are other inputs (the task one-hot and
previous action/reward the policy appends to the features) and are never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch as th
from stable_baselines3.common.torch_layers import NatureCNN
from torch import nn

from baselines_sb3.networks import (
    A2CPPOCNN,
    CoraResidualCNN,
    ImpalaDeepCNN,
    _CoraResidualBlock,
    _ResidualBlock,
    width_factor,
)
from baselines_sb3.plasticity import ACTIVATION_KINDS

Layer = nn.Linear | nn.Conv2d
PASS_THROUGH: tuple[type[nn.Module], ...] = (
    nn.Flatten,
    nn.MaxPool2d,
    nn.LayerNorm,
    nn.Dropout,
    nn.Identity,
)
"""Modules a link may cross between its source and its target: they act on each unit (or
channel) alone, or only reorder them (``Flatten``). ``LayerNorm`` mixes a layer's units
through its mean and variance: behind one (MEAL's trunks: Linear -> ReLU -> LayerNorm), a
recycled unit changes how its layer's other units are normalised, so recycling is not
function-preserving there; the LayerNorm's own scale and shift are kept."""

RESIDUAL_BLOCKS: dict[type[nn.Module], tuple[str, str]] = {
    _ResidualBlock: ("conv0", "conv1"),
    _CoraResidualBlock: ("conv0", "conv1"),
}
"""Residual blocks of :mod:`baselines_sb3.networks` and the one safe link inside each:
``conv0 -> relu -> conv1`` (``conv0``'s units reach nothing else). The block's input and
output are a residual stream (``x + conv1(...)``): the convolution that writes the stream
(a stack's first conv, every ``conv1``) and the ReLU that reads it are not linked. Their
ReLU is functional (``th.relu``), so these links hook ``conv0``'s output and apply a ReLU."""

CNN_EXTRACTORS: tuple[type[nn.Module], ...] = (NatureCNN, A2CPPOCNN, ImpalaDeepCNN, CoraResidualCNN)
"""Feature extractors computed as ``linear(cnn(x))`` (``ImpalaShallowCNN`` is a NatureCNN):
their links run along ``cnn`` then ``linear``."""


@dataclass(frozen=True, eq=False)
class Link:
    """One recyclable layer (see the module docstring).

    Attributes:
        name: the source's module name (the key of masks, counts and features).
        source: the layer whose output units are recycled.
        activation: the module whose output scores them (ReDo) and gives the features
            (continual backprop).
        targets: the layers reading those units (two for a features extractor shared by
            actor and critic: both are zeroed).
        forward: which forward pass computes it (``"main"``).
        repeat: target columns per unit of each target (a conv source flattened into a
            Linear: ``H * W``; else 1).
        hook: ``"activation"``: ``activation`` is a module of the network and its output is
            read; ``"source"``: the network applies it functionally, so ``source``'s output
            is read and ``activation`` applied to it.
    """

    name: str
    source: Layer
    activation: nn.Module
    targets: tuple[Layer, ...]
    forward: str = "main"
    repeat: int = 1
    hook: str = "activation"

    def __post_init__(self) -> None:
        if not isinstance(self.source, Layer):
            raise ValueError(f"link {self.name!r}: source must be a Linear or Conv2d")
        if self.hook not in ("activation", "source"):
            raise ValueError(f"link {self.name!r}: hook must be 'activation' or 'source'")
        width = self.width * self.units
        for t in self.targets:
            if isinstance(t, nn.Conv2d):
                ok = self.repeat == 1 and t.in_channels == width
            else:
                ok = isinstance(t, nn.Linear) and t.in_features >= width * self.repeat
            if not ok:
                raise ValueError(
                    f"link {self.name!r}: target {type(t).__name__} does not read "
                    f"{width} units x {self.repeat} positions"
                )

    @property
    def units(self) -> int:
        """``n``, the source's output units."""
        s = self.source
        return s.out_features if isinstance(s, nn.Linear) else s.out_channels

    @property
    def width(self) -> int:
        """``k``, the activation's outputs per unit."""
        return width_factor(self.activation)


def is_activation(module: nn.Module) -> bool:
    """Whether the diagnostics read ``module`` as an activation (``ACTIVATION_KINDS``)."""
    return type(module) in ACTIVATION_KINDS


def _chain(
    named: Sequence[tuple[str, nn.Module]], forward: str = "main"
) -> tuple[list[Link], tuple[str, Layer, nn.Module] | None]:
    """The links along ``named`` (modules applied one after the other) and the last
    ``(name, source, activation)`` whose target lies outside (``None``: none)."""
    links: list[Link] = []
    pending: tuple[str, Layer, nn.Module | None] | None = None
    for name, m in named:
        if isinstance(m, Layer):
            if pending is not None and pending[2] is not None:
                src_name, src, act = pending
                repeat = 1
                if isinstance(src, nn.Conv2d) and isinstance(m, nn.Linear):
                    repeat = m.in_features // (width_factor(act) * src.out_channels)
                links.append(Link(src_name, src, act, (m,), forward, repeat))
            pending = (name, m, None)
        elif is_activation(m):
            if pending is not None and pending[2] is None:
                pending = (pending[0], pending[1], m)
            else:  # an activation of no linked source (a residual stream): nothing to link
                pending = None
        elif isinstance(m, PASS_THROUGH):
            continue
        else:
            pending = None  # a block: whatever went in may go elsewhere
            pair = RESIDUAL_BLOCKS.get(type(m))
            if pair is not None:
                src, dst = (getattr(m, p) for p in pair)
                links.append(
                    Link(f"{name}.{pair[0]}", src, nn.ReLU(), (dst,), forward, hook="source")
                )
    if pending is None or pending[2] is None:
        return links, None
    return links, (pending[0], pending[1], pending[2])


def _children(module: nn.Module, prefix: str) -> list[tuple[str, nn.Module]]:
    return [(f"{prefix}.{n}", m) for n, m in module.named_children()]


def _first_layer(trunk: nn.Module | None, head: nn.Module) -> nn.Module:
    """The layer reading a trunk's input: its first Linear, or the head for an empty trunk."""
    if trunk is not None:
        for m in trunk.modules():
            if isinstance(m, Layer):
                return m
    return head


def sequential_links(net: nn.Sequential, prefix: str = "", forward: str = "main") -> list[Link]:
    """The links of an ``nn.Sequential`` of layers, activations and pass-through modules
    (GnT's ``Linear, ReLU, Linear, ReLU, Linear`` layout; nested Sequentials are not
    entered). Names are the Sequential's indices (with ``prefix.``)."""
    dot = f"{prefix}." if prefix else ""
    return _chain([(f"{dot}{n}", m) for n, m in net.named_children()], forward)[0]


def policy_links(policy: nn.Module | Sequence[Link]) -> list[Link]:
    """The recyclable layers of a policy, in forward order.

    Covers SB3 ``ActorCriticPolicy`` s (the package's ``ContinualPolicy``):

    * the CNN features extractors of :mod:`baselines_sb3.networks` (``NatureCNN`` /
      ``ImpalaShallowCNN``, ``A2CPPOCNN``: every conv; ``ImpalaDeepCNN`` and
      ``CoraResidualCNN``: ``conv0`` of each residual block only, see
      :data:`RESIDUAL_BLOCKS`) and their final Linear, whose targets are the first layer
      of both trunks (or both heads, without trunks);
    * each trunk (``MlpExtractor``'s or MEAL's :class:`~baselines_sb3.networks.SeparateTrunks`:
      Linear -> activation [-> LayerNorm]), its last layer's target the head
      (``action_net`` / ``value_net``, all task slices of a multi-head policy).

    Not covered: ``FlattenExtractor`` (no layer), other feature extractors, P&C's knowledge
    base and adapters (remedies do not compose with P&C). An ``nn.Sequential`` gives
    :func:`sequential_links`; a list of links is returned as it is.

    Raises:
        ValueError: no recyclable layer (one line naming the policy class).
    """
    if not isinstance(policy, nn.Module):
        return list(policy)
    if isinstance(policy, nn.Sequential):
        links = sequential_links(policy)
    elif all(hasattr(policy, a) for a in ("mlp_extractor", "action_net", "value_net")):
        links = _actor_critic_links(policy)
    else:
        links = []
    if not links:
        raise ValueError(
            f"{type(policy).__name__} has no recyclable layer (a Linear or Conv2d whose "
            "units reach the next layer through an activation only)"
        )
    return links


def _actor_critic_links(policy: nn.Module) -> list[Link]:
    mlp = policy.mlp_extractor
    pi_trunk = getattr(mlp, "policy_net", None)
    vf_trunk = getattr(mlp, "value_net", None)
    pi_first = _first_layer(pi_trunk, policy.action_net)
    vf_first = _first_layer(vf_trunk, policy.value_net)
    links: list[Link] = []
    shared = getattr(policy, "share_features_extractor", True)
    extractors = (
        [("features_extractor", policy.features_extractor, (pi_first, vf_first))]
        if shared
        else [
            ("pi_features_extractor", policy.pi_features_extractor, (pi_first,)),
            ("vf_features_extractor", policy.vf_features_extractor, (vf_first,)),
        ]
    )
    for prefix, extractor, consumers in extractors:
        if not isinstance(extractor, CNN_EXTRACTORS):
            continue
        named = _children(extractor.cnn, f"{prefix}.cnn") + _children(
            extractor.linear, f"{prefix}.linear"
        )
        found, last = _chain(named)
        links += found
        if last is not None:
            targets = tuple(t for t in consumers if isinstance(t, Layer))
            if targets:
                links.append(Link(last[0], last[1], last[2], targets))
    for prefix, trunk, head in (
        ("mlp_extractor.policy_net", pi_trunk, policy.action_net),
        ("mlp_extractor.value_net", vf_trunk, policy.value_net),
    ):
        if trunk is None:
            continue
        found, last = _chain(_children(trunk, prefix))
        links += found
        if last is not None and isinstance(head, Layer):
            links.append(Link(last[0], last[1], last[2], (head,)))
    return links


# -- unit views ---------------------------------------------------------------------------
def unit_axis(x: th.Tensor) -> int:
    """The unit axis of an activation: 1 for ``(B, C, H, W)``, else the last."""
    return 1 if x.ndim == 4 else x.ndim - 1


def unit_mean(x: th.Tensor, width: int = 1) -> th.Tensor:
    """``(n,)``: the mean of ``x`` over every axis but the unit axis, and over the ``width``
    halves of a widening activation (CReLU: ``x`` has ``width * n`` units)."""
    axis = unit_axis(x)
    if width == 1:
        others = tuple(d for d in range(x.ndim) if d != axis)
        return x.mean(dim=others) if len(others) > 1 else x.mean(dim=others[0])
    shape = (*x.shape[:axis], width, x.shape[axis] // width, *x.shape[axis + 1 :])
    xs = x.reshape(shape)
    return xs.mean(dim=tuple(d for d in range(xs.ndim) if d != axis + 1))


def channel_mean(x: th.Tensor) -> th.Tensor:
    """``(k * n,)``: the mean of ``x`` over every axis but the unit axis."""
    axis = unit_axis(x)
    others = tuple(d for d in range(x.ndim) if d != axis)
    return x.mean(dim=others) if len(others) > 1 else x.mean(dim=others[0])


def target_columns(link: Link, units: th.Tensor) -> th.Tensor:
    """``(m,)`` long: the input columns (Linear) or channels (Conv2d) of each target that
    read the ``units`` (long indices of the source's units), every half and position."""
    n, rep = link.units, link.repeat
    halves = th.arange(link.width, device=units.device).view(-1, 1) * n
    channels = (halves + units.view(1, -1)).reshape(-1)
    if rep == 1:
        return channels
    positions = th.arange(rep, device=units.device).view(1, -1)
    return (channels.view(-1, 1) * rep + positions).reshape(-1)


def outgoing_magnitude(link: Link) -> th.Tensor:
    """``(n,)``: the mean ``|weight|`` of each unit's outgoing weights over every target,
    output, half and position (GnT's ``next_layer.weight.abs().mean(dim=0)`` for one
    Linear target)."""
    n, k, rep = link.units, link.width, link.repeat
    parts = []
    for t in link.targets:
        w = t.weight.detach().abs()
        if isinstance(t, nn.Linear) and k == 1 and rep == 1 and w.shape[1] == n:
            if len(link.targets) == 1:
                return w.mean(dim=0)
            parts.append(w.t())
            continue
        if isinstance(t, nn.Linear):
            w = w[:, : k * n * rep].reshape(w.shape[0], k, n, rep)
        else:
            w = w.reshape(w.shape[0], k, n, -1)
        parts.append(w.permute(2, 0, 1, 3).reshape(n, -1))
    return th.cat(parts, dim=1).mean(dim=1)


# -- reading the features -------------------------------------------------------------------
@contextlib.contextmanager
def capture_features(links: Sequence[Link]) -> Iterator[dict[str, th.Tensor]]:
    """Within the block, every forward pass through the links' modules stores each link's
    activation output (detached; the last pass wins) in the yielded dict under the
    link's name: what :meth:`ContinualBackprop.observe` and :func:`dormant_masks` read.

    Example::

        with capture_features(links) as features:
            loss = compute_loss(policy, batch)  # the training forward
        loss.backward(); optimizer.step(); cbp.observe(features)
    """
    store: dict[str, th.Tensor] = {}
    handles = []

    def keep(link: Link) -> Callable[..., None]:
        def hook(_m: nn.Module, _inputs: Any, output: th.Tensor) -> None:
            out = output.detach()
            store[link.name] = link.activation(out) if link.hook == "source" else out

        return hook

    try:
        for link in links:
            module = link.source if link.hook == "source" else link.activation
            handles.append(module.register_forward_hook(keep(link)))
        yield store
    finally:
        for h in handles:
            h.remove()
