"""CORA's learners, networks, CL methods and presets as ``continual_rl`` (f2754bb) runs them.

Every default pinned here has a row in docs/fidelity.md ("CORA learners", "CORA
continual-learning methods", "CORA presets per suite").
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.cl import CoraEWC, CoraOnlineEWC, ProgressCompress, attach_method, make_method
from baselines_sb3.cl.base import Rollout
from baselines_sb3.cl.importance import cora_fisher
from baselines_sb3.cl.regularizer_base import normalize_importance
from baselines_sb3.cl.unroll_buffer import UnrollBuffer
from baselines_sb3.factory import build_model, wrap_env
from baselines_sb3.learners import VTrace
from baselines_sb3.networks import A2CPPOCNN, CoraResidualCNN, ImpalaShallowCNN
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.running_stats import RunningRewardStd
from baselines_sb3.wrappers import PreviousActionReward, TaskIdObservation
from cl_suites.api import make_vec
from cl_suites.core.task import Segment, TaskSwitch
from cl_suites.job import hyperparameters, presets
from cl_suites.sb3.adapter import SB3VecEnv
from cl_suites.suites import SUITES


def _diag_env(n_envs=4, steps=400, n_tasks=2):
    env = SB3VecEnv(
        make_vec("Diagnostic", n_envs, n_tasks=n_tasks, steps_per_task=steps, show_task=False)
    )
    env.seed(0)
    return env


class _Record(BaseCallback):
    """Learning rate of every update and the env's task id when it ran."""

    def __init__(self):
        super().__init__()
        self.rates: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        return not self.locals["infos"][0].get("sequence_done")

    def _on_rollout_end(self) -> None:
        self.rates.append((self.num_timesteps, self.model.current_learning_rate()))


# --------------------------------------------------------------------------- learners
def test_lr_linear_per_task_halves_and_restarts():
    """CORA monobeast.py lr_lambda: lr * (1 - min(k * T * B, S) / S), restarted per task."""
    env = _diag_env(n_envs=4, steps=400)
    model = VTrace(
        ContinualPolicy,
        env,
        learning_rate=1e-3,
        n_steps=10,
        lr_schedule="linear-per-task",
        policy_kwargs={"net_arch": [8]},
        seed=0,
    )
    record = _Record()
    model.learn(800, callback=record)
    rates = dict(record.rates)  # agent step after the rollout -> lr of its update
    assert rates[40] == pytest.approx(1e-3)  # first update of task 0
    assert rates[240] == pytest.approx(0.5e-3)  # k = 5: half of the 400-step task
    assert rates[400] == pytest.approx(1e-3 * (1 - 360 / 400))  # last update of task 0
    assert rates[440] == pytest.approx(1e-3)  # right after the switch: restarted
    assert rates[640] == pytest.approx(0.5e-3)


def test_lr_schedule_survives_resume_from_cursor():
    """The schedule position is read from the env's cursor (restored by checkpoints)."""
    env = _diag_env(n_envs=4, steps=400)
    model = VTrace(
        ContinualPolicy,
        env,
        learning_rate=1e-3,
        n_steps=10,
        seed=0,
        lr_schedule="linear-per-task",
        policy_kwargs={"net_arch": [8]},
    )
    cursor = env.vector_env.cursor
    cursor.start(0)
    cursor.load_state_dict({**cursor.state_dict(), "index": 1, "total_step": 600, "task_step": 200})
    assert model.current_learning_rate() == pytest.approx(1e-3 * (1 - 160 / 400))


def test_previous_action_and_reward_reach_the_network():
    """CORA nets.py: core input = [features, clamp(prev reward, -1, 1), one_hot(prev action)];
    environment.py: zero at the start, carried across episode ends."""
    venv = PreviousActionReward(TaskIdObservation(_diag_env(n_envs=2, steps=40), 2))
    obs = venv.reset()
    assert obs["prev_action"].tolist() == [0, 0] and obs["prev_reward"].tolist() == [[0], [0]]
    for _ in range(12):  # past the end of a 10-step episode
        venv.step_async(np.array([2, 1]))
        obs, rewards, dones, infos = venv.step_wait()
        assert obs["prev_action"].tolist() == [2, 1]
        assert obs["prev_reward"][:, 0].tolist() == np.clip(rewards, -1, 1).tolist()
        if dones.any():  # the new episode's first observation keeps the last action
            assert infos[0]["terminal_observation"]["prev_action"] == 2
    policy = ContinualPolicy(venv.observation_space, venv.action_space, lambda _: 1e-3, net_arch=[])
    batch = {k: th.as_tensor(v) for k, v in obs.items()}
    batch["prev_reward"] = th.tensor([[5.0], [-0.25]])
    feats = policy.features(batch)
    assert feats.shape[1] == policy.features_extractor.features_dim + 1 + 3
    assert feats[:, -4].tolist() == [1.0, -0.25]  # clipped previous reward
    assert feats[:, -3:].tolist() == [[0, 0, 1], [0, 1, 0]]  # one-hot previous action
    logits_a = policy.logits_and_values(batch)[0]
    batch["prev_action"] = th.tensor([0, 0])
    assert not th.allclose(logits_a, policy.logits_and_values(batch)[0])


def test_previous_inputs_zeroed_at_task_switch():
    venv = PreviousActionReward(_diag_env(n_envs=2, steps=20))
    venv.reset()
    for _ in range(10):
        venv.step_async(np.array([1, 1]))
        obs, _, _, infos = venv.step_wait()
        if infos[0].get("task_switched"):
            assert obs["prev_action"].tolist() == [0, 0]
            assert obs["prev_reward"].tolist() == [[0.0], [0.0]]
            return
    pytest.fail("no task switch seen")


