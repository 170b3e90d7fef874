"""MEAL's IPPO learner and CL methods as MEAL (7d81858 / Table 4; issue 15 items 1-4).

Every default pinned here has a row in docs/fidelity.md ("MEAL learner (IPPO) and methods").
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.cl import MealEWC, MealL2, MealMAS, MealOnlineEWC, attach_method
from baselines_sb3.cl.base import FreshEpisodes
from baselines_sb3.cl.importance import mas_importance, score_fisher
from baselines_sb3.factory import build_model, wrap_env
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.networks import SeparateTrunks
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.wrappers import TaskIdObservation
from cl_suites.api import make_vec
from cl_suites.core.task import Segment, TaskSwitch
from cl_suites.job import hyperparameters, presets
from cl_suites.sb3.adapter import SB3VecEnv

N_TASKS, OBS = 2, 4


def _meal_policy(width: int = 2) -> ContinualPolicy:
    """MEAL's layout in miniature: task one-hot input, separate ReLU+LayerNorm trunks,
    one head per task."""
    space = gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(0, 5, (OBS,), np.float32),
            "task_id": gym.spaces.Discrete(N_TASKS),
        }
    )
    return ContinualPolicy(
        space,
        gym.spaces.Discrete(3),
        lambda _: 3e-4,
        num_tasks=N_TASKS,
        multi_head=True,
        task_id_input=True,
        trunk_layer_norm=True,
        net_arch=[width],
        normalize_images=False,
    )


class _FakeModel:
    def __init__(self, policy):
        self.policy, self.n_envs, self.num_timesteps = policy, 1, 0

    def get_env(self):
        return None


def _switch(prev_task, step=100):
    prev = Segment(prev_task, 0, prev_task, "a", step - 100, step)
    return TaskSwitch(prev, Segment(prev_task + 1, 0, prev_task + 1, "b", step, step + 100), step)


def _episodes(steps=6, agents=2, alive=None, seed=0):
    rng = np.random.default_rng(seed)
    obs = {
        "obs": rng.integers(0, 3, (steps * agents, OBS)).astype(np.float32),
        "task_id": np.zeros(steps * agents, np.int64),
    }
    alive = np.ones(steps, bool) if alive is None else np.asarray(alive)
    return FreshEpisodes(obs, agents, np.arange(steps), alive)


# --------------------------------------------------------------------------- penalty
def test_penalty_hand_computed_with_division_by_parameter_count():
    """EWC.py penalty: 0.5 * coef * sum(mask * F * (p - old)^2) / (sum(mask) + 1e-8); the
    mask covers the actor trunk (build_reg_weights: no critic, no heads)."""
    policy = _meal_policy()
    method = MealEWC(lam=4.0)
    method.bind(policy, _FakeModel(policy))
    named = method.named_parameters(policy)
    # actor trunk: Linear(4 + 2 task one-hot -> 2): 12 + 2, LayerNorm(2): 2 + 2
    assert [n for n, _ in named] == [
        "mlp_extractor.policy_net.0.weight",
        "mlp_extractor.policy_net.0.bias",
        "mlp_extractor.policy_net.2.weight",
        "mlp_extractor.policy_net.2.bias",
    ]
    assert sum(p.numel() for _, p in named) == 18
    method.terms["all"] = (
        {n: th.full_like(p, 2.0) for n, p in named},
        {n: p.detach().clone() for n, p in named},
    )
    with th.no_grad():
        for _, p in named:
            p.add_(0.1)
    expected = 0.5 * 4.0 * (18 * 2.0 * 0.1**2) / (18 + 1e-8)  # = 0.04
    assert float(method.penalty(policy).detach()) == pytest.approx(expected, rel=1e-5)
    assert float(method.penalty_grad_(policy)) == pytest.approx(expected, rel=1e-4)


def test_critic_and_heads_get_no_penalty_gradient_by_default():
    policy = _meal_policy()
    method = MealL2(lam=10.0)
    method.bind(policy, _FakeModel(policy))  # L2: anchored at the initial parameters
    with th.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    policy.optimizer.zero_grad()
    method.penalty_grad_(policy)
    for group, params in policy.parameter_groups().items():
        for name, p in params:
            if group == "actor_trunk":
                assert p.grad is not None and p.grad.abs().sum() > 0, name
            else:
                assert p.grad is None or not p.grad.any(), name
    with_critic = MealL2(lam=10.0, regularize_critic=True, regularize_heads=True)
    with_critic.bind(policy, _FakeModel(policy))
    groups = {n for n, _ in with_critic.named_parameters(policy)}
    assert "mlp_extractor.value_net.0.weight" in groups and "value_net.weight" in groups


def test_l2_active_from_first_task_anchored_at_initial_parameters():
    policy = _meal_policy()
    initial = {n: p.detach().clone() for n, p in policy.named_parameters()}
    method = MealL2(lam=1.0)
    method.bind(policy, _FakeModel(policy))
    assert float(method.penalty(policy).detach()) == 0.0
    with th.no_grad():
        policy.mlp_extractor.policy_net[0].bias.add_(1.0)
    assert float(method.penalty(policy).detach()) == pytest.approx(0.5 * 2 / 18, rel=1e-5)
    anchor = method.terms["all"][1]
    assert th.equal(
        anchor["mlp_extractor.policy_net.0.weight"], initial["mlp_extractor.policy_net.0.weight"]
    )
    method.on_task_switch(_switch(0))  # anchor moves to the latest parameters
    assert float(method.penalty(policy).detach()) == 0.0


def test_ewc_sums_fishers_and_online_ewc_decays(monkeypatch):
    """EWC.update_state: multi F = F + F_new; online F = 0.9 F + 0.1 F_new; anchor = latest."""
    values = iter([1.0, 3.0, 1.0, 3.0])

    def fake_fisher(policy, forward, params, episodes, generator, agents, actions=None):
        value = next(values)
        return {n: th.full_like(p, value) for n, p in params}

    monkeypatch.setattr("baselines_sb3.cl.meal_regularizers.score_fisher", fake_fisher)
    results = {}
    for cls in (MealEWC, MealOnlineEWC):
        policy = _meal_policy()
        method = cls(lam=1.0)
        method.bind(policy, _FakeModel(policy))
        method.set_episode_source(lambda task, episodes, steps, **_: _episodes())
        method.on_task_switch(_switch(0, 100))
        with th.no_grad():
            policy.mlp_extractor.policy_net[0].bias.add_(1.0)
        method.on_task_switch(_switch(1, 200))
        f, anchor = method.terms["all"]
        results[cls.name] = float(f["mlp_extractor.policy_net.0.bias"][0])
        assert th.equal(
            anchor["mlp_extractor.policy_net.0.bias"],
            policy.mlp_extractor.policy_net[0].bias.detach(),
        )
    assert results["ewc"] == pytest.approx(1.0 + 3.0)
    assert results["online-ewc"] == pytest.approx(0.9 * (0.1 * 1.0) + 0.1 * 3.0)


def test_fresh_episode_source_is_asked_for_the_finished_task():
    policy = _meal_policy()
    method = MealEWC(lam=1.0)
    method.bind(policy, _FakeModel(policy))
    calls = []

    def source(task_id, episodes, max_steps, lead_agent=False):
        calls.append((task_id, episodes, max_steps, lead_agent))
        return _episodes()

    method.set_episode_source(source)
    method.on_task_switch(_switch(0))
    assert calls == [(0, 5, 500, True)] and "all" in method.terms  # agent 0 leads (7d81858)
    mas = MealMAS(lam=1.0)
    mas.bind(policy, _FakeModel(policy))
    mas.set_episode_source(source)
    mas.on_task_switch(_switch(0))
    assert calls[-1] == (0, 5, 500, False)  # MAS: every agent on its own observation
    fallback = MealEWC(lam=1.0)
    fallback.bind(policy, _FakeModel(policy))
    fallback.samples.items = [{"obs": np.zeros(OBS, np.float32), "task_id": np.int64(0)}] * 3
    with pytest.warns(UserWarning, match="no fresh-episode source"):
        fallback.on_task_switch(_switch(0))


# --------------------------------------------------------------------------- importance
def _fisher_by_hand(policy, params, episodes, actions, agents):
    obs = {k: th.as_tensor(v) for k, v in episodes.observations.items()}
    steps, n = episodes.num_steps, episodes.num_agents
    expected = {name: th.zeros_like(p) for name, p in params}
    for s in range(steps):
        rows = {k: v[n * s : n * s + agents] for k, v in obs.items()}
        logp = th.log_softmax(policy.logits_and_values(rows)[0], -1)
        total = logp.gather(1, actions[s, :agents].view(-1, 1)).sum()  # then square
        grads = th.autograd.grad(total, [p for _, p in params])
        for (name, _), g in zip(params, grads, strict=True):
            expected[name] += g.pow(2) / steps
    return expected


def test_score_fisher_is_agent_zeros_squared_score_by_default():
    """MEAL 7d81858 cl_methods/EWC.py compute_fisher: agent 0's observation and sampled
    action at every step (through episode ends), (d log pi / d theta)^2, mean over the
    steps; 057f862's joint log-probability of all agents is the option ``agents="joint"``."""
    policy = _meal_policy(width=3)
    params = [(n, p) for n, p in policy.named_parameters() if "policy_net" in n]
    episodes = _episodes(steps=4, agents=2, alive=[True, True, False, False])
    actions = th.tensor([[0, 1], [2, 2], [1, 0], [2, 1]])
    for agents, count in (("first", 1), ("joint", 2)):
        fisher = score_fisher(
            policy, policy.logits_and_values, params, episodes, agents=agents, actions=actions
        )
        expected = _fisher_by_hand(policy, params, episodes, actions, count)
        for n, _ in params:
            assert th.allclose(fisher[n], expected[n], atol=1e-6)
    sampled = score_fisher(
        policy, policy.logits_and_values, params, episodes, th.Generator().manual_seed(1)
    )
    assert all(th.isfinite(v).all() and v.abs().sum() > 0 for v in sampled.values())
    assert MealEWC(lam=1.0).fisher_agents == "first"
    with pytest.raises(ValueError, match="unknown fisher_agents 'all'.*first, joint"):
        MealEWC(lam=1.0, fisher_agents="all")


