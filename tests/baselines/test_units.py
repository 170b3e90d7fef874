"""V-trace, Fisher timing, reservoir uniformity, clipping, resume, bad input."""

import numpy as np
import pytest
import scipy.stats
import torch as th
from gymnasium import spaces

from baselines_sb3.cl import CoraEWC, ReservoirBuffer, attach_method
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.vtrace import vtrace_targets
from cl_suites.api import make_vec
from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval
from cl_suites.sb3.adapter import SB3VecEnv


def test_vtrace_hand_computed():
    # T=2, B=1; gamma=0.5; log ratios: ln 2 (rho clipped to 1), ln 0.5 (rho=c=0.5)
    blp = th.tensor([[0.0], [0.0]])
    tlp = th.tensor([[np.log(2.0)], [np.log(0.5)]], dtype=th.float32)
    r = th.tensor([[1.0], [2.0]])
    v = th.tensor([[0.5], [1.0]])
    boot = th.tensor([4.0])
    disc = th.tensor([[0.5], [0.5]])
    vs, adv = vtrace_targets(blp, tlp, r, v, boot, disc)
    # delta1 = 0.5*(2 + 0.5*4 - 1) = 1.5 -> vs1 = 2.5
    # delta0 = 1*(1 + 0.5*1 - 0.5) = 1.0; vs0 = 0.5 + 1.0 + 0.5*1*1.5 = 2.25
    assert vs[:, 0].tolist() == pytest.approx([2.25, 2.5])
    # adv0 = 1*(1 + 0.5*2.5 - 0.5) = 1.75; adv1 = 0.5*(2 + 0.5*4 - 1) = 1.5
    assert adv[:, 0].tolist() == pytest.approx([1.75, 1.5])


def test_vtrace_on_policy_is_nstep_return():
    g = th.Generator().manual_seed(0)
    t_len, b = 5, 3
    lp = th.randn(t_len, b, generator=g)
    r, v = th.randn(t_len, b, generator=g), th.randn(t_len, b, generator=g)
    boot = th.randn(b, generator=g)
    disc = th.full((t_len, b), 0.9)
    disc[2, 1] = 0.0  # an episode end
    vs, _ = vtrace_targets(lp, lp, r, v, boot, disc)
    ret = boot.clone()
    expected = th.empty(t_len, b)
    for t in range(t_len - 1, -1, -1):
        ret = r[t] + disc[t] * ret
        expected[t] = ret
    assert th.allclose(vs, expected, atol=1e-5)


def _diag_model(method, n_envs=4, steps=800, **ppo):
    venv = make_vec("Diagnostic", n_envs, n_tasks=2, steps_per_task=steps, show_task=False)
    env = SB3VecEnv(venv)
    env.seed(0)
    kw = dict(n_steps=16, batch_size=32, n_epochs=2, learning_rate=3e-3)
    kw.update(ppo)
    model = ContinualPPO(
        ContinualPolicy, env, cl_method=method, seed=0, policy_kwargs={"net_arch": [16]}, **kw
    )
    return model, attach_method(model, method, env)


def test_fisher_computed_at_switch_step_and_not_before():
    method = CoraEWC(lam=1.0, fisher_batches=2, min_task_steps=0)
    model, cb = _diag_model(method)
    seen = []

    from stable_baselines3.common.callbacks import BaseCallback

    class Watch(BaseCallback):
        def _on_step(self):
            seen.append((self.num_timesteps, len(method.consolidations), bool(method.terms)))
            return not self.locals["infos"][0].get("sequence_done")

    model.learn(1600, callback=[cb, Watch()])
    before = [s for s in seen if s[0] <= 832]  # the switch at 800 is inside this rollout
    assert before and all(c == 0 and not imp for _, c, imp in before)
    assert method.consolidations[0]["total_step"] == 800
    assert method.consolidations[0]["task_id"] == 0
    # CORA consolidates in the first update of the new task: here the update of the
    # rollout in which the switch happened (it has steps of task 1), before its first step
    assert next(s for s in seen if s[0] == 836)[1:] == (1, True)


def test_reservoir_is_uniform():
    space = spaces.Box(0, 255, (2,), np.uint8)
    counts = np.zeros(200)
    for rep in range(300):
        buf = ReservoirBuffer(
            capacity=20, unroll_length=1, observation_space=space, num_actions=2, seed=rep
        )
        for item in range(200):
            obs = {"": np.full((2, 1, 2), item % 256, np.uint8)}  # T + 1 frames
            buf.add(
                obs,
                np.array([[item]]),
                np.zeros((2, 1, 2)),
                np.zeros((2, 1)),
                np.zeros((1, 1)),
                np.zeros((2, 1), bool),
            )
        counts[buf.actions[:, 0]] += 1
    assert counts.sum() == 300 * 20
    assert scipy.stats.chisquare(counts).pvalue > 0.01
    # a biased (keep-first) buffer fails the same test
    biased = np.zeros(200)
    biased[:20] = 300
    assert scipy.stats.chisquare(biased).pvalue < 1e-6


