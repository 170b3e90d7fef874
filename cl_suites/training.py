"""Pieces every training loop over a sequence shares, and the random-agent run.

``run_metadata`` describes a run for its run log; ``episode_records`` turns a vector
step's infos into training-episode rows; ``run_random_agent`` is the reference loop
(and the CLI's ``--method random``): plug a learner in by replacing the action choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.api import make_sequence
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.progress import RunProgress
from cl_suites.core.runlog import RunLog
from cl_suites.core.task import TASK_EPISODE_KEY, TaskSequence
from cl_suites.core.vector import SequenceVectorEnv, VectorizationMode
from cl_suites.suites import find_suite


def run_metadata(
    suite: str,
    sequence: TaskSequence,
    *,
    seed: int,
    method: str,
    num_envs: int,
    env_kwargs: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """The ``metadata.json`` content of a run: suite id and kwargs, seed, method, the
    schedule with this number of sub-envs, and the suite's metric settings."""
    info = find_suite(suite)
    description = sequence.describe()
    return {
        "suite_id": info.id,
        "suite": info.name,
        "method": method,
        "seed": int(seed),
        "env_kwargs": dict(env_kwargs),
        "num_envs": int(num_envs),
        "tasks": description["tasks"],
        "schedule": [s.as_dict() for s in sequence.schedule(num_envs)],
        "steps_per_task": [t.budget for t in sequence.tasks],
        "cycles": sequence.cycles,
        "eval_every": sequence.eval_every,
        "eval_episodes": sequence.eval_episodes,
        "metric_settings": description["metric_settings"],
        **extra,
    }


def episode_records(infos: dict[str, Any], total_step: int) -> list[dict[str, Any]]:
    """Training-episode rows (``episodes.csv`` columns) for the episodes that ended in
    one vector step, from ``SequenceVectorEnv`` infos."""
    if "_" + TASK_EPISODE_KEY not in infos:
        return []
    ended = np.flatnonzero(infos["_" + TASK_EPISODE_KEY])
    episode = infos[TASK_EPISODE_KEY]
    return [
        {
            "total_step": int(total_step),
            "task_id": int(episode["task_id"][i]),
            "episode_return": float(episode["r"][i]),
            "episode_length": int(episode["l"][i]),
        }
        for i in ended
    ]


def run_random_agent(
    suite: str,
    *,
    seed: int,
    run_dir: str | Path,
    num_envs: int = 8,
    vectorization_mode: VectorizationMode = "sync",
    progress: bool = False,
    **env_kwargs: Any,
) -> Path:
    """Play a whole sequence with uniformly random actions, evaluating on schedule.

    Writes a complete run directory (``metadata.json``, ``eval.csv``, ``episodes.csv``,
    ``progress.json``) and returns its path. ``env_kwargs`` override the suite's defaults
    (``steps_per_task``, ``cycles``, ``eval_every``, ``eval_episodes``, ...).
    ``progress=True`` draws the rich progress bar (the CLI does; library calls are quiet).
    """
    sequence = make_sequence(suite, **env_kwargs)
    env = SequenceVectorEnv(sequence, num_envs, vectorization_mode)
    metadata = run_metadata(
        suite, sequence, seed=seed, method="random", num_envs=num_envs, env_kwargs=env_kwargs
    )
    rng = np.random.default_rng(seed)
    action_space = sequence.action_space

    def policy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        return rng.integers(action_space.n, size=len(obs))

    with RunLog(run_dir, metadata) as log:
        evaluator = Evaluator(
            sequence, seed=seed, run_log=log, vectorization_mode=vectorization_mode
        )
        env.action_space.seed(seed)
        env.reset(seed=seed)
        bar = RunProgress(env.schedule(), run_dir=run_dir, show=progress, unit="agent steps")
        total_step, outcome = 0, "failed"
        try:
            while True:
                evaluator.maybe_evaluate(total_step, policy)
                _, _, _, _, infos = env.step(env.action_space.sample())
                total_step = int(infos["total_step"][0])
                log.log_episodes(episode_records(infos, total_step))
                bar.update(total_step)
                if infos["sequence_done"][0]:
                    break
            evaluator.evaluate(total_step, policy)
            outcome = "finished"
        finally:
            bar.close(outcome)
            evaluator.close()
            env.close()
    return Path(run_dir)
