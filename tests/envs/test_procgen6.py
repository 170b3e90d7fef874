"""Procgen6 exactly as CORA section 3.2 defines it, through gym.make and make_vec."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import cl_suites
from cl_suites.envs.procgen import ProcgenVectorEnv


def test_paper_defaults():
    seq = cl_suites.make_sequence("CLSuite/Procgen6-v0")
    assert [t.name for t in seq.tasks] == [
        "climber",
        "dodgeball",
        "ninja",
        "starpilot",
        "bigfish",
        "fruitbot",
    ]
    assert {t.budget for t in seq.tasks} == {5_000_000}
    assert (seq.cycles, seq.eval_every, seq.eval_episodes) == (5, 250_000, 10)
    assert seq.observation_space == gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert seq.action_space == gym.spaces.Discrete(15)
    assert all(t.splits == ("train", "test") for t in seq.tasks)
    train, test = seq.tasks[0].make_train, seq.tasks[0].make_test
    assert train.keywords | {} == {
        "distribution_mode": "easy",
        "num_levels": 200,
        "start_level": 0,
    }
    assert test.keywords["num_levels"] == 0 and test.keywords["distribution_mode"] == "easy"
    assert seq.schedule()[-1].end_step == 6 * 5 * 5_000_000


def test_gym_make_overrides_and_plays_through_a_switch():
    env = gym.make("CLSuite/Procgen6-v0", steps_per_task=30, cycles=1)
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8
    assert (info["task_name"], info["task_switched"]) == ("climber", True)
    for _ in range(29):
        _, _, terminated, truncated, info = env.step(0)
        assert not truncated
        if terminated:
            env.reset()
    _, _, _, truncated, info = env.step(0)
    assert truncated and info["total_step"] == 30
    obs, info = env.reset()
    assert (info["task_name"], info["task_switched"], info["task_step"]) == ("dodgeball", True, 0)
    env.close()


def test_check_env_on_unwrapped():
    env = gym.make("CLSuite/Procgen6-v0", steps_per_task=1000, cycles=1)
    check_env(env.unwrapped, skip_render_check=True)


def test_same_seed_same_frames_different_seed_differs():
    def frames(seed):
        env = cl_suites.make_env("Procgen6", steps_per_task=50, cycles=1)
        out = [env.reset(seed=seed)[0]]
        for t in range(50):
            obs, *_ = env.step(t % 15)
            out.append(obs)
        return np.stack(out)

    assert np.array_equal(frames(1), frames(1))
    assert not np.array_equal(frames(1), frames(2))


def test_make_vec_uses_native_batched_procgen_and_switches_together():
    venv = cl_suites.make_vec("CLSuite/Procgen6-v0", num_envs=16, steps_per_task=64, cycles=1)
    obs, info = venv.reset(seed=0)
    assert isinstance(venv._backend, ProcgenVectorEnv) and venv._backend.num_envs == 16
    assert obs.shape == (16, 64, 64, 3)
    for _ in range(3):
        venv.step(np.zeros(16, dtype=np.int64))
    obs, _, _, truncated, info = venv.step(np.zeros(16, dtype=np.int64))
    assert (
        truncated.all() and info["task_switched"].all() and (info["task_name"] == "dodgeball").all()
    )
    assert info["total_step"][0] == 64
    venv.close()


def test_gym_make_without_explicit_import():
    code = (
        "import gymnasium as gym; "
        "e = gym.make('cl_suites:CLSuite/Procgen6-v0', steps_per_task=10); "
        "print(e.reset(seed=0)[1]['task_name'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "climber"


def test_unknown_suite_lists_available_ids():
    with pytest.raises(KeyError, match="CLSuite/Procgen6-v0"):
        cl_suites.make_sequence("CLSuite/Procgen7-v0")


def test_bad_procgen_options_are_named():
    # refused when the sequence is built, not when the task starts millions of steps later
    with pytest.raises(ValueError, match="'medium' is unknown; use one of \\('easy'"):
        cl_suites.make_sequence("Procgen6", distribution_mode="medium")
    with pytest.raises(
        ValueError, match="unknown procgen game\\(s\\) \\['pong'\\]; available: bigfish"
    ):
        cl_suites.make_sequence("Procgen6", games=("climber", "pong"))
    with pytest.raises(ValueError, match="games must be a sequence of procgen game names"):
        cl_suites.make_sequence("Procgen6", games="climber")
    # negative level numbers would reach procgen's C++ assert, which kills the process
    for name in ("num_train_levels", "start_level", "num_test_levels", "num_threads"):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 0, got -1"):
            cl_suites.make_sequence("Procgen6", **{name: -1})
    with pytest.raises(ValueError, match="num_train_levels must be below 2\\*\\*31"):
        cl_suites.make_sequence("Procgen6", num_train_levels=2**40)
    with pytest.raises(ValueError, match="num_levels must be an integer >= 0, got -5"):
        ProcgenVectorEnv("climber", 2, num_levels=-5)
    with pytest.raises(ValueError, match="steps_per_task must be a positive integer, got -1"):
        cl_suites.make_sequence("Procgen6", steps_per_task=-1)
    with pytest.raises(ValueError, match="cycles must be a positive integer, got 0"):
        cl_suites.make_sequence("Procgen6", cycles=0)
