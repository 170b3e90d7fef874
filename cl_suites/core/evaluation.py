"""Policy-agnostic evaluation on every task and split of a sequence, on a schedule."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from cl_suites.core.runlog import RunLog
from cl_suites.core.task import TaskSequence, check_positive_int, task_seed
from cl_suites.core.vector import VectorizationMode, make_task_vector_env

Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``policy(obs, task_ids) -> actions``: a batch of observations ``(B, *obs_shape)`` and
the task id of each row ``(B,)`` to a batch of actions ``(B, *action_shape)``. Task-agnostic
policies ignore ``task_ids``; multi-head policies use them to pick their head."""

_EVAL_SEED_OFFSET = 1_000_003


class Evaluator:
    """Runs ``episodes`` episodes per task and split every ``every`` agent steps.

    Evaluation envs are separate from the training env, built once per (task, split) on
    first use and reused. At each evaluation point every (task, split) env is reseeded
    from ``(seed, eval point, task, split)``, so the same seed gives the same evaluation
    episodes, also after a resumed run. Each sub-env plays a fixed number of episodes
    (``episodes`` spread over ``num_envs`` sub-envs), which avoids a bias towards short
    episodes.

    Use from any training loop::

        evaluator = Evaluator(sequence, seed=0, run_log=log)
        ...
        evaluator.maybe_evaluate(total_step, policy)   # after every (vector) step

    Args:
        sequence: the task sequence; ``every`` and ``episodes`` default to its
            ``eval_every`` and ``eval_episodes``.
        seed: run seed.
        run_log: where records are appended (optional).
        num_envs: sub-envs per evaluation env (default: ``episodes``).
        vectorization_mode: ``"sync"`` or ``"async"`` for tasks without native batching.
        first_eval_step: the first evaluation point (0: evaluate before training).
    """

    def __init__(
        self,
        sequence: TaskSequence,
        *,
        seed: int = 0,
        run_log: RunLog | None = None,
        every: int | None = None,
        episodes: int | None = None,
        num_envs: int | None = None,
        vectorization_mode: VectorizationMode = "sync",
        first_eval_step: int = 0,
    ):
        self.sequence = sequence
        self.seed = int(seed)
        self.run_log = run_log
        self.every = check_positive_int("every", every or sequence.eval_every)
        self.episodes = check_positive_int("episodes", episodes or sequence.eval_episodes)
        self.num_envs = check_positive_int("num_envs", num_envs or self.episodes)
        self.vectorization_mode = vectorization_mode
        self.next_eval_step = first_eval_step
        self._envs: dict[tuple[int, str], VectorEnv] = {}
        self._start = time.monotonic()

    def due(self, total_step: int) -> bool:
        """True when ``total_step`` has reached the next evaluation point."""
        return total_step >= self.next_eval_step

    def maybe_evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate if an evaluation point was reached; returns the new records (maybe none)."""
        if not self.due(total_step):
            return []
        return self.evaluate(total_step, policy)

    def evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate every task and split now; one record per (task, split).

        All (task, split) envs step in lockstep, so each ``policy`` call sees one batch
        with the rows of every env that still has episodes to play (``task_ids`` tells
        them apart). Records hold ``total_step, task_id, task_name, split, mean_return,
        std_return, episodes, wall_time`` (``wall_time``: seconds since the evaluator was
        built).
        """
        eval_index = total_step // self.every
        jobs = [
            self._start_job(task_id, split, eval_index, split_id)
            for task_id, task in enumerate(self.sequence.tasks)
            for split_id, split in enumerate(task.splits)
        ]
        active = list(jobs)
        previous = bool(getattr(policy, "needs_previous_action_reward", False))
        while active:
            obs = np.concatenate([job.obs for job in active])
            task_ids = np.concatenate([job.task_ids for job in active])
            if previous:  # CORA's IMPALA inputs; each episode starts from zeros
                actions = policy(
                    obs,
                    task_ids,
                    np.concatenate([job.prev_actions for job in active]),
                    np.concatenate([job.prev_rewards for job in active]),
                )
            else:
                actions = policy(obs, task_ids)
            offset = 0
            for job in active:
                job.step(actions[offset : offset + job.env.num_envs])
                offset += job.env.num_envs
            active = [job for job in active if not job.finished]
        wall_time = round(time.monotonic() - self._start, 3)
        records = [
            {
                "total_step": int(total_step),
                "task_id": job.task_id,
                "task_name": self.sequence.tasks[job.task_id].name,
                "split": job.split,
                "mean_return": float(np.mean(job.returns)),
                "std_return": float(np.std(job.returns)),
                "episodes": len(job.returns),
                "wall_time": wall_time,
            }
            for job in jobs
        ]
        self.next_eval_step = (eval_index + 1) * self.every
        if self.run_log is not None:
            self.run_log.log_eval(records)
        return records

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    def _env(self, task_id: int, split: str) -> VectorEnv:
        key = (task_id, split)
        if key not in self._envs:
            self._envs[key] = make_task_vector_env(
                self.sequence.tasks[task_id],
                split,
                self.num_envs,
                self.vectorization_mode,
                evaluation=True,
            )
        return self._envs[key]

    def _start_job(self, task_id: int, split: str, eval_index: int, split_id: int) -> _EvalJob:
        env = self._env(task_id, split)
        seed = task_seed(self.seed + _EVAL_SEED_OFFSET, eval_index, 2 * task_id + split_id)
        obs, _ = env.reset(seed=seed)
        return _EvalJob(task_id, split, env, obs, self.episodes)


class _EvalJob:
    """The episodes of one (task, split) at one evaluation point.

    Each of the env's ``n`` sub-envs plays a fixed share of the episodes
    (``(episodes + i) // n``), which avoids a bias towards short episodes.
    """

    def __init__(self, task_id: int, split: str, env: VectorEnv, obs: np.ndarray, episodes: int):
        n = env.num_envs
        self.task_id, self.split, self.env, self.obs = task_id, split, env, obs
        self.task_ids = np.full(n, task_id)
        self.targets = np.array([(episodes + i) // n for i in range(n)])
        self.counts = np.zeros(n, dtype=int)
        self.running = np.zeros(n, dtype=np.float64)
        self.returns: list[float] = []
        self.prev_actions = np.zeros(n, dtype=np.int64)
        self.prev_rewards = np.zeros(n, dtype=np.float32)

    @property
    def finished(self) -> bool:
        return bool((self.counts >= self.targets).all())

    def step(self, actions: np.ndarray) -> None:
        self.obs, rewards, terminations, truncations, _ = self.env.step(actions)
        self.running += rewards
        ended = terminations | truncations
        self.prev_actions = np.where(ended, 0, np.asarray(actions).reshape(-1)).astype(np.int64)
        self.prev_rewards = np.where(ended, 0.0, rewards).astype(np.float32)
        for i in np.flatnonzero(ended):
            if self.counts[i] < self.targets[i]:
                self.returns.append(float(self.running[i]))
                self.counts[i] += 1
            self.running[i] = 0.0
