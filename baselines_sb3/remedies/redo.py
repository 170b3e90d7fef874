"""ReDo: recycling dormant units (Sokar et al. 2023, "The Dormant Neuron Phenomenon in Deep
Reinforcement Learning"), as Plasticine implements it (``PlasticineAgent.plasticine_redo``,
``plasticine/ppo_continual_procgen_base.py``) with the optimizer-moment reset of ReDo's own
code (``dopamine/labs/redo/weight_recyclers.py``).

A unit's score is the mean ``|activation|`` over the batch (and positions, and CReLU's two
halves), divided by the mean score of its layer plus 1e-9; it is dormant when the
normalised score is ``<= tau``. Recycling a dormant unit re-draws its incoming weights and
bias with Kaiming-uniform bounds as Plasticine does (``gain = calculate_gain("relu",
sqrt(5))``, which is ``sqrt(2)``: the weights' bound is ``sqrt(6 / fan_in)``; the bias'
``1 / sqrt(fan_in)``), zeroes its outgoing weights in every target, and (``reset_moments``)
zeroes the optimizer's running statistics of those weights and its bias
(:mod:`.optim_state`; dopamine resets Adam's ``mu``/``nu`` of the kernels, Plasticine
nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch as th
from torch import nn

from baselines_sb3.remedies.links import (
    Link,
    capture_features,
    policy_links,
    target_columns,
    unit_mean,
)
from baselines_sb3.remedies.optim_state import zero_entries

Runner = Callable[[Any], Any]
"""``run(obs)``: the forward pass that computes the links' activations."""


def _as_input(policy: nn.Module, obs: Any) -> Any:
    if isinstance(obs, th.Tensor) or (
        isinstance(obs, dict) and all(isinstance(v, th.Tensor) for v in obs.values())
    ):
        return obs
    if hasattr(policy, "obs_to_tensor"):
        return policy.obs_to_tensor(obs)[0]
    return th.as_tensor(obs)


def policy_forward(policy: nn.Module, obs: Any) -> Any:
    """One forward pass of ``policy`` on ``obs`` (numpy as the env gives it, or tensors)
    through every link: ``logits_and_values`` of a ``ContinualPolicy``, the actor and
    critic heads of another SB3 policy, ``policy(obs)`` of a plain module."""
    x = _as_input(policy, obs)
    if hasattr(policy, "logits_and_values"):
        return policy.logits_and_values(x)
    if hasattr(policy, "mlp_extractor"):
        features = policy.extract_features(x)
        if getattr(policy, "share_features_extractor", True):
            latent_pi, latent_vf = policy.mlp_extractor(features)
        else:
            latent_pi = policy.mlp_extractor.forward_actor(features[0])
            latent_vf = policy.mlp_extractor.forward_critic(features[1])
        return policy.action_net(latent_pi), policy.value_net(latent_vf)
    return policy(x)


def resolve(
    policy_or_links: nn.Module | Sequence[Link], run: Runner | None
) -> tuple[list[Link], Runner]:
    """``(links, run)`` of a policy (its :func:`policy_links`, :func:`policy_forward`) or of
    an explicit list of links (``run`` required)."""
    if isinstance(policy_or_links, nn.Module):
        module = policy_or_links
        return policy_links(module), run or (lambda obs: policy_forward(module, obs))
    if run is None:
        raise ValueError("explicit links need run=, the forward pass that computes them")
    return list(policy_or_links), run


def dormant_scores(features: dict[str, th.Tensor], links: Sequence[Link]) -> dict[str, th.Tensor]:
    """``{link: (n,) normalised score}``: each unit's mean ``|activation|`` divided by its
    layer's mean score + 1e-9 (Plasticine's ``_get_redo_masks``)."""
    out = {}
    for link in links:
        score = unit_mean(features[link.name].abs(), link.width)
        out[link.name] = score / (score.mean() + 1e-9)
    return out


def dormant_masks(
    policy_or_links: nn.Module | Sequence[Link],
    obs: Any,
    tau: float,
    *,
    run: Runner | None = None,
) -> dict[str, th.Tensor]:
    """``{link name: (n,) bool}``, True where a unit is dormant on the batch ``obs``
    (normalised score ``<= tau``), from one forward pass without gradients.

    Args:
        policy_or_links: a policy (:func:`~.links.policy_links`) or explicit links.
        obs: the batch (``(B, ...)``: numpy as the env gives it, or tensors).
        tau: the threshold, > 0 (Plasticine and ReDo's Atari setting: 0.025).
        run: the forward pass (explicit links only; default :func:`policy_forward`).
    """
    if not tau > 0:
        raise ValueError(f"ReDo's tau must be > 0, got {tau!r}")
    links, run = resolve(policy_or_links, run)
    with th.no_grad(), capture_features(links) as features:
        run(obs)
    missing = [link.name for link in links if link.name not in features]
    if missing:
        raise ValueError(f"the forward pass did not reach link(s) {', '.join(missing)}")
    return {k: s <= tau for k, s in dormant_scores(features, links).items()}


