"""MEAL 057f862's MAPPO in JAX (``baselines_jax.JaxMAPPO``): the central critic's rows and
network, the pinned update-for-update comparison with MEAL's code and a replay of its
first minibatch, MEAL's settings, and the learner as a program (seeds vmapped, chunked
training, end of task, checkpoint round trip)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from baselines_jax import JaxMAPPO, MAPPOConfig
from baselines_jax import cl as cl_lib
from baselines_jax.learner import actor_critic
from baselines_jax.mappo import mappo_schedule
from baselines_jax.network import central_row_dim, central_rows
from baselines_jax.ppo import Transition, ppo_loss
from cl_suites.meal.suite import build_suite
from tests.helpers import REPO

GOLDEN = REPO / "tests" / "golden"
TINY = MAPPOConfig(
    num_envs=2,
    num_steps=8,
    num_minibatches=2,
    update_epochs=2,
    hidden_sizes=(16, 16),
    cl_method="ewc",
    importance_episodes=1,
    importance_steps=6,
)


def test_central_rows_by_hand():
    """2 envs x 2 agents x 3 values: agent-major rows, each [own | one-hot id | env's obs]."""
    obs = jnp.arange(12, dtype=jnp.uint8).reshape(2, 2, 3)  # env m, agent i: 6m + 3i + (0..2)
    rows = np.asarray(central_rows(obs))
    assert rows.shape == (4, central_row_dim(3, 2)) == (4, 11)
    expected = [
        [0, 1, 2, 1, 0, 0, 1, 2, 3, 4, 5],  # agent 0, env 0
        [6, 7, 8, 1, 0, 6, 7, 8, 9, 10, 11],  # agent 0, env 1
        [3, 4, 5, 0, 1, 0, 1, 2, 3, 4, 5],  # agent 1, env 0
        [9, 10, 11, 0, 1, 6, 7, 8, 9, 10, 11],  # agent 1, env 1
    ]
    np.testing.assert_array_equal(rows, expected)


def test_actor_reads_its_agent_and_the_critic_the_env():
    """Another agent's observation moves the critic's value and never the actor's logits;
    the agent's id moves the logits; both agents of an env get the same value."""
    net = actor_critic(TINY, num_tasks=2, num_agents=2)
    obs = jax.random.randint(jax.random.PRNGKey(0), (3, 2, 5), 0, 3).astype(jnp.uint8)
    params = net.init(jax.random.PRNGKey(1), central_rows(obs))
    logits, values = net.apply(params, central_rows(obs), 1)
    np.testing.assert_array_equal(values[:3], values[3:])  # one value per env
    other = obs.at[:, 1].add(1)  # agent 1's observation changes
    logits2, values2 = net.apply(params, central_rows(other), 1)
    np.testing.assert_array_equal(logits[:3], logits2[:3])  # agent 0's actor: unchanged
    assert not np.allclose(values, values2)
    swapped = central_rows(obs).at[:3, 5:7].set(jnp.array([0, 1], jnp.uint8))  # id 1
    assert not np.allclose(net.apply(params, swapped, 1)[0][:3], logits[:3])


def test_defaults_are_meal_057f862s_mappo():
    """``algos/on_policy.py`` 24-38 and ``algos/mappo.py`` 28-33, ``algos/base.py`` 52."""
    c = MAPPOConfig()
    assert (c.learning_rate, c.anneal_lr, c.lr_end) == (1e-3, False, 1e-4)
    assert (c.num_envs, c.num_steps, c.update_epochs, c.num_minibatches) == (2048, 400, 8, 16)
    assert (c.gamma, c.gae_lambda, c.clip_eps, c.ent_coef, c.vf_coef) == (
        0.99,
        0.95,
        0.2,
        0.01,
        0.5,
    )
    assert (c.max_grad_norm, c.hidden_sizes, c.activation, c.layer_norm) == (
        1.0,
        (128, 128),
        "relu",
        True,
    )
    assert c.agent_id_input and c.regularize_heads and not c.regularize_critic
    assert c.multi_head and c.task_id_input and c.importance_stride == 5
    assert c.central_critic and not c.shared_backbone
    schedule = mappo_schedule(MAPPOConfig(num_minibatches=2, update_epochs=2), 4)  # 16 steps
    np.testing.assert_allclose([schedule(0), schedule(8), schedule(16)], [1e-3, 5.5e-4, 1e-4])


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"cl_method": "agem"}, ["'agem'", "mappo-jax", "ft, ewc"]),
        ({"shared_backbone": True}, ["shared_backbone"]),
        ({"remedy": {"remedy": "redo"}}, ["remedy", "'redo'"]),
        ({"importance_stride": 0}, ["importance_stride", "0"]),
    ],
)
def test_bad_settings_fail_in_one_line(values, words):
    from cl_suites.remedies import RemedyConfig

    if "remedy" in values:
        values = {"remedy": RemedyConfig(**values["remedy"])}
    with pytest.raises(ValueError) as err:
        MAPPOConfig(**values)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_pinned_comparison_with_meals_code_held():
    """``benchmarks/parity/meal_mappo_reference.py`` ran MEAL 057f862's MAPPO update beside
    ours for FT, EWC and L2 (same parameters, Adam state, batch, CL state and key): every
    check within its tolerance (losses 1e-5, gradients 1e-4 relative, Adam steps and the
    whole update 1e-3 relative to MEAL's step, the same key after the update)."""
    pinned = json.loads((GOLDEN / "meal_mappo_reference.json").read_text())
    assert set(pinned["checks"]) == {"ft", "ewc", "l2"}
    for method, checks in pinned["checks"].items():
        names = " ".join(checks)
        for word in ("mask", "losses", "gradients", "Adam", "whole update", "key"):
            assert word in names, (method, word)
        for name, (value, tolerance) in checks.items():
            assert value <= tolerance, (method, name, value)


