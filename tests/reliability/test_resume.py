"""Exact resume of a running vector env (issue 13 item 4, env side): state_dict() in the
middle of episodes, load_state_dict() into a new env, and the same observations, rewards
and episode ends afterwards, bit for bit, where the simulator can be saved."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cl_suites
from cl_suites.core.env_state import EnvStateError, save_env_state

FIELDS = ("obs", "reward", "terminated", "truncated", "task_id", "episode_mask", "episode_r")


def play(env, actions) -> list[tuple[np.ndarray, ...]]:
    out = []
    for action in actions:
        obs, reward, terminated, truncated, infos = env.step(action)
        mask = infos.get("_task_episode", np.zeros(env.num_envs, dtype=bool))
        returns = infos["task_episode"]["r"] if mask.any() else np.zeros(env.num_envs)
        out.append(
            tuple(
                np.array(x, copy=True)
                for x in (obs, reward, terminated, truncated, infos["task_id"], mask, returns)
            )
        )
    return out


def assert_identical(reference, resumed) -> None:
    assert len(reference) == len(resumed)
    for t, (a, b) in enumerate(zip(reference, resumed, strict=True)):
        for name, x, y in zip(FIELDS, a, b, strict=True):
            assert np.array_equal(x, y), f"{name} differs {t} steps after the resume"


def round_trip(suite: str, num_envs: int, n_actions: int, before: int, after: int, **kwargs):
    """(uninterrupted run, resumed run, state) over ``after`` steps from a checkpoint taken
    after ``before`` steps; the state goes through pickle, as in a checkpoint file."""
    actions = list(np.random.default_rng(1).integers(n_actions, size=(before + after, num_envs)))
    original = cl_suites.make_vec(suite, num_envs, **kwargs)
    original.reset(seed=3)
    play(original, actions[:before])
    assert original.exact_resume
    state = pickle.loads(pickle.dumps(original.state_dict()))
    reference = play(original, actions[before:])
    resumed = cl_suites.make_vec(suite, num_envs, **kwargs)
    resumed.reset(seed=99)  # anything: the state replaces it
    assert resumed.load_state_dict(state) is None  # restored exactly: keep the saved obs
    return reference, play(resumed, actions[before:]), state


def test_procgen_vector_env_resumes_bit_identically_through_a_switch():
    reference, resumed, state = round_trip(
        "Procgen6", 4, 15, before=90, after=150, steps_per_task=500, cycles=1
    )
    assert state["cursor"]["total_step"] == 360 and state["episodes"]["lengths"].min() > 0
    assert_identical(reference, resumed)
    task_ids = [int(r[4][0]) for r in reference]
    assert task_ids[0] == 0 and task_ids[-1] == 1  # the switch at step 500 is covered
    assert sum(int(r[5].sum()) for r in reference) > 0  # and episode ends


def test_atari_vector_env_resumes_bit_identically_mid_game():
    pytest.importorskip("ale_py")
    reference, resumed, state = round_trip(
        "Atari6", 2, 18, before=60, after=80, steps_per_task=1_000, games=("Breakout",)
    )
    assert (state["episodes"]["lengths"] > 0).all()  # mid-episode
    assert_identical(reference, resumed)
    assert any(r[1].any() for r in reference)  # points were scored after the resume


def test_diagnostic_resumes_by_pickle_and_episodes_carry_over():
    reference, resumed, state = round_trip(
        "Diagnostic", 3, 3, before=14, after=30, steps_per_task=60
    )
    assert state["episodes"]["lengths"].tolist() == [4, 4, 4]  # 14 = 10 + 4 steps
    assert_identical(reference, resumed)
    first_end = next(r for r in resumed if r[5].any())
    assert first_end[6].shape == (3,)  # the carried episodes end with their full return


def test_nethack_restarts_from_a_seed_and_reports_the_cut_episodes():
    pytest.importorskip("minihack")
    kwargs = {"steps_per_task": 100, "pairs": (("Room-Random-5x5", "Room-Random-15x15"),)}
    env = cl_suites.make_vec("MiniHack15", 2, **kwargs)
    env.reset(seed=0)
    for _ in range(7):
        env.step(np.zeros(2, dtype=np.int64))
    assert not env.exact_resume
    state = env.state_dict()
    assert state["task_env"] is None and "NetHack" in state["task_env_note"]
    resumed = cl_suites.make_vec("MiniHack15", 2, **kwargs)
    fresh = resumed.load_state_dict(state)
    assert fresh.shape == (2, 84, 84, 3)  # new first observations
    cut = resumed.interrupted_episodes
    assert cut["_mask"].all() and cut["l"].tolist() == [7, 7] and cut["task_id"].tolist() == [0, 0]
    _, _, _, _, infos = resumed.step(np.zeros(2, dtype=np.int64))
    assert int(infos["total_step"][0]) == 16  # the schedule position carried over


def test_states_that_do_not_fit_are_refused():
    env = cl_suites.make_vec("Diagnostic", 2)
    env.reset(seed=0)
    state = env.state_dict()
    with pytest.raises(ValueError, match="num_envs 2.*does not fit this env.*num_envs 3"):
        cl_suites.make_vec("Diagnostic", 3).load_state_dict(state)
    venv = cl_suites.make_vec("Diagnostic", 2, vectorization_mode="async")
    venv.reset(seed=0)
    try:
        assert not venv.exact_resume
        with pytest.raises(EnvStateError, match="worker processes"):
            save_env_state(venv._backend)
    finally:
        venv.close()
