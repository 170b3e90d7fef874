"""Continual backprop (Dohare et al. 2024, "Loss of plasticity in deep continual learning",
Nature): generate-and-test after every optimizer step, as ``lop/algos/gnt.py`` (``GnT``)
runs it in the paper's RL code (``lop/algos/rl/ppo.py``, ``lop/rl/run_ppo.py``).

Per link and optimizer step, from the activations of that step's forward pass (``h``,
captured by :func:`~.links.capture_features`):

1. ages += 1; with ``d`` the decay, ``bc = 1 - d ** age``;
2. mean activation ``a <- d * a + (1 - d) * mean(h)`` (per activation channel);
3. contribution utility ``u <- d * u + (1 - d) * mean|h| * mean|outgoing weight|`` and its
   bias-corrected value ``u / bc``;
4. the eligible units are those older than ``maturity``; ``replacement_rate * eligible``
   units are replaced: with ``accumulate=False`` (the RL code: ``GnT``'s default) a
   fraction below 1 becomes one unit with that probability (one ``torch.rand(1)`` draw)
   and is truncated otherwise; with ``accumulate=True`` fractions carry over;
5. the lowest bias-corrected-utility eligible units are replaced (``torch.topk``): their
   utility and mean activation are set to 0, then (after every link is tested) their
   incoming weights are re-drawn ``U(-b, b)`` (``init``: GnT's bounds), their incoming bias
   set to 0, their outgoing weights to 0 and their age to 0.

Differences from GnT, each an option: GnT means to add the replaced units' mean
contribution to the next layer's bias, but it zeroes the mean activation before reading it,
so its correction is always 0: ``correct_bias=False`` (default) reproduces that, ``True``
applies the correction. The RL code trains with ``torch.optim.Adam``, so ``GnT`` leaves the
optimizer alone (it resets state only for its own ``AdamGnT``, which keeps one step per
entry); ``reset_moments=True`` (default) zeroes the replaced weights' moments as ``GnT``
does with ``AdamGnT`` (torch's one step per tensor is left: see :mod:`.optim_state`),
``False`` is the RL code. Links may be conv layers, CReLU and several targets (GnT: one
Linear stack); then means run over positions and CReLU's halves too.

Random numbers, per step: every link's count draw (non-accumulating, fraction < 1 only)
in link order, then every replacing link's incoming weights (one ``(m, fan_in...)`` draw),
in link order; from ``generator`` on its device, else the global CPU RNG (GnT's order and
device: bit-identical to ``GnT`` under the same seed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch as th
from torch import nn

from baselines_sb3.plasticity import ACTIVATION_KINDS
from baselines_sb3.remedies.links import (
    Link,
    capture_features,
    channel_mean,
    outgoing_magnitude,
    policy_links,
    target_columns,
    unit_mean,
)
from baselines_sb3.remedies.optim_state import zero_entries

INITS: tuple[str, ...] = ("lecun", "kaiming", "default")
"""GnT's bounds of the re-drawn incoming weights (``compute_bounds``): ``sqrt(3 / fan_in)``
(``lecun``: ``run_ppo.py``'s default), ``gain * sqrt(3 / fan_in)`` (``kaiming``: GnT's
default, ``gain = calculate_gain`` of the activation), ``sqrt(1 / fan_in)`` (``default``)."""

__all__ = ["INITS", "ContinualBackprop", "capture_features", "gnt_bound"]


def gnt_bound(link: Link, init: str = "lecun") -> float:
    """The bound ``b`` of a link's re-drawn incoming weights (:data:`INITS`)."""
    src = link.source
    fan_in = src.in_features if isinstance(src, nn.Linear) else src.weight[0].numel()
    if init == "lecun":
        return math.sqrt(3 / fan_in)
    if init == "default":
        return math.sqrt(1 / fan_in)
    if init == "kaiming":
        kind = ACTIVATION_KINDS.get(type(link.activation), "relu")
        kind = "relu" if kind == "other" else kind
        return nn.init.calculate_gain(nonlinearity=kind) * math.sqrt(3 / fan_in)
    raise ValueError(f"unknown init {init!r}; valid: {', '.join(INITS)}")


