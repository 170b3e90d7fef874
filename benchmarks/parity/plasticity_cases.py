"""Networks and batches on which our plasticity diagnostics are compared with the
reference implementations (``benchmarks/parity/plasticity_reference.py``) and pinned
(``tests/metrics/test_plasticity.py::test_reference_pins``), and our diagnostics of each case
(``our_diagnostics``, what the pins check). Weights and batches are drawn from seeded
numpy generators, so the script and the test build the same arrays."""

from __future__ import annotations

import numpy as np
import torch as th
from torch import nn

from baselines_sb3.plasticity import TorchNetwork, TorchProbe
from cl_suites.metrics import plasticity as P

CASES = ("hand", "mlp", "cnn", "tanh")
TAUS = (0.025, 0.1)
"""The dormant-unit thresholds compared (Plasticine's and ReDo's)."""


def _fill(net: nn.Module, rng: np.random.Generator, bias_shift: float = 0.0) -> None:
    with th.no_grad():
        for name, p in net.named_parameters():
            scale = 1.0 / np.sqrt(max(p[0].numel(), 1)) if p.ndim > 1 else 0.1
            values = rng.normal(0.0, scale, size=tuple(p.shape))
            if name.endswith("bias"):
                values = values + bias_shift * (rng.random(p.shape) < 0.3)
            p.copy_(th.as_tensor(values, dtype=th.float32))


def build(case: str) -> tuple[nn.Sequential, np.ndarray, str]:
    """``(network, batch, activation)``: a Sequential whose last module is the head (its
    input: the penultimate features) and a float32 batch. Deterministic."""
    rng = np.random.default_rng(CASES.index(case) + 42)
    if case == "hand":
        net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 2))
        with th.no_grad():
            net[0].weight.copy_(th.tensor([[1.0, 0], [0, 1], [-1, -1]]))
            net[0].bias.zero_()
            net[2].weight.copy_(th.tensor([[1.0, 0, 0], [0, 0.01, 0]]))
            net[2].bias.zero_()
            net[4].weight.copy_(th.eye(2))
            net[4].bias.zero_()
        x = np.array([[1, 0], [0, 1], [2, 0], [0, 0]], np.float32)
        return net, x, "relu"
    if case in ("mlp", "tanh"):
        act = nn.ReLU if case == "mlp" else nn.Tanh
        net = nn.Sequential(nn.Linear(40, 64), act(), nn.Linear(64, 32), act(), nn.Linear(32, 6))
        _fill(net, rng, bias_shift=-1.5 if case == "mlp" else 3.0)
        x = ((rng.random((256, 40)) < 0.25) * rng.integers(1, 4, (256, 40))).astype(np.float32)
        return net, x, "relu" if case == "mlp" else "tanh"
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 3 * 3, 32),
        nn.ReLU(),
        nn.Linear(32, 5),
    )
    _fill(net, rng, bias_shift=-1.0)
    x = rng.random((64, 3, 15, 15)).astype(np.float32)
    return net, x, "relu"


def moved(net: nn.Sequential, case: str) -> dict[str, th.Tensor]:
    """A state dict of ``net`` after a seeded perturbation (the "earlier" weights the
    weight change is measured from)."""
    rng = np.random.default_rng(CASES.index(case) + 7)
    return {
        k: v.detach().clone() + th.as_tensor(rng.normal(0, 0.05, tuple(v.shape)), dtype=v.dtype)
        for k, v in net.state_dict().items()
    }


def case_probe(net: nn.Sequential) -> TorchProbe:
    """The probe of a case's network: one network ``net``, its last layer the head."""
    return TorchProbe(
        net,
        [TorchNetwork("net", ("",), str(len(net) - 1), "policy")],
        {"main": lambda m, obs, ids: (m(th.as_tensor(obs)), th.zeros(len(obs)))},
    )


def our_diagnostics(case: str) -> dict[str, float]:
    """Our diagnostics of ``case``, under the keys the references' values are pinned by."""
    net, x, activation = build(case)
    probe = case_probe(net)
    cap = probe.capture(x, np.zeros(len(x), np.int64))["net"]
    out: dict[str, float] = {}
    for tau in TAUS:
        out[f"dormant_plasticine@{tau}"] = P.dormant_ratios(cap.activations, tau, "plasticine")[0]
        whole, layers = P.dormant_ratios(cap.activations, tau, "redo")
        out[f"dormant_redo@{tau}"] = whole
        for name, value in layers.items():
            out[f"dormant_redo@{tau}/{name}"] = value
    h = cap.features
    out["active_fraction"] = P.active_fraction(h, activation)
    out["stable_rank"] = P.stable_rank(h, "srank")
    out["effective_rank"] = P.effective_rank(h)
    out["feature_norm"] = P.feature_norm(h)
    params = {k: v.detach().numpy() for k, v in net.named_parameters()}
    ref = {k: v.numpy() for k, v in moved(net, case).items()}
    out["weight_change_rms"] = P.weight_norms(params, ref, "rms")[0]
    return out
