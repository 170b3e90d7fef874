"""The plasticity remedies of ``ppo-jax`` (``baselines_jax.remedies``, issue 54) against
hand-worked numpy: ReDo recycles exactly the planted dead units, shrink-and-perturb and
the resets touch what they say, continual backprop is GnT's step (``lop/algos/gnt.py``)
and replaces a unit without outgoing weights once it is mature; then the remedies inside
``JaxIPPO``: their cadence, no remedy leaving the run as it was, a resumed state equal to
the uninterrupted one, and seeds vmapped equal to single-seed runs.

The numpy references are written in torch's layout (``weight (out, in)``) so that the
torch side (``baselines_sb3.remedies``) can be held to the same numbers.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from baselines_jax import IPPOConfig, JaxIPPO
from baselines_jax import remedies as rem
from baselines_jax.network import ActorCritic
from baselines_jax.plasticity import actor_critic_apply
from baselines_jax.ppo import make_optimizer
from cl_suites.remedies import RemedyConfig

OBS = 5


def _net(**kw) -> ActorCritic:
    base = dict(action_dim=3, num_tasks=2, hidden_sizes=(8, 8), task_id_input=False)
    return ActorCritic(**{**base, **kw})


def _init(net: ActorCritic, seed: int = 0):
    return net.init(jax.random.PRNGKey(seed), jnp.zeros((1, OBS)))


def _np(tree):
    return jax.tree.map(lambda x: np.array(x, copy=True), tree)


def _set(params, module, leaf, fn):
    """A copy of ``params`` with ``params[module][leaf] = fn(numpy copy)``."""
    out = jax.tree.map(lambda x: x, params)
    value = np.array(out["params"][module][leaf], copy=True)
    out["params"][module][leaf] = jnp.asarray(fn(value))
    return out


def _adam_state(params, fill: float = 1.0):
    """An optax state of ``make_optimizer`` with every moment ``fill`` and count 7."""
    tx = make_optimizer(IPPOConfig(), 10)
    state = tx.init(params)
    adam = state[1][0]
    adam = adam._replace(
        count=jnp.int32(7),
        mu=jax.tree.map(lambda m: jnp.full_like(m, fill), adam.mu),
        nu=jax.tree.map(lambda m: jnp.full_like(m, 2 * fill), adam.nu),
    )
    return (state[0], (adam, state[1][1]))


def _moments(opt_state):
    adam = opt_state[1][0]
    return _np(adam.mu["params"]), _np(adam.nu["params"]), int(adam.count)


# -- ReDo --------------------------------------------------------------------------------
PLANTED = {"actor_dense1": [2, 5], "actor_dense2": [1], "critic_dense2": [3]}


def _planted(net):
    """Parameters with the units of :data:`PLANTED` dead: incoming weights 0, bias -1, so
    their ReLU output is 0 on every input."""
    params = _init(net)
    for layer, units in PLANTED.items():
        params = _set(params, layer, "kernel", lambda k, u=units: _zero_cols(k, u))
        params = _set(params, layer, "bias", lambda b, u=units: _fill(b, u, -1.0))
    return params


def _zero_cols(k, units):
    k[:, units] = 0.0
    return k


def _fill(b, units, value):
    b[units] = value
    return b


def test_redo_recycles_exactly_the_planted_dead_units_and_nothing_else():
    net = _net()
    params = _planted(net)
    x = jax.random.normal(jax.random.PRNGKey(1), (64, OBS))
    _, _, acts = rem.trunk_activations(net, params, x, 0)
    masks = rem.dormant_masks(acts, 0.025)
    found = {k: np.flatnonzero(np.asarray(m)).tolist() for k, m in masks.items()}
    assert found == {"actor_dense1": [2, 5], "actor_dense2": [1], "critic_dense1": [],
                     "critic_dense2": [3]}  # fmt: skip
    # hand-worked scores: mean |h| over the batch / (layer mean + 1e-9)
    h = np.asarray(acts["actor_dense1"])
    score = np.abs(h).mean(0)
    np.testing.assert_allclose(
        np.asarray(rem.unit_scores(acts)["actor_dense1"]), score / (score.mean() + 1e-9), 1e-6
    )

    layers = rem.layers_of(net)
    uniforms = rem.draw_uniforms(jax.random.PRNGKey(2), params, layers)
    opt = _adam_state(params)
    new, new_opt, counts = rem.redo(net, params, opt, x, 0, jax.random.PRNGKey(2), 0.025, True)
    assert {k: int(v) for k, v in counts.items()} == {k: len(v) for k, v in found.items()}
    old, got = _np(params)["params"], _np(new)["params"]
    expect = _np(params)["params"]
    for layer, units in PLANTED.items():  # Plasticine's bounds: sqrt(6 / fan_in), 1/sqrt(fan_in)
        fan_in = old[layer]["kernel"].shape[0]
        ku, bu = (np.asarray(u) for u in uniforms[layer])
        wb, bb = math.sqrt(6.0 / fan_in), 1.0 / math.sqrt(fan_in)
        expect[layer]["kernel"][:, units] = (ku * np.float32(2 * wb) - np.float32(wb))[:, units]
        expect[layer]["bias"][units] = (bu * np.float32(2 * bb) - np.float32(bb))[units]
    # outgoing rows zeroed: actor_dense1 -> actor_dense2 (but its recycled column 1 is a new
    # draw: the later layer's re-draw wins), actor_dense2 -> actor_head, critic_dense2 ->
    # critic_head (all task slices)
    rows_zero = {"actor_dense2": [2, 5], "actor_head": [1], "critic_head": [3]}
    for module, rows in rows_zero.items():
        expect[module]["kernel"][rows, :] = 0.0
    expect["actor_dense2"]["kernel"][[2, 5], 1] = got["actor_dense2"]["kernel"][[2, 5], 1]
    assert np.all(got["actor_dense2"]["kernel"][[2, 5], 1] != 0)
    for module in old:
        for leaf in old[module]:
            np.testing.assert_allclose(
                got[module][leaf], expect[module][leaf], rtol=1e-6, atol=1e-7,
                err_msg=f"{module}.{leaf}",
            )  # fmt: skip
    # Adam: mu/nu zero at the incoming columns, biases and outgoing rows; the count stays
    mu, nu, count = _moments(new_opt)
    assert count == 7
    for module in old:
        for leaf in old[module]:
            changed = np.zeros(old[module][leaf].shape, bool)
            if module in PLANTED and leaf == "kernel":
                changed[:, PLANTED[module]] = True
            elif module in PLANTED:
                changed[PLANTED[module]] = True
            if module in rows_zero and leaf == "kernel":
                changed[rows_zero[module], :] = True
            np.testing.assert_array_equal(mu[module][leaf], np.where(changed, 0.0, 1.0))
            np.testing.assert_array_equal(nu[module][leaf], np.where(changed, 0.0, 2.0))
    # redo_reset_moments=False: the optimizer state is left as it was (Plasticine)
    _, kept, _ = rem.redo(net, params, opt, x, 0, jax.random.PRNGKey(2), 0.025, False)
    for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(opt), strict=True):
        np.testing.assert_array_equal(a, b)


def test_redo_on_a_shared_backbone_zeroes_both_heads_rows():
    net = _net(shared_backbone=True, hidden_sizes=(6,))
    params = _init(net)
    params = _set(params, "common_dense1", "kernel", lambda k: _zero_cols(k, [4]))
    params = _set(params, "common_dense1", "bias", lambda b: _fill(b, [4], -1.0))
    assert [ly.consumers for ly in rem.layers_of(net)] == [("actor_head", "critic_head")]
    x = jax.random.normal(jax.random.PRNGKey(1), (32, OBS))
    new, _, counts = rem.redo(
        net, params, _adam_state(params), x, 1, jax.random.PRNGKey(0), 0.025, True
    )
    assert int(counts["common_dense1"]) == 1
    for head in ("actor_head", "critic_head"):
        k = np.asarray(new["params"][head]["kernel"])
        assert np.all(k[4] == 0) and np.all(
            k[:4] == np.asarray(params["params"][head]["kernel"])[:4]
        )


def test_crelu_doubles_the_width_and_counts_as_relu_units():
    net = _net(activation="crelu", hidden_sizes=(4, 3))
    params = _init(net)
    assert params["params"]["actor_dense2"]["kernel"].shape == (8, 3)  # reads 2 x 4
    assert params["params"]["actor_head"]["kernel"].shape == (6, 6)
    assert params["params"]["actor_ln1"]["scale"].shape == (8,)
    x = jax.random.normal(jax.random.PRNGKey(1), (16, OBS))
    _, _, acts = rem.trunk_activations(net, params, x, 0)
    h = np.asarray(acts["actor_dense1"])
    pre = np.asarray(x) @ np.asarray(params["params"]["actor_dense1"]["kernel"])
    np.testing.assert_allclose(h, np.concatenate([np.maximum(pre, 0), np.maximum(-pre, 0)], -1),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    inter = actor_critic_apply(net)(params, np.asarray(x), np.zeros(16, np.int32))
    assert inter["actor"]["activation"] == "relu"
    assert inter["actor"]["activations"]["actor_dense1"].shape == (16, 8)
    # ReDo on CReLU: a unit scores the mean over its two outputs; only a unit whose
    # pre-activation is always 0 is dormant (a negative one feeds relu(-x))
    params = _set(params, "actor_dense1", "kernel", lambda k: _zero_cols(k, [1, 2]))
    params = _set(params, "actor_dense1", "bias", lambda b: _fill(_fill(b, [1], 0.0), [2], -3.0))
    _, _, acts = rem.trunk_activations(net, params, x, 0)
    masks = rem.dormant_masks(acts, 0.025, per_unit=2)
    assert np.flatnonzero(np.asarray(masks["actor_dense1"])).tolist() == [1]
    layers = rem.layers_of(net)
    new, touched = rem.recycle(
        params, masks, rem.draw_uniforms(jax.random.PRNGKey(3), params, layers), layers, 2
    )
    k2 = np.asarray(new["params"]["actor_dense2"]["kernel"])
    assert np.all(k2[[1, 5]] == 0) and np.all(k2[[0, 2, 3, 4, 6, 7]] != 0)  # unit 1: rows 1, 4+1
    assert np.asarray(touched["params"]["actor_dense2"]["kernel"])[[1, 5]].all()


# -- shrink-and-perturb, reset, injection ------------------------------------------------
def test_shrink_and_perturb_hand_worked():
    params = {"params": {"a": {"kernel": jnp.array([[2.0, -4.0]]), "bias": jnp.array([1.0])}}}
    noise = {"params": {"a": {"kernel": jnp.array([[8.0, 0.0]]), "bias": jnp.array([-2.0])}}}
    out = rem.shrink_perturb(params, noise, 0.5, 0.25)
    np.testing.assert_array_equal(out["params"]["a"]["kernel"], [[3.0, -2.0]])  # 1 + 2, -2 + 0
    np.testing.assert_array_equal(out["params"]["a"]["bias"], [0.0])  # 0.5 - 0.5
    # Plasticine's factors on a real tree: theta * 0.999999 + 1e-6 * theta_0, in float32
    net = _net()
    theta, theta0 = _init(net, 1), _init(net, 2)
    out = rem.shrink_perturb(theta, theta0, 0.999999, 1e-6)
    for a, p, n in zip(jax.tree.leaves(out), jax.tree.leaves(theta), jax.tree.leaves(theta0),
                       strict=True):  # fmt: skip
        want = np.asarray(p) * np.float32(0.999999) + np.float32(1e-6) * np.asarray(n)
        np.testing.assert_allclose(a, want, rtol=1e-7, atol=1e-12)


def test_reset_of_a_multi_head_network_touches_only_the_next_tasks_slice():
    net = _net(num_tasks=3, action_dim=2)
    params, fresh = _init(net, 0), _init(net, 9)
    new, touched = rem.reset(params, fresh, "heads", 1, num_tasks=3, multi_head=True)
    old, got, f = _np(params)["params"], _np(new)["params"], _np(fresh)["params"]
    cols = {"actor_head": [2, 3], "critic_head": [1]}  # task 1's slice: 2 actions, 1 value
    for module in old:
        for leaf in old[module]:
            want = old[module][leaf].copy()
            if module in cols:
                want[..., cols[module]] = f[module][leaf][..., cols[module]]
            np.testing.assert_array_equal(got[module][leaf], want, err_msg=f"{module}.{leaf}")
            mask = np.asarray(touched["params"][module][leaf])
            assert mask.sum() == (
                np.ones_like(mask)[..., cols[module]].sum() if module in cols else 0
            )
    # Adam moments of the reset entries zeroed, nothing else
    mu, _, _ = _moments(rem.zero_moments(_adam_state(params), touched))
    assert np.all(mu["actor_head"]["kernel"][:, [2, 3]] == 0)
    assert np.all(mu["actor_head"]["kernel"][:, [0, 1, 4, 5]] == 1)
    # single head: the whole head; "all": every layer (a multi-head network: the other
    # tasks' head slices kept)
    single = _net(multi_head=False)
    p1, f1 = _init(single, 0), _init(single, 9)
    new1, _ = rem.reset(p1, f1, "heads", 0, num_tasks=2, multi_head=False)
    np.testing.assert_array_equal(new1["params"]["actor_head"]["kernel"],
                                  f1["params"]["actor_head"]["kernel"])  # fmt: skip
    np.testing.assert_array_equal(new1["params"]["actor_dense1"]["kernel"],
                                  p1["params"]["actor_dense1"]["kernel"])  # fmt: skip
    every, _ = rem.reset(params, fresh, "all", 2, num_tasks=3, multi_head=True)
    np.testing.assert_array_equal(every["params"]["critic_dense2"]["kernel"],
                                  fresh["params"]["critic_dense2"]["kernel"])  # fmt: skip
    head = np.asarray(every["params"]["actor_head"]["kernel"])
    np.testing.assert_array_equal(head[:, 4:], f["actor_head"]["kernel"][:, 4:])
    np.testing.assert_array_equal(head[:, :4], old["actor_head"]["kernel"][:, :4])


def test_injection_zeroes_the_heads_moments_and_keeps_the_count():
    params = _init(_net())
    mu, nu, count = _moments(rem.inject(_adam_state(params)))
    assert count == 7
    for module in mu:
        for leaf in mu[module]:
            head = module in rem.HEADS
            assert np.all(mu[module][leaf] == (0.0 if head else 1.0)), module
            assert np.all(nu[module][leaf] == (0.0 if head else 2.0)), module


# -- continual backprop ------------------------------------------------------------------
def gnt_step(weights, biases, state, acts, uniforms, layers, rate, maturity, decay, *,
             bound, counts=None, accumulate=False, correct_bias=False):  # fmt: skip
    """GnT's ``test_features`` + ``gen_new_features`` (``lop/algos/gnt.py``) in numpy, torch
    layout (``weights[name] (out, in)``), one output per unit, float32: ``accumulate``
    carries fractions (else a fraction below 1 is one unit when ``counts[name] <=`` it);
    ``correct_bias`` adds the mean activation read before it is zeroed (gnt.py zeroes it
    first: no correction); ``bound(fan_in)``; ties to the lower index."""
    f32 = np.float32
    util, mean_act, age, acc = ({k: np.array(v, copy=True) for k, v in s.items()} for s in state)
    chosen, corrected = {}, {}
    for name, consumers in layers:
        h = acts[name]
        age[name] = age[name] + 1
        bc = f32(1) - f32(decay) ** age[name].astype(f32)
        mean_act[name] = mean_act[name] * f32(decay) + (f32(1) - f32(decay)) * h.mean(0)
        out = np.concatenate([weights[c] for c in consumers], 0)
        util[name] = util[name] * f32(decay) + (f32(1) - f32(decay)) * (
            np.abs(out).mean(0) * np.abs(h).mean(0)
        )
        bcu = util[name] / bc
        eligible = np.flatnonzero(age[name] > maturity)
        count = f32(rate) * f32(len(eligible))
        acc[name] = acc[name] + count
        if accumulate:
            n = int(np.floor(acc[name]))
            acc[name] = acc[name] - f32(n)
        else:
            n = int(counts[name] <= count) if count < 1 else int(np.floor(count))
        pick = eligible[np.argsort(bcu[eligible], kind="stable")][:n]
        chosen[name] = pick
        corrected[name] = mean_act[name][pick] / bc[pick]
        util[name][pick] = 0.0
        mean_act[name][pick] = 0.0
    w = {k: np.array(v, copy=True) for k, v in weights.items()}
    b = {k: np.array(v, copy=True) for k, v in biases.items()}
    for name, consumers in layers:
        pick = chosen[name]
        lim = bound(w[name].shape[1])
        w[name][pick, :] = (uniforms[name].T * f32(2 * lim) - f32(lim))[pick, :]
        b[name][pick] = 0.0
        for c in consumers:
            if correct_bias:
                b[c] = b[c] + (w[c][:, pick] * corrected[name]).sum(1)
            w[c][:, pick] = 0.0
        age[name][pick] = 0
    return w, b, (util, mean_act, age, acc), {k: len(v) for k, v in chosen.items()}


def _cbp_case(seed: int = 0):
    net = _net(hidden_sizes=(6, 5))
    params = _init(net, seed)
    layers = rem.layers_of(net)
    rng = np.random.default_rng(seed)
    acts = {ly.name: rng.uniform(0, 2, (7, ly.width)).astype(np.float32) for ly in layers}
    uniforms = {n: np.asarray(ku) for n, (ku, _) in
                rem.draw_uniforms(jax.random.PRNGKey(5), params, layers).items()}  # fmt: skip
    return net, params, layers, acts, uniforms, rng


GNT_VARIANTS = {
    # the paper's RL code (baselines_sb3's defaults): lecun bound, drawn fractions, no
    # bias correction
    "rl": dict(init="lecun", accumulate=False, correct_bias=False),
    "gnt-kaiming": dict(init="kaiming", accumulate=True, correct_bias=True),
}


@pytest.mark.parametrize("variant", sorted(GNT_VARIANTS))
def test_cbp_step_equals_gnt_by_hand(variant):
    options = GNT_VARIANTS[variant]
    _, params, layers, acts, uniforms, rng = _cbp_case()
    state = rem.CBPState(
        util={ly.name: rng.uniform(0, 1, ly.width).astype(np.float32) for ly in layers},
        mean_act={ly.name: rng.uniform(0, 1, ly.width).astype(np.float32) for ly in layers},
        age={ly.name: rng.integers(2, 6, ly.width).astype(np.int32) for ly in layers},
        accumulated={ly.name: np.float32(0.9) for ly in layers},
    )
    # 0.1 x 2..5 eligible: below 1 (drawn: 0.05 replaces one, 0.95 none) or carried
    draws = dict(zip((ly.name for ly in layers), (0.05, 0.95, 0.05, 0.05), strict=True))
    cfg = dict(replacement_rate=0.1, maturity=3, decay=0.9)
    jstate = rem.CBPState(*(jax.tree.map(jnp.asarray, s) for s in state))
    jacts = {k: jnp.asarray(v) for k, v in acts.items()}
    ju = {k: jnp.asarray(v) for k, v in uniforms.items()}
    jdraws = {k: jnp.float32(v) for k, v in draws.items()}
    new, opt, out, counts = rem.cbp_step(
        params, _adam_state(params), jstate, jacts, ju, layers, "relu", **cfg,
        count_uniforms=jdraws, **options,
    )  # fmt: skip
    p = _np(params)["params"]
    weights = {m: p[m]["kernel"].T for m in p if "ln" not in m}
    biases = {m: p[m]["bias"] for m in p if "ln" not in m}
    gain = math.sqrt(2.0) if options["init"] == "kaiming" else 1.0
    w, b, ref, ref_counts = gnt_step(
        weights, biases, state, acts, uniforms, [(ly.name, ly.consumers) for ly in layers],
        cfg["replacement_rate"], cfg["maturity"], cfg["decay"],
        bound=lambda fan_in: gain * math.sqrt(3.0 / fan_in), counts=draws,
        accumulate=options["accumulate"], correct_bias=options["correct_bias"],
    )  # fmt: skip
    assert {k: int(v) for k, v in counts.items()} == ref_counts
    assert sum(ref_counts.values()) >= 2  # the case replaces units in several layers
    assert ref_counts["actor_dense2"] == (1 if options["accumulate"] else 0)  # 0.95 > c
    got = _np(new)["params"]
    for m in weights:
        np.testing.assert_allclose(got[m]["kernel"].T, w[m], rtol=1e-5, atol=1e-6, err_msg=m)
        np.testing.assert_allclose(got[m]["bias"], b[m], rtol=1e-5, atol=1e-6, err_msg=m)
    for mine, theirs in zip(out, ref, strict=True):
        for k in theirs:
            np.testing.assert_allclose(np.asarray(mine[k]), theirs[k], rtol=1e-5, atol=1e-7)
    # the bias correction moves the consumer's bias only when asked
    moved = not np.allclose(got["actor_dense2"]["bias"], p["actor_dense2"]["bias"])
    assert ref_counts["actor_dense1"] > 0 and moved == options["correct_bias"]
    # Adam: the replaced units' incoming columns and biases, their outgoing rows
    mu, _, _ = _moments(opt)
    picked = np.flatnonzero(np.asarray(out.age["actor_dense1"]) == 0)
    assert len(picked) == ref_counts["actor_dense1"] > 0
    assert np.all(mu["actor_dense1"]["kernel"][:, picked] == 0)
    assert np.all(mu["actor_dense2"]["kernel"][picked, :] == 0)
    assert np.all(mu["actor_head"]["bias"] == 1)  # GnT leaves the consumer's bias moments
    kept = rem.cbp_step(
        params, _adam_state(params), jstate, jacts, ju, layers, "relu", **cfg,
        count_uniforms=jdraws, **options, reset_moments=False,
    )[1]  # fmt: skip
    assert _moments(kept)[0]["actor_dense1"]["kernel"].min() == 1  # the RL code's Adam


def test_cbp_replaces_the_unit_without_outgoing_weights_once_mature():
    _, params, layers, acts, uniforms, _ = _cbp_case(1)
    params = _set(params, "actor_dense2", "kernel", lambda k: _fill(k, [4], 0.0))
    state = rem.init_cbp(layers)
    opt = _adam_state(params)
    jacts = {k: jnp.asarray(v) for k, v in acts.items()}
    ju = {k: jnp.asarray(v) for k, v in uniforms.items()}
    draws = {ly.name: jnp.float32(0.5) for ly in layers}
    for step in range(1, 5):  # maturity 3: eligible from the 4th step; 0.2 x 6 units: one
        params, opt, state, counts = rem.cbp_step(
            params, opt, state, jacts, ju, layers, "relu", 0.2, 3, 0.99, count_uniforms=draws
        )
        if step < 4:
            assert all(int(v) == 0 for v in counts.values()), step
    assert int(counts["actor_dense1"]) == 1
    assert np.asarray(state.age["actor_dense1"]).tolist() == [4, 4, 4, 4, 0, 4]
    k1 = np.asarray(params["params"]["actor_dense1"]["kernel"])
    bound = math.sqrt(3.0 / OBS)  # lecun: the RL code's
    np.testing.assert_allclose(k1[:, 4], uniforms["actor_dense1"][:, 4] * 2 * bound - bound, 1e-6)
    assert float(params["params"]["actor_dense1"]["bias"][4]) == 0.0


# -- inside JaxIPPO ----------------------------------------------------------------------
TINY = dict(num_envs=2, num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(16, 16))


@pytest.fixture(scope="module")
def suite():
    from cl_suites.meal.suite import build_suite

    return build_suite("MEAL-2", steps_per_task=2 * 8 * 4, seed=0)  # 4 updates per task


def _learner(suite, seeds, **remedy):
    return JaxIPPO(suite, IPPOConfig(**TINY, remedy=RemedyConfig(**remedy)), seeds)


def _leaves_equal(a, b):
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b),
                            strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), jax.tree_util.keystr(path))


@pytest.fixture(scope="module", params=[
    dict(remedy="redo", redo_every=2, redo_tau=0.5),
    dict(remedy="cbp", cbp_maturity=3, cbp_replacement_rate=0.2),
])  # fmt: skip
def runs(request, suite):
    """Seeds (3, 5) in one program: two train calls of one update, and the same resumed
    from the state dict after the first; seed 5 alone."""
    pair, single = _learner(suite, [3, 5], **request.param), _learner(suite, [5], **request.param)
    s0 = pair.init_state()
    s1, m1 = pair.train(s0, 0, 1)
    s2, m2 = pair.train(s1, 0, 1)
    flat = pair.state_dict(s1)
    resumed, mr = pair.train(pair.load_state_dict(flat), 0, 1)
    a1, _ = single.train(single.init_state(), 0, 1)
    a2, ma = single.train(a1, 0, 1)
    return request.param["remedy"], pair, flat, (s2, m1, m2), (resumed, mr), (a2, ma)


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_a_resumed_state_equals_the_uninterrupted_run(runs):
    remedy, pair, flat, (s2, _, m2), (resumed, mr), _ = runs
    kind = {"redo": "remedy/recycled/", "cbp": "remedy/replaced/"}[remedy]
    if remedy == "cbp":  # its statistics travel in the checkpoint
        assert any(k.startswith(".remedy.cbp.age") for k in flat)
    _leaves_equal(s2, resumed)
    for key in pair.remedy_metrics:
        np.testing.assert_array_equal(np.asarray(m2[key]), np.asarray(mr[key]))
    assert np.asarray(m2["remedy/update"]).tolist() == [[2, 2]]
    acted = [k for k in pair.remedy_metrics if k.startswith(kind)]
    assert len(acted) == 4 and sum(int(np.asarray(m2[k]).sum()) for k in acted) > 0


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_seeds_vmapped_with_a_remedy_equal_single_seed_runs(runs):
    remedy, pair, _, (s2, m1, m2), _, (a2, ma) = runs
    for x, y in zip(jax.tree.leaves(jax.tree.map(lambda v: np.asarray(v)[1], s2)),
                    jax.tree.leaves(a2), strict=True):  # fmt: skip
        np.testing.assert_allclose(x, np.asarray(y)[0], rtol=2e-5, atol=1e-6)
    for key in pair.remedy_metrics:
        np.testing.assert_array_equal(np.asarray(m2[key])[:, 1], np.asarray(ma[key])[:, 0])
    if remedy == "redo":  # redo_every=2: after the 2nd update of the task, not the 1st
        assert np.asarray(m1["remedy/recycled"]).tolist() == [[0, 0]]
        assert np.asarray(m2["remedy/recycled"]).tolist() == [[1, 1]]
        layers = [k for k in pair.remedy_metrics if k.startswith("remedy/recycled/")]
        assert all(int(np.asarray(m1[k]).sum()) == 0 for k in layers)
        assert sum(int(np.asarray(m2[k]).sum()) for k in layers) > 0
    else:  # one count per optimizer step: 2 epochs x 2 minibatches
        assert np.asarray(m2["remedy/replaced/actor_dense1"]).shape == (1, 2, 4)


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_reset_at_the_switch_reinitialises_the_next_tasks_head_slice(suite):
    learner = _learner(suite, [3], remedy="reset")
    state, _ = learner.train(learner.init_state(), 0, 1)
    before = _np(state.params)["params"]
    ended = learner.end_task(state, 0, next_task=1)
    after = _np(ended.params)["params"]
    for module in before:
        for leaf in before[module]:
            a, b = after[module][leaf][0], before[module][leaf][0]
            if module in rem.HEADS:  # 6 actions / 1 value per task: task 1's columns new
                cut = a.shape[-1] // 2
                np.testing.assert_array_equal(a[..., :cut], b[..., :cut])
                if leaf == "kernel":
                    assert not np.array_equal(a[..., cut:], b[..., cut:])
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"{module}.{leaf}")
    last = learner.end_task(state, 0)  # no task follows: nothing to reset
    _leaves_equal(last.params, state.params)


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_injection_after_the_middle_update_zeroes_the_heads_moments(suite):
    learner = _learner(suite, [3], remedy="plasticity-injection")
    state, m = learner.train(learner.init_state(), 0, 2)  # 4 updates per task: after the 2nd
    assert np.asarray(m["remedy/injected"])[:, 0].tolist() == [0, 1]
    adam = state.opt_state[1][0]
    for module, leaves in adam.mu["params"].items():
        zero = all(float(jnp.abs(v).sum()) == 0 for v in leaves.values())
        assert zero == (module in rem.HEADS), module
    assert int(adam.count[0]) == 2 * 2 * 2  # the count is the tree's: it stays
