"""The plasticity remedies' torch library (``baselines_sb3.remedies``, issue 54): each
remedy on planted cases whose answer is known, the recyclable layers of the package's
policies, CReLU, and ours against the reference code's pinned results
(``python -m benchmarks.parity.plasticity_reference --only remedies --pin``)."""

from __future__ import annotations

import copy
import doctest
import json
import math

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from torch import nn

from baselines_sb3 import remedies as R
from baselines_sb3.networks import FEATURE_EXTRACTORS, CReLU, SeparateTrunks
from baselines_sb3.policies import ContinualPolicy
from tests.helpers import REPO

IMAGE = spaces.Box(0, 255, (3, 48, 48), np.uint8)


def _cnn_policy(network: str, net_arch=(16,)) -> ContinualPolicy:
    return ContinualPolicy(
        IMAGE,
        spaces.Discrete(4),
        lambda _: 1e-3,
        net_arch=list(net_arch),
        features_extractor_class=FEATURE_EXTRACTORS[network],
        features_extractor_kwargs={"features_dim": 32},
    )


def _meal_policy(activation=nn.ReLU, layer_norm=True, tasks=3) -> ContinualPolicy:
    obs = spaces.Dict(
        {"obs": spaces.Box(0, 1, (12,), np.float32), "task_id": spaces.Discrete(tasks)}
    )
    return ContinualPolicy(
        obs,
        spaces.Discrete(4),
        lambda _: 1e-3,
        net_arch=[16, 16],
        num_tasks=tasks,
        multi_head=True,
        task_id_input=True,
        trunk_layer_norm=layer_norm,
        activation_fn=activation,
        ortho_init=True,
    )


def _meal_obs(n=32, tasks=3, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "obs": th.as_tensor(rng.random((n, 12)).astype(np.float32)),
        "task_id": th.as_tensor(rng.integers(0, tasks, n)),
    }


def _adam_steps(net: nn.Module, opt, x: th.Tensor, steps: int = 2) -> None:
    for _ in range(steps):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()


def _state(opt) -> dict:
    return {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}


# -- ReDo ------------------------------------------------------------------------------------------
def test_recycle_dormant_docstring_example_runs():
    result = doctest.testmod(R.redo, verbose=False)
    assert result.attempted >= 5 and result.failed == 0


