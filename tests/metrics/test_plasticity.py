"""Plasticity diagnostics: hand-worked values, torch = JAX, bad input, failures as NaN.

The hand-worked network (``_hand_net``): input ``x (4, 2)`` = rows (1, 0), (0, 1), (2, 0),
(0, 0); layer 1 ``relu(W1 x)`` with ``W1 = [[1, 0], [0, 1], [-1, -1]]`` gives units
``x0``, ``x1`` and a unit that is always 0; layer 2 ``relu(W2 h)`` with
``W2 = [[1, 0, 0], [0, 0.01, 0]]`` gives ``x0`` and ``0.01 x1``; the head is the identity
(logits = features).

* ReDo scores, layer 1: ``E|h| = (0.75, 0.25, 0)``, mean 1/3, scores (2.25, 0.75, 0):
  one dormant unit at tau 0.025 (two at tau 0.8). Layer 2: ``E|h| = (0.75, 0.0025)``,
  scores (1.99336, 0.0066445): one dormant at 0.025, none at 0.005. Whole network: 2 of 5
  units (ReDo's pooling, 0.4), or the mean of 1/3 and 1/2 (Plasticine's, 0.41667).
* Features ``(4, 2)`` = (1, 0), (0, 0.01), (2, 0), (0, 0): orthogonal columns, singular
  values ``sqrt(5)`` and 0.01; srank_0.01 = 1 (2.236 / 2.246 = 0.99555 >= 0.99), the
  Frobenius stable rank ``(5 + 1e-4) / 5``, feature norm ``(1 + 0.01 + 2 + 0) / 4``, 3 of 8
  entries non-zero.
* Weights: 23 parameters (6 + 3 + 6 + 2 + 6); adding 2 to ``W1[0, 0]`` and ``ln 3`` to the
  head's first bias changes them by ``sqrt((4 + ln(3)^2) / 23)`` (RMS), layer ``0`` by
  ``sqrt(4 / 9)``.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from cl_suites.metrics import plasticity as P
from cl_suites.metrics.plasticity_tracker import (
    Capture,
    PlasticitySettings,
    PlasticityTracker,
)

th = pytest.importorskip("torch")
from baselines_sb3.plasticity import TorchNetwork, TorchProbe  # noqa: E402
from benchmarks.parity.plasticity_cases import build  # noqa: E402
from tests.helpers import TESTS  # noqa: E402

X = build("hand")[1]


def _hand_net():
    return build("hand")[0]


def _hand_probe(net):
    return TorchProbe(
        net,
        [TorchNetwork("actor", ("",), "4", "policy")],
        {"main": lambda m, obs, ids: (m(th.as_tensor(obs)), th.zeros(len(obs)))},
    )


def _whole(rows, metric, network="actor"):
    [row] = [
        r for r in rows if r["metric"] == metric and r["layer"] == "all" and r["network"] == network
    ]
    return row["value"]


def test_hand_worked_dormant_units_ranks_norms():
    cap = _hand_probe(_hand_net()).capture(X, np.zeros(4, np.int64))["actor"]
    acts = cap.activations
    assert list(acts) == ["1", "3"]
    np.testing.assert_allclose(P.unit_scores(acts["1"]), [2.25, 0.75, 0.0], rtol=1e-6)
    np.testing.assert_allclose(
        P.unit_scores(acts["3"]), [0.75 / 0.37625, 0.0025 / 0.37625], rtol=1e-5
    )
    whole, layers = P.dormant_ratios(acts, 0.025, "redo")
    assert whole == pytest.approx(2 / 5) and layers == pytest.approx({"1": 1 / 3, "3": 1 / 2})
    assert P.dormant_ratios(acts, 0.025, "plasticine")[0] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert P.dormant_ratios(acts, 0.005, "redo")[0] == pytest.approx(1 / 5)
    assert P.dormant_ratios(acts, 0.8, "redo")[0] == pytest.approx(3 / 5)

    h = cap.features
    np.testing.assert_allclose(h, [[1, 0], [0, 0.01], [2, 0], [0, 0]], atol=1e-7)
    np.testing.assert_allclose(P.singular_values(h), [math.sqrt(5), 0.01], rtol=1e-6)
    assert P.stable_rank(h, "srank") == 1
    assert P.stable_rank(h, "frobenius") == pytest.approx((5 + 1e-4) / 5, rel=1e-6)
    p = np.array([math.sqrt(5), 0.01]) / (math.sqrt(5) + 0.01)
    assert P.effective_rank(h) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-6)
    assert P.feature_norm(h) == pytest.approx((1 + 0.01 + 2 + 0) / 4, rel=1e-6)
    assert P.active_fraction(h, "relu") == pytest.approx(3 / 8)


def test_known_singular_values_give_known_ranks():
    h = np.zeros((6, 3))
    h[0, 0], h[1, 1], h[2, 2] = 4.0, 3.0, 1.0  # singular values 4, 3, 1
    assert P.stable_rank(h, "srank") == 3  # 7/8 and 7/8 + ... < 0.99 until the third
    assert P.stable_rank(h, "frobenius") == pytest.approx(26 / 16)
    p = np.array([4, 3, 1]) / 8
    assert P.effective_rank(h) == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    assert P.stable_rank(np.eye(4) * 2, "srank") == 4
    assert P.effective_rank(np.eye(4)) == pytest.approx(4)
    assert math.isnan(P.stable_rank(np.zeros((3, 2))))


def test_hand_worked_weight_change_and_churn():
    net = _hand_net()
    probe = _hand_probe(net)
    tracker = PlasticityTracker(PlasticitySettings(probe_size=8, weight_scale="rms"))
    tracker.observe(0, X, step=0)
    tracker.task_started(0, probe)
    rows0 = tracker.measure(0, 0, probe)
    assert _whole(rows0, "weight_change_run") == 0.0
    assert math.isnan(_whole(rows0, "churn"))
    assert _whole(rows0, "dormant_ratio") == pytest.approx(0.4)
    with th.no_grad():
        net[0].weight[0, 0] += 2.0  # unit 0 of layer 1 becomes 3 x0
        net[4].bias.copy_(th.tensor([math.log(3.0), 0.0]))
    rows1 = tracker.measure(10, 0, probe)
    moved = math.sqrt((4 + math.log(3.0) ** 2) / 23)  # W1[0, 0] by 2, a head bias by ln 3
    assert _whole(rows1, "weight_change_run") == pytest.approx(moved)
    assert _whole(rows1, "weight_change_task") == pytest.approx(moved)
    [layer0] = [r for r in rows1 if r["metric"] == "weight_change_run" and r["layer"] == "0"]
    assert layer0["value"] == pytest.approx(math.sqrt(4 / 9))
    # churn: mean total variation between the softmaxes before and after, by hand
    before = np.array([[1, 0], [0, 0.01], [2, 0], [0, 0]])
    after = np.array(
        [[3 + math.log(3), 0], [math.log(3), 0.01], [6 + math.log(3), 0], [math.log(3), 0]]
    )

    def soft(z):
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    expected = 0.5 * np.abs(soft(after) - soft(before)).sum(1).mean()
    assert _whole(rows1, "churn") == pytest.approx(expected, rel=1e-5)
    tracker.task_started(1, probe)
    rows2 = tracker.measure(20, 1, probe)
    assert _whole(rows2, "weight_change_task") == 0.0
    assert _whole(rows2, "weight_change_run") == pytest.approx(moved)
    tracker_l2 = PlasticityTracker(PlasticitySettings(weight_scale="l2"))
    assert P.weight_norms({"a.w": np.array([3.0, 4.0])}, scale="l2")[0] == 5.0
    assert tracker_l2.settings.weight_scale == "l2"


@pytest.mark.parametrize("path", ["hooks", "clip_grad_norm"])
def test_gradient_norm_is_the_mean_over_the_update_before_clipping(path):
    """Own loops: hooks on the parameters and the optimizer's steps; the package's
    learners: ``clip_grad_norm`` (no hook). Either way the mean over the update's
    minibatches of the norm before clipping (what ``clip_grad_norm_`` returns)."""
    from baselines_sb3.plasticity import GradientNorms, clip_grad_norm

    net = _hand_net()
    opt = th.optim.SGD(net.parameters(), lr=0.0)
    probe = _hand_probe(net)
    probe.gradients.close()
    if path == "hooks":
        probe.gradients = GradientNorms({"actor": list(net.parameters())}, opt)
    else:
        probe.gradients = GradientNorms({"actor": list(net.parameters())}, module=net)
    norms = []
    for scale in (1.0, 3.0):
        opt.zero_grad()
        (scale * net(th.as_tensor(X)).sum()).backward()
        total = th.sqrt(sum((p.grad**2).sum() for p in net.parameters()))
        clip = th.nn.utils.clip_grad_norm_ if path == "hooks" else partial(clip_grad_norm, net)
        norms.append(float(clip(net.parameters(), 0.1)))
        assert norms[-1] == pytest.approx(float(total))
        opt.step()
    assert math.isnan(probe.gradient_norms()["actor"])
    probe.finish_update()
    assert probe.gradient_norms()["actor"] == pytest.approx(np.mean(norms), rel=1e-6)
    assert norms[1] == pytest.approx(3 * norms[0])  # the norm before clipping, not 0.1


# -- torch = JAX ---------------------------------------------------------------------------
def test_torch_equals_jax_on_the_same_weights_and_batch():
    jax = pytest.importorskip("jax")
    from baselines_jax.network import ActorCritic
    from baselines_jax.plasticity import actor_critic_probe
    from baselines_sb3.networks import SeparateTrunks

    obs_dim, tasks, actions = 12, 2, 6
    net = ActorCritic(action_dim=actions, num_tasks=tasks, hidden_sizes=(16, 8))
    params = net.init(jax.random.PRNGKey(3), np.zeros((1, obs_dim), np.float32))

    class Torch(th.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp_extractor = SeparateTrunks(obs_dim + tasks, [16, 8], sparse_input=False)
            self.action_net = th.nn.Linear(8, actions * tasks)
            self.value_net = th.nn.Linear(8, tasks)

        def forward(self, obs, ids):
            x = th.cat([th.as_tensor(obs), th.nn.functional.one_hot(ids, tasks).float()], 1)
            pi, vf = self.mlp_extractor(x)
            logits = self.action_net(pi).view(-1, tasks, actions)[th.arange(len(ids)), ids]
            return logits, self.value_net(vf)[th.arange(len(ids)), ids]

    model = Torch()
    p = params["params"]
    with th.no_grad():
        for trunk, name in (
            (model.mlp_extractor.policy_net, "actor"),
            (model.mlp_extractor.value_net, "critic"),
        ):
            for i, (lin, ln) in enumerate(((trunk[0], trunk[2]), (trunk[3], trunk[5])), 1):
                lin.weight.copy_(th.as_tensor(np.array(p[f"{name}_dense{i}"]["kernel"]).T))
                lin.bias.copy_(th.as_tensor(np.array(p[f"{name}_dense{i}"]["bias"])))
                ln.weight.copy_(th.as_tensor(np.array(p[f"{name}_ln{i}"]["scale"])))
                ln.bias.copy_(th.as_tensor(np.array(p[f"{name}_ln{i}"]["bias"])))
        model.action_net.weight.copy_(th.as_tensor(np.array(p["actor_head"]["kernel"]).T))
        model.action_net.bias.copy_(th.as_tensor(np.array(p["actor_head"]["bias"])))
        model.value_net.weight.copy_(th.as_tensor(np.array(p["critic_head"]["kernel"]).T))
        model.value_net.bias.copy_(th.as_tensor(np.array(p["critic_head"]["bias"])))
    rng = np.random.default_rng(0)
    obs = ((rng.random((64, obs_dim)) < 0.3) * rng.integers(1, 4, (64, obs_dim))).astype(np.float32)
    ids = np.repeat([0, 1], 32)
    torch_probe = TorchProbe(
        model,
        [
            TorchNetwork(
                "actor",
                ("mlp_extractor.policy_net.",),
                "action_net",
                "policy",
                params=("mlp_extractor.policy_net.", "action_net."),
            ),
            TorchNetwork(
                "critic",
                ("mlp_extractor.value_net.",),
                "value_net",
                "value",
                params=("mlp_extractor.value_net.", "value_net."),
            ),
        ],
        {"main": lambda m, o, i: m(o, th.as_tensor(i))},
    )
    jax_probe = actor_critic_probe(net, params)
    settings = PlasticitySettings(probe_size=64, tau=0.1)
    results = []
    for probe, params_of in ((torch_probe, None), (jax_probe, None)):
        del params_of
        tracker = PlasticityTracker(settings)
        tracker.observe(0, obs, 0)
        tracker.probe.task_ids = ids.copy()
        rows = tracker.measure(0, 0, probe)
        results.append(
            {(r["network"], r["metric"]): r["value"] for r in rows if r["layer"] == "all"}
        )
        caps = probe.capture(obs, ids)
        results[-1]["_caps"] = caps
        assert not [r for r in rows if r["reason"] and r["metric"] not in ("churn", "grad_norm")]
    t, j = results
    for key in t:
        if key == "_caps":
            continue
        if math.isnan(t[key]):
            assert math.isnan(j[key]), key
        else:
            assert t[key] == pytest.approx(j[key], rel=1e-5, abs=1e-6), key
    # the per-layer values and the raw features too, layer by layer in order
    for name in ("actor", "critic"):
        tc, jc = t["_caps"][name], j["_caps"][name]
        np.testing.assert_allclose(tc.features, jc.features, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(tc.outputs, jc.outputs, rtol=1e-4, atol=1e-5)
        for ta, ja in zip(tc.activations.values(), jc.activations.values(), strict=True):
            np.testing.assert_allclose(ta, ja, rtol=1e-4, atol=1e-5)
            assert (P.unit_scores(ta) <= 0.1).tolist() == (P.unit_scores(ja) <= 0.1).tolist()
    assert t[("actor", "dormant_ratio")] > 0  # tau 0.1 finds some: the check bites
    # an own loop's JAX probe: the parameters through a callable (read at each point)
    holder = {"p": params}
    live = actor_critic_probe(net, lambda: holder["p"])
    before = live.parameters()["actor"]["params.actor_dense1.kernel"].copy()
    holder["p"] = jax.tree.map(lambda a: a + 1.0, params)
    after = live.parameters()["actor"]["params.actor_dense1.kernel"]
    np.testing.assert_allclose(after, before + 1.0, rtol=1e-6)


# -- bad input and failures ---------------------------------------------------------------
@pytest.mark.parametrize("tau", [0.0, 1.0, -0.1, 1.5, True, "0.1"])
def test_a_threshold_outside_0_1_is_refused_in_one_line(tau):
    with pytest.raises(ValueError, match=r"plasticity_tau must be a number in \(0, 1\), got") as e:
        PlasticitySettings(tau=tau)
    assert "\n" not in str(e.value)


def test_a_probe_size_of_0_is_refused_in_one_line():
    with pytest.raises(ValueError, match="plasticity_probe_size must be an integer >= 1, got 0"):
        PlasticitySettings(probe_size=0)


def test_a_module_without_a_readable_layer_is_refused_in_one_line():
    net = th.nn.Sequential(th.nn.Linear(2, 3), th.nn.Linear(3, 2))
    with pytest.raises(ValueError, match="has no layer the plasticity diagnostics can read") as e:
        TorchProbe(net, [TorchNetwork("actor", ("",), "1", "policy")])
    assert "\n" not in str(e.value)


def test_a_failing_diagnostic_is_logged_as_nan_with_its_reason():
    class Broken:
        def capture(self, obs, task_ids):
            raise RuntimeError("boom")

        def parameters(self):
            return {"actor": {"w": np.ones(3)}}

        def gradient_norms(self):
            return {}

    logged = []
    tracker = PlasticityTracker(log=logged.extend)
    assert math.isnan(_whole(tracker.measure(0, 0, Broken()), "dormant_ratio"))
    tracker.observe(0, X, 0)
    rows = tracker.measure(5, 0, Broken())
    row = next(r for r in rows if r["metric"] == "stable_rank")
    assert math.isnan(row["value"]) and "RuntimeError: boom" in row["reason"]
    assert _whole(rows, "weight_norm") == pytest.approx(1.0)  # what could be computed is
    assert logged[-len(rows) :] == rows

    class Dead:  # all-zero features: ranks are NaN with a reason, the run goes on
        def capture(self, obs, task_ids):
            z = np.zeros((len(task_ids), 4))
            return {"actor": Capture({"l": z}, z, np.zeros((len(task_ids), 2)), "policy")}

        def parameters(self):
            return {}

        def gradient_norms(self):
            return {}

    rows = tracker.measure(6, 0, Dead())
    assert _whole(rows, "dormant_ratio") == 1.0  # every unit silent: every unit dormant
    row = next(r for r in rows if r["metric"] == "stable_rank")
    assert math.isnan(row["value"]) and row["reason"]


# -- the reference implementations' values, pinned ------------------------------------------
def test_reference_pins():
    """Ours against the values Plasticine's ``plasticine_metrics`` and ReDo's
    ``weight_recyclers.py`` gave on the same weights and batches
    (``python -m benchmarks.parity.plasticity_reference --pin``; commits in the pin file)."""
    import json

    from benchmarks.parity.plasticity_cases import CASES, our_diagnostics

    pins = json.loads((TESTS / "golden" / "plasticity_reference.json").read_text())
    assert set(pins["cases"]) == set(CASES)
    for case, refs in pins["cases"].items():
        mine = our_diagnostics(case)
        for key, ref in refs.items():
            # float32 references (torch SVD, float32 sums) against our float64 math
            assert mine[key] == pytest.approx(ref, rel=1e-5, abs=1e-6), (case, key)
    # the two poolings differ where layers differ in width: the option is not cosmetic
    assert pins["cases"]["mlp"]["dormant_redo@0.025"] != pytest.approx(
        pins["cases"]["mlp"]["dormant_plasticine@0.025"]
    )
