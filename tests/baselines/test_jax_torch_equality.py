"""The torch learner (baselines_sb3, MEAL preset) and the JAX learner (baselines_jax)
compute the same IPPO and CL methods (issue 20 item 3): the same parameters are loaded
into both (``cl_suites.job.convert``) and both get the same batch; forward outputs,
losses, gradients, an Adam update, GAE, penalties and importances agree to float32
tolerance. No MEAL checkout needed."""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer

from baselines_jax import cl as jcl
from baselines_jax.config import IPPOConfig
from baselines_jax.network import ActorCritic
from baselines_jax.ppo import Transition, gae, make_optimizer, ppo_loss
from baselines_sb3.cl import MealEWC, MealL2, MealMAS, MealOnlineEWC
from baselines_sb3.cl.base import FreshEpisodes
from baselines_sb3.cl.importance import mas_importance, score_fisher
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.policies import ContinualPolicy
from cl_suites.job.convert import load_into_torch, params_from_torch, torch_names

OBS_SHAPE, N_TASKS, N_ACTIONS, TASK = (5, 5, 26), 3, 6, 1
D = int(np.prod(OBS_SHAPE))
CFG = IPPOConfig()


def _torch_policy(
    seed: int = 0, obs_shape: tuple[int, ...] = OBS_SHAPE, num_tasks: int = N_TASKS
) -> ContinualPolicy:
    th.manual_seed(seed)
    space = gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(0, 255, obs_shape, np.uint8),
            "task_id": gym.spaces.Discrete(num_tasks),
        }
    )
    return ContinualPolicy(  # the MEAL preset's policy (presets._resolve_meal)
        space,
        gym.spaces.Discrete(N_ACTIONS),
        lambda _: CFG.learning_rate,
        num_tasks=num_tasks,
        multi_head=True,
        task_id_input=True,
        trunk_layer_norm=True,
        net_arch=[128, 128],
        activation_fn=th.nn.ReLU,
        ortho_init=True,
        normalize_images=False,
        optimizer_kwargs={"eps": 1e-5, "fused": True},
    )


def _network() -> ActorCritic:
    return ActorCritic(action_dim=N_ACTIONS, num_tasks=N_TASKS)


def _obs(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4, (n, *OBS_SHAPE)) * (rng.random((n, *OBS_SHAPE)) < 0.1)).astype(
        np.uint8
    )


def _torch_obs(obs: np.ndarray, task: int = TASK) -> dict[str, th.Tensor]:
    return {"obs": th.as_tensor(obs), "task_id": th.full((len(obs),), task, dtype=th.long)}


def _flat(obs: np.ndarray) -> jax.Array:
    return jnp.asarray(obs.reshape(len(obs), -1))


def _to_tree(named: dict[str, th.Tensor], policy: ContinualPolicy, fill: float = 0.0) -> dict:
    """A flax-shaped tree from torch-named tensors (missing names: ``fill``)."""
    params = params_from_torch(policy)["params"]
    out = {m: {k: np.full_like(v, fill) for k, v in leaves.items()} for m, leaves in params.items()}
    for name, (module, leaf) in torch_names(policy).items():
        if name in named:
            value = named[name].detach().numpy()
            out[module][leaf] = value.T if leaf == "kernel" else value
    return {"params": out}


def _close(a, b, rtol=1e-5, atol=1e-6) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def _assert_tree_matches_torch(tree: dict, named: dict[str, th.Tensor], policy, **tol) -> None:
    for name, (module, leaf) in torch_names(policy).items():
        if name not in named:
            continue
        value = np.asarray(tree["params"][module][leaf])
        _close(value.T if leaf == "kernel" else value, named[name].detach().numpy(), **tol)


