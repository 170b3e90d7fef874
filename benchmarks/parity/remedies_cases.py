"""Networks, weights and batches on which our plasticity remedies are compared with the
reference code (``benchmarks/parity/plasticity_reference.py``, section ``remedies``) and
pinned (``tests/baselines/test_remedies.py::test_reference_pins``), and our side of each
comparison. Weights and batches come from seeded numpy generators, so the script and the
test build the same arrays; nothing here is the reference's code.

* :class:`ImpalaTwin`: a network laid out as Plasticine's ``PlasticineAgent`` on 64x64x3
  Procgen frames (the same module names and shapes: ``encoder.{0,1,2}`` conv stacks with
  two residual blocks each, ``encoder.5`` the 256-unit Linear, ``actor``, ``critic``), so
  its state dict loads into the reference agent. :func:`plasticine_links` are the links
  Plasticine's ``plasticine_redo`` hard-codes (residual ones included, and the final
  Linear linked to the actor only), given to our functions as an explicit list.
* :func:`gnt_net`: GnT's layout ``Linear, ReLU, Linear, ReLU, Linear`` and the batches of
  a 50-step continual-backprop run (:func:`cbp_run`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

from baselines_sb3.remedies import (
    ContinualBackprop,
    Link,
    capture_features,
    dormant_masks,
    inject_plasticity,
    recycle_dormant,
    reset_heads,
    sequential_links,
    shrink_perturb,
)

OBS_SHAPE = (64, 64, 3)
N_ACTIONS = 15
REDO_TAU = 0.025
SNP_SHRINK = 0.999999
SEED = 54
PLANTED = {  # module -> output units given a bias of -50: dormant by construction
    "encoder.0.res_block0.block.1": (3,),
    "encoder.1.res_block1.block.1": (0, 31),
    "encoder.2.conv": (12,),  # the last stack's residual stream: dead after its ReLUs
    "encoder.2.res_block0.block.3": (7,),
    "encoder.5": (0, 10, 100),
}


class _Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.block = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: th.Tensor) -> th.Tensor:
        return self.block(x) + x


class _Stack(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.res_block0 = _Block(out_channels)
        self.res_block1 = _Block(out_channels)

    def forward(self, x: th.Tensor) -> th.Tensor:
        x = F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res_block1(self.res_block0(x))


class ImpalaTwin(nn.Module):
    """The module layout of Plasticine's default ``PlasticineAgent`` (see the module
    docstring); ``forward(obs (B, 64, 64, 3) in [0, 255]) -> (hidden, logits, values)``."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            _Stack(3, 16),
            _Stack(16, 32),
            _Stack(32, 32),
            nn.Flatten(),
            nn.ReLU(),
            nn.Linear(32 * 8 * 8, 256),
            nn.ReLU(),
        )
        self.actor = nn.Linear(256, N_ACTIONS)
        self.critic = nn.Linear(256, 1)

    def encode(self, obs: th.Tensor) -> th.Tensor:
        return self.encoder(obs.permute((0, 3, 1, 2)) / 255.0)

    def forward(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        hidden = self.encode(obs)
        return hidden, self.actor(hidden), self.critic(hidden)


class Heads(nn.Module):
    """The twin's heads under SB3's names, for :func:`reset_heads` (Plasticine's heads
    use SB3's orthogonal gains: actor 0.01, critic 1)."""

    ortho_init = True

    def __init__(self, agent: nn.Module):
        super().__init__()
        self.action_net = agent.actor
        self.value_net = agent.critic


def fill(net: nn.Module, seed: int, planted: bool = True) -> nn.Module:
    """Seeded weights: He-normal kernels, small normal biases; ``planted`` units' biases
    set to -50."""
    rng = np.random.default_rng(seed)
    modules = dict(net.named_modules())
    with th.no_grad():
        for p in net.parameters():
            fan_in = p[0].numel() if p.ndim > 1 else 1
            std = np.sqrt(2.0 / fan_in) if p.ndim > 1 else 0.1
            p.copy_(th.as_tensor(rng.normal(0.0, std, tuple(p.shape)), dtype=th.float32))
        if planted:
            for name, units in PLANTED.items():
                modules[name].bias[list(units)] = -50.0
    return net


def twin(seed: int = SEED) -> ImpalaTwin:
    """The twin with seeded weights, its heads scaled as Plasticine initialises them
    (actor gain 0.01, critic 1)."""
    net = fill(ImpalaTwin(), seed)
    with th.no_grad():
        net.actor.weight.mul_(0.01 / np.sqrt(2.0))
        net.critic.weight.mul_(1.0 / np.sqrt(2.0))
    return net


def observations(seed: int = SEED, batch: int = 16) -> th.Tensor:
    """``(batch, 64, 64, 3)`` float32 pixels in [0, 255]: a colour per frame, a brightness
    ramp along a random axis and noise, so frames differ as game frames do."""
    rng = np.random.default_rng(seed + 1)
    colour = rng.uniform(0, 1, (batch, 1, 1, 3))
    ramp = np.linspace(0, 1, OBS_SHAPE[0]).reshape(1, -1, 1, 1)
    ramp = np.where(rng.random((batch, 1, 1, 1)) < 0.5, ramp, ramp.transpose(0, 2, 1, 3))
    noise = rng.uniform(0, 1, (batch, *OBS_SHAPE))
    frames = 255 * (0.5 * colour + 0.3 * ramp * rng.uniform(0, 1, (batch, 1, 1, 1)) + 0.2 * noise)
    return th.as_tensor(np.floor(frames).astype(np.float32))


def plasticine_links(agent: nn.Module) -> list[Link]:
    """The links ``plasticine_redo`` hard-codes, in its order, as explicit :class:`Link` s."""
    m = dict(agent.named_modules())
    triples = []
    for s in ("encoder.0", "encoder.1", "encoder.2"):
        triples += [
            (f"{s}.conv", f"{s}.res_block0.block.0", f"{s}.res_block0.block.1"),
            (f"{s}.res_block0.block.1", f"{s}.res_block0.block.2", f"{s}.res_block0.block.3"),
            (f"{s}.res_block0.block.3", f"{s}.res_block1.block.0", f"{s}.res_block1.block.1"),
            (f"{s}.res_block1.block.1", f"{s}.res_block1.block.2", f"{s}.res_block1.block.3"),
        ]
    triples.append(("encoder.5", "encoder.6", "actor"))
    return [Link(src, m[src], m[act], (m[dst],)) for src, act, dst in triples]


def encode_runner(agent: nn.Module) -> Callable[[th.Tensor], th.Tensor]:
    return lambda obs: agent.encoder(obs.permute((0, 3, 1, 2)) / 255.0)


def digest(t: th.Tensor) -> str:
    """sha256 of a tensor's float32 bytes (bit-for-bit identity)."""
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()


def snapshot(net: nn.Module, parts: tuple[str, ...] = ("encoder", "actor", "critic")) -> dict:
    """Copies of ``net``'s tensors under ``parts`` (a reference agent holds more)."""
    return {n: v.detach().clone() for n, v in net.state_dict().items() if n.split(".")[0] in parts}


def redo_summary(before: dict, after: dict, masks: dict[str, list[int]]) -> dict[str, Any]:
    """What ReDo changed between two state dicts: per link its dormant units and the
    digests of the re-drawn weight rows and bias entries; the names of every tensor that
    changed."""
    changed = sorted(n for n, v in after.items() if not th.equal(v, before[n]))
    out: dict[str, Any] = {"masks": masks, "rows": {}, "changed": changed}
    for name, units in masks.items():
        if units:
            out["rows"][name] = [
                digest(after[f"{name}.weight"][units]),
                digest(after[f"{name}.bias"][units]),
            ]
    return out


def ours_redo(agent: nn.Module, obs: th.Tensor, seed: int = SEED) -> dict[str, Any]:
    """Our ``recycle_dormant`` on ``agent`` with Plasticine's links, global RNG seeded."""
    links = plasticine_links(agent)
    run = encode_runner(agent)
    masks = dormant_masks(links, obs, REDO_TAU, run=run)
    before = snapshot(agent)
    th.manual_seed(seed)
    counts = recycle_dormant(links, obs, REDO_TAU, run=run)
    units = {k: v.nonzero().flatten().tolist() for k, v in masks.items()}
    assert counts == {k: len(v) for k, v in units.items()}
    return redo_summary(before, snapshot(agent), units)


def initial_twin(seed: int = SEED) -> ImpalaTwin:
    """The "initial" weights shrink-and-perturb pulls towards."""
    return fill(ImpalaTwin(), seed + 100, planted=False)


def ours_snp(agent: nn.Module, initial: nn.Module) -> None:
    """Our ``shrink_perturb`` with Plasticine's factors (``perturb = 1 - shrink``)."""
    shrink_perturb(
        list(agent.parameters()), list(initial.parameters()), SNP_SHRINK, 1.0 - SNP_SHRINK
    )


def ours_reset(agent: nn.Module, seed: int = SEED) -> None:
    th.manual_seed(seed)
    reset_heads(Heads(agent), None)


def param_sums(net: nn.Module, names: tuple[str, ...] | None = None) -> dict[str, list[float]]:
    """Per tensor: sum, sum of |.|, first 4 entries (float64 of float32; tolerance pins)."""
    out = {}
    for n, v in net.state_dict().items():
        if names is None or n.split(".")[0] in names:
            flat = v.detach().double().flatten()
            out[n] = [float(flat.sum()), float(flat.abs().sum()), *map(float, flat[:4])]
    return out


# -- plasticity injection --------------------------------------------------------------------
def train_batches(seed: int, steps: int, batch: int = 8) -> list[tuple[th.Tensor, ...]]:
    rng = np.random.default_rng(seed + 7)
    out = []
    for _ in range(steps):
        x = th.as_tensor(rng.integers(0, 256, (batch, *OBS_SHAPE)).astype(np.float32))
        a = th.as_tensor(rng.integers(0, N_ACTIONS, batch))
        v = th.as_tensor(rng.normal(0, 1, (batch, 1)).astype(np.float32))
        out.append((x, a, v))
    return out


def train_step(agent: nn.Module, opt: th.optim.Optimizer, batch: tuple[th.Tensor, ...]) -> None:
    x, a, v = batch
    _, logits, values = agent(x)
    loss = F.cross_entropy(logits, a) + 0.5 * ((values - v) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def ours_injection(agent: nn.Module, opt: th.optim.Optimizer, before, after) -> None:
    """Train on ``before``, inject (:func:`inject_plasticity`), train on ``after``."""
    for b in before:
        train_step(agent, opt, b)
    inject_plasticity(Heads(agent), opt)
    for b in after:
        train_step(agent, opt, b)


# -- continual backprop ------------------------------------------------------------------------
CBP_CASES: dict[str, dict[str, Any]] = {
    # GnT as the paper's RL code runs it: probabilistic counts, lecun bounds, torch Adam
    "drawn": {"replacement_rate": 0.05, "maturity": 5, "decay": 0.99, "accumulate": False},
    "accumulated": {"replacement_rate": 0.15, "maturity": 3, "decay": 0.9, "accumulate": True},
}
CBP_STEPS = 50


def gnt_net(seed: int = SEED) -> nn.Sequential:
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    return fill(net, seed + 200, planted=False)


def cbp_batches(seed: int = SEED, steps: int = CBP_STEPS) -> list[tuple[th.Tensor, th.Tensor]]:
    rng = np.random.default_rng(seed + 300)
    return [
        (
            th.as_tensor(rng.normal(0, 1, (32, 8)).astype(np.float32)),
            th.as_tensor(rng.normal(0, 1, (32, 3)).astype(np.float32)),
        )
        for _ in range(steps)
    ]


def cbp_loss(net: nn.Module, batch: tuple[th.Tensor, th.Tensor]) -> th.Tensor:
    x, y = batch
    return ((net(x) - y) ** 2).mean()


def cbp_record(net: nn.Module, stats: dict[str, dict[str, th.Tensor]], replaced: list) -> dict:
    """A run's outcome: replaced units per step and link, final statistics and weights."""
    return {
        "replaced": replaced,
        "stats": {
            link: {k: [float(x) for x in v.flatten()] for k, v in s.items()}
            for link, s in stats.items()
        },
        "weights": param_sums(net),
        "digests": {n: digest(v) for n, v in net.state_dict().items()},
    }


def ours_cbp(case: str, seed: int = SEED) -> dict[str, Any]:
    """Our :class:`ContinualBackprop` over :data:`CBP_STEPS` Adam steps of GnT's layout
    (``reset_moments=False``: the RL code's torch Adam is left alone by GnT)."""
    cfg = dict(CBP_CASES[case])
    net = gnt_net(seed)
    opt = th.optim.Adam(net.parameters(), lr=1e-2)
    links = sequential_links(net)
    cbp = ContinualBackprop(links, opt, reset_moments=False, init="lecun", **cfg)
    th.manual_seed(seed)
    replaced = []
    for batch in cbp_batches(seed):
        with capture_features(links) as feats:
            loss = cbp_loss(net, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out = cbp.observe(feats)
        replaced.append([out[link.name].tolist() for link in links])
    stats = {
        name: {
            "util": u.util,
            "bias_corrected_util": u.bias_corrected_util,
            "ages": u.ages,
            "mean_act": u.mean_act,
        }
        for name, u in cbp.units.items()
    }
    return cbp_record(net, stats, replaced)


def clone(net: nn.Module) -> nn.Module:
    return copy.deepcopy(net)