def test_planted_dead_units_recycled_and_nothing_else_changes():
    th.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 3))
    x = th.randn(128, 6)
    opt = th.optim.Adam(net.parameters(), lr=1e-3)
    _adam_steps(net, opt, x)
    with th.no_grad():
        net[0].bias[[2, 7]] = -1e3  # units 2 and 7 of layer 0 never fire
        net[2].bias.fill_(1.0)  # the others of layer 2 always do
        net[2].bias[4] = -1e3  # unit 4 of layer 2
    before = {k: v.clone() for k, v in net.state_dict().items()}
    moments = _state(opt)
    masks = R.dormant_masks(net, x, 0.025)
    assert {k: v.nonzero().flatten().tolist() for k, v in masks.items()} == {"0": [2, 7], "2": [4]}
    counts = R.recycle_dormant(net, x, 0.025, opt, generator=th.Generator().manual_seed(1))
    assert counts == {"0": 2, "2": 1}
    after = net.state_dict()
    w0, w2, w4 = (before[f"{i}.weight"] for i in (0, 2, 4))
    # incoming rows re-drawn (Kaiming-uniform bounds of Plasticine), nothing else of layer 0
    rows0 = th.ones(10, dtype=th.bool)
    rows0[[2, 7]] = False
    assert th.equal(after["0.weight"][rows0], w0[rows0])
    assert th.equal(after["0.bias"][rows0], before["0.bias"][rows0])
    assert (after["0.weight"][[2, 7]] != w0[[2, 7]]).all()
    assert after["0.weight"][[2, 7]].abs().max() <= math.sqrt(6 / 6)
    assert after["0.bias"][[2, 7]].abs().max() <= 1 / math.sqrt(6)
    # layer 2: its columns 2, 7 zeroed (layer 0's targets), then its row 4 re-drawn
    expected = w2.clone()
    expected[:, [2, 7]] = 0.0
    rows2 = th.arange(8) != 4
    assert th.equal(after["2.weight"][rows2], expected[rows2])
    assert (after["2.weight"][4] != 0).all()
    # layer 4: only column 4 zeroed; its bias untouched
    expected = w4.clone()
    expected[:, 4] = 0.0
    assert th.equal(after["4.weight"], expected)
    assert th.equal(after["4.bias"], before["4.bias"])
    # the moments of exactly those rows and columns are zeroed; steps kept
    for p in net.parameters():
        old, new = moments[id(p)], opt.state[p]
        assert th.equal(old["step"], new["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            zeroed = (new[key] == 0) & (old[key] != 0)
            changed = new[key] != old[key]
            assert th.equal(changed, zeroed)
    m = opt.state[net[2].weight]["exp_avg"]
    assert (m[4] == 0).all() and (m[:, [2, 7]] == 0).all()
    assert (m[[0, 2, 3, 5, 6, 7]][:, [0, 1, 3, 4, 5, 6, 8, 9]] != 0).any()
    assert (opt.state[net[0].bias]["exp_avg"][[2, 7]] == 0).all()


def test_recycle_without_moment_reset_and_with_generator_is_reproducible():
    def run(reset_moments, seed):
        th.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = th.optim.Adam(net.parameters())
        x = th.randn(64, 5)
        _adam_steps(net, opt, x)
        with th.no_grad():
            net[0].bias[3] = -1e3
        moments = _state(opt)
        R.recycle_dormant(net, x, 0.1, opt, reset_moments, th.Generator().manual_seed(seed))
        return net, opt, moments

    net, opt, moments = run(False, 5)
    for p in net.parameters():
        assert all(th.equal(moments[id(p)][k], v) for k, v in opt.state[p].items())
    again, _, _ = run(False, 5)
    other, _, _ = run(False, 6)
    assert th.equal(net[0].weight, again[0].weight)
    assert not th.equal(net[0].weight[3], other[0].weight[3])


def test_tau_must_be_positive():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    with pytest.raises(ValueError, match="tau must be > 0"):
        R.dormant_masks(net, th.randn(4, 2), 0.0)


# -- the recyclable layers of our policies ---------------------------------------------------------
@pytest.mark.parametrize(
    "network, names, repeat",
    [
        ("shallow", ["cnn.0", "cnn.2", "cnn.4", "linear.0"], 4),
        ("a2c-ppo", ["cnn.0", "cnn.2", "cnn.4", "linear.0"], 4),
        ("impala-deep", [f"cnn.{i}.conv0" for i in (2, 3, 6, 7, 10, 11)] + ["linear.0"], None),
        ("residual", [f"cnn.{i}.conv0" for i in (2, 3, 6, 7, 10, 11)] + ["linear.0"], None),
    ],
)
def test_policy_links_of_the_cnn_extractors(network, names, repeat):
    policy = _cnn_policy(network)
    links = R.policy_links(policy)
    extractor = [link for link in links if link.name.startswith("features_extractor.")]
    assert [link.name.removeprefix("features_extractor.") for link in extractor] == names
    last = extractor[-1]  # the shared features feed both trunks: both are targets
    mlp = policy.mlp_extractor
    assert last.targets == (mlp.policy_net[0], mlp.value_net[0])
    assert [link.name for link in links[len(extractor) :]] == [
        "mlp_extractor.policy_net.0",
        "mlp_extractor.value_net.0",
    ]
    assert links[-2].targets == (policy.action_net,) and links[-1].targets == (policy.value_net,)
    if repeat is not None:  # conv -> flatten -> linear: one column per position
        assert extractor[2].repeat == repeat
    else:  # residual networks: only conv0 -> relu -> conv1 inside each block
        modules = dict(policy.named_modules())
        for link in extractor[:-1]:
            block = modules[link.name.rsplit(".", 1)[0]]
            assert link.hook == "source" and link.source is block.conv0
            assert link.targets == (block.conv1,)
    th.manual_seed(0)
    obs = np.random.default_rng(0).integers(0, 256, (6, *IMAGE.shape)).astype(np.uint8)
    masks = R.dormant_masks(policy, obs, 0.025)
    assert set(masks) == {link.name for link in links}


def test_conv_to_linear_and_shared_features_zero_every_target_column():
    policy = _cnn_policy("shallow")
    links = {link.name: link for link in R.policy_links(policy)}
    cnn = policy.features_extractor.cnn
    with th.no_grad():
        cnn[4].bias[5] = -1e4  # a dead channel of the last conv
        policy.features_extractor.linear[0].bias[9] = -1e4  # a dead feature
    obs = np.random.default_rng(1).integers(0, 256, (8, *IMAGE.shape)).astype(np.uint8)
    masks = R.dormant_masks(policy, obs, 0.025)
    assert masks["features_extractor.cnn.4"][5] and masks["features_extractor.linear.0"][9]
    R.recycle_dormant(policy, obs, 0.025, policy.optimizer)
    lin = policy.features_extractor.linear[0].weight
    hw = links["features_extractor.cnn.4"].repeat
    kept = ~masks["features_extractor.linear.0"]  # the recycled rows are re-drawn whole
    assert (lin[kept][:, 5 * hw : 6 * hw] == 0).all()  # channel-first: 5*HW .. 6*HW - 1
    assert (lin[kept][:, : 5 * hw] != 0).any()
    for trunk in (policy.mlp_extractor.policy_net, policy.mlp_extractor.value_net):
        assert (trunk[0].weight[:, 9] == 0).all()


def test_meal_trunks_links_and_crelu_columns():
    policy = _meal_policy()
    links = R.policy_links(policy)
    assert [link.name for link in links] == [
        "mlp_extractor.policy_net.0",
        "mlp_extractor.policy_net.3",
        "mlp_extractor.value_net.0",
        "mlp_extractor.value_net.3",
    ]
    assert links[1].targets == (policy.action_net,) and links[3].targets == (policy.value_net,)
    assert policy._sparse_features  # the sparse first layer still runs the hooked ReLUs
    obs = {k: v.numpy() for k, v in _meal_obs().items()}
    assert set(R.recycle_dormant(policy, obs, 0.1, policy.optimizer)) == {x.name for x in links}
    crelu = _meal_policy(CReLU, layer_norm=False)
    link = R.policy_links(crelu)[0]
    assert link.width == 2 and link.targets[0].in_features == 32
    with th.no_grad():
        link.source.bias[6] = 0.0
        link.source.weight[6] = 0.0  # constant 0: both halves 0, dormant
    mask = R.dormant_masks(crelu, _meal_obs(), 0.025)[link.name]
    assert mask.nonzero().flatten().tolist() == [6]
    R.recycle_dormant(crelu, _meal_obs(), 0.025)
    w = link.targets[0].weight
    assert (w[:, [6, 16 + 6]] == 0).all() and (w[:, [5, 16 + 5]] != 0).all()


def test_a_network_without_recyclable_layer_is_refused():
    policy = ContinualPolicy(
        spaces.Box(0, 1, (3,)), spaces.Discrete(2), lambda _: 1e-3, net_arch=[]
    )
    with pytest.raises(ValueError, match="^ContinualPolicy has no recyclable layer"):
        R.policy_links(policy)


# -- shrink and perturb, resets --------------------------------------------------------------------
def test_shrink_perturb_hand_worked():
    p = [nn.Parameter(th.tensor([1.0, 2.0])), nn.Parameter(th.tensor([[4.0]]))]
    initial = [th.tensor([10.0, -10.0]), th.tensor([[0.0]])]
    R.shrink_perturb(p, initial, shrink=0.5, perturb=0.25)
    assert p[0].tolist() == [3.0, -1.5] and p[1].tolist() == [[2.0]]
    noise = [th.tensor([4.0, 4.0]), th.tensor([[8.0]])]
    R.shrink_perturb(p, initial, shrink=1.0, perturb=0.5, noise=noise)  # noise replaces theta0
    assert p[0].tolist() == [5.0, 0.5] and p[1].tolist() == [[6.0]]
    with pytest.raises(ValueError, match="2 parameters but 1"):
        R.shrink_perturb(p, initial[:1], 0.5, 0.5)


def test_fresh_init_like_uses_the_policy_scheme_and_leaves_it_alone():
    policy = _meal_policy()
    before = [p.detach().clone() for p in policy.parameters()]
    fresh = R.fresh_init_like(policy, th.Generator().manual_seed(3))
    again = R.fresh_init_like(policy, th.Generator().manual_seed(3))
    assert all(th.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert all(th.equal(a, b) for a, b in zip(fresh, again, strict=True))
    names = [n for n, _ in policy.named_parameters()]
    values = dict(zip(names, fresh, strict=True))
    assert [v.shape for v in fresh] == [p.shape for p in before]
    # SB3's orthogonal gains: value head 1, action head 0.01, trunks sqrt(2); LayerNorm 1/0
    v = values["value_net.weight"]
    assert th.allclose(v @ v.T, th.eye(3), atol=1e-5)
    a = values["action_net.weight"]
    assert th.allclose(a @ a.T, 1e-4 * th.eye(12), atol=1e-7)
    assert (values["action_net.bias"] == 0).all()
    assert (values["mlp_extractor.policy_net.2.weight"] == 1).all()
    first = names.index("mlp_extractor.policy_net.0.weight")
    assert not th.equal(fresh[first], before[first])


def test_reset_heads_multi_head_touches_only_the_task_slice():
    policy = _meal_policy()
    opt = policy.optimizer
    obs = _meal_obs()
    opt.zero_grad()
    logits, values = policy.logits_and_values(obs)
    (logits.pow(2).mean() + values.pow(2).mean()).backward()
    opt.step()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    moments = _state(opt)
    with pytest.raises(ValueError, match="task_id"):
        R.reset_heads(policy, opt)
    touched = R.reset_heads(policy, opt, task_id=1, generator=th.Generator().manual_seed(0))
    assert touched == ["value_net.weight", "value_net.bias", "action_net.weight", "action_net.bias"]
    after = policy.state_dict()
    changed = sorted(k for k in after if not th.equal(after[k], before[k]))
    assert changed == ["action_net.bias", "action_net.weight", "value_net.bias", "value_net.weight"]
    rows = th.zeros(12, dtype=th.bool)
    rows[4:8] = True  # task 1's 4 actions
    for name, sliced in (("action_net", rows), ("value_net", th.arange(3) == 1)):
        for part in ("weight", "bias"):
            new, old = after[f"{name}.{part}"], before[f"{name}.{part}"]
            assert th.equal(new[~sliced], old[~sliced]) and (new[sliced] != old[sliced]).all()
            p = getattr(getattr(policy, name), part)
            m, m0 = opt.state[p]["exp_avg"], moments[id(p)]["exp_avg"]
            assert (m[sliced] == 0).all() and th.equal(m[~sliced], m0[~sliced])
    # the slice holds what freshly drawn whole layers hold there (value head, then action)
    g = th.Generator().manual_seed(0)
    fresh = {}
    for name, shape, gain in (("value_net", (3, 16), 1.0), ("action_net", (12, 16), 0.01)):
        w = nn.init.kaiming_uniform_(th.empty(shape), a=math.sqrt(5), generator=g)
        nn.init.uniform_(th.empty(shape[0]), -0.25, 0.25, generator=g)
        fresh[name] = nn.init.orthogonal_(w, gain, generator=g)
    assert th.equal(after["action_net.weight"][rows], fresh["action_net"][rows])
    assert th.equal(after["value_net.weight"][1], fresh["value_net"][1])
    assert (after["action_net.bias"][rows] == 0).all()


def test_reset_heads_single_head_and_reset_all_forget_the_optimizer_state():
    policy = _cnn_policy("shallow", net_arch=())
    opt = policy.optimizer
    obs = policy.obs_to_tensor(np.zeros((2, *IMAGE.shape), np.uint8))[0]
    opt.zero_grad()
    sum(t.sum() for t in policy.logits_and_values(obs)).backward()
    opt.step()
    w0 = policy.action_net.weight.detach().clone()
    R.reset_heads(policy, opt)
    assert policy.ortho_init
    a = policy.action_net.weight
    assert not th.equal(a, w0)
    assert th.allclose(a @ a.T, 1e-4 * th.eye(4), atol=1e-7)  # orthogonal, gain 0.01
    heads = [*policy.action_net.parameters(), *policy.value_net.parameters()]
    assert all(p not in opt.state for p in heads)
    assert policy.features_extractor.linear[0].weight in opt.state
    R.reset_all(policy, opt)
    assert not opt.state


def test_reset_heads_draws_as_recreating_the_layer():
    """Re-drawing a head consumes the draws of building it anew (Plasticine's reset):
    PyTorch's default init, then the orthogonal one."""
    policy = _cnn_policy("shallow", net_arch=())
    th.manual_seed(7)
    value = nn.Linear(32, 1)
    nn.init.orthogonal_(value.weight, 1.0)
    action = nn.Linear(32, 4)
    nn.init.orthogonal_(action.weight, 0.01)
    th.manual_seed(7)
    R.reset_heads(policy, None)
    assert th.equal(policy.value_net.weight, value.weight)
    assert th.equal(policy.action_net.weight, action.weight)


# -- plasticity injection --------------------------------------------------------------------------
class _Injector(nn.Module):
    """The paper's injection: the original head frozen, a fresh head ``a`` trained and a
    frozen copy ``b`` of it subtracted. ``detach_b``: stop ``b``'s output gradient as
    Plasticine does (then the input also gets ``a``'s gradient path uncancelled)."""

    def __init__(self, original: nn.Linear, detach_b: bool):
        super().__init__()
        self.original = original.requires_grad_(False)
        self.new_a = nn.Linear(original.in_features, original.out_features)
        self.new_b = copy.deepcopy(self.new_a).requires_grad_(False)
        self.detach_b = detach_b

    def forward(self, x):
        b = self.new_b(x)
        return self.original(x) + self.new_a(x) - (b.detach() if self.detach_b else b)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.action_net = nn.Linear(16, 4)
        self.value_net = nn.Linear(16, 1)

    def forward(self, x):
        h = self.encoder(x)
        return self.action_net(h), self.value_net(h)


def _injection_run(kind: str, train_encoder: bool, steps: int = 10):
    th.manual_seed(0)
    net = _Net()
    if not train_encoder:
        net.encoder.requires_grad_(False)
    rng = np.random.default_rng(0)
    data = [
        (
            th.as_tensor(rng.normal(size=(16, 6)), dtype=th.float32),
            th.as_tensor(rng.integers(0, 4, 16)),
        )
        for _ in range(3 + steps)
    ]

    def step(opt, x, y):
        logits, value = net(x)
        loss = nn.functional.cross_entropy(logits, y) + value.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    opt = th.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=1e-2)
    for x, y in data[:3]:
        step(opt, x, y)
    if kind == "ours":
        R.inject_plasticity(net, opt)
    elif kind != "none":
        th.manual_seed(1)
        net.action_net = _Injector(net.action_net, kind == "plasticine")
        net.value_net = _Injector(net.value_net, kind == "plasticine")
        fresh = th.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=1e-2)
        for p in net.encoder.parameters():
            if p in opt.state:
                fresh.state[p] = opt.state[p]
        opt = fresh
    for x, y in data[3:]:
        step(opt, x, y)
    with th.no_grad():
        return net(th.as_tensor(rng.normal(size=(32, 6)), dtype=th.float32))


def test_plasticity_injection_equals_the_papers_injector():
    def gap(a, b):
        return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))

    for train_encoder in (False, True):
        ours = _injection_run("ours", train_encoder)
        assert gap(ours, _injection_run("paper", train_encoder)) < 1e-5
        assert gap(ours, _injection_run("none", train_encoder)) > 1e-3  # the fresh state counts
    # Plasticine's detach of b's output: same heads, but the encoder also gets the gradient
    # through the fresh a: equal only while the encoder does not train
    assert gap(_injection_run("ours", False), _injection_run("plasticine", False)) < 1e-5
    assert gap(_injection_run("ours", True), _injection_run("plasticine", True)) > 1e-3


