"""Issue 55 deliver 3: own agents are evaluated as they act. ``Recorder(env=...)`` takes
the loop's own (wrapped) env and the evaluator plays through the same wrappers: a frame
stack gets stacked frames at evaluation; recurrent policies get episode starts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.evaluation import Evaluator, WrappedEnvSource
from tests.envs.test_own_loop import _example

SUITE = dict(steps_per_task=40, n_tasks=2, eval_every=40, eval_episodes=2)


def _stacked_env(stack=3):
    return gym.wrappers.FrameStackObservation(
        gym.make("CLSuite/Diagnostic-v0", **SUITE), stack_size=stack
    )


def test_the_evaluator_hands_the_policy_stacked_frames_of_an_own_env(tmp_path):
    env = _stacked_env(3)
    obs_dim = env.unwrapped.observation_space.shape[0]
    seen = []

    def policy(obs, task_ids):
        seen.append(np.asarray(obs).shape)
        return np.zeros(len(obs), dtype=np.int64)

    rec = cl_suites.Recorder(tmp_path / "run", "Diagnostic", env=env, method="mine", **SUITE)
    with rec:
        obs, infos = env.reset(seed=0)
        assert obs.shape == (3, obs_dim)
        rec.step(infos, policy)
        while not rec.done:
            obs, _, term, trunc, infos = env.step(0)
            rec.step(infos, policy)
            if (term or trunc) and not rec.done:
                obs, _ = env.reset()
    assert seen and all(s[1:] == (3, obs_dim) for s in seen), set(seen)
    evals = cl_suites.read_eval(tmp_path / "run")
    assert sorted(set(evals.total_step)) == [0, 40, 80]
    assert not cl_suites.read_episodes(tmp_path / "run").empty


def test_a_vector_env_under_vector_wrappers_is_evaluated_through_them(tmp_path):
    base = cl_suites.make_vec("Diagnostic", 2, **SUITE)
    env = gym.wrappers.vector.RecordEpisodeStatistics(base)
    rec = cl_suites.Recorder(tmp_path / "run", "Diagnostic", env=env, method="mine", **SUITE)
    assert rec.envs is env
    assert rec.evaluator.source.vector_wrappers == []  # bookkeeping only: not rebuilt
    with rec:
        _, infos = env.reset(seed=0)
        records = rec.step(infos, lambda obs, ids: np.zeros(len(obs), dtype=np.int64))
    assert len(records) == 2  # both tasks evaluated at step 0 through the wrapper


def test_an_env_of_another_schedule_is_refused(tmp_path):
    env = gym.make("CLSuite/Diagnostic-v0", **{**SUITE, "steps_per_task": 80})
    with pytest.raises(ValueError, match="another schedule"):
        cl_suites.Recorder(tmp_path / "run", "Diagnostic", env=env, method="mine", **SUITE)


def test_recurrent_policies_get_episode_starts_at_evaluation():
    env = _stacked_env(2)
    seq = env.unwrapped.sequence
    calls = []

    def policy(obs, task_ids, episode_starts):
        calls.append(np.asarray(episode_starts).copy())
        return np.zeros(len(obs), dtype=np.int64)

    policy.needs_episode_starts = True
    ev = Evaluator(seq, seed=0, episodes=4, env_source=WrappedEnvSource(seq, 2, env))
    try:
        ev.evaluate(0, policy)
    finally:
        ev.close()
    assert calls[0].all()  # every row starts an episode at the first call
    assert not calls[1].any()
    assert any(c.any() for c in calls[2:])  # an episode ended, the next one starts


def test_the_frame_stack_example_runs_and_is_evaluated_through_its_wrappers(tmp_path):
    run_dir = _example("frame_stack_agent").main(
        ["--run-dir", str(tmp_path / "fs"), "--steps-per-task", "64", "--eval-every", "32",
         "--eval-episodes", "1", "--stack", "2"]
    )  # fmt: skip
    meta = cl_suites.read_metadata(run_dir)
    assert meta["method"] == "cleanrl-frame-stack"
    evals = cl_suites.read_eval(run_dir)
    assert sorted(set(evals.total_step)) == [0, 32, 64, 96, 128]
