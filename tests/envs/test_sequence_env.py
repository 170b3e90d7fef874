"""The single-env sequence: order, switch steps, truncation, info keys, end, seeding."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import SequenceDoneError, TaskSequence, TaskSpec
from tests.helpers.toy_envs import OBS_SPACE, CountingEnv, toy_sequence

INFO_KEYS = {"task_id", "task_name", "cycle", "task_step", "total_step", "task_switched"}


def play(env: SequenceEnv, seed: int = 0):
    """Play the whole sequence with action 1; returns per-step records."""
    obs, info = env.reset(seed=seed)
    steps = [("reset", obs.copy(), False, False, info)]
    while True:
        obs, _, terminated, truncated, info = env.step(1)
        steps.append(("step", obs.copy(), terminated, truncated, info))
        if info["sequence_done"]:
            return steps
        if terminated or truncated:
            obs, info = env.reset()
            steps.append(("reset", obs.copy(), False, False, info))


def test_task_order_and_switch_steps_over_two_cycles():
    env = SequenceEnv(toy_sequence(num_tasks=3, budget=20, cycles=2, episode_length=7))
    steps = play(env)
    switches = [
        (s[4]["total_step"], s[4]["task_name"], s[4]["cycle"])
        for s in steps
        if s[4]["task_switched"]
    ]
    assert switches == [
        (0, "task0", 0),
        (20, "task1", 0),
        (40, "task2", 0),
        (60, "task0", 1),
        (80, "task1", 1),
        (100, "task2", 1),
    ]
    truncations = [s[4]["total_step"] for s in steps if s[3]]
    assert truncations == [20, 40, 60, 80, 100, 120]
    # the observation marker proves which simulator ran each step
    for kind, obs, _, _, info in steps:
        assert obs[0] == 10 * info["task_id"], (kind, info)


def test_info_keys_at_every_step_and_counters():
    env = SequenceEnv(toy_sequence(num_tasks=2, budget=9, cycles=1, episode_length=4))
    steps = play(env)
    for _, _, _, _, info in steps:
        assert info.keys() >= INFO_KEYS
    step_infos = [s[4] for s in steps if s[0] == "step"]
    assert [i["total_step"] for i in step_infos] == list(range(1, 19))
    assert [i["task_step"] for i in step_infos] == list(range(1, 10)) + list(range(1, 10))


def test_switch_truncates_running_episode_and_reports_partial_episode():
    env = SequenceEnv(toy_sequence(num_tasks=2, budget=10, cycles=1, episode_length=4))
    steps = play(env)
    at_switch = next(s for s in steps if s[0] == "step" and s[4]["total_step"] == 10)
    assert at_switch[3] is True and at_switch[2] is False  # truncated, not terminated
    assert at_switch[4]["task_episode"] == {"r": 2.0, "l": 2, "task_id": 0}  # steps 9, 10
    ends = [
        (s[4]["task_episode"]["l"], s[4]["task_episode"]["task_id"])
        for s in steps
        if s[0] == "step" and "task_episode" in s[4]
    ]
    assert ends == [(4, 0), (4, 0), (2, 0), (4, 1), (4, 1), (2, 1)]
    assert not any("episode" in s[4] for s in steps)  # left to RecordEpisodeStatistics


def test_sequence_done_then_step_raises():
    env = SequenceEnv(toy_sequence(num_tasks=1, budget=5, cycles=1))
    steps = play(env)
    assert steps[-1][4]["sequence_done"] is True
    assert not any(s[4]["sequence_done"] for s in steps[:-1])
    with pytest.raises(SequenceDoneError, match="sequence is done.*reset\\(seed=...\\)"):
        env.step(0)
    # a reset without seed (a vector env's autoreset) hands back the last observation
    obs, info = env.reset()
    assert np.array_equal(obs, steps[-1][1]) and info["sequence_done"] is True
    with pytest.raises(SequenceDoneError):
        env.step(0)
    env.reset(seed=1)  # starts over
    assert env.cursor.total_step == 0


def test_stepping_past_a_switch_without_reset_raises():
    env = SequenceEnv(toy_sequence(num_tasks=2, budget=3, cycles=1))
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    with pytest.raises(RuntimeError, match="spent its budget"):
        env.step(0)


def test_same_seed_same_observations_and_different_seed_differs():
    obs_a = [s[1] for s in play(SequenceEnv(toy_sequence()), seed=3)]
    obs_b = [s[1] for s in play(SequenceEnv(toy_sequence()), seed=3)]
    obs_c = [s[1] for s in play(SequenceEnv(toy_sequence()), seed=4)]
    assert all(np.array_equal(a, b) for a, b in zip(obs_a, obs_b, strict=True))
    assert not all(np.array_equal(a, c) for a, c in zip(obs_a, obs_c, strict=True))


def test_switch_subscribers_and_schedule():
    env = SequenceEnv(toy_sequence(num_tasks=2, budget=5, cycles=2))
    seen = []
    unsubscribe = env.on_task_switch(
        lambda e: seen.append((e.total_step, e.previous.task_id, e.current and e.current.task_id))
    )
    assert [(s.task_id, s.cycle, s.start_step, s.end_step) for s in env.schedule()] == [
        (0, 0, 0, 5),
        (1, 0, 5, 10),
        (0, 1, 10, 15),
        (1, 1, 15, 20),
    ]
    play(env)
    assert seen == [(5, 0, 1), (10, 1, 0), (15, 0, 1), (20, 1, None)]
    unsubscribe()
    play(env)
    assert len(seen) == 4


def test_bad_actions_raise_clear_errors():
    env = SequenceEnv(toy_sequence())
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not in the action space Discrete\\(3\\)"):
        env.step(3)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.array([1, 2]))


@pytest.mark.parametrize("arg", ["budget", "cycles", "eval_every", "eval_episodes"])
@pytest.mark.parametrize("value", [0, -5])
def test_non_positive_settings_raise_naming_the_argument(arg, value):
    kwargs = {"budget": 5, "cycles": 1, "eval_every": 5, "eval_episodes": 1, arg: value}
    with pytest.raises(ValueError, match=arg):
        TaskSequence(
            name="Bad",
            tasks=(TaskSpec("t", lambda: CountingEnv(0), kwargs.pop("budget")),),
            observation_space=OBS_SPACE,
            action_space=CountingEnv.action_space,
            **kwargs,
        )


def test_task_with_other_spaces_is_refused():
    import gymnasium as gym

    class Wider(CountingEnv):
        action_space = gym.spaces.Discrete(5)

    seq = TaskSequence(
        "Mixed", (TaskSpec("w", lambda: Wider(0), 5),), OBS_SPACE, CountingEnv.action_space
    )
    with pytest.raises(
        ValueError, match="action space Discrete\\(5\\).*fixed action space is Discrete\\(3\\)"
    ):
        SequenceEnv(seq).reset(seed=0)


def test_missing_simulator_names_the_extra():
    seq = TaskSequence(
        "Needs",
        (TaskSpec("t", lambda: CountingEnv(0), 5),),
        OBS_SPACE,
        CountingEnv.action_space,
        extra="fancy",
        required_modules=("no_such_simulator_module",),
    )
    with pytest.raises(ImportError, match=r'pip install "cl-suites\[fancy\]"'):
        SequenceEnv(seq)


def test_check_env_passes():
    check_env(SequenceEnv(toy_sequence(budget=1000)), skip_render_check=True)