def _mas_by_hand(policy, params, episodes, steps, live, agent_mean):
    obs = {k: th.as_tensor(v) for k, v in episodes.observations.items()}
    expected = {n: th.zeros_like(p) for n, p in params}
    for s in steps:
        rows = {k: v[2 * s : 2 * s + 2] for k, v in obs.items()}
        logits, values = policy.logits_and_values(rows)
        vec = th.cat([th.log_softmax(logits, -1), values.view(-1, 1)], -1)
        loss = 0.5 * vec.pow(2).sum() / (2 if agent_mean else 1)
        for (n, _), g in zip(params, th.autograd.grad(loss, [p for _, p in params]), strict=True):
            expected[n] += g.pow(2) / live
    return expected


def test_mas_importance_paper_time_every_live_step_and_later_strided_form():
    """MEAL 7d81858 cl_methods/MAS.py: grads of sum_agents 1/2 ||[logits, v]||^2, squared,
    at every step before the episode ends, divided by the number of live steps; 057f862
    experiments/continual/mas.py: the same divided by A, at t % 5 == 0."""
    policy = _meal_policy(width=3)
    params = [(n, p) for n, p in policy.named_parameters() if "policy_net" in n]
    episodes = _episodes(steps=12, agents=2, alive=[True] * 8 + [False] * 4)
    paper = mas_importance(policy, policy.logits_and_values, params, episodes)
    expected = _mas_by_hand(policy, params, episodes, range(8), 8, agent_mean=False)
    for n, _ in params:
        assert th.allclose(paper[n], expected[n], atol=1e-6)
    later = mas_importance(
        policy, policy.logits_and_values, params, episodes, stride=5, agent_mean=True
    )
    expected = _mas_by_hand(policy, params, episodes, (0, 5), 8, agent_mean=True)
    for n, _ in params:
        assert th.allclose(later[n], expected[n], atol=1e-6)
    mas = MealMAS(lam=1.0)
    assert (mas.stride, mas.normalize_task, mas.mode, mas.agent_mean, mas.normalize) == (
        1,
        False,
        "last",
        False,
        None,
    )


