"""The remedies of ``ppo-jax`` (``baselines_jax.remedies``) compute what the torch side's
(``baselines_sb3.remedies``) compute on the MEAL preset's network: the same weights
(``cl_suites.job.convert``), the same batch and the same random numbers (the torch
generator's draws replayed from a copy of its state and handed to the JAX functions as
their explicit ``uniforms``) give the same dormant units, the same recycled and replaced
weights and the same continual-backprop statistics, to float32 rounding (torch draws
``uniform_(-b, b)`` in double, JAX maps ``u`` in float32: 1 ulp)."""

from __future__ import annotations

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest
import torch as th

from baselines_jax import remedies as rem
from baselines_jax.network import ActorCritic
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.remedies import (
    ContinualBackprop,
    capture_features,
    policy_forward,
    policy_links,
    recycle_dormant,
    reset_heads,
    shrink_perturb,
)
from cl_suites.job.convert import params_from_torch, torch_names

OBS_SHAPE, N_TASKS, N_ACTIONS, TASK, WIDTH = (3, 3, 26), 3, 6, 1, 16
D = int(np.prod(OBS_SHAPE))


def _policy(seed: int = 0) -> ContinualPolicy:
    th.manual_seed(seed)
    space = gym.spaces.Dict(
        {"obs": gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8), "task_id": gym.spaces.Discrete(3)}
    )
    return ContinualPolicy(  # the MEAL preset's policy, narrower
        space,
        gym.spaces.Discrete(N_ACTIONS),
        lambda _: 3e-4,
        num_tasks=N_TASKS,
        multi_head=True,
        task_id_input=True,
        trunk_layer_norm=True,
        net_arch=[WIDTH, WIDTH],
        activation_fn=th.nn.ReLU,
        ortho_init=True,
        normalize_images=False,
    )


NET = ActorCritic(action_dim=N_ACTIONS, num_tasks=N_TASKS, hidden_sizes=(WIDTH, WIDTH))
LAYERS = rem.layers_of(NET)


def _obs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4, (n, *OBS_SHAPE)) * (rng.random((n, *OBS_SHAPE)) < 0.3)).astype(
        np.uint8
    )


def _torch_obs(obs: np.ndarray) -> dict[str, th.Tensor]:
    return {"obs": th.as_tensor(obs), "task_id": th.full((len(obs),), TASK, dtype=th.long)}


def _jax_obs(obs: np.ndarray) -> jnp.ndarray:
    return jnp.asarray(obs.reshape(len(obs), -1).astype(np.float32))


def _module_of(policy) -> dict[str, str]:
    """torch link name (``mlp_extractor.policy_net.0``) -> JAX module (``actor_dense1``)."""
    return {n[: -len(".weight")]: m for n, (m, leaf) in torch_names(policy).items()
            if leaf == "kernel"}  # fmt: skip


def _copy_generator(g: th.Generator) -> th.Generator:
    out = th.Generator()
    out.set_state(g.get_state())
    return out


def _assert_params_equal(jax_params, policy, rtol=1e-6, atol=2e-7) -> None:
    torch_params = params_from_torch(policy)["params"]
    for module, leaves in torch_params.items():
        for leaf, value in leaves.items():
            np.testing.assert_allclose(
                np.asarray(jax_params["params"][module][leaf]), value, rtol=rtol, atol=atol,
                err_msg=f"{module}.{leaf}",
            )  # fmt: skip


def test_the_network_converts_and_its_trunks_are_the_links():
    policy = _policy()
    names = _module_of(policy)
    assert [names[link.name] for link in policy_links(policy)] == [ly.name for ly in LAYERS]
    obs = _obs(8, 0)
    logits, values = NET.apply(params_from_torch(policy), _jax_obs(obs), TASK)
    with th.no_grad():
        t_logits, t_values = policy_forward(policy, _torch_obs(obs))
    np.testing.assert_allclose(np.asarray(logits), t_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(values), t_values.numpy().ravel(), rtol=1e-5, atol=1e-5)