def test_cora_residual_network_as_common_nets():
    """common_nets.py impala_res_cnn: 32/64/64, conv3x3 same, unpadded max-pool 3/2, blocks
    whose in-place ReLU makes the skip add relu(x), no ReLU before flatten, 512 units."""
    space = gym.spaces.Box(0, 1, (3, 64, 64), np.float32)
    net = CoraResidualCNN(space)
    convs = [m for m in net.cnn if isinstance(m, th.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 64]
    pools = [m for m in net.cnn if isinstance(m, th.nn.MaxPool2d)]
    assert all(p.kernel_size == 3 and p.stride == 2 and p.padding == 0 for p in pools)
    assert not isinstance(net.cnn[-2], th.nn.ReLU)  # flatten directly after the last block
    # 64 -> 31 -> 15 -> 7 (unpadded pools): 64 channels x 7 x 7 into the 512-unit layer
    assert net.linear[0].in_features == 64 * 7 * 7 and net.features_dim == 512
    block = net.cnn[2]
    x = th.randn(2, 32, 5, 5) - 1.0
    expected = th.relu(x) + block.conv1(th.relu(block.conv0(th.relu(x))))
    assert th.allclose(block(x), expected)
    shallow = ImpalaShallowCNN(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert [m.out_channels for m in shallow.cnn if isinstance(m, th.nn.Conv2d)] == [32, 64, 64]
    ppo_cnn = A2CPPOCNN(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert [m.out_channels for m in ppo_cnn.cnn if isinstance(m, th.nn.Conv2d)] == [32, 64, 32]
    assert ppo_cnn.linear[0].in_features == 32 * 7 * 7


def test_running_reward_std_as_cora():
    """nets.py update_running_moments / get_running_std on 1-D batches: rewards divided,
    not centred; CORA's count and the true count agree here."""
    for count in ("cora", "true"):
        stats = RunningRewardStd(count)
        a, b = th.tensor([1.0, 3.0]), th.tensor([0.0, 0.0, 8.0])
        stats.update(a)
        stats.update(b)
        everything = th.cat([a, b]).double()
        assert float(stats.std()) == pytest.approx(float(everything.std(unbiased=False)), rel=1e-6)


def _cora_running_std(batches: list[np.ndarray]) -> float:
    """CORA nets.py update_running_moments, written out for (T, B) batches: the count
    grows by len(batch) = T, sum and squared deviations run over all T * B rewards."""
    total, m2, count = 0.0, 0.0, 1e-8
    for batch in batches:
        new_count = batch.shape[0]
        new_sum = float(batch.sum())
        new_mean = new_sum / new_count
        mean = total / count
        m2 += (
            float(((batch - new_mean) ** 2).sum())
            + count * new_count / (count + new_count) * (new_mean - mean) ** 2
        )
        count += new_count
        total += new_sum
    return float(np.sqrt(m2 / count))


def test_running_reward_std_counts_time_steps_as_cora_on_unroll_batches():
    """(T, B) batches: CORA adds T to the count per update (monobeast.py compute_loss
    passes batch["reward"][1:], shape (T, B)); the default is CORA's value, the true std
    an option, and the two differ by far."""
    # two 2x3 batches, by hand: batch 1 sum 1, "mean" 1/2, squared deviations
    # 5 * 1/4 + 1/4 = 1.5, count 2; batch 2 sum 2, "mean" 1, deviations 5 * 1 + 1 = 6,
    # plus 2 * 2 / 4 * (1 - 1/2)^2 = 0.25; std = sqrt(7.75 / 4)
    b1 = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    b2 = np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    assert _cora_running_std([b1, b2]) == pytest.approx(np.sqrt(7.75 / 4))
    rng = np.random.default_rng(0)
    batches = [b1, b2] + [
        (rng.random((20, 32)) < 0.01) * 1.0 - 0.001 for _ in range(5)
    ]  # MiniHack-like: sparse wins, a small step penalty
    cora, true = RunningRewardStd(), RunningRewardStd("true")
    for batch in batches:
        cora.update(th.as_tensor(batch, dtype=th.float32))
        true.update(th.as_tensor(batch, dtype=th.float32))
    assert float(cora.std()) == pytest.approx(_cora_running_std(batches), rel=1e-6)
    everything = np.concatenate([b.ravel() for b in batches])
    assert float(true.std()) == pytest.approx(everything.std(), rel=1e-6)
    assert float(cora.std()) > 5 * float(true.std())
    with pytest.raises(ValueError, match="reward_std_count 'unbiased'.*cora, true"):
        RunningRewardStd("unbiased")


def test_vtrace_divides_rewards_by_coras_running_std_by_default():
    """The learner's default is CORA's count; the MiniHack preset names it."""
    env = _diag_env(n_envs=4, steps=400)
    model = VTrace(ContinualPolicy, env, n_steps=5, normalize_reward=True, seed=0, device="cpu")
    assert model.policy.reward_normalizer.count == "cora"
    model.learn(40)
    stats = model.policy.reward_normalizer
    assert float(stats.reward_count) == pytest.approx(10, rel=1e-6)  # 2 updates x T = 5
    hp = hyperparameters.preset_settings("MiniHack15", "vtrace", "ft", "paper")["learner"]
    assert hp["reward_std_count"] == "cora" and hp["normalize_reward"] is True


def test_time_limit_is_terminal_but_switch_bootstraps():
    from baselines_sb3.wrappers import VecTimeLimitAsTermination

    env = VecTimeLimitAsTermination(_diag_env(n_envs=1, steps=25))
    env.reset()
    flags = []
    for _ in range(25):
        env.step_async(np.array([0]))
        _, _, dones, infos = env.step_wait()
        if dones[0]:
            flags.append((infos[0]["TimeLimit.truncated"], bool(infos[0]["task_switched"])))
    assert (False, False) in flags  # 10-step episode ends (Diagnostic truncates them)
    assert (True, True) in flags  # the switch truncation still bootstraps


def test_evaluation_feeds_previous_action_and_reward_from_zero():
    """CORA evaluates each episode in a fresh env (environment.py initial(): zeros)."""
    from cl_suites.core.evaluation import Evaluator
    from cl_suites.suites.diagnostic import build

    sequence = build(n_tasks=1, steps_per_task=40, show_task=False, eval_episodes=2)
    calls = []

    def policy(obs, task_ids, prev_actions, prev_rewards):
        calls.append((prev_actions.copy(), prev_rewards.copy()))
        return np.full(len(obs), 2)

    policy.needs_previous_action_reward = True
    Evaluator(sequence, seed=0, num_envs=1).evaluate(0, policy)
    assert calls[0][0].tolist() == [0] and calls[0][1].tolist() == [0.0]
    assert calls[1][0].tolist() == [2] and calls[1][1][0] in (-1.0, 1.0)
    assert calls[10][0].tolist() == [0]  # the second 10-step episode starts from zeros


def test_cora_ppo_lr_decays_over_fixed_steps_then_stops_at_zero():
    """ppo_policy.py _update_learning_rate: lr0 (1 - k / (decay_over_steps // (T E))) over the
    whole run (CORA's formula turns negative after 1e7 steps: ours stops at 0)."""
    from baselines_sb3.learners import ContinualPPO

    model = ContinualPPO(
        ContinualPolicy,
        _diag_env(n_envs=4),
        n_steps=10,
        batch_size=20,
        learning_rate=1e-3,
        lr_schedule="linear-steps",
        lr_decay_steps=400,
        policy_kwargs={"net_arch": [8]},
    )
    rates = {}
    for steps in (40, 80, 440, 800):
        model.num_timesteps = steps
        rates[steps] = model.current_learning_rate()
    assert rates == pytest.approx({40: 1e-3, 80: 0.9e-3, 440: 0.0, 800: 0.0})


# --------------------------------------------------------------------------- action masks
class _MaskedSequence:
    """A sequence stand-in with per-task valid actions (interface 1)."""

    def __init__(self, sequence, masks):
        self._sequence, self._masks = sequence, masks

    def __getattr__(self, name):
        return getattr(self._sequence, name)

    def action_masks(self):
        return self._masks


def test_action_masks_as_cora_nets():
    """nets.py: the action is chosen among the task's actions; the losses see all logits."""
    from cl_suites.suites.diagnostic import build

    sequence = build(n_tasks=2, steps_per_task=40, show_task=False)
    masks = np.array([[True, True, False], [False, True, True]])
    masked = _MaskedSequence(sequence, masks)
    hp = hyperparameters.preset_settings("Diagnostic", "vtrace", "ft", "small")
    env, task_wrapper = wrap_env(
        _diag_env(n_envs=4, steps=40), masked, hp, multi_head=False, task_id_input=False
    )
    assert task_wrapper is not None  # the task id comes with masks
    model = build_model(
        "vtrace",
        env,
        masked,
        hp,
        make_method("ft"),
        method="ft",
        seed=0,
        multi_head=False,
        task_id_input=False,
    )
    policy = model.policy
    obs = {"obs": th.zeros(200, 5), "task_id": th.tensor([0, 1] * 100)}
    actions, _, log_prob = policy(obs)
    assert masks[obs["task_id"].numpy(), actions.numpy()].all()
    full = th.distributions.Categorical(logits=policy.logits_and_values(obs)[0])
    assert th.allclose(log_prob, full.log_prob(actions))  # losses: unmasked, as CORA
    greedy = policy.predict({k: v.numpy() for k, v in obs.items()}, deterministic=True)[0]
    assert masks[obs["task_id"].numpy(), greedy].all()
    policy.action_mask_mode = "full"
    _, log_prob_full, _ = policy.evaluate_actions(obs, th.tensor([2, 0] * 100))
    assert (log_prob_full < -1e6).all()  # masked actions have no probability


def test_cora_evaluation_is_greedy_by_default():
    from cl_suites.job.main_job import resolve_job

    for suite in ("Atari6", "Procgen6", "MiniHack15"):
        spec = resolve_job(
            suite=suite, method="ft", learner=None, preset="paper", num_envs=None, overrides={}
        )
        assert spec.options.eval_deterministic is True


# --------------------------------------------------------------------------- EWC
class _TinyPolicy(th.nn.Module):
    """logits = W x, value = v . x (a network whose gradients are written by hand)."""

    def __init__(self, w, v):
        super().__init__()
        self.w = th.nn.Parameter(th.tensor(w, dtype=th.float32))
        self.v = th.nn.Parameter(th.tensor(v, dtype=th.float32))

    def forward(self, obs):
        return obs @ self.w.T, obs @ self.v


def _unroll(obs, actions, rewards, starts, log_probs):
    """One rollout of T steps x 1 env plus the bootstrap observation."""
    obs = np.asarray(obs, np.float32)
    return Rollout(
        observations=obs[:-1, None],
        actions=np.asarray(actions).reshape(-1, 1),
        rewards=np.asarray(rewards, np.float32).reshape(-1, 1),
        episode_starts=np.asarray(starts[:-1], np.float32).reshape(-1, 1),
        values=np.zeros((len(actions), 1), np.float32),
        log_probs=np.asarray(log_probs, np.float32).reshape(-1, 1),
        first_step=0,
        end_step=len(actions),
        last_observations=obs[-1:],
        last_episode_starts=np.asarray(starts[-1:], np.float32),
    )


def test_cora_fisher_hand_computed():
    """ewc_monobeast.py checkpoint_task: mean over batches of the squared gradient of the
    batch-summed pg + baseline loss (V-trace targets; here on-policy, so n-step returns)."""
    w, v = [[0.5, -1.0], [0.0, 2.0]], [1.0, -0.5]
    net = _TinyPolicy(w, v)
    x0, x1 = np.array([1.0, 2.0]), np.array([0.0, 1.0])
    logits0 = np.array(w) @ x0
    logp0 = logits0 - np.log(np.exp(logits0).sum())
    a, r, gamma, vf = 1, 0.5, 0.9, 0.5
    buffer = UnrollBuffer(100, gym.spaces.Box(-10, 10, (2,), np.float32))
    buffer.add(_unroll([x0, x1], [a], [r], [1, 0], [logp0[a]]))
    fisher = cora_fisher(
        lambda o: net(o),
        list(net.named_parameters()),
        buffer,
        num_batches=3,
        batch_unrolls=2,
        gamma=gamma,
        vf_coef=vf,
        rng=np.random.default_rng(0),
        device="cpu",
    )
    # by hand: V0 = v.x0 = 0, V1 = v.x1 = -0.5, vs = r + gamma V1 = 0.05, adv = vs - V0
    v0, v1 = np.dot(v, x0), np.dot(v, x1)
    vs = r + gamma * v1
    adv = vs - v0
    probs = np.exp(logp0)
    # loss per unroll = -adv * log pi(a|x0) + vf * 0.5 (vs - V0)^2, batch of 2 identical
    dw = 2 * (-adv) * np.outer(np.eye(2)[a] - probs, x0)
    dv = 2 * (-vf * (vs - v0)) * x0
    assert fisher["w"].numpy() == pytest.approx(dw**2, rel=1e-4)
    assert fisher["v"].numpy() == pytest.approx(dv**2, rel=1e-4)


def _switch(prev_task, next_task, step, steps=100):
    prev = Segment(0, 0, prev_task, f"t{prev_task}", step - steps, step)
    nxt = Segment(1, 0, next_task, f"t{next_task}", step, step + steps)
    return TaskSwitch(prev, nxt, step)


class _FakeModel:
    def __init__(self, policy, n_envs=1):
        self.policy, self.n_envs, self.num_timesteps = policy, n_envs, 0
        self.gamma, self.vf_coef = 0.99, 0.5

    def get_env(self):
        return None


def _small_policy():
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    return ContinualPolicy(space, gym.spaces.Discrete(2), lambda _: 1e-3, net_arch=[])


def test_ewc_one_entry_per_task_overwritten_and_mean_penalty(monkeypatch):
    """ewc_monobeast.py: one (params, Fisher) per task id, replaced on revisit; penalty =
    lam/2 * mean over stored tasks (scale_ewc_by_num_tasks)."""
    policy = _small_policy()
    method = CoraEWC(lam=10.0, min_task_steps=0)
    model = _FakeModel(policy)
    method.bind(policy, model)
    method.buffers = {0: object(), 1: object()}
    method.buffers[0] = method.buffers[1] = type("B", (), {"__len__": lambda s: 1})()
    fishers = iter([1.0, 2.0, 3.0])

    def fake(forward, params, buffer, **_):
        value = next(fishers)
        return {n: th.full_like(p, value) for n, p in params}

    monkeypatch.setattr("baselines_sb3.cl.cora_regularizers.cora_fisher", fake)
    params = dict(method.named_parameters(policy))
    anchors = []
    for prev, nxt, step in ((0, 1, 100), (1, 0, 200), (0, 1, 300)):
        with th.no_grad():
            for p in params.values():
                p.add_(0.1 * step / 100)
        anchors.append({n: p.detach().clone() for n, p in params.items()})
        model.num_timesteps = step - 1
        method.on_task_switch(_switch(prev, nxt, step))
        method._consolidate_pending()  # what the end of the switch's rollout does
    assert set(method.terms) == {0, 1}
    assert float(method.terms[0][0]["action_net.weight"][0, 0]) == 3.0  # overwritten
    assert th.equal(method.terms[0][1]["action_net.weight"], anchors[2]["action_net.weight"])
    with th.no_grad():
        for p in params.values():
            p.add_(0.5)
    by_hand = sum(
        (f * (params[n] - anchor[n]) ** 2).sum()
        for (importance, anchor) in method.terms.values()
        for n, f in importance.items()
    )
    expected = 10.0 / 2 * by_hand / 2
    assert float(method.penalty(policy).detach()) == pytest.approx(
        float(expected.detach()), rel=1e-5
    )
    for p in policy.parameters():
        p.grad = None
    assert float(method.penalty_grad_(policy)) == pytest.approx(float(expected.detach()), rel=1e-4)
    autograd = th.autograd.grad(method.penalty(policy), list(params.values()))
    for p, g in zip(params.values(), autograd, strict=True):
        assert th.allclose(p.grad, g, atol=1e-5)


def test_ewc_penalty_off_before_min_task_steps_but_consolidated():
    """ewc_per_task_min_frames: no penalty until the current task has 2e5 steps (over all
    its visits); checkpoint_task runs regardless."""
    env = _diag_env(n_envs=4, steps=400)
    method = CoraEWC(lam=1.0, fisher_batches=1, min_task_steps=600)
    model = VTrace(
        ContinualPolicy, env, n_steps=10, cl_method=method, seed=0, policy_kwargs={"net_arch": [8]}
    )
    cb = attach_method(model, method, env)
    seen = []

    class Watch(BaseCallback):
        def _on_step(self):
            seen.append((self.num_timesteps, bool(method.terms), method.penalty_active()))
            return not self.locals["infos"][0].get("sequence_done")

    model.learn(800, callback=[cb, Watch()])
    assert method.batch_unrolls == 4 and method.groups == "all"  # batch_size unrolls, all
    assert method.consolidations[0]["task_id"] == 0  # consolidated at 400 steps < 600
    # CORA's checkpoint_task runs in the first update of task 1 (after its first rollout)
    first_rollout = [s for s in seen if 400 < s[0] <= 440]
    assert first_rollout and not any(terms for _, terms, _ in first_rollout)
    after = [s for s in seen if s[0] > 440]
    assert after and all(terms and not active for _, terms, active in after)
    assert presets.CORA_METHODS["ewc"]["min_task_steps"] == 200_000


def test_online_ewc_and_pnc_normalisation_as_cora_computes():
    """normalize_fisher_method 'row' normalises along the dim of the network's *last*
    parameter (a bias: dim 0) for every tensor; 'full' by each tensor's norm; both after
    F = gamma F_old + F_new."""
    f = {"w": th.tensor([[3.0, 4.0], [0.0, 5.0]]), "b": th.tensor([1.0, 1.0])}
    row = normalize_importance(f, "row")
    assert th.allclose(row["w"], th.tensor([[1.0, 4 / 41**0.5], [0.0, 5 / 41**0.5]]))
    assert th.allclose(row["b"], th.tensor([1.0, 1.0]) / 2**0.5)
    full = normalize_importance(f, "full")
    assert th.allclose(full["w"], f["w"] / 50**0.5)
    intended = normalize_importance(f, "row-intended")
    assert th.allclose(intended["w"][0], th.tensor([0.6, 0.8]))
    method = CoraOnlineEWC(lam=1.0)
    assert (method.online_gamma, method.normalize, method.min_task_steps) == (0.99, "row", 0)


def test_unroll_buffer_keeps_the_latest_frames():
    """EWCTaskInfo: a ring of the task's latest replay_buffer_frames transitions."""
    buffer = UnrollBuffer(6, gym.spaces.Box(0, 255, (2,), np.uint8))
    for i in range(4):  # rollouts of 2 steps x 1 env, observations tagged with i
        obs = np.full((3, 2), i, np.float32)
        buffer.add(_unroll(obs, [0, 1], [1.0, 0.0], [0, 0, 0], [0.0, 0.0]))
    assert buffer.num_frames == 6 and buffer.num_unrolls == 3
    batch = buffer.sample(50, np.random.default_rng(0))
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (3, 50, 2)
    assert set(np.unique(batch["obs"])) == {1, 2, 3}  # the oldest rollout was dropped


def test_unroll_buffer_on_disk_checkpoints_file_names(tmp_path):
    space = gym.spaces.Box(0, 255, (2,), np.uint8)
    buffer = UnrollBuffer(4, space, disk_dir=tmp_path)
    for i in range(3):
        obs = np.full((3, 2), i, np.float32)
        buffer.add(_unroll(obs, [0, 1], [1.0, 0.0], [0, 0, 0], [0.0, 0.0]))
    assert len(list(tmp_path.glob("*.npy"))) == 2 and buffer.resident_bytes == 0
    state = buffer.state_dict()
    files = [v["file"] for chunk in state["chunks"] for v in chunk["obs"].values()]
    assert all(type(f) is str for f in files)  # checkpoints hold plain values, not Paths
    restored = UnrollBuffer(4, space, disk_dir=tmp_path)
    restored.load_state_dict(state)
    assert set(np.unique(restored.sample(20, np.random.default_rng(0))["obs"])) == {1, 2}
    buffer.add(_unroll(np.full((3, 2), 3, np.float32), [0, 1], [0, 0], [0, 0, 0], [0, 0]))
    with pytest.warns(UserWarning, match="1 rollouts written to disk"):
        restored.load_state_dict(state)  # the rollout of 1 was dropped since
    assert restored.num_unrolls == 1


def test_online_ewc_accumulates_then_normalises(monkeypatch):
    """ewc_monobeast.py: F = online_gamma * F_old + F_new (eq. 9 of P&C), then the
    normalisation, anchor = latest parameters, one term for all tasks."""
    policy = _small_policy()
    method = CoraOnlineEWC(lam=1.0, normalize="full")
    model = _FakeModel(policy)
    method.bind(policy, model)
    method.buffer = type("B", (), {"__len__": lambda s: 1})()
    news = iter([th.tensor([1.0, 2.0]), th.tensor([3.0, 1.0])])

    def fake(forward, params, buffer, **_):
        value = next(news)
        return {n: value.clone() if n == "action_net.bias" else th.ones_like(p) for n, p in params}

    monkeypatch.setattr("baselines_sb3.cl.cora_regularizers.cora_fisher", fake)
    for prev, nxt, step in ((0, 1, 100), (1, 2, 200)):
        method.on_task_switch(_switch(prev, nxt, step))
        method._consolidate_pending()  # what the end of the switch's rollout does
    assert list(method.terms) == ["online"]
    f = method.terms["online"][0]["action_net.bias"]
    first = th.tensor([1.0, 2.0]) / 5**0.5  # normalised after task 0
    expected = 0.99 * first + th.tensor([3.0, 1.0])
    assert th.allclose(f, expected / th.linalg.vector_norm(expected))
    assert method.penalty_active()  # no min-steps gate for online EWC (CORA's code)


# --------------------------------------------------------------------------- P&C
def _pnc_model(n_envs=4, steps=400, **method_kw):
    env = _diag_env(n_envs=n_envs, steps=steps)
    method = ProgressCompress(lam=1.0, fisher_batches=1, buffer_frames=400, **method_kw)
    model = VTrace(
        ProgressCompressPolicy,
        env,
        n_steps=10,
        cl_method=method,
        seed=0,
        policy_kwargs={"net_arch": [8, 8]},
    )
    return model, method, attach_method(model, method, env)


def test_pnc_adapter_per_layer_after_first_and_reset_at_switch():
    """progress_and_compress_policy.py: an adapter at every layer after the first, the
    active column re-initialised at the first update of a new task (adapters kept);
    monobeast: progress for num_train_steps_of_progress + 1 updates, then compress."""
    model, method, cb = _pnc_model(progress_updates=3)
    policy = model.policy
    assert policy.adapted_layers == [
        "mlp_extractor.policy_net.2",
        "mlp_extractor.value_net.2",
        "action_net",
        "value_net",
    ]
    adapter = policy.adapters["mlp_extractor__policy_net__2"]
    assert isinstance(adapter[0], th.nn.Linear) and isinstance(adapter[1], th.nn.ReLU)
    snapshots = {}

    class Watch(BaseCallback):
        def _on_rollout_start(self):
            snapshots[self.num_timesteps] = (
                None,
                None,
                policy.kb["action_net"].weight.detach().clone(),
                method.phase(),
            )

        def _on_step(self):
            return not self.locals["infos"][0].get("sequence_done")

    model.learn(800, callback=[cb, Watch()])
    phases = [snapshots[s][3] for s in sorted(snapshots) if s < 400]
    assert phases[:4] == ["progress"] * 4 and phases[4:] == ["compress"] * (len(phases) - 4)
    assert method.resets == [440]  # the first update on the new task's data
    # the KB Fisher of task 0 is taken at task 1's first compress update (CORA), not at 400
    assert method.consolidations == [{"task_id": 0, "total_step": 600}]
    assert th.equal(snapshots[440][2], snapshots[400][2])  # KB frozen in progress
    parts = {
        "column": lambda: policy.action_net.weight.detach().clone(),
        "adapter": lambda: policy.adapters["action_net"][0].weight.detach().clone(),
        "kb": lambda: policy.kb["action_net"].weight.detach().clone(),
    }
    before = {k: f() for k, f in parts.items()}
    policy.reset_active_column()  # CORA: Conv2d/Linear of the column, not its adapters
    after = {k: f() for k, f in parts.items()}
    assert not th.equal(before["column"], after["column"])
    assert th.equal(before["adapter"], after["adapter"]) and th.equal(before["kb"], after["kb"])
    policy.reset_active_column(adapters=True)
    assert not th.equal(after["adapter"], parts["adapter"]())
    obs = th.rand(5, 5)
    with policy.evaluation_mode():  # CORA evaluates P&C with its knowledge base
        acting = policy.get_distribution(obs).distribution.logits
    assert th.allclose(acting, th.log_softmax(policy.kb_logits_and_values(obs)[0], -1))


def test_pnc_kl_summed_over_replayed_states():
    model, method, cb = _pnc_model()
    model.learn(120, callback=cb)
    batch = method.buffer.sample(3, np.random.default_rng(0))
    kl = method.distillation_kl(batch)
    obs = th.as_tensor(batch["obs"].reshape(-1, batch["obs"].shape[-1]))
    la = th.log_softmax(model.policy.logits_and_values(obs)[0], -1)
    lk = th.log_softmax(model.policy.kb_logits_and_values(obs)[0], -1)
    assert obs.shape[0] == 11 * 3  # T + 1 observations of each replayed unroll
    assert float(kl) == pytest.approx(float((la.exp() * (la - lk)).sum().detach()), rel=1e-5)


def test_pnc_compress_step_counts_the_kb_twice_as_cora():
    """ProgressAndCompressNet.parameters() lists the KB twice: RMSProp steps it twice and
    the clipping sees it twice (reproduced by default, off with kb_listed_twice=False)."""
    results = {}
    for twice in (True, False):
        model, method, cb = _pnc_model()
        method.kb_listed_twice = twice
        model.learn(120, callback=cb)
        kb = method.kb_parameters()
        before = {n: p.detach().clone() for n, p in kb}
        active = model.policy.action_net.weight.detach().clone()
        method.rng = np.random.default_rng(0)
        method.compress_step(model)
        state = model.policy.optimizer.state
        steps = [state[p]["step"] for _, p in kb if "step" in state[p]]  # the KL's parameters
        assert steps
        results[twice] = (steps, {n: (p.detach() - before[n]) for n, p in kb})
        assert any(results[twice][1][n].abs().sum() > 0 for n, _ in kb)
        assert th.equal(active, model.policy.action_net.weight)  # only the KB learns
    assert all(int(s) == 2 for s in results[True][0])
    assert all(int(s) == 1 for s in results[False][0])


# --------------------------------------------------------------------------- CLEAR
def _clear_model(t=5, n_envs=3, learning_rate=0.0, **clear):
    """V-trace on Diagnostic with CLEAR attached (learning rate 0: the behaviour outputs
    stay the current policy's, so stored outputs can be recomputed)."""
    from baselines_sb3.cl.clear import CLEAR

    env = _diag_env(n_envs=n_envs, steps=400)
    method = CLEAR(buffer_size=10_000, storage="ram", **clear)
    model = VTrace(
        ContinualPolicy,
        env,
        n_steps=t,
        learning_rate=learning_rate,
        normalize_reward=True,
        loss_reduction="sum",
        cl_method=method,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    return model, method, attach_method(model, method, env)


def _outputs(model, frames):
    """The current policy's (logits, values) of time-major frames (F, B, ...)."""
    f, b = frames.shape[:2]
    with th.no_grad():
        logits, values = model.policy.logits_and_values(
            th.as_tensor(frames.reshape(f * b, *frames.shape[2:])).float()
        )
    return logits.view(f, b, -1).numpy(), values.view(f, b).numpy()


def test_clear_replays_whole_unrolls_in_coras_layout():
    """clear_monobeast.py stores unrolls of T + 1 frames (the bootstrap frame included) and
    replays them whole; TorchBeast writes the output computed from frame t at index t + 1
    (monobeast.py act(): index 0 = the previous unroll's last output)."""
    t, e = 5, 3
    model, method, cb = _clear_model(t, e)
    model.learn(2 * t * e, callback=cb)
    buf = method.buffer
    assert buf.size == 2 * e
    frames = buf.obs[""].array
    assert frames.shape[:2] == (buf.slots, t + 1)
    assert buf.logits.shape[1] == buf.values.shape[1] == buf.starts.shape[1] == t + 1
    assert buf.actions.shape[1] == buf.rewards.shape[1] == t
    # the bootstrap frame of the first unroll is the first frame of the next one
    np.testing.assert_array_equal(frames[:e, t], frames[e : 2 * e, 0])
    for slot in range(2 * e):
        logits, values = _outputs(model, frames[slot][:, None])
        np.testing.assert_allclose(buf.logits[slot, 1:], logits[:t, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(buf.values[slot, 1:], values[:t, 0], rtol=1e-5, atol=1e-6)
    # index 0: frame 0's own output for an env's first unroll, else the previous unroll's last
    np.testing.assert_array_equal(buf.logits[:e, 0], buf.logits[:e, 1])
    np.testing.assert_array_equal(buf.logits[e : 2 * e, 0], buf.logits[:e, t])
    np.testing.assert_array_equal(buf.values[e : 2 * e, 0], buf.values[:e, t])
    batch = buf.sample(4)
    assert batch["obs"][""].shape[:2] == (t + 1, 4) and batch["rewards"].shape == (t, 4)
    for column in range(4):  # each replayed column is one stored unroll, whole
        slot = [
            s for s in range(buf.size) if np.array_equal(frames[s], batch["obs"][""][:, column])
        ]
        assert slot and np.array_equal(buf.rewards[slot[0]], batch["rewards"][:, column])
    assert method._replay_unrolls(t * e) == e  # 50/50: as many replayed unrolls as new ones


def _kl(log_mu: np.ndarray, log_pi: np.ndarray) -> float:
    return float((np.exp(log_mu) * (log_mu - log_pi)).sum())


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_clear_cloning_targets_aligned_as_coras_code_by_default():
    """clear_monobeast.py custom_loss compares the current output of frame i with index i
    of the stored unroll, i.e. the output computed from frame i - 1; the paper's alignment
    (frame i with its own output) is the option. With the policy unchanged since the
    unrolls were stored, the paper's cloning losses vanish and CORA's do not."""
    t, e = 5, 3
    model, method, cb = _clear_model(t, e)
    assert method.clone_alignment == "cora"
    with th.no_grad():  # outputs that differ from frame to frame
        model.policy.action_net.weight.mul_(30.0)
        model.policy.value_net.weight.mul_(30.0)
    model.learn(2 * t * e, callback=cb)
    batch = method.buffer.sample(4)
    logits, values = _outputs(model, batch["obs"][""])
    terms = {k: v.detach() for k, v in method.replay_terms(model.policy, batch).items()}
    log_mu, log_pi = _log_softmax(batch["logits"]), _log_softmax(logits)
    assert float(terms["policy_cloning"]) == pytest.approx(_kl(log_mu, log_pi), rel=1e-4)
    assert float(terms["value_cloning"]) == pytest.approx(
        float(((values - batch["values"]) ** 2).sum()), rel=1e-4
    )
    assert float(terms["policy_cloning"]) > 1e-3
    method.clone_alignment = "paper"
    paper = {k: v.detach() for k, v in method.replay_terms(model.policy, batch).items()}
    assert float(paper["policy_cloning"]) < 1e-5 * float(terms["policy_cloning"])
    assert float(paper["value_cloning"]) < 1e-5 * float(terms["value_cloning"])
    with pytest.raises(ValueError, match="clone_alignment 'x'; valid: cora, paper"):
        type(method)(buffer_size=100, clone_alignment="x")


def test_clear_replayed_rewards_share_the_running_std_of_the_new_ones(monkeypatch):
    """clear_monobeast.py concatenates new and replayed unrolls; monobeast.py compute_loss
    then updates the running moments once with the whole (T, B + R) batch and divides
    every reward by the same std."""
    import baselines_sb3.cl.clear as clear_module
    import baselines_sb3.learners as learners_module

    t, e = 5, 3
    model, method, cb = _clear_model(t, e)
    model.learn(2 * t * e, callback=cb)
    rng = np.random.default_rng(0)
    model.rollout_buffer.rewards[...] = rng.normal(size=(t, e))
    method.buffer.rewards[...] = rng.normal(size=method.buffer.rewards.shape) + 3.0
    stats = model.policy.reward_normalizer
    before = {k: float(getattr(stats, k)) for k in ("reward_sum", "reward_m2", "reward_count")}
    seen = {}

    def spy(module, name):
        original = module.vtrace_targets

        def wrapped(*args, **kwargs):
            seen[name] = args[2].clone()
            return original(*args, **kwargs)

        monkeypatch.setattr(module, "vtrace_targets", wrapped)

    spy(learners_module, "new")
    spy(clear_module, "replay")
    drawn = {}
    original_sample = method.buffer.sample

    def sample(n):
        drawn["batch"] = original_sample(n)
        return drawn["batch"]

    monkeypatch.setattr(method.buffer, "sample", sample)
    model.train()
    replayed = drawn["batch"]["rewards"]
    assert replayed.shape == (t, e)
    both = np.concatenate([model.rollout_buffer.rewards, replayed], axis=1)
    # one update of the moments with the concatenated batch: CORA's count adds T once
    assert float(stats.reward_count) - before["reward_count"] == pytest.approx(t)
    assert float(stats.reward_sum) - before["reward_sum"] == pytest.approx(both.sum(), rel=1e-5)
    std = float(stats.std())
    np.testing.assert_allclose(seen["new"].numpy(), model.rollout_buffer.rewards / std, rtol=1e-5)
    np.testing.assert_allclose(seen["replay"].numpy(), replayed / std, rtol=1e-5)


def test_clear_defaults_pinned():
    """Every CLEAR loss setting: ClearPolicyConfig (batch_replay_ratio 1.0, cloning costs
    0.01 / 0.005), summed losses (KLDivLoss(reduction="sum"), torch.sum), CORA's cloning
    alignment, whole unrolls of the learner's T, replayed rewards normalised as new ones."""
    import inspect

    from baselines_sb3.cl.clear import CLEAR

    defaults = {
        k: p.default
        for k, p in inspect.signature(CLEAR).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    assert defaults == {
        "policy_cloning": 0.01,
        "value_cloning": 0.005,
        "replay_ratio": 0.5,
        "clone_alignment": "cora",
        "disk_dir": None,
        "storage": "auto",
        "seed": 0,
    }
    for suite in ("Atari6", "MiniHack15", "CHORES-VaryRoom"):
        hp = hyperparameters.preset_settings(suite, "vtrace", "clear", "paper")
        assert {k: v for k, v in hp["method"].items() if k != "buffer_size"} == {
            "policy_cloning": 0.01,
            "value_cloning": 0.005,
            "replay_ratio": 0.5,
            "clone_alignment": "cora",
        }
        assert hp["learner"]["loss_reduction"] == "sum"
    _, method, _ = _clear_model(t=4, n_envs=2)
    assert (method.reduction, method.gamma, method.buffer.unroll_length) == ("sum", 0.99, 4)
    assert method._replay_unrolls(4 * 2) == 2
    assert CLEAR(buffer_size=100, replay_ratio=0.0).replay_ratio == 0.0


# --------------------------------------------------------------------------- presets
CORA_SUITES = [name for name, info in SUITES.items() if info.family == "cora"]
"""The CORA suites: the catalog's entries of CORA's family."""


def test_default_learner_per_suite():
    """The default learner is the catalog's (one declaration), the same under every preset."""
    from cl_suites.suites import find_suite

    for suite in CORA_SUITES:
        assert find_suite(suite).default_learner == "vtrace"
    assert find_suite("MEAL-20").default_learner == "ppo-jax"
    assert find_suite("CLSuite/Diagnostic-v0").default_learner == "ppo"
    with pytest.raises(ValueError, match="no preset for suite 'Nope'.*Atari6"):
        hyperparameters.preset_settings("Nope", "vtrace", "ft", "paper")


def test_cora_presets_per_suite():
    atari = hyperparameters.preset_settings("Atari6", "vtrace", "ft", "paper")
    assert atari["learner"] == {
        "learning_rate": 4e-4,
        "n_steps": 20,
        "gamma": 0.99,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 40.0,
        "rms_prop_alpha": 0.99,
        "rms_prop_eps": 0.01,
        "loss_reduction": "sum",
        "lr_schedule": "linear-per-task",
        "normalize_reward": False,
        "policy_lag": 1,
    }
    assert (atari["num_envs"], atari["network"], atari["reward_clip"]) == (32, "shallow", (-1, 1))
    assert atari["previous_action_reward"] and not atari["ortho_init"]
    assert atari["time_limit_terminal"] and atari["action_mask_mode"] == "sampling"
    assert (
        hyperparameters.preset_settings("Procgen6", "vtrace", "ft", "paper")["network"]
        == "residual"
    )
    assert (
        hyperparameters.preset_settings("Procgen6", "vtrace", "ft", "small")["network"] == "shallow"
    )
    minihack = hyperparameters.preset_settings("MiniHack15", "vtrace", "ft", "paper")
    assert minihack["reward_clip"] is None and minihack["network"] == "shallow"
    assert {k: minihack["learner"][k] for k in presets.CORA_MINIHACK_VTRACE} == {
        "learning_rate": 2e-4,
        "ent_coef": 0.001,
        "gamma": 0.999,
        "rms_prop_eps": 1e-6,
        "normalize_reward": True,
        "reward_std_count": "cora",
    }
    chores = hyperparameters.preset_settings("CHORES-VaryRoom", "vtrace", "clear", "paper")
    assert (chores["num_envs"], chores["learner"]["n_steps"]) == (10, 80)
    assert chores["learner"]["learning_rate"] == 4.8e-4
    assert chores["method"]["buffer_size"] == 1_500_000
    chores_ewc = hyperparameters.preset_settings("CHORES-MultiTraj", "vtrace", "ewc", "paper")
    assert (chores_ewc["learner"]["learning_rate"], chores_ewc["learner"]["rms_prop_eps"]) == (
        6e-4,
        0.1,
    )
    assert chores_ewc["method"]["min_task_steps"] == 20_000_000
    pnc = {
        s: hyperparameters.preset_settings(s, "vtrace", "pnc", "paper")["method"]
        for s in CORA_SUITES
    }
    assert pnc["Atari6"]["progress_updates"] == 39_063
    assert pnc["Procgen6"]["progress_updates"] == 3_906
    assert pnc["CHORES-VaryTask"]["progress_updates"] == 625
    assert pnc["MiniHack15"]["progress_updates"] is None
    assert pnc["Atari6"]["buffer_frames"] == 100_000
    assert pnc["CHORES-VaryTask"]["buffer_frames"] == 1_000_000
    clear = {
        s: hyperparameters.preset_settings(s, "vtrace", "clear", "paper")["method"]["buffer_size"]
        for s in ("Atari6", "Procgen6", "MiniHack15")
    }
    assert clear == {"Atari6": 25_000_000, "Procgen6": 5_000_000, "MiniHack15": 10_000_000}


def test_cora_method_presets():
    ewc = hyperparameters.preset_settings("Procgen6", "vtrace", "ewc", "paper")["method"]
    assert ewc == {
        "variant": "cora",
        "lam": 10_000.0,
        "fisher_batches": 100,
        "buffer_frames": 1_000_000,
        "min_task_steps": 200_000,
    }
    online = hyperparameters.preset_settings("Atari6", "vtrace", "online-ewc", "paper")["method"]
    assert (online["lam"], online["online_gamma"], online["normalize"]) == (175.0, 0.99, "row")
    assert online["min_task_steps"] == 0
    pnc = hyperparameters.preset_settings("Atari6", "vtrace", "pnc", "paper")["method"]
    assert (pnc["lam"], pnc["online_gamma"], pnc["normalize"], pnc["kl_cost"]) == (
        3000.0,
        0.99,
        "full",
        1.0,
    )
    assert ProgressCompress().reset == "column"
    l2 = hyperparameters.preset_settings("Atari6", "vtrace", "l2", "paper")["method"]
    assert l2 == {"variant": "meal", "lam": 1e7, "groups": "all"}


def test_cora_ppo_preset():
    """configs/atari/ppo_atari.json over PPOPolicyConfig (not MEAL's values)."""
    hp = hyperparameters.preset_settings("Atari6", "ppo", "ft", "paper")
    assert hp["learner"] == presets.CORA_PPO
    assert presets.CORA_PPO["learning_rate"] == 2.5e-4 and presets.CORA_PPO["clip_range"] == 0.1
    assert (hp["num_envs"], hp["learner"]["n_steps"], hp["learner"]["n_minibatches"]) == (8, 128, 4)
    assert hp["learner"]["lr_decay_steps"] == 10_000_000
    assert (hp["network"], hp["reward_sign"], hp["previous_action_reward"]) == (
        "a2c-ppo",
        True,
        False,
    )


def test_bad_options_name_the_valid_ones():
    from cl_suites.job.torch.options import route_overrides

    hp = hyperparameters.preset_settings("Atari6", "ppo", "ft", "paper")
    with pytest.raises(ValueError, match="'rho_bar' belongs to learner 'vtrace'.*valid learner"):
        route_overrides(hp, "ppo", "ft", {"rho_bar": 2.0})
    hp = hyperparameters.preset_settings("Atari6", "vtrace", "ft", "paper")
    with pytest.raises(ValueError, match="'lam' belongs to method"):
        route_overrides(hp, "vtrace", "ft", {"lam": 2.0})
    with pytest.raises(ValueError, match="does not support option.*'num_samples'.*valid"):
        make_method("ewc", variant="cora", num_samples=3)
    with pytest.raises(ValueError, match="MEAL's baselines use IPPO"):
        hyperparameters.preset_settings("MEAL-2", "vtrace", "ft", "paper")
    with pytest.raises(ValueError, match="unknown preset 'huge'.*paper, small"):
        hyperparameters.preset_settings("Atari6", "vtrace", "ft", "huge")


@pytest.mark.parametrize("method", ["pnc", "ewc"])
def test_resume_with_cora_inputs_and_schedule_reproduces_the_run(tmp_path, method):
    """The per-task LR, the previous-action inputs, the Fisher buffers and P&C's phase and
    knowledge base survive a kill: the resumed run logs exactly the uninterrupted one."""
    from baselines_sb3 import callbacks
    from cl_suites.job.main_job import run_main_job
    from cl_suites.rundir.runlog import read_episodes, read_eval

    kw = dict(
        suite="Diagnostic", method=method, learner="vtrace", preset="small", seed=1, num_envs=4
    )
    ov = {
        "n_tasks": 2,
        "steps_per_task": 480,
        "eval_every": 240,
        "checkpoint_every": 240,
        "progress": False,
        "report": False,
        "previous_action_reward": True,
    }
    run_main_job(run_dir=tmp_path / "full", resume=False, overrides=ov, **kw)
    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if self.num_timesteps >= 700:
            raise KeyboardInterrupt("simulated kill")
        return out

    callbacks.ContinualEvalCallback._on_step = killer
    try:
        with pytest.raises(KeyboardInterrupt):
            run_main_job(run_dir=tmp_path / "cut", resume=False, overrides=ov, **kw)
    finally:
        callbacks.ContinualEvalCallback._on_step = original
    run_main_job(run_dir=tmp_path / "cut", resume=True, overrides=ov, **kw)
    full, cut = read_eval(tmp_path / "full"), read_eval(tmp_path / "cut")
    assert full.drop(columns="wall_time").equals(cut.drop(columns="wall_time"))
    assert read_episodes(tmp_path / "full").equals(read_episodes(tmp_path / "cut"))


def test_cora_paper_preset_overlaps_the_update_with_acting():
    """Issue 38: the paper preset's V-trace acts with one update of lag, as CORA's actors
    do; ``small`` and the class default stay lockstep, and PPO has no lag."""
    for suite in ("MiniHack15", "Procgen6", "Atari6", "CHORES-VaryRoom"):
        assert (
            hyperparameters.preset_settings(suite, "vtrace", "ft", "paper")["learner"]["policy_lag"]
            == 1
        )
        assert (
            hyperparameters.preset_settings(suite, "vtrace", "ft", "small")["learner"].get(
                "policy_lag", 0
            )
            == 0
        )
    assert (
        "policy_lag"
        not in hyperparameters.preset_settings("Atari6", "ppo", "ft", "paper")["learner"]
    )
