"""MiniHack15 exactly as CORA section 3.3 / appendix C.3 defines it."""

from __future__ import annotations

import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.evaluation import Evaluator
from cl_suites.envs.minihack import make_minihack_env
from cl_suites.suites.minihack15 import PAIRS, env_names

pytest.importorskip("minihack")

OBS_SPACE = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
TRAIN = [
    "Room-Random-5x5", "Room-Dark-5x5", "Room-Monster-5x5", "Room-Trap-5x5",
    "Room-Ultimate-5x5", "Corridor-R2", "Corridor-R3", "KeyRoom-S5", "KeyRoom-Dark-S5",
    "River-Narrow", "River-Monster", "River-Lava", "HideNSeek", "HideNSeek-Lava",
    "CorridorBattle",
]  # fmt: skip
TEST = [
    "Room-Random-15x15", "Room-Dark-15x15", "Room-Monster-15x15", "Room-Trap-15x15",
    "Room-Ultimate-15x15", "Corridor-R5", "Corridor-R5", "KeyRoom-S15", "KeyRoom-Dark-S15",
    "River", "River-MonsterLava", "River-MonsterLava", "HideNSeek-Big", "HideNSeek-Big",
    "CorridorBattle-Dark",
]  # fmt: skip
CAPS = {"Room-Random-5x5": 100, "Room-Random-15x15": 300, "Corridor-R2": 1000, "River": 350}


@pytest.fixture(scope="module")
def envs():
    """One env per distinct id, reset with seed 0 (NLE construction is the slow part)."""
    built = {}
    for name in env_names():
        env = make_minihack_env(name)
        built[name] = (env, env.reset(seed=0)[0])
    yield built
    for env, _ in built.values():
        env.close()


def test_paper_defaults():
    seq = cl_suites.make_sequence("CLSuite/MiniHack15-v0")
    assert [t.name for t in seq.tasks] == TRAIN
    assert [t.make_train.args[0] for t in seq.tasks] == TRAIN
    assert [t.make_test.args[0] for t in seq.tasks] == TEST
    assert all(t.splits == ("train", "test") for t in seq.tasks)
    assert {t.budget for t in seq.tasks} == {10_000_000}
    assert (seq.cycles, seq.eval_every, seq.eval_episodes) == (2, 1_000_000, 10)
    assert seq.observation_space == OBS_SPACE and seq.action_space == gym.spaces.Discrete(8)
    assert seq.metric_settings["smoothing_window"] == 20
    assert len(env_names()) == 27 and len(set(TRAIN + TEST)) == 27
    assert list(PAIRS) == list(zip(TRAIN, TEST, strict=True))


def test_all_27_ids_construct_step_and_share_spaces(envs):
    from nle.nethack import CompassDirection

    assert list(envs) == list(dict.fromkeys(n for pair in PAIRS for n in pair))
    for name, (env, first) in envs.items():
        core = env.unwrapped
        assert env.spec.id == f"MiniHack-{name}-v0"
        assert env.observation_space == OBS_SPACE and env.action_space == gym.spaces.Discrete(8)
        assert tuple(core.actions) == tuple(CompassDirection)
        assert (core.reward_win, core.penalty_step) == (1, -0.001)
        assert (core.obs_crop_h, core.obs_crop_w) == (5, 5)
        assert core.spec.kwargs["fix_moon_phase"] is True  # no system-clock effects
        assert first.shape == (84, 84, 3) and first.dtype == np.uint8
        obs, reward, _, _, _ = env.step(0)
        assert obs.shape == (84, 84, 3) and obs.dtype == np.uint8
        assert reward in (0.0, -0.001) or name.startswith(("Room-Trap", "Room-Ultimate", "River"))


def test_padding_is_two_zero_pixels_around_the_80x80_crop(envs):
    for name, (env, first) in envs.items():
        assert not first[:2].any() and not first[-2:].any(), name
        assert not first[:, :2].any() and not first[:, -2:].any(), name
        raw = env.unwrapped._get_observation(env.unwrapped.last_observation)["pixel_crop"]
        assert raw.shape == (80, 80, 3)
        obs = env.observation(env.unwrapped._get_observation(env.unwrapped.last_observation))
        np.testing.assert_array_equal(obs[2:82, 2:82], raw)
        assert raw.any()  # the agent's tile is drawn