def test_meals_first_ewc_minibatch_replays_through_our_loss():
    """MEAL 057f862's first minibatch of an EWC update (pinned: MEAL's parameters and CL
    state in our tree, the rows, MEAL's loss and gradient): our loss with the EWC
    penalty gives MEAL's loss and gradient."""
    data = np.load(GOLDEN / "meal_mappo_minibatch.npz")
    pinned = json.loads((GOLDEN / "meal_mappo_reference.json").read_text())
    tiny = pinned["tiny"]
    cfg = MAPPOConfig(
        cl_method="ewc",
        num_envs=tiny["num_envs"],
        num_steps=tiny["num_steps"],
        num_minibatches=tiny["num_minibatches"],
        update_epochs=tiny["update_epochs"],
        hidden_sizes=(tiny["hidden_size"],) * 2,
    )
    net = actor_critic(cfg, num_tasks=2, num_agents=2)
    rows = jnp.asarray(data["['rows']"])
    template = net.init(jax.random.PRNGKey(0), rows[:1])

    def tree(prefix: str):
        leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
        return jax.tree_util.tree_unflatten(
            treedef,
            [jnp.asarray(data[f"['{prefix}']" + jax.tree_util.keystr(p)]) for p, _ in leaves],
        )

    params, grads_meal = tree("params"), tree("meal_grads")
    cl_state = cl_lib.CLState(tree("anchor"), tree("importance"))
    mask = cl_lib.reg_mask(template, cfg.regularize_critic, cfg.regularize_heads)
    traj = Transition(
        *(jnp.asarray(data[f"['traj']['{k}']"]) for k in Transition._fields if k != "obs"),
        rows,
    )
    adv, tgt = jnp.asarray(data["['advantages']"]), jnp.asarray(data["['targets']"])

    def loss_fn(p):
        logits, values = net.apply(p, rows, 0)
        loss, _ = ppo_loss(logits, values, traj, adv, tgt, cfg)
        return loss + cl_lib.penalty(p, cl_state, mask, cfg)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    assert abs(float(loss) - float(data["['meal_loss']"])) < 1e-5
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_meal))
    for ours, meal in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_meal), strict=True):
        assert float(jnp.abs(ours - meal).max()) / scale < 1e-4


@pytest.fixture(scope="module")
def runs():
    """Seeds (3, 5): two train calls of one update on task 0, end_task, one update of
    task 1; seed 5 alone: one call of two updates."""
    suite = build_suite("MEAL-2", steps_per_task=2 * 8 * 4, seed=0)
    pair, single = JaxMAPPO(suite, TINY, [3, 5]), JaxMAPPO(suite, TINY, [5])
    state = pair.init_state()
    state, m1 = pair.train(state, 0, 1)
    state, m2 = pair.train(state, 0, 1)
    ended = pair.end_task(state, 0)
    alone, m_alone = single.train(single.init_state(), 0, 2)
    return pair, state, ended, (m1, m2), alone, m_alone


def _seed(tree, i):
    return jax.tree.map(lambda x: np.asarray(x)[i], tree)


def test_vmapped_seeds_and_chunks_equal_a_single_seed_in_one_call(runs):
    _, state, _, (m1, m2), alone, m_alone = runs
    for x, y in zip(
        jax.tree.leaves(_seed(state, 1)), jax.tree.leaves(_seed(alone, 0)), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-6)
    for key in ("total_loss", "value_loss", "learning_rate"):
        chunked = np.concatenate([np.asarray(m1[key]), np.asarray(m2[key])])[:, 1]
        np.testing.assert_allclose(chunked, np.asarray(m_alone[key])[:, 0], rtol=2e-5, atol=1e-6)