def test_mas_replaced_per_task_and_normalised_over_the_whole_tree(monkeypatch):
    """7d81858 MAS.update_state replaces the importance; normalisation (057f862
    normalize_task, 7d81858 normalize_importance) divides by the mean absolute importance
    over the whole parameter tree (critic and heads included), not over the regularised
    parameters only."""
    values = iter([2.0, 5.0])

    def fake_mas(policy, forward, params, episodes, stride, agent_mean):
        value = next(values)
        out = {n: th.full_like(p, value) for n, p in params}
        for n in out:
            if "value_net" in n:
                out[n] = th.full_like(out[n], 3.0 * value)  # critic: 3x as important
        return out

    monkeypatch.setattr("baselines_sb3.cl.meal_regularizers.mas_importance", fake_mas)
    policy = _meal_policy()
    method = MealMAS(lam=1.0)
    method.bind(policy, _FakeModel(policy))
    method.set_episode_source(lambda task, episodes, steps, **_: _episodes())
    method.on_task_switch(_switch(0, 100))
    method.on_task_switch(_switch(1, 200))
    f, _ = method.terms["all"]
    assert set(f) == {n for n, _ in method.named_parameters(policy)}
    assert all(th.equal(v, th.full_like(v, 5.0)) for v in f.values())  # replaced, raw

    values = iter([2.0])
    normalised = MealMAS(lam=1.0, normalize_task=True)
    normalised.bind(policy, _FakeModel(policy))
    normalised.set_episode_source(lambda task, episodes, steps, **_: _episodes())
    normalised.on_task_switch(_switch(0, 100))
    f, _ = normalised.terms["all"]
    named = dict(policy.named_parameters())
    critic = sum(p.numel() for n, p in named.items() if "value_net" in n)
    total = sum(p.numel() for p in named.values())
    mean = (2.0 * (total - critic) + 6.0 * critic) / total
    for v in f.values():
        assert th.allclose(v, th.full_like(v, 2.0 / mean))


