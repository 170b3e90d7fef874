"""Per-task valid actions (interface 1): TaskSpec.valid_actions, TaskSequence.action_masks()
and info["action_mask"] from the single, vector and SB3 envs, on toy envs."""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest

from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.core.vector import SequenceVectorEnv
from tests.helpers.toy_envs import CountingEnv, toy_sequence


def masked_sequence(budget: int = 4) -> TaskSequence:
    base = toy_sequence(num_tasks=2, budget=budget, cycles=1, with_test=False)
    tasks = (
        dataclasses.replace(base.tasks[0], valid_actions=(0, 1)),
        base.tasks[1],  # every action valid
    )
    return dataclasses.replace(base, tasks=tasks)


def test_action_masks_rows_follow_the_tasks():
    assert toy_sequence().action_masks() is None  # no task restricts its actions
    masks = masked_sequence().action_masks()
    assert masks.dtype == bool and masks.tolist() == [[True, True, False], [True, True, True]]


def test_bad_valid_actions_are_refused_early():
    make = partial(CountingEnv, 0)
    for bad in ((), (1, 0), (0, 0), (-1, 0)):
        with pytest.raises(ValueError, match="sorted, distinct, non-negative"):
            TaskSpec("t", make, 10, valid_actions=bad)
    base = toy_sequence(num_tasks=1, with_test=False)
    task = dataclasses.replace(base.tasks[0], valid_actions=(0, 3))
    with pytest.raises(ValueError, match=r"\(0, 3\) of task 'task0' are not all in"):
        dataclasses.replace(base, tasks=(task,))


def test_single_env_reports_the_current_tasks_mask_on_reset_and_step():
    env = SequenceEnv(masked_sequence())
    _, info = env.reset(seed=0)
    masks = [info["action_mask"].tolist()]
    while not info["sequence_done"]:
        _, _, terminated, truncated, info = env.step(0)
        masks.append(info["action_mask"].tolist())
        if (terminated or truncated) and not info["sequence_done"]:
            _, info = env.reset()
            masks.append(info["action_mask"].tolist())
    first, second = [True, True, False], [True, True, True]
    assert masks == [first] * 5 + [second] * 5  # reset + 4 steps per task
    assert "action_mask" not in SequenceEnv(toy_sequence()).reset(seed=0)[1]


def test_vector_and_sb3_envs_report_one_mask_row_per_sub_env():
    venv = SequenceVectorEnv(masked_sequence(budget=4), num_envs=2)
    _, info = venv.reset(seed=0)
    assert info["action_mask"].tolist() == [[True, True, False]] * 2
    _, _, _, _, info = venv.step(np.zeros(2, dtype=np.int64))  # 2 of 4 steps
    assert info["action_mask"].shape == (2, 3) and not info["action_mask"][:, 2].any()
    _, _, _, truncated, info = venv.step(np.zeros(2, dtype=np.int64))  # the switch step
    assert truncated.all() and info["action_mask"].all()  # the next task's first obs
    pytest.importorskip("stable_baselines3")
    from cl_suites.sb3.adapter import SB3VecEnv

    sb3 = SB3VecEnv(SequenceVectorEnv(masked_sequence(budget=4), num_envs=2))
    sb3.reset()
    assert [i["action_mask"].tolist() for i in sb3.reset_infos] == [[True, True, False]] * 2
    _, _, _, infos = sb3.step(np.zeros(2, dtype=np.int64))
    assert [i["action_mask"].sum() for i in infos] == [2, 2]