def test_end_task_importance_covers_the_actor_and_heads_only(runs):
    """MEAL 057f862's Fisher for MAPPO reads the actor alone: the critic's importance is
    zero; the anchor is the task's final parameters; Adam restarts."""
    _, state, ended, *_ = runs
    imp = ended.cl.importance["params"]
    assert all(
        float(jnp.abs(x).sum()) == 0
        for k in imp
        if k.startswith("critic_")
        for x in jax.tree.leaves(imp[k])
    )
    assert all(
        float(jnp.abs(x).sum()) > 0
        for k in ("actor_dense1", "actor_head")
        for x in jax.tree.leaves(imp[k])
    )
    for a, b in zip(jax.tree.leaves(ended.cl.anchor), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(float(jnp.abs(x).sum()) == 0 for x in jax.tree.leaves(ended.opt_state))


def test_a_restored_state_trains_as_the_original(runs):
    pair, _, ended, *_ = runs
    restored = pair.load_state_dict(pair.state_dict(ended))
    a, ma = pair.train(ended, 1, 1)
    b, mb = pair.train(restored, 1, 1)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert float(np.asarray(ma["reg_loss"]).max()) > 0  # the EWC penalty of task 0 acts
    np.testing.assert_array_equal(np.asarray(ma["total_loss"]), np.asarray(mb["total_loss"]))


def test_acts_on_env_major_rows_of_every_agent(runs):
    """The evaluator's rows (env-major) give the actions of the agent-major program rows;
    a row count that is not whole envs is refused in one line."""
    pair, state, *_ = runs
    params = _seed(state.params, 0)
    obs = jax.random.randint(jax.random.PRNGKey(2), (3, 2, *pair.suite.obs_shape), 0, 2)
    obs = obs.astype(jnp.uint8)
    logits, _ = pair.apply(params, pair._flat(obs), 0)  # agent-major
    expected = np.asarray(jnp.argmax(logits, -1)).reshape(2, 3).T.reshape(-1)
    rows = np.asarray(obs).reshape(6, *pair.suite.obs_shape)  # env-major
    np.testing.assert_array_equal(np.asarray(pair.act(params, rows, 0, greedy=True)), expected)
    with pytest.raises(ValueError, match="5 rows are not a multiple of 2 agents"):
        pair.act(params, rows[:5], 0, greedy=True)


def _sampled_scores(learner: JaxMAPPO, params, episodes: int = 8) -> tuple[float, float]:
    """Task 0's scores (soups per 400-step episode / the kitchen's bound) of one seed's
    ``params`` with actions sampled from the actor, and of uniform random actions (one
    compiled program for both)."""
    engine, suite, n = learner.engine, learner.suite, learner.num_agents

    def run(keys, uniform):
        env, obs = engine.reset_batch(0, keys)

        def step(carry, key):
            env, obs, soups = carry
            logits, _ = learner.apply(params, learner._flat(obs), 0)  # agent-major rows
            logits = jnp.where(uniform, 0.0, logits)
            actions = jax.random.categorical(key, logits).reshape(n, episodes).T
            env, obs, _, delivered = engine.step_batch(env, actions, 0.0)
            return (env, obs, soups + delivered), None

        keys_t = jax.random.split(jax.random.PRNGKey(0), suite.episode_len)
        (_, _, soups), _ = jax.lax.scan(step, (env, obs, jnp.zeros(episodes, jnp.int32)), keys_t)
        return soups

    play = jax.jit(run)
    keys = engine.env_keys(123, episodes)
    bound = suite.layouts[0].max_soups
    return tuple(float(np.mean(np.asarray(play(keys, u)))) / bound for u in (False, True))


@pytest.mark.slow  # 100 updates: a minute on a 2-core CPU
def test_learns_meal2_task0():
    """MEAL-2 easy (seed 1), MAPPO's settings on 16 envs x 128 steps, 100 updates (204,800
    env steps, shaping over the first half): the training soups rise from none, and the
    sampled policy scores well above the random one (measured: 24.3 soups per update over
    the last 10, score 0.66; 0 and 0 at the start)."""
    updates = 100
    steps = 16 * 128 * updates
    suite = build_suite("MEAL-2", steps_per_task=steps, seed=1, shaping_horizon=steps // 2)
    learner = JaxMAPPO(suite, MAPPOConfig(num_envs=16, num_steps=128, num_minibatches=8), [1])
    state, metrics = learner.train(learner.init_state(), 0, updates)
    soups = np.asarray(metrics["soups"])[:, 0]
    assert soups[:10].mean() < 1 and soups[-10:].mean() > 10, soups
    params = jax.tree.map(lambda x: x[0], state.params)
    sampled, random_score = _sampled_scores(learner, params)
    assert random_score < 0.05 and sampled > random_score + 0.3, (sampled, random_score)