# -- continual backprop ----------------------------------------------------------------------------
def _cbp_setup(seed=0):
    th.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    with th.no_grad():
        net[0].bias.fill_(1.0)  # every unit active
        net[2].weight[:, 3] = 0.0  # unit 3 contributes nothing
    opt = th.optim.SGD(net.parameters(), lr=0.0)  # weights stay put: utilities are exact
    return net, opt


def test_cbp_replaces_the_mature_unit_without_outgoing_weights():
    net, opt = _cbp_setup()
    links = R.sequential_links(net)
    cbp = R.ContinualBackprop(links, opt, replacement_rate=0.2, maturity=2, decay=0.9)
    x = th.randn(32, 4)
    w0 = net[0].weight.detach().clone()
    for step in range(1, 4):
        with R.capture_features(links) as feats:
            net(x)
        out = cbp.observe(feats)
        if step < 3:  # ages 1, 2 are not > maturity 2
            assert out["0"].numel() == 0
    assert out["0"].tolist() == [3]
    u = cbp.units["0"]
    assert u.ages.tolist() == [3, 3, 3, 0, 3, 3] and u.util[3] == 0 and u.mean_act[3] == 0
    rows = th.arange(6) != 3
    assert th.equal(net[0].weight[rows], w0[rows]) and not th.equal(net[0].weight[3], w0[3])
    assert net[0].weight[3].abs().max() <= math.sqrt(3 / 4)  # lecun bound
    assert net[0].bias[3] == 0 and (net[2].weight[:, 3] == 0).all()
    assert (net[0].bias[rows] == 1).all()