# --------------------------------------------------------------------------- network
def test_converted_parameters_give_the_same_outputs_and_round_trip():
    policy = _torch_policy()
    params = params_from_torch(policy)
    obs = _obs(64)
    for task in range(N_TASKS):
        logits_t, values_t = policy.logits_and_values(_torch_obs(obs, task))
        logits_j, values_j = _network().apply(params, _flat(obs), task)
        _close(logits_j, logits_t.detach(), atol=1e-5)
        _close(values_j, values_t.detach(), atol=1e-5)
    # the flax init tree has the same structure and shapes as the converted one
    init = _network().init(jax.random.PRNGKey(0), jnp.zeros((1, D)))
    assert jax.tree.map(np.shape, init) == jax.tree.map(np.shape, params)
    other = _torch_policy(seed=1)
    load_into_torch(other, params)
    for (n, a), (_, b) in zip(policy.named_parameters(), other.named_parameters(), strict=True):
        assert th.equal(a, b), n


# --------------------------------------------------------------------------- PPO
def _batch(policy: ContinualPolicy, n: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    obs = _obs(n, seed)
    with th.no_grad():
        logits, values = policy.logits_and_values(_torch_obs(obs))
    actions = rng.integers(0, N_ACTIONS, n)
    log_pi = th.log_softmax(logits, -1).numpy()
    old_log_prob = log_pi[np.arange(n), actions] + rng.normal(0, 0.3, n)  # ratios off 1
    old_values = values.numpy() + rng.normal(0, 0.5, n)
    advantages = rng.normal(0, 2, n)
    returns = old_values + rng.normal(0, 1, n)
    return obs, actions, old_log_prob, old_values, advantages, returns


def _torch_learner(policy: ContinualPolicy, cfg: IPPOConfig = CFG) -> ContinualPPO:
    """A ContinualPPO with the MEAL preset's loss settings around ``policy`` (no env:
    only its minibatch loss is used)."""
    learner = object.__new__(ContinualPPO)
    learner.policy, learner.ent_coef, learner.vf_coef = policy, cfg.ent_coef, cfg.vf_coef
    learner.value_loss = "clipped-max"
    learner.advantage_normalization = cfg.advantage_normalization
    return learner


def _torch_loss(policy, batch, cfg: IPPOConfig = CFG):
    obs, actions, old_log_prob, old_values, advantages, returns = batch
    data = type("Minibatch", (), {})()
    data.observations = _torch_obs(obs)
    data.old_log_prob = th.as_tensor(old_log_prob, dtype=th.float32)
    data.old_values = th.as_tensor(old_values, dtype=th.float32)
    data.advantages = th.as_tensor(advantages, dtype=th.float32)
    data.returns = th.as_tensor(returns, dtype=th.float32)
    acts = th.as_tensor(actions).long()
    return _torch_learner(policy, cfg).minibatch_loss(data, acts, cfg.clip_eps, None)


def _jax_loss_fn(batch, cl_state=None, mask=None, cfg=CFG):
    obs, actions, old_log_prob, old_values, advantages, returns = batch
    tr = Transition(
        done=jnp.zeros(len(obs)),
        action=jnp.asarray(actions),
        value=jnp.asarray(old_values, jnp.float32),
        reward=jnp.zeros(len(obs)),
        log_prob=jnp.asarray(old_log_prob, jnp.float32),
        obs=_flat(obs),
    )

    def loss_fn(params):
        logits, values = _network().apply(params, tr.obs, TASK)
        loss, aux = ppo_loss(
            logits,
            values,
            tr,
            jnp.asarray(advantages, jnp.float32),
            jnp.asarray(returns, jnp.float32),
            cfg,
        )
        reg = jnp.zeros(()) if cl_state is None else jcl.penalty(params, cl_state, mask, cfg)
        return loss + reg, (*aux, reg)

    return loss_fn


@pytest.mark.parametrize("normalization", ["minibatch-biased", "none"])
def test_ppo_loss_and_gradients_equal(normalization):
    """MEAL's per-minibatch normalisation (the paper preset) and none (``small``)."""
    cfg = IPPOConfig(advantage_normalization=normalization)
    policy = _torch_policy()
    params = params_from_torch(policy)
    batch = _batch(policy)
    loss_t, pg_t, value_t, entropy_t, _, _ = _torch_loss(policy, batch, cfg)
    policy.optimizer.zero_grad()
    loss_t.backward()
    (loss_j, (value_j, actor_j, entropy_j, _)), grads = jax.value_and_grad(
        _jax_loss_fn(batch, cfg=cfg), has_aux=True
    )(params)
    obs, actions, old_log_prob, _, advantages, _ = batch
    with th.no_grad():
        log_pi = th.log_softmax(policy.logits_and_values(_torch_obs(obs))[0], -1).numpy()
    ratio = np.exp(log_pi[np.arange(len(actions)), actions] - old_log_prob)
    adv = advantages
    if normalization == "minibatch-biased":
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    by_hand = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv).mean()
    _close(actor_j, by_hand, rtol=1e-4, atol=1e-5)
    _close(loss_j, float(loss_t.detach()), atol=1e-5)
    _close(actor_j, float(pg_t), atol=1e-5)
    _close(value_j, float(value_t), atol=1e-5)
    _close(-entropy_j, float(entropy_t), atol=1e-5)
    torch_grads = {n: p.grad for n, p in policy.named_parameters()}
    _assert_tree_matches_torch(grads, torch_grads, policy, rtol=1e-4, atol=1e-6)