class _Units:
    """One link's statistics (GnT's per-layer lists), on the source's device."""

    def __init__(self, link: Link):
        device = link.source.weight.device
        n, k = link.units, link.width
        self.util = th.zeros(n, device=device)
        self.bias_corrected_util = th.zeros(n, device=device)
        self.ages = th.zeros(n, device=device)
        self.mean_act = th.zeros(k * n, device=device)
        self.accumulated = 0.0
        self.host_ages = np.zeros(n, np.int64)  # the ages without a device sync

    TENSORS = ("util", "bias_corrected_util", "ages", "mean_act")


class ContinualBackprop:
    """Generate-and-test over ``links`` (see the module docstring for the algorithm).

    Args:
        links: the layers whose units are replaced (:func:`~.links.policy_links`, or a
            policy: its links).
        optimizer: the optimizer stepping them (its moments are zeroed when
            ``reset_moments``); may be ``None``.
        replacement_rate: units replaced per optimizer step, a fraction of the eligible
            units (the paper's RL runs: 1e-4, ``lop/rl/cfg/ant/cbp.yml`` ``rr``).
        maturity: optimizer steps a unit lives before it is eligible (paper: 10000, ``mt``).
        decay: decay of the running utility and mean activation (paper: 0.99).
        generator: random numbers' source (default: the global CPU RNG).
        init: bound of the new incoming weights (:data:`INITS`; paper's RL: ``"lecun"``).
        accumulate: carry fractional counts over (``True``) or draw them (``False``, RL).
        correct_bias: add the replaced units' mean contribution to the targets' biases
            (``False``: GnT's effective behaviour, see the module docstring).
        reset_moments: zero the optimizer statistics of the replaced weights.
    """

    def __init__(
        self,
        links: Sequence[Link] | nn.Module,
        optimizer: th.optim.Optimizer | None,
        replacement_rate: float = 1e-4,
        maturity: int = 10000,
        decay: float = 0.99,
        generator: th.Generator | None = None,
        *,
        init: str = "lecun",
        accumulate: bool = False,
        correct_bias: bool = False,
        reset_moments: bool = True,
    ):
        if not 0.0 < replacement_rate < 1.0:
            raise ValueError(f"replacement_rate must be in (0, 1), got {replacement_rate!r}")
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay!r}")
        if int(maturity) < 0:
            raise ValueError(f"maturity must be >= 0, got {maturity!r}")
        self.links = policy_links(links)
        self.optimizer = optimizer
        self.replacement_rate = float(replacement_rate)
        self.maturity = int(maturity)
        self.decay = float(decay)
        self.generator = generator
        self.accumulate = bool(accumulate)
        self.correct_bias = bool(correct_bias)
        self.reset_moments = bool(reset_moments)
        self.bounds = {link.name: gnt_bound(link, init) for link in self.links}
        self.units = {link.name: _Units(link) for link in self.links}

    # -- one optimizer step -------------------------------------------------------------
    def observe(self, features: Mapping[str, th.Tensor]) -> dict[str, th.Tensor]:
        """Generate-and-test after an optimizer step, on the activations of that step's
        forward pass (``{link name: activation output}``, e.g. :func:`capture_features`).
        Returns ``{link name: replaced unit indices (long, possibly empty)}``.

        Raises:
            KeyError: a link without features (one line naming it).
        """
        missing = [link.name for link in self.links if link.name not in features]
        if missing:
            raise KeyError(f"no features for link(s) {', '.join(missing)}")
        replaced: dict[str, th.Tensor] = {}
        contributions: dict[str, th.Tensor] = {}
        with th.no_grad():
            for link in self.links:
                units = self.units[link.name]
                self._update_utility(link, units, features[link.name].detach())
                new = self._test(link, units)
                replaced[link.name] = new
                if new.numel():
                    units.util[new] = 0
                    channels = target_columns(_channels_only(link), new)
                    if self.correct_bias:
                        bc = 1 - self.decay ** units.ages[new]
                        contributions[link.name] = units.mean_act[channels] / bc.repeat(link.width)
                    units.mean_act[channels] = 0.0
            for link in self.links:
                new = replaced[link.name]
                if new.numel():
                    self._generate(link, self.units[link.name], new, contributions.get(link.name))
        return replaced

    def _update_utility(self, link: Link, units: _Units, h: th.Tensor) -> None:
        d = self.decay
        units.ages += 1
        units.host_ages += 1
        units.util *= d
        bias_correction = 1 - d**units.ages
        units.mean_act *= d
        units.mean_act -= -(1 - d) * channel_mean(h)
        new_util = outgoing_magnitude(link) * unit_mean(h.abs(), link.width)
        units.util += (1 - d) * new_util
        units.bias_corrected_util = units.util / bias_correction

    def _test(self, link: Link, units: _Units) -> th.Tensor:
        device = units.util.device
        none = th.empty(0, dtype=th.long, device=device)
        eligible = np.flatnonzero(units.host_ages > self.maturity)
        if eligible.size == 0:
            return none
        count: float = self.replacement_rate * eligible.size
        units.accumulated += count
        if self.accumulate:
            count = int(units.accumulated)
            units.accumulated -= count
        else:
            if count < 1:
                g = self.generator
                draw = th.rand(1, generator=g, device=g.device if g is not None else "cpu")
                if draw <= count:
                    count = 1
            count = int(count)
        if count == 0:
            return none
        index = th.as_tensor(eligible, device=device)
        lowest = th.topk(-units.bias_corrected_util[index], count)[1]
        return index[lowest]

    def _generate(
        self, link: Link, units: _Units, new: th.Tensor, contribution: th.Tensor | None
    ) -> None:
        src = link.source
        g = self.generator
        bound = self.bounds[link.name]
        shape = (new.numel(), *src.weight.shape[1:])
        draw = th.empty(shape, device=g.device if g is not None else "cpu").uniform_(
            -bound, bound, generator=g
        )
        src.weight.data[new] = draw.to(src.weight.device, src.weight.dtype)
        if src.bias is not None:
            src.bias.data[new] = src.bias.data[new] * 0
        cols = target_columns(link, new)
        for t in link.targets:
            if contribution is not None and t.bias is not None:
                w = t.weight.data.index_select(1, cols)
                per_col = (
                    contribution.repeat_interleave(link.repeat) if link.repeat > 1 else contribution
                )
                shape = (1, -1) + (1,) * (w.ndim - 2)
                t.bias.data += (w * per_col.view(shape)).sum(dim=tuple(range(1, w.ndim)))
            t.weight.data.index_fill_(1, cols, 0.0)
        units.ages[new] = 0
        units.host_ages[new.cpu().numpy()] = 0
        if self.reset_moments and self.optimizer is not None:
            zero_entries(self.optimizer, src.weight, new, 0)
            if src.bias is not None:
                zero_entries(self.optimizer, src.bias, new, 0)
            for t in link.targets:
                zero_entries(self.optimizer, t.weight, cols, 1)

    # -- resume --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Utilities, ages, mean activations and count accumulators per link (and the
        generator's state when one was given): :meth:`load_state_dict` resumes
        bit-identically."""
        out: dict[str, Any] = {
            "links": {
                name: {
                    **{k: getattr(u, k).clone() for k in _Units.TENSORS},
                    "accumulated": u.accumulated,
                    "host_ages": th.as_tensor(u.host_ages.copy()),
                }
                for name, u in self.units.items()
            }
        }
        if self.generator is not None:
            out["generator"] = self.generator.get_state()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s values (same links, by name and size)."""
        links = state["links"]
        if set(links) != set(self.units):
            raise ValueError(
                f"continual backprop state has links {sorted(links)}, this has {sorted(self.units)}"
            )
        for name, values in links.items():
            u = self.units[name]
            for k in _Units.TENSORS:
                getattr(u, k).copy_(values[k])
            u.accumulated = float(values["accumulated"])
            u.host_ages = np.asarray(values["host_ages"], np.int64).copy()
        if self.generator is not None and "generator" in state:
            self.generator.set_state(state["generator"])


def _channels_only(link: Link) -> Link:
    """``link`` read per activation channel (``repeat`` 1): the mean activation's index."""
    if link.repeat == 1:
        return link
    return Link(link.name, link.source, link.activation, (), link.forward, 1, link.hook)