# --------------------------------------------------------------------------- learner
def _diag_env(n_envs=4, steps=256):
    env = SB3VecEnv(
        make_vec("Diagnostic", n_envs, n_tasks=2, steps_per_task=steps, show_task=False)
    )
    env.seed(0)
    return env


def test_adam_reset_after_the_old_tasks_last_update_and_lr_restarts():
    """IPPO_CL.py train_on_environment: a new optax Adam per task, built after the old
    task's last update (the switch fires in the last env step of the old task's last
    rollout; that rollout's update still uses the old Adam state); Table 4: the learning
    rate decays linearly to 0 within each task and restarts."""
    env = _diag_env()
    model = ContinualPPO(
        ContinualPolicy,
        env,
        n_steps=16,
        n_minibatches=2,
        n_epochs=1,
        learning_rate=3e-4,
        lr_schedule="linear-per-task",
        reset_optimizer_at_switch=True,
        seed=0,
        policy_kwargs={"net_arch": [8]},
    )
    seen = {}
    env.vector_env.on_task_switch(  # subscribed after the learner
        lambda event: seen.setdefault("at_switch", len(model.policy.optimizer.state))
    )
    update = model._update

    def watched_update():
        param = next(iter(model.policy.parameters()))
        state = model.policy.optimizer.state.get(param, {})
        seen.setdefault("steps_before_update", []).append(
            (model.num_timesteps, int(state["step"]) if "step" in state else 0)
        )
        update()

    model._update = watched_update

    class Watch(BaseCallback):
        def _on_rollout_end(self):
            seen[self.num_timesteps] = model.current_learning_rate()

        def _on_step(self):
            return not self.locals["infos"][0].get("sequence_done")

    model.learn(512, callback=Watch())
    steps = dict(seen["steps_before_update"])
    assert seen["at_switch"] > 0  # not emptied at the switch
    assert steps[256] == 3 * 2  # the switch rollout's update continues task 0's Adam
    assert steps[320] == 0  # task 1's first update starts a fresh Adam
    assert seen[128] == pytest.approx(3e-4 * (1 - 64 / 256))
    assert seen[320] == pytest.approx(3e-4)  # first update of task 1


def test_clipped_value_loss_weighted_half():
    """IPPO_CL.py: value_loss = 0.5 * max((V - R)^2, (V_clip - R)^2).mean(), V_clip within
    clip_eps of the old value; total loss += vf_coef (0.5) * value_loss."""
    model = ContinualPPO(
        ContinualPolicy,
        _diag_env(),
        n_steps=16,
        batch_size=32,
        value_loss="clipped-max",
        policy_kwargs={"net_arch": [8]},
    )
    data = type("D", (), {})()
    data.old_values, data.returns = th.tensor([0.0, 1.0]), th.tensor([1.0, 0.0])
    values = th.tensor([0.5, 0.9])
    # row 0: (0.5-1)^2 = .25 vs (0.2-1)^2 = .64 -> .64; row 1: (.9)^2 = .81 vs (.9)^2 -> .81
    assert float(model._value_loss(values, data, 0.2, None)) == pytest.approx(
        0.5 * (0.64 + 0.81) / 2
    )
    assert presets.MEAL_PPO["value_loss"] == "clipped-max" and presets.MEAL_PPO["vf_coef"] == 0.5