def _draw(shape: tuple[int, ...], bound: float, like: th.Tensor, generator: th.Generator | None):
    device = generator.device if generator is not None else like.device
    out = th.empty(shape, dtype=like.dtype, device=device).uniform_(
        -bound, bound, generator=generator
    )
    return out.to(like.device)


def kaiming_rows(
    layer: nn.Linear | nn.Conv2d, rows: th.Tensor, generator: th.Generator | None = None
) -> None:
    """Re-draw the incoming weights and bias of output units ``rows`` (long, ascending) of
    ``layer`` as Plasticine's ``_kaiming_uniform_reinit``: weights ``U(-b, b)`` with
    ``b = sqrt(3) * calculate_gain("relu", sqrt(5)) / sqrt(fan_in)``, then the bias
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``; drawn in that order, each as one
    ``(len(rows), ...)`` tensor, from ``generator`` (on its device) or the global RNG of
    the layer's device."""
    fan_in = nn.init._calculate_correct_fan(layer.weight, "fan_in")
    gain = nn.init.calculate_gain("relu", math.sqrt(5))
    bound = math.sqrt(3.0) * (gain / math.sqrt(fan_in))
    w = layer.weight.data
    w[rows] = _draw((len(rows), *w.shape[1:]), bound, w, generator)
    if layer.bias is not None and fan_in != 0:
        b = layer.bias.data
        b[rows] = _draw((len(rows),), 1 / math.sqrt(fan_in), b, generator)


def recycle_units(
    link: Link,
    units: th.Tensor,
    optimizer: th.optim.Optimizer | None = None,
    reset_moments: bool = True,
    generator: th.Generator | None = None,
) -> None:
    """Recycle ``units`` (long, ascending) of ``link`` as ReDo does: :func:`kaiming_rows`
    on the source, zero the units' columns in every target, and (``reset_moments``, with an
    optimizer) zero the optimizer statistics of the source's rows and bias entries and of
    the targets' columns."""
    if units.numel() == 0:
        return
    with th.no_grad():
        kaiming_rows(link.source, units, generator)
        cols = target_columns(link, units)
        for t in link.targets:
            t.weight.data.index_fill_(1, cols, 0.0)
        if reset_moments and optimizer is not None:
            zero_entries(optimizer, link.source.weight, units, 0)
            if link.source.bias is not None:
                zero_entries(optimizer, link.source.bias, units, 0)
            for t in link.targets:
                zero_entries(optimizer, t.weight, cols, 1)


def recycle_dormant(
    policy_or_links: nn.Module | Sequence[Link],
    obs: Any,
    tau: float = 0.025,
    optimizer: th.optim.Optimizer | None = None,
    reset_moments: bool = True,
    generator: th.Generator | None = None,
    *,
    run: Runner | None = None,
) -> dict[str, int]:
    """ReDo: find the dormant units on ``obs`` (:func:`dormant_masks`) and recycle them
    (:func:`recycle_units`), link by link in forward order. Returns ``{link name: units
    recycled}`` (every link, zeros included).

    The masks all come from one forward pass before anything changes. Random numbers:
    per link with a dormant unit, in link order, its weight rows then its bias entries
    (Plasticine's order: bit-identical to ``plasticine_redo`` under the same seed).

    Args:
        policy_or_links: a policy or explicit links (then ``run`` is required).
        obs: the batch the units are scored on (Plasticine: the whole rollout).
        tau: dormant threshold, > 0 (Plasticine: 0.025).
        optimizer: the policy's optimizer (``policy.optimizer``); ``None``: its state is
            not touched.
        reset_moments: zero the optimizer statistics of the recycled weights (ReDo's code
            does, Plasticine does not).
        generator: the random numbers' source (default: the global RNG).
        run: the forward pass (explicit links only).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from baselines_sb3.remedies import recycle_dormant
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> with torch.no_grad():
        ...     net[0].bias[:3] = -100.0  # units 0, 1, 2 never fire
        >>> opt = torch.optim.Adam(net.parameters())
        >>> recycle_dormant(net, torch.randn(64, 4), optimizer=opt)
        {'0': 3}
        >>> net[2].weight[:, :3].abs().sum().item()  # their outgoing weights: zero
        0.0
    """
    links, run = resolve(policy_or_links, run)
    masks = dormant_masks(links, obs, tau, run=run)
    counts: dict[str, int] = {}
    for link in links:
        units = masks[link.name].nonzero().flatten()
        counts[link.name] = int(units.numel())
        recycle_units(link, units, optimizer, reset_moments, generator)
    return counts