def test_cbp_zeroes_the_replaced_weights_moments():
    net, _ = _cbp_setup()
    opt = th.optim.Adam(net.parameters(), lr=1e-9)
    links = R.sequential_links(net)
    cbp = R.ContinualBackprop(links, opt, replacement_rate=0.2, maturity=0, decay=0.9)
    x = th.randn(32, 4)
    with R.capture_features(links) as feats:
        net(x).pow(2).mean().backward()
    opt.step()
    out = cbp.observe(feats)
    (unit,) = out["0"].tolist()
    m = opt.state[net[0].weight]["exp_avg"]
    assert (m[unit] == 0).all() and (opt.state[net[0].bias]["exp_avg"][unit] == 0)
    assert (opt.state[net[2].weight]["exp_avg_sq"][:, unit] == 0).all()
    others = [i for i in range(6) if i != unit]
    assert (m[others] != 0).any()


def test_cbp_state_dict_resumes_identically():
    def make():
        net = nn.Sequential(
            nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2)
        )
        opt = th.optim.Adam(net.parameters(), lr=1e-2)
        links = R.sequential_links(net)
        gen = th.Generator().manual_seed(11)
        cbp = R.ContinualBackprop(links, opt, 0.05, 3, 0.95, gen)
        return net, opt, links, cbp, gen

    rng = np.random.default_rng(0)
    batches = [th.as_tensor(rng.normal(size=(16, 5)), dtype=th.float32) for _ in range(40)]

    def train(net, opt, links, cbp, xs):
        out = []
        for x in xs:
            with R.capture_features(links) as feats:
                loss = net(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append({k: v.tolist() for k, v in cbp.observe(feats).items()})
        return out

    th.manual_seed(0)
    net, opt, links, cbp, _ = make()
    train(net, opt, links, cbp, batches[:20])
    saved = copy.deepcopy((net.state_dict(), opt.state_dict(), cbp.state_dict()))
    straight = train(net, opt, links, cbp, batches[20:])
    th.manual_seed(1)  # a fresh start
    net2, opt2, links2, cbp2, _ = make()
    net2.load_state_dict(saved[0])
    opt2.load_state_dict(saved[1])
    cbp2.load_state_dict(saved[2])
    resumed = train(net2, opt2, links2, cbp2, batches[20:])
    assert resumed == straight and any(any(v) for s in straight for v in s.values())
    assert all(th.equal(a, b) for a, b in zip(net.parameters(), net2.parameters(), strict=True))


def test_cbp_refuses_missing_features():
    net, opt = _cbp_setup()
    cbp = R.ContinualBackprop(R.sequential_links(net), opt)
    with pytest.raises(KeyError, match="no features for link"):
        cbp.observe({})


# -- CReLU -----------------------------------------------------------------------------------------
def test_crelu_doubles_the_width_and_the_trunks_size_after_it():
    x = th.tensor([[1.0, -2.0, 0.0]])
    assert CReLU()(x).tolist() == [[1.0, 0.0, 0.0, 0.0, 2.0, 0.0]]
    img = th.randn(2, 3, 4, 4)
    assert CReLU()(img).shape == (2, 6, 4, 4)
    assert th.equal(CReLU()(img)[:, 3:], th.relu(-img))
    trunks = SeparateTrunks(10, [8, 4], True, CReLU, sparse_input=False)
    assert trunks.policy_net[2].normalized_shape == (16,)
    assert trunks.policy_net[3].in_features == 16 and trunks.latent_dim_pi == 8
    policy = _meal_policy(CReLU, layer_norm=False)
    assert policy.action_net.in_features == 32
    logits, values = policy.logits_and_values(_meal_obs())
    assert logits.shape == (32, 4) and values.shape == (32,)


def test_crelu_is_offered_and_read_as_relu_units():
    from baselines_sb3.factory import ACTIVATIONS
    from baselines_sb3.plasticity import ACTIVATION_KINDS, policy_probe

    assert ACTIVATIONS["crelu"] is CReLU and ACTIVATION_KINDS[CReLU] == "relu"
    policy = _meal_policy(CReLU)
    obs = {k: v.numpy() for k, v in _meal_obs(8).items()}
    cap = policy_probe(policy).capture(obs, obs["task_id"])
    acts = cap["actor"].activations
    assert cap["actor"].activation == "relu"
    assert [a.shape[1] for a in acts.values()] == [32, 32]


# -- ours against the reference code ---------------------------------------------------------------
def test_reference_pins():
    """Ours against what Plasticine's ``PlasticineAgent`` (ReDo, shrink-and-perturb, head
    reset) and GnT (continual backprop) gave on the same weights, batches and seeds
    (``benchmarks/parity/remedies_cases.py``; commits in the pin file). The script checks
    bit-for-bit identity on its machine; here the draws (masks, re-drawn rows, replaced
    units) must match exactly and the arithmetic within float32 rounding."""
    from benchmarks.parity import remedies_cases as RC

    pins = json.loads((REPO / "tests" / "golden" / "remedies_reference.json").read_text())
    th.set_num_threads(1)
    assert RC.ours_redo(RC.twin(), RC.observations()) == pins["redo"]
    snp = RC.twin()
    RC.ours_snp(snp, RC.initial_twin())
    _close(RC.param_sums(snp, ("encoder", "actor", "critic")), pins["shrink_perturb"], 1e-9)
    reset = RC.twin()
    RC.ours_reset(reset)
    _close(RC.param_sums(reset, ("actor", "critic")), pins["reset_heads"], 1e-5)
    for case, ref in pins["cbp"].items():
        mine = RC.ours_cbp(case)
        assert mine["replaced"] == ref["replaced"], case
        _close(mine["stats"], ref["stats"], 1e-5)
        _close(mine["weights"], ref["weights"], 1e-5)


def _close(mine: dict, ref: dict, rel: float) -> None:
    assert mine.keys() == ref.keys()
    for key, value in ref.items():
        if isinstance(value, dict):
            _close(mine[key], value, rel)
        else:
            assert mine[key] == pytest.approx(value, rel=rel, abs=1e-6), key