def test_one_adam_update_with_gradient_clipping_equal():
    """Two minibatch steps: global-norm clip 0.5, Adam(3e-4, eps 1e-5); optax's first
    steps of the per-task schedule use the full learning rate. Each step starts both
    sides from the same parameters (the torch policy takes the JAX ones), so the Adam
    moments carried into the second step are compared too (without re-syncing, float32
    differences flip a sample of the clipped value loss's max between branches)."""
    policy = _torch_policy()
    params = params_from_torch(policy)
    tx = make_optimizer(CFG, updates_per_task=10)
    opt_state = tx.init(params)
    for step in range(2):
        load_into_torch(policy, params)
        batch = _batch(policy, seed=step)
        loss_t = _torch_loss(policy, batch)[0]
        policy.optimizer.zero_grad()
        loss_t.backward()
        th.nn.utils.clip_grad_norm_(policy.parameters(), CFG.max_grad_norm)
        policy.optimizer.step()
        grads = jax.grad(lambda p, b=batch: _jax_loss_fn(b)(p)[0])(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    named = dict(policy.named_parameters())
    _assert_tree_matches_torch(params, named, policy, rtol=1e-4, atol=2e-6)


def test_gae_and_targets_equal_sb3_buffer():
    """MEAL's _calculate_gae (done = the episode ended at this step, no bootstrap) and
    SB3's buffer with the next step's episode start give the same advantages."""
    t_len, n = 16, 4
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(t_len, n)).astype(np.float32)
    values = rng.normal(size=(t_len, n)).astype(np.float32)
    last_values = rng.normal(size=n).astype(np.float32)
    done = np.zeros((t_len, n), np.float32)
    done[5] = 1.0  # all envs end an episode together (MEAL)
    done[11, 1] = 1.0
    buf = RolloutBuffer(
        t_len,
        gym.spaces.Box(-1, 1, (1,)),
        gym.spaces.Discrete(2),
        gae_lambda=0.957,
        gamma=0.99,
        n_envs=n,
    )
    for t in range(t_len):
        starts = np.zeros(n) if t == 0 else done[t - 1]
        buf.add(
            np.zeros((n, 1)),
            np.zeros((n, 1)),
            rewards[t],
            starts,
            th.as_tensor(values[t]),
            th.zeros(n),
        )
    buf.compute_returns_and_advantage(th.as_tensor(last_values), done[-1])
    adv, targets = gae(
        jnp.asarray(done),
        jnp.asarray(values),
        jnp.asarray(rewards),
        jnp.asarray(last_values),
        0.99,
        0.957,
    )
    _close(adv, buf.advantages, atol=1e-5)
    _close(targets, buf.returns, atol=1e-5)