def test_replay_buffer_stores_uint8_once():
    space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    buf = ReservoirBuffer(capacity=2000, unroll_length=20, observation_space=space, num_actions=15)
    assert buf.obs[""].array.dtype == np.uint8
    assert buf.resident_bytes / buf.capacity <= 1.1 * 64 * 64 * 3


def test_penalty_gradient_is_clipped_with_loss():
    method = CoraEWC(lam=1e6, fisher_batches=2, min_task_steps=0)
    model, cb = _diag_model(method, max_grad_norm=0.5)
    model.learn(800, callback=cb)  # task 0 done -> consolidated? switch at 800
    assert method.terms
    # push the parameters away from the anchor so the penalty dominates
    with th.no_grad():
        for _n, p in method.named_parameters(model.policy):
            p.add_(1.0)
    norms = []

    def pre_step(opt, args, kwargs):
        grads = [p.grad for p in model.policy.parameters() if p.grad is not None]
        norms.append(float(th.norm(th.stack([g.norm() for g in grads]))))

    handle = model.policy.optimizer.register_step_pre_hook(pre_step)
    raw = method.penalty(model.policy)
    raw_grad = th.autograd.grad(raw, [p for _, p in method.named_parameters(model.policy)])
    raw_norm = float(th.norm(th.stack([g.norm() for g in raw_grad])))
    model.learn(64, callback=cb, reset_num_timesteps=False)
    handle.remove()
    assert raw_norm > 100.0
    assert norms and max(norms) == pytest.approx(0.5, rel=1e-3)


def test_resume_reproduces_uninterrupted_log(tmp_path, diag_overrides):
    kw = dict(
        suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=3, num_envs=None
    )
    ov = {**diag_overrides, "steps_per_task": 1000, "eval_every": 500, "checkpoint_every": 500}
    full = tmp_path / "full"
    run_main_job(run_dir=full, resume=False, overrides=ov, **kw)

    cut = tmp_path / "cut"
    from baselines_sb3 import callbacks

    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if self.num_timesteps >= 1400:
            raise KeyboardInterrupt("simulated kill")
        return out

    callbacks.ContinualEvalCallback._on_step = killer
    try:
        with pytest.raises(KeyboardInterrupt):
            run_main_job(run_dir=cut, resume=False, overrides=ov, **kw)
    finally:
        callbacks.ContinualEvalCallback._on_step = original
    assert read_eval(cut).total_step.max() >= 1000  # evals after the checkpoint exist
    run_main_job(run_dir=cut, resume=True, overrides=ov, **kw)
    a, b = read_eval(full).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert len(b) == len(a) and not b.duplicated(["total_step", "task_id", "split"]).any()
    assert a.equals(b)
    assert read_episodes(full).equals(read_episodes(cut))


def test_bad_input(tmp_path, diag_overrides):
    kw = dict(
        suite="Diagnostic",
        learner="ppo",
        preset="small",
        seed=0,
        num_envs=None,
        overrides=diag_overrides,
    )
    with pytest.raises(ValueError, match="unknown method 'sgd'.*ewc"):
        run_main_job(method="sgd", run_dir=tmp_path / "a", resume=False, **kw)
    with pytest.raises(ValueError, match="unknown learner 'dqn'.*vtrace"):
        run_main_job(method="ft", run_dir=tmp_path / "a", resume=False, **{**kw, "learner": "dqn"})
    run_main_job(
        method="ft",
        run_dir=tmp_path / "b",
        resume=False,
        **{**kw, "overrides": {**diag_overrides, "steps_per_task": 200}},
    )
    with pytest.raises(ValueError, match="refusing to resume.*method"):
        run_main_job(
            method="ewc",
            run_dir=tmp_path / "b",
            resume=True,
            **{**kw, "overrides": {**diag_overrides, "steps_per_task": 200}},
        )


def test_boundary_method_needs_boundaries():
    from stable_baselines3.common.env_util import make_vec_env

    from cl_suites.suites.diagnostic import CueEnv

    env = make_vec_env(lambda: CueEnv(0), n_envs=2, seed=0)
    model = ContinualPPO(ContinualPolicy, env, n_steps=8, batch_size=16)
    with pytest.raises(ValueError, match="needs task boundaries"):
        attach_method(model, CoraEWC(lam=1.0), env)
