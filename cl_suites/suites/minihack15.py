"""MiniHack15 (CORA section 3.3, appendix C.3): 15 MiniHack navigation (train -> test) pairs.

Each task trains on the easier env of its pair and is evaluated on it (train split) and
on the harder one (test split). The 15 pairs use 27 distinct envs: Corridor-R5,
River-MonsterLava and HideNSeek-Big are the test env of two pairs each.

Observations ``uint8 (84, 84, 3)`` (the 80x80 ``pixel_crop`` zero-padded), actions
``Discrete(8)`` (compass directions) for every task; see ``cl_suites.envs.minihack``.
Budgets count agent steps (NetHack has no frame skip, so steps = frames).
"""

from __future__ import annotations

import importlib.util
from functools import partial
from typing import Any

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.envs.minihack import (
    ACTION_SPACE,
    OBSERVATION_SPACE,
    make_minihack_env,
    minihack_env_id,
)

PAIRS: tuple[tuple[str, str], ...] = (
    ("Room-Random-5x5", "Room-Random-15x15"),
    ("Room-Dark-5x5", "Room-Dark-15x15"),
    ("Room-Monster-5x5", "Room-Monster-15x15"),
    ("Room-Trap-5x5", "Room-Trap-15x15"),
    ("Room-Ultimate-5x5", "Room-Ultimate-15x15"),
    ("Corridor-R2", "Corridor-R5"),
    ("Corridor-R3", "Corridor-R5"),
    ("KeyRoom-S5", "KeyRoom-S15"),
    ("KeyRoom-Dark-S5", "KeyRoom-Dark-S15"),
    ("River-Narrow", "River"),
    ("River-Monster", "River-MonsterLava"),
    ("River-Lava", "River-MonsterLava"),
    ("HideNSeek", "HideNSeek-Big"),
    ("HideNSeek-Lava", "HideNSeek-Big"),
    ("CorridorBattle", "CorridorBattle-Dark"),
)
"""(train, test) MiniHack task names in training order (ids are ``MiniHack-<name>-v0``)."""


def env_names(pairs: tuple[tuple[str, str], ...] = PAIRS) -> tuple[str, ...]:
    """The distinct env names of ``pairs`` in order of first use (27 for ``PAIRS``)."""
    return tuple(dict.fromkeys(name for pair in pairs for name in pair))


def build(
    *,
    steps_per_task: int = 10_000_000,
    cycles: int = 2,
    eval_every: int = 1_000_000,
    eval_episodes: int = 10,
    pairs: tuple[tuple[str, str], ...] = PAIRS,
    **minihack_options: Any,
) -> TaskSequence:
    """The MiniHack15 sequence with CORA's defaults (every count in agent steps).

    Args:
        steps_per_task: training budget of each task per cycle.
        cycles: passes over the 15 tasks.
        eval_every: evaluation cadence.
        eval_episodes: episodes per task and split at each evaluation.
        pairs: (train, test) MiniHack names in training order (checked against the
            installed minihack; without minihack, building the env raises
            ``ImportError`` naming the ``minihack`` extra).
        **minihack_options: extra options for every MiniHack env (e.g.
            ``max_episode_steps``); the defaults are CORA's.
    """
    if all(importlib.util.find_spec(m) is not None for m in ("minihack", "nle")):
        for name in env_names(pairs):
            minihack_env_id(name)  # raises early, naming the id and the installed version
    tasks = tuple(
        TaskSpec(
            name=train,
            budget=steps_per_task,
            make_train=partial(make_minihack_env, train, **minihack_options),
            make_test=partial(make_minihack_env, test, **minihack_options),
        )
        for train, test in pairs
    )
    return TaskSequence(
        name="MiniHack15",
        tasks=tasks,
        observation_space=OBSERVATION_SPACE,
        action_space=ACTION_SPACE,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        extra="minihack",
        required_modules=("minihack", "nle"),
        metric_settings={"smoothing_window": 20, "return_clip_min": None},
    )
