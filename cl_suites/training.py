"""Pieces every training loop over a sequence shares.

``run_metadata`` describes a run for its run log; ``episode_records`` turns a vector
step's infos into training-episode rows (both used by ``cl_suites.Recorder``, the object
an own loop calls once per step). The reference loop, ``run_random_agent``, lives in
``cl_suites.random_agent`` (it runs on a ``Recorder``, which uses this module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cl_suites.core.task import TASK_EPISODE_KEY, Segment, TaskSequence
from cl_suites.suites import find_suite


def run_metadata(
    suite: str,
    sequence: TaskSequence,
    *,
    seed: int,
    method: str,
    num_envs: int,
    env_kwargs: Mapping[str, Any],
    learner: str | None = None,
    preset: str | None = None,
    description: Mapping[str, Any] | None = None,
    schedule: Sequence[Segment] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ``metadata.json`` content of a run, the one declaration of its schema (every
    loop writes it: ``cl_suites.Recorder``, the main job): suite id and kwargs, method
    (a trained run's ``learner`` and ``preset`` beside it), seed, the tasks, the schedule
    with this number of sub-envs, the budgets and the suite's metric settings, then
    ``extra`` (hyperparameters, evaluation settings, ...).

    ``description`` is the suite's ``describe()`` (default: ``sequence``'s); ``schedule``
    the schedule already cut for ``num_envs`` envs, if the caller has it."""
    info = find_suite(suite)
    description = sequence.describe() if description is None else description
    schedule = sequence.schedule(num_envs) if schedule is None else schedule
    trained = {} if learner is None else {"learner": learner, "preset": preset}
    return {
        "suite_id": info.id,
        "suite": info.name,
        "method": method,
        **trained,
        "seed": int(seed),
        "env_kwargs": dict(env_kwargs),
        "tasks": description["tasks"],
        "schedule": [s.as_dict() for s in schedule],
        "steps_per_task": [t.budget for t in sequence.tasks],
        "cycles": sequence.cycles,
        "eval_every": sequence.eval_every,
        "eval_episodes": sequence.eval_episodes,
        "num_envs": int(num_envs),
        "metric_settings": description["metric_settings"],
        **extra,
    }


def episode_records(infos: dict[str, Any], total_step: int) -> list[dict[str, Any]]:
    """Training-episode rows (``episodes.csv`` columns) for the episodes that ended in
    one vector step, from the ``infos["task_episode"]`` of a ``SequenceVectorEnv`` or a
    ``MealBatchedEnv`` (returns ``(num_envs, num_agents)``: the row holds agent 0's
    return, as the main job logs MEAL episodes)."""
    key = TASK_EPISODE_KEY
    if "_" + key not in infos:
        return []
    done = np.asarray(infos["_" + key])
    episode = infos[key]
    task_ids = np.broadcast_to(np.asarray(episode["task_id"]), done.shape)  # MEAL: one int
    returns = np.asarray(episode["r"])
    if returns.ndim == 2:  # MEAL: (envs, agents); the row holds agent 0's return
        returns = returns[:, 0]
    lengths = np.broadcast_to(np.asarray(episode["l"]), done.shape)
    return [
        {
            "total_step": int(total_step),
            "task_id": int(task_ids[i]),
            "episode_return": float(returns[i]),
            "episode_length": int(lengths[i]),
        }
        for i in np.flatnonzero(done)
    ]


def __getattr__(name: str):
    if name == "run_random_agent":
        raise ImportError(
            "cl_suites.training.run_random_agent moved to cl_suites.random_agent.run_random_agent"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
