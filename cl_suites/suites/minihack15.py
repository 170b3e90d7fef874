"""MiniHack15 (CORA section 3.3, appendix C.3): 15 MiniHack navigation (train -> test) pairs.

Each task trains on the easier env of its pair and is evaluated on it (train split) and
on the harder one (test split). The 15 pairs use 27 distinct envs: Corridor-R5,
River-MonsterLava and HideNSeek-Big are the test env of two pairs each.

Observations ``uint8 (84, 84, 3)`` (CORA's code: the 9x9-tile ``pixel_crop`` padded and
resized; ``crop="paper"``: the 5x5-tile crop padded), one ``Discrete(11)`` action space
whose valid actions depend on the task (8 compass directions; Corridor +OPEN, KICK,
SEARCH; KeyRoom +PICKUP, APPLY): ``TaskSpec.valid_actions``,
``TaskSequence.action_masks()`` and ``info["action_mask"]``. See
``cl_suites.envs.minihack``. Budgets count agent steps (NetHack has no frame skip, so
steps = frames).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import partial
from typing import Any

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.envs.minihack import (
    ACTION_SPACE,
    CROPS,
    OBSERVATION_SPACE,
    make_minihack_env,
    minihack_env_id,
    task_family,
    valid_actions,
)
from cl_suites.errors import BadValueError

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


PairsOption = Sequence["int | tuple[str, str] | list[str]"]


def env_names(pairs: tuple[tuple[str, str], ...] = PAIRS) -> tuple[str, ...]:
    """The distinct env names of ``pairs`` in order of first use (27 for ``PAIRS``)."""
    return tuple(dict.fromkeys(name for pair in pairs for name in pair))


def _listing() -> str:
    return "; ".join(f"{i}: {train} -> {test}" for i, (train, test) in enumerate(PAIRS))


def resolve_pairs(pairs: PairsOption) -> tuple[tuple[str, str], ...]:
    """``pairs`` as (train, test) names: each item is an index into ``PAIRS`` (0-14) or a
    (train, test) pair of MiniHack names. Raises ``ValueError`` listing the 15 pairs."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or not pairs:
        raise BadValueError(
            f"pairs must be a non-empty list of pair indices or (train, test) names, got "
            f"{pairs!r}; the pairs are {_listing()}"
        )
    resolved = []
    for item in pairs:
        if isinstance(item, int) and not isinstance(item, bool):
            if not 0 <= item < len(PAIRS):
                raise BadValueError(
                    f"MiniHack15 has no pair {item}; the {len(PAIRS)} pairs are {_listing()}"
                )
            resolved.append(PAIRS[item])
        elif (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(name, str) for name in item)
        ):
            train, test = item
            if task_family(train) != task_family(test):
                raise BadValueError(
                    f"pair {train!r} -> {test!r} mixes action sets ({task_family(train)} "
                    f"and {task_family(test)}); both envs of a pair must share one"
                )
            resolved.append((train, test))
        else:
            raise BadValueError(
                f"pair {item!r} is neither an index (0-{len(PAIRS) - 1}) nor a (train, test) "
                f"pair of MiniHack names; the pairs are {_listing()}"
            )
    return tuple(resolved)


def build(
    *,
    steps_per_task: int = 10_000_000,
    cycles: int = 2,
    eval_every: int = 1_000_000,
    eval_episodes: int = 10,
    pairs: PairsOption = PAIRS,
    crop: str = "code",
    **minihack_options: Any,
) -> TaskSequence:
    """The MiniHack15 sequence with CORA's defaults (every count in agent steps).

    Args:
        steps_per_task: training budget of each task per cycle.
        cycles: passes over the 15 tasks.
        eval_every: evaluation cadence.
        eval_episodes: episodes per task and split at each evaluation.
        pairs: the tasks in training order: indices into ``PAIRS`` (``[7, 8]``: the two
            KeyRooms) or (train, test) MiniHack names (checked against the installed
            minihack; without minihack, building the env raises ``ImportError`` naming
            the ``minihack`` extra).
        crop: ``"code"`` (CORA's code, default) or ``"paper"`` (80x80 crop padded to 84).
        **minihack_options: extra options for every MiniHack env (e.g.
            ``max_episode_steps``); the defaults are CORA's.
    """
    pairs = resolve_pairs(pairs)
    if crop not in CROPS:
        raise BadValueError(f"crop {crop!r} is unknown; use one of {tuple(CROPS)}")
    if all(importlib.util.find_spec(m) is not None for m in ("minihack", "nle")):
        for name in env_names(pairs):
            minihack_env_id(name)  # raises early, naming the id and the installed version
    options = {"crop": crop, **minihack_options}
    tasks = tuple(
        TaskSpec(
            name=train,
            budget=steps_per_task,
            make_train=partial(make_minihack_env, train, **options),
            make_test=partial(make_minihack_env, test, **options),
            valid_actions=valid_actions(train),
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
        required_modules=("minihack", "nle", "cv2"),
        metric_settings={"smoothing_window": 20, "return_clip_min": None},
    )