# --------------------------------------------------------------------------- CL methods
def _fake_model(policy):
    model = type("Model", (), {"policy": policy, "n_envs": 1, "num_timesteps": 0})()
    model.get_env = lambda: None
    return model


METHODS = {
    "ewc": lambda: MealEWC(lam=1e11),
    "online-ewc": lambda: MealOnlineEWC(lam=1e11),
    "mas": lambda: MealMAS(lam=1e9),
    "l2": lambda: MealL2(lam=1e7),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_penalty_value_and_gradient_equal(name):
    """0.5 lam sum(mask F (p - anchor)^2) / #regularised, on the actor trunk only (MEAL's
    build_reg_weights), for each method with the same importance and anchor."""
    policy = _torch_policy()
    method = METHODS[name]()
    method.bind(policy, _fake_model(policy))
    regularised = dict(method.named_parameters(policy))
    gen = th.Generator().manual_seed(3)
    importance = {n: th.rand(p.shape, generator=gen) * 1e-6 for n, p in regularised.items()}
    anchor = {
        n: p.detach() + 0.01 * th.randn(p.shape, generator=gen) for n, p in regularised.items()
    }
    if name == "l2":
        importance = {n: th.ones_like(p) for n, p in regularised.items()}
    method.terms["all"] = (importance, anchor)
    method._flat = None
    batch = _batch(policy)
    loss_t = _torch_loss(policy, batch)[0]
    policy.optimizer.zero_grad()
    loss_t.backward()
    value_t = method.penalty_grad_(policy)

    params = params_from_torch(policy)
    cfg = IPPOConfig(cl_method=name)
    mask = jcl.reg_mask(params, cfg.regularize_critic, cfg.regularize_heads)
    cl_state = jcl.CLState(
        anchor=jax.tree.map(jnp.asarray, _to_tree(anchor, policy)),
        importance=jax.tree.map(jnp.asarray, _to_tree(importance, policy, fill=7.0)),
    )
    (_, aux), grads = jax.value_and_grad(_jax_loss_fn(batch, cl_state, mask, cfg), has_aux=True)(
        params
    )
    _close(aux[-1], float(value_t), rtol=1e-4)
    assert float(value_t) > 1e-3  # the penalty is not negligible here
    torch_grads = {n: p.grad for n, p in policy.named_parameters()}
    _assert_tree_matches_torch(grads, torch_grads, policy, rtol=1e-4, atol=1e-6)
    n_reg = sum(p.numel() for p in regularised.values())
    assert float(sum(m.sum() for m in jax.tree.leaves(mask))) == n_reg


def _episodes(steps: int, agents: int = 2, alive=None, seed: int = 0) -> FreshEpisodes:
    obs = _obs(steps * agents, seed)
    alive = np.ones(steps, bool) if alive is None else np.asarray(alive)
    observations = {"obs": obs, "task_id": np.full(steps * agents, TASK, np.int64)}
    return FreshEpisodes(observations, agents, np.arange(steps), alive)


def test_ewc_fisher_equal():
    """7d81858: agent 0's observation and action at every step, mean squared score."""
    policy = _torch_policy()
    params = params_from_torch(policy)
    steps = 12
    episodes = _episodes(steps)
    actions = th.as_tensor(np.random.default_rng(1).integers(0, N_ACTIONS, (steps, 2)))
    everything = list(policy.named_parameters())
    fisher_t = score_fisher(policy, policy.logits_and_values, everything, episodes, actions=actions)
    obs0 = _flat(episodes.observations["obs"][::2])
    terms = jax.vmap(lambda o, a: jcl.fisher_term(_network().apply, params, o, a, TASK))(
        obs0, jnp.asarray(actions[:, 0].numpy())
    )
    fisher_j = jax.tree.map(lambda x: x.mean(0), terms)
    _assert_tree_matches_torch(fisher_j, fisher_t, policy, rtol=1e-4, atol=1e-10)


def test_mas_importance_equal_and_normalisation_over_the_whole_tree():
    policy = _torch_policy()
    params = params_from_torch(policy)
    steps = 10
    episodes = _episodes(steps, alive=[True] * 7 + [False] * 3)
    everything = list(policy.named_parameters())
    mas_t = mas_importance(policy, policy.logits_and_values, everything, episodes)
    obs = _flat(episodes.observations["obs"]).reshape(steps, 2, D)[:7]
    terms = jax.vmap(lambda o: jcl.mas_term(_network().apply, params, o, TASK))(obs)
    mas_j = jax.tree.map(lambda x: x.sum(0) / 7, terms)
    _assert_tree_matches_torch(mas_j, mas_t, policy, rtol=1e-4, atol=1e-10)

    method = MealMAS(lam=1.0, normalize_task=True)
    method.bind(policy, _fake_model(policy))
    method.set_episode_source(lambda task, n, max_steps: episodes)
    normalised_t = method.importance(episodes)
    normalised_j = jcl.normalize(mas_j)
    _assert_tree_matches_torch(normalised_j, normalised_t, policy, rtol=1e-4, atol=1e-10)


def test_importance_combination_equal():
    """EWC sums, online EWC decays (0.9), MAS replaces; anchors become the latest params."""
    params = {"params": {"actor_dense1": {"bias": jnp.zeros(2)}}}
    start = jcl.CLState(params, {"params": {"actor_dense1": {"bias": jnp.full(2, 2.0)}}})
    new = {"params": {"actor_dense1": {"bias": jnp.full(2, 10.0)}}}
    later = {"params": {"actor_dense1": {"bias": jnp.ones(2)}}}
    expected = {"ewc": 12.0, "online-ewc": 0.9 * 2.0 + 0.1 * 10.0, "mas": 10.0}
    for name, value in expected.items():
        out = jcl.update(start, later, new, IPPOConfig(cl_method=name))
        assert float(out.importance["params"]["actor_dense1"]["bias"][0]) == pytest.approx(value)
        assert float(out.anchor["params"]["actor_dense1"]["bias"][0]) == 1.0
    torch_values = {}
    for name in ("ewc", "online-ewc", "mas"):
        method = METHODS[name]()
        old = {"w": th.full((2,), 2.0)}
        torch_values[name] = float(method.combine(old, {"w": th.full((2,), 10.0)})["w"][0])
    assert torch_values == pytest.approx(expected)


# --------------------------------------------------------------------------- reward shaping
def test_shaping_coefficient_held_per_update_as_ppo_jax():
    """MEAL 7d81858 ``IPPO_CL.py:657``: the shaping weight of every step of update ``u``
    is ``1 - u * num_envs * num_steps / horizon`` (the task's env steps before the update),
    counted from each task's start. The torch job's env gives, step by step over a whole
    task and into the next, the weight ppo-jax uses for the update that step belongs to."""
    from baselines_jax import JaxIPPO
    from cl_suites.job.jax.entry import make_config
    from cl_suites.job.main_job import resolve_job
    from cl_suites.job.torch.train import training_env

    overrides = {"steps_per_task": 320, "shaping_horizon": 200, "episode_len": 100}
    torch_spec = resolve_job(
        suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
        overrides=overrides, seed=0,
    )  # fmt: skip
    env, _, _ = training_env(torch_spec)
    num_steps = torch_spec.rollout_steps
    per_update = 4 * num_steps
    assert torch_spec.meal.sequence.tasks[0].budget == 5 * per_update  # 5 whole updates
    jax_spec = resolve_job(
        suite="MEAL-2", method="ft", learner="ppo-jax", preset="small", num_envs=4,
        overrides=overrides, seed=0,
    )  # fmt: skip
    assert jax_spec.hp["learner"]["num_steps"] == num_steps
    learner = JaxIPPO(jax_spec.meal, make_config(jax_spec.hp["learner"]), [0])
    jax_coef = np.asarray(learner.shaping_coef(jnp.arange(5)))
    hand = [1.0, 1 - 64 / 200, 1 - 128 / 200, 1 - 192 / 200, 0.0]  # 64 env steps per update
    np.testing.assert_allclose(jax_coef, hand, atol=1e-7)

    env.reset(seed=0)
    seen = []
    for _ in range(7 * num_steps):  # task 0 (5 updates), then 2 updates of task 1
        seen.append((env.cursor.segment.task_id, env.shaping_coef()))
        env.step(np.zeros((4, 2), np.int64))
    tasks, coefs = np.array(seen).T
    expected = np.concatenate([np.repeat(jax_coef, num_steps), np.repeat(jax_coef[:2], num_steps)])
    np.testing.assert_array_equal(tasks, np.repeat([0, 1], [5 * num_steps, 2 * num_steps]))
    np.testing.assert_allclose(coefs, expected, atol=1e-7)


# --------------------------------------------------------------------------- Fisher episodes
def test_ewc_fisher_episodes_equal_from_the_same_parameters(monkeypatch):
    """MEAL 7d81858 ``cl_methods/EWC.py:131-174``: fresh episodes in which every agent
    plays the action sampled from agent 0's observation, each step's score of that
    observation and action, running on through the episode end. From the same parameters
    and kitchen, the torch job's episode source + ``MealEWC`` and ppo-jax's ``_fisher``
    play the same episodes and give the same Fisher. Sampling is made greedy on both sides
    (the same draw without shared random numbers) and every episode of both sides starts
    from one PRNG key (agents' start cells are random)."""
    import stable_baselines3.common.distributions as sb3_dist

    from baselines_jax import JaxIPPO
    from baselines_sb3.callbacks import make_episode_source
    from cl_suites.meal.evaluation import meal_evaluator
    from cl_suites.meal.suite import build_suite

    monkeypatch.setattr(sb3_dist.CategoricalDistribution, "sample", _greedy_torch)
    monkeypatch.setattr(jax.random, "categorical", _greedy_jax)
    suite = build_suite("MEAL-2", steps_per_task=4096, episode_len=100, layout_seed=0)
    episodes, steps, task = 2, 110, 1  # through the 100-step episode end
    policy = _torch_policy(obs_shape=suite.obs_shape, num_tasks=2)
    params = params_from_torch(policy)

    cfg = IPPOConfig(cl_method="ewc", importance_episodes=episodes, importance_steps=steps)
    learner = JaxIPPO(suite, cfg, [0])
    key = jax.random.PRNGKey(3)
    monkeypatch.setattr(learner.engine, "env_keys", lambda seed, n: jnp.tile(key, (n, 1)))
    start = jax.vmap(lambda k: learner.engine.reset_batch(task, k[None]))
    monkeypatch.setattr(learner, "_importance_envs", lambda t, keys: start(jnp.tile(key, (1, 1))))

    model = type("Model", (), {"policy": policy})()
    source = make_episode_source(meal_evaluator(suite), model, lambda: 0, suite.num_agents)
    played = source(task, episodes, steps, lead_agent=True)
    assert played.actions.shape == (episodes * steps, 2)
    np.testing.assert_array_equal(played.actions[:, 1], played.actions[:, 0])
    assert len(np.unique(played.actions[:, 0])) > 1  # the agents move
    method = MealEWC(lam=1.0, episodes=episodes, max_steps=steps)
    method.bind(policy, _fake_model(policy))
    method.set_episode_source(source)
    fisher_t = method.compute_importance(
        method.fresh_episodes(task), list(policy.named_parameters())
    )

    stacked = jax.tree.map(lambda x: x[None], params)
    fisher_j = learner._fisher(stacked, jnp.zeros((1, 2), jnp.uint32), task)
    fisher_j = jax.tree.map(lambda x: x[0], fisher_j)
    _assert_tree_matches_torch(fisher_j, fisher_t, policy, rtol=1e-3, atol=1e-9)
    assert sum(float(v.sum()) for v in fisher_t.values()) > 0


def _greedy_torch(self):
    return self.distribution.probs.argmax(dim=-1)


def _greedy_jax(key, logits, axis=-1, shape=None, replace=True):
    return jnp.argmax(logits, axis=axis)
