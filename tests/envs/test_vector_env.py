"""The vector sequence: global budget, synchronous switches, SAME_STEP autoreset, SB3."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.core.vector import SequenceVectorEnv
from tests.helpers.toy_envs import toy_sequence


def run_all(env: SequenceVectorEnv, seed: int = 0):
    obs, infos = env.reset(seed=seed)
    records = [(obs.copy(), None, None, infos)]
    while not infos["sequence_done"][0]:
        obs, _, terminated, truncated, infos = env.step(np.ones(env.num_envs, dtype=np.int64))
        records.append((obs.copy(), terminated, truncated, infos))
    return records


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_budget_counts_globally_and_all_sub_envs_switch_together(mode):
    env = SequenceVectorEnv(
        toy_sequence(num_tasks=2, budget=20, cycles=2, episode_length=7), 4, mode
    )
    assert [(s.start_step, s.end_step) for s in env.schedule()] == [
        (0, 20),
        (20, 40),
        (40, 60),
        (60, 80),
    ]
    records = run_all(env)
    assert len(records) - 1 == 80 // 4  # 20 vector steps of 4 agent steps
    switch_rows = [i for i, r in enumerate(records) if r[3]["task_switched"].any()]
    assert switch_rows == [0, 5, 10, 15]
    for i in switch_rows[1:]:
        obs, _, truncated, infos = records[i]
        assert infos["task_switched"].all() and truncated.all()
        assert (obs[:, 0] == 10 * infos["task_id"][0]).all()  # first obs of the new task
        assert infos["_final_obs"].all()
        assert infos["total_step"][0] == 4 * i
    assert [int(r[3]["task_id"][0]) for r in records[1:5]] == [0, 0, 0, 0]
    assert records[-1][3]["sequence_done"].all()
    with pytest.raises(RuntimeError, match="sequence is done"):
        env.step(np.zeros(4, dtype=np.int64))
    env.close()


def test_budget_not_divisible_by_num_envs_overruns_by_less_than_num_envs():
    env = SequenceVectorEnv(toy_sequence(num_tasks=2, budget=10, cycles=1), 4)
    assert [(s.start_step, s.end_step) for s in env.schedule()] == [(0, 12), (12, 24)]
    records = run_all(env)
    assert [int(r[3]["total_step"][0]) for r in records if r[3]["task_switched"].any()] == [0, 12]


def test_episodes_carry_the_task_they_were_played_on():
    env = SequenceVectorEnv(toy_sequence(num_tasks=2, budget=12, cycles=1, episode_length=5), 2)
    records = run_all(env)
    episodes = []
    for _, terminated, truncated, infos in records[1:]:
        # task_episode (every suite's key), present exactly at the steps where episodes
        # end; "episode" is left to gymnasium's RecordEpisodeStatistics
        assert ("task_episode" in infos) == bool((terminated | truncated).any())
        assert "episode" not in infos and "_episode" not in infos
        if "task_episode" not in infos:
            continue
        episode = infos["task_episode"]
        assert (infos["_task_episode"] == (terminated | truncated)).all()
        assert episode["t"].dtype == np.float64
        for i in np.flatnonzero(infos["_task_episode"]):
            episodes.append(
                (int(infos["total_step"][0]), int(episode["task_id"][i]), int(episode["l"][i]))
            )
    # each sub-env: episode of 5 at steps 10, then cut after 1 more step at the switch (12)
    assert episodes == [
        (10, 0, 5),
        (10, 0, 5),
        (12, 0, 1),
        (12, 0, 1),
        (22, 1, 5),
        (22, 1, 5),
        (24, 1, 1),
        (24, 1, 1),
    ]


def test_same_seed_same_observations():
    a = [r[0] for r in run_all(SequenceVectorEnv(toy_sequence(), 3), seed=5)]
    b = [r[0] for r in run_all(SequenceVectorEnv(toy_sequence(), 3), seed=5)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_wrong_action_shape_is_refused():
    env = SequenceVectorEnv(toy_sequence(), 3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not in the action space"):
        env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="not in the action space"):
        env.step(np.array([0, 1, 7]))


def test_unknown_vectorization_mode():
    message = "'threads' is unknown; use one of \\('sync', 'async', 'workers'\\)"
    with pytest.raises(ValueError, match=message):
        SequenceVectorEnv(toy_sequence(), 2, "threads")


def test_sb3_adapter_reports_terminal_observations_and_switches():
    from cl_suites.sb3.adapter import SB3VecEnv

    venv = SB3VecEnv(
        SequenceVectorEnv(toy_sequence(num_tasks=2, budget=6, cycles=1, episode_length=50), 2)
    )
    obs = venv.reset()
    assert obs.shape == (2, 2)
    for _ in range(2):
        _, _, dones, infos = venv.step(np.array([1, 1]))
        assert not dones.any()
    obs, rewards, dones, infos = venv.step(np.array([1, 2]))
    assert dones.all() and rewards.tolist() == [1.0, 2.0]
    assert infos[0]["TimeLimit.truncated"] is True
    assert infos[0]["terminal_observation"][0] == 0 and obs[0][0] == 10  # old task, new task
    assert infos[0]["task_switched"] is True and infos[0]["task_id"] == 1
    assert infos[1]["episode"] == {"r": 4.0, "l": 3, "task_id": 0}


# -- the schedule, cut once: the job cuts it, the env follows it ---------------------------------
def test_a_schedule_is_the_segments_tuple_that_knows_its_envs():
    import copy
    import json
    import pickle

    from cl_suites.core.task import Schedule

    schedule = toy_sequence(num_tasks=2, budget=10, cycles=1).schedule(4)
    assert isinstance(schedule, Schedule) and schedule.num_envs == 4
    assert schedule == tuple(schedule) and [s.end_step for s in schedule] == [12, 24]
    assert json.loads(json.dumps([s.as_dict() for s in schedule]))[1]["end_step"] == 24
    for copied in (pickle.loads(pickle.dumps(schedule)), copy.deepcopy(schedule)):
        assert isinstance(copied, Schedule) and copied == schedule and copied.num_envs == 4
    assert repr(schedule).startswith("Schedule((Segment(") and repr(schedule).endswith("4)")


def test_an_env_follows_the_schedule_it_is_handed_without_cutting_it_again():
    sequence = toy_sequence(num_tasks=2, budget=10, cycles=1)
    schedule = sequence.schedule(4)
    env = SequenceVectorEnv(sequence, schedule=schedule)
    assert env.num_envs == 4 and env.cursor.segments is schedule
    assert SequenceVectorEnv(sequence, 4, schedule=schedule).cursor.segments is schedule
    env.close()


def test_a_schedule_that_does_not_fit_the_env_is_refused_by_name():
    sequence = toy_sequence(num_tasks=2, budget=10, cycles=1)
    with pytest.raises(ValueError, match="num_envs 2 disagrees with the schedule's 4 envs"):
        SequenceVectorEnv(sequence, 2, schedule=sequence.schedule(4))
    other = toy_sequence(num_tasks=3, budget=10, cycles=1)
    with pytest.raises(ValueError, match=r"the schedule \(3 segments\) is not one of .*2 tasks"):
        SequenceVectorEnv(sequence, schedule=other.schedule(4))
    with pytest.raises(TypeError, match="schedule must be a Schedule .* got tuple"):
        SequenceVectorEnv(sequence, schedule=tuple(sequence.schedule(4)))
    with pytest.raises(ValueError, match="give num_envs or a schedule"):
        SequenceVectorEnv(sequence)