def test_redo_recycles_as_the_torch_side():
    policy = _policy(1)
    with th.no_grad():  # dead units: incoming weights 0, bias -1
        trunks = policy.mlp_extractor
        for layer, rows in ((trunks.policy_net[0], [2, 5]), (trunks.value_net[3], [7])):
            layer.weight[rows] = 0.0
            layer.bias[rows] = -1.0
    params = params_from_torch(policy)
    obs = _obs(64, 1)
    g = th.Generator().manual_seed(11)
    replay = _copy_generator(g)
    counts = recycle_dormant(policy, _torch_obs(obs), tau=0.025, generator=g)
    _, _, acts = rem.trunk_activations(NET, params, _jax_obs(obs), TASK)
    masks = rem.dormant_masks(acts, 0.025)
    names = _module_of(policy)
    assert {names[k]: v for k, v in counts.items()} == {k: int(m.sum()) for k, m in masks.items()}
    assert sum(counts.values()) >= 3
    # the torch draws, per layer with dormant units in link order: weight rows, then biases
    uniforms = {}
    for layer in LAYERS:
        fan_in = params["params"][layer.name]["kernel"].shape[0]
        units = np.flatnonzero(np.asarray(masks[layer.name]))
        ku, bu = np.zeros((fan_in, layer.width), np.float32), np.zeros(layer.width, np.float32)
        if units.size:
            ku[:, units] = th.rand((units.size, fan_in), generator=replay).numpy().T
            bu[units] = th.rand(units.size, generator=replay).numpy()
        uniforms[layer.name] = (jnp.asarray(ku), jnp.asarray(bu))
    new, _ = rem.recycle(params, masks, uniforms, LAYERS)
    _assert_params_equal(new, policy)


@pytest.mark.parametrize("rate", [0.05, 0.15])  # 0.8 units per step (drawn), 2.4 (two)
def test_continual_backprop_replaces_as_the_torch_side(rate):
    policy = _policy(2)
    links = policy_links(policy)
    names = _module_of(policy)
    g = th.Generator().manual_seed(5)
    cbp = ContinualBackprop(links, None, rate, maturity=1, decay=0.9, generator=g)
    state = rem.init_cbp(LAYERS)
    params = params_from_torch(policy)
    replaced_total = 0
    for step in range(4):  # mature from the 2nd step
        obs = _obs(32, 10 + step)
        with th.no_grad(), capture_features(links) as features:
            policy_forward(policy, _torch_obs(obs))
        replay = _copy_generator(g)
        replaced = cbp.observe(features)
        # the torch draws: the count of each layer below one unit (in link order), then each
        # replacing layer's new rows, in the order of its replaced units
        count = rate * WIDTH
        draws = {
            ly.name: jnp.float32(th.rand(1, generator=replay).item() if step >= 1 and count < 1
                                 else 0.0)
            for ly in LAYERS
        }  # fmt: skip
        uniforms = {}
        for link in links:
            layer = names[link.name]
            fan_in = params["params"][layer]["kernel"].shape[0]
            ku = np.zeros((fan_in, WIDTH), np.float32)
            units = replaced[link.name].numpy()
            if units.size:
                ku[:, units] = th.rand((units.size, fan_in), generator=replay).numpy().T
            uniforms[layer] = jnp.asarray(ku)
        _, _, acts = rem.trunk_activations(NET, params, _jax_obs(obs), TASK)
        params, _, state, counts = rem.cbp_step(
            params, None, state, acts, uniforms, LAYERS, "relu", rate, 1, 0.9,
            count_uniforms=draws, reset_moments=False,
        )  # fmt: skip
        assert {names[k]: int(v.numel()) for k, v in replaced.items()} == {
            k: int(v) for k, v in counts.items()
        }, step
        replaced_total += sum(int(v) for v in counts.values())
        _assert_params_equal(params, policy, rtol=1e-5, atol=1e-6)
        for link in links:
            units, layer = cbp.units[link.name], names[link.name]
            np.testing.assert_array_equal(np.asarray(state.age[layer]), units.ages.numpy())
            for mine, theirs in ((state.util, units.util), (state.mean_act, units.mean_act)):
                np.testing.assert_allclose(np.asarray(mine[layer]), theirs.numpy(), 1e-5, 1e-7)
    assert replaced_total >= 3


def test_shrink_perturb_equals_the_torch_side():
    policy, start = _policy(3), _policy(4)
    params, theta0 = params_from_torch(policy), params_from_torch(start)
    shrink_perturb(list(policy.parameters()), [p.detach() for p in start.parameters()], 0.9, 0.1)
    _assert_params_equal(rem.shrink_perturb(params, theta0, 0.9, 0.1), policy)


def test_a_multi_head_reset_touches_the_same_entries_as_the_torch_side():
    policy = _policy(5)
    params = params_from_torch(policy)
    reset_heads(policy, None, task_id=2, generator=th.Generator().manual_seed(0))
    after = params_from_torch(policy)["params"]
    _, touched = rem.reset(params, NET.init(_key(), jnp.zeros((1, D))), "heads", 2, 3, True)
    for module, leaves in after.items():
        for leaf, value in leaves.items():
            changed = value != np.asarray(params["params"][module][leaf])
            mask = np.asarray(touched["params"][module][leaf])
            # torch redraws the slice (a zero bias stays zero); nothing outside it changes
            assert not (changed & ~mask).any(), f"{module}.{leaf}"
            if leaf == "kernel":
                assert (changed == mask).all(), f"{module}.{leaf}"


def _key():
    import jax

    return jax.random.PRNGKey(0)