def test_meal_network_and_batch_through_the_factory():
    """IPPO_CL.py ActorCritic: separate 128-unit trunks of Dense -> ReLU -> LayerNorm,
    one head slice per task, task one-hot input, orthogonal init (sqrt 2 / 0.01 / 1)."""
    from cl_suites.suites.diagnostic import build

    sequence = build(n_tasks=2, steps_per_task=256, show_task=False)
    hp = hyperparameters.preset_settings("MEAL-2", "ppo", "ewc", "paper")
    env, task_wrapper = wrap_env(_diag_env(), sequence, hp, multi_head=True, task_id_input=True)
    assert isinstance(task_wrapper, TaskIdObservation)
    model = build_model(
        "ppo",
        env,
        sequence,
        hp,
        MealEWC(lam=1.0),
        method="ewc",
        seed=0,
        multi_head=True,
        task_id_input=True,
    )
    policy = model.policy
    assert isinstance(policy.mlp_extractor, SeparateTrunks)
    layers = [type(m).__name__ for m in policy.mlp_extractor.policy_net]
    assert layers == ["Linear", "ReLU", "LayerNorm"] * 2
    assert policy.mlp_extractor.policy_net[0].in_features == 5 + 2  # obs + task one-hot
    assert policy.mlp_extractor.policy_net[0].out_features == 128
    assert policy.mlp_extractor.value_net is not policy.mlp_extractor.policy_net
    assert (policy.action_net.out_features, policy.value_net.out_features) == (3 * 2, 2)
    w = policy.mlp_extractor.policy_net[3].weight
    assert th.allclose(w @ w.T, 2.0 * th.eye(128), atol=1e-4)  # orthogonal, gain sqrt(2)
    assert not policy.normalize_images
    assert model.batch_size == 128 * 4 // 8  # n_steps x slots / 8 minibatches
    assert policy.optimizer.defaults["eps"] == 1e-5


def test_meal_presets():
    hp = hyperparameters.preset_settings("CLSuite/MEAL-20-v0", "ppo", "ewc", "paper")
    assert hp["learner"] == {
        "learning_rate": 3e-4,
        "lr_schedule": "linear-per-task",
        "reset_optimizer_at_switch": True,
        "n_steps": 128,
        "n_minibatches": 8,
        "n_epochs": 8,
        "gamma": 0.99,
        "gae_lambda": 0.957,
        "clip_range": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "value_loss": "clipped-max",
        "advantage_normalization": "minibatch-biased",
    }
    assert (hp["num_envs"], hp["net_arch"], hp["multi_head"], hp["task_id_input"]) == (
        16,
        [128, 128],
        True,
        True,
    )
    assert hp["time_limit_terminal"] and hp["trunk_layer_norm"] and hp["reward_clip"] is None
    methods = {
        m: hyperparameters.preset_settings("MEAL", "ppo", m, "paper")["method"]
        for m in ("ewc", "online-ewc", "mas", "l2")
    }
    assert methods["ewc"] == {
        "variant": "meal",
        "lam": 1e11,
        "mode": "multi",
        "episodes": 5,
        "max_steps": 500,
    }
    assert (methods["online-ewc"]["mode"], methods["online-ewc"]["decay"]) == ("online", 0.9)
    assert methods["mas"] == {"variant": "meal", "lam": 1e9, "episodes": 5, "max_steps": 500}
    assert methods["l2"] == {"variant": "meal", "lam": 1e7}
    assert MealEWC(lam=1.0).groups == ("shared", "actor_trunk")
    with pytest.raises(ValueError, match="unknown method 'pnc' for MEAL.*ewc"):
        hyperparameters.preset_settings("MEAL-2", "ppo", "pnc", "paper")


def test_attach_meal_method_to_learner_end_to_end():
    """A MEAL method on a real PPO run: consolidates at the switch (fallback states)."""
    env = _diag_env()
    method = MealEWC(lam=1e3, fallback_states=64)
    model = ContinualPPO(
        ContinualPolicy,
        env,
        n_steps=16,
        n_minibatches=2,
        n_epochs=1,
        cl_method=method,
        seed=0,
        policy_kwargs={"net_arch": [8]},
    )
    cb = attach_method(model, method, env)
    with pytest.warns(UserWarning, match="no fresh-episode source"):
        model.learn(320, callback=cb)
    assert method.consolidations[0]["task_id"] == 0 and method.consolidations[0]["steps"] == 64


def test_meal_small_preset_completes_episodes_in_every_task():
    """Issue 23: the small preset's budget ended no MEAL episode (empty training curves)."""
    from cl_suites.meal import build_suite

    hp = hyperparameters.preset_settings("MEAL-2", "ppo", "ft", "small")
    suite = build_suite("MEAL-2", **hp["suite_defaults"])
    steps_per_env = suite.sequence.tasks[0].budget // hp["num_envs"]
    assert suite.episode_len == 64 and steps_per_env == 128
    assert steps_per_env // suite.episode_len == 2  # whole episodes per env and task
    for seed in range(6):  # every paper-time kitchen can deliver a soup in one episode
        for name in ("MEAL-2", "MEAL-10", "MEAL-20"):
            build_suite(name, layout_seed=seed, **hp["suite_defaults"])
    assert suite.sequence.eval_every == 1_024 and suite.sequence.step_unit == "env steps"