def test_each_env_keeps_its_own_episode_cap(envs):
    for name, cap in CAPS.items():
        assert envs[name][0].unwrapped._max_episode_steps == cap
    env = envs["Corridor-R2"][0]  # walking north into the wall never ends the episode
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, terminated, truncated, info = env.step(0)
        steps += 1
        if terminated or truncated:
            break
    assert (steps, terminated, truncated) == (1000, False, True)
    assert info["end_status"] == env.unwrapped.StepStatus.ABORTED


def test_same_seed_same_frames_different_seed_differs():
    def frames(seed):
        env = cl_suites.make_env("MiniHack15", steps_per_task=60, cycles=1)
        out = [env.reset(seed=seed)[0]]
        for t in range(60):
            obs, _, terminated, truncated, _ = env.step(t % 8)
            out.append(obs)
            if (terminated or truncated) and t < 59:
                out.append(env.reset()[0])
        env.close()
        return out

    a, b, c = frames(3), frames(3), frames(4)
    assert len(a) >= 61
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) != len(c) or not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_sequence_plays_all_15_tasks_in_order_through_switches():
    env = gym.make("CLSuite/MiniHack15-v0", steps_per_task=5, cycles=1)
    obs, info = env.reset(seed=0)
    names = [info["task_name"]]
    while True:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (84, 84, 3)
        if info["sequence_done"]:
            break
        if terminated or truncated:
            obs, info = env.reset()
            if info["task_switched"]:
                names.append(info["task_name"])
    assert names == TRAIN and info["total_step"] == 75
    env.close()


def test_async_vector_path_and_evaluator_with_test_splits():
    kwargs = {"steps_per_task": 20, "cycles": 1, "pairs": PAIRS[5:7]}
    venv = cl_suites.make_vec("MiniHack15", num_envs=2, vectorization_mode="async", **kwargs)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (2, 84, 84, 3) and list(info["task_name"]) == ["Corridor-R2"] * 2
    for _ in range(10):
        obs, _, _, truncated, info = venv.step(np.array([0, 1]))
    assert truncated.all() and list(info["task_name"]) == ["Corridor-R3"] * 2
    assert info["task_switched"].all() and info["total_step"][0] == 20
    venv.close()
    seq = cl_suites.make_sequence("MiniHack15", eval_episodes=2, max_episode_steps=10, **kwargs)
    evaluator = Evaluator(seq, seed=0)
    records = evaluator.evaluate(0, lambda o, ids: np.zeros(len(o), dtype=np.int64))
    evaluator.close()
    assert [(r["task_name"], r["split"], r["episodes"]) for r in records] == [
        ("Corridor-R2", "train", 2),
        ("Corridor-R2", "test", 2),
        ("Corridor-R3", "train", 2),
        ("Corridor-R3", "test", 2),
    ]
    # 10 steps north, mostly into a wall: -0.001 per step that does not advance game time
    returns = np.array([r["mean_return"] for r in records])
    assert ((returns >= -0.01 - 1e-9) & (returns < 0)).all()
    np.testing.assert_allclose(returns * 2000, np.round(returns * 2000), atol=1e-9)


def test_factories_pickle():
    task = cl_suites.make_sequence("MiniHack15").tasks[6]
    factory = pickle.loads(pickle.dumps(task.make_test))
    assert factory.args == ("Corridor-R5",) and factory().observation_space == OBS_SPACE


def test_unknown_id_names_the_id_and_the_minihack_version():
    from importlib.metadata import version

    with pytest.raises(
        ValueError, match=rf"'MiniHack-Room-Nope-v0'.*minihack {version('minihack')}"
    ):
        cl_suites.make_sequence("MiniHack15", pairs=(("Room-Random-5x5", "Room-Nope"),))


def test_missing_minihack_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minihack", None)
    seq = cl_suites.make_sequence("MiniHack15")  # schedules list without the simulator
    assert len(seq.schedule()) == 30
    with pytest.raises(ImportError, match=r"cl-suites\[minihack\]"):
        cl_suites.make_env("MiniHack15")
    with pytest.raises(ImportError, match=r"cl-suites\[minihack\]"):
        make_minihack_env("Room-Random-5x5")
