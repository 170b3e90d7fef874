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

        Records hold ``total_step, task_id, task_name, split, mean_return, std_return,
        episodes, wall_time`` (``wall_time`` in seconds since the evaluator was built).
        """
        eval_index = total_step // self.every
        records = []
        for task_id, task in enumerate(self.sequence.tasks):
            for split_id, split in enumerate(task.splits):
                returns = self._run_episodes(task_id, split, policy, eval_index, split_id)
                records.append(
                    {
                        "total_step": int(total_step),
                        "task_id": task_id,
                        "task_name": task.name,
                        "split": split,
                        "mean_return": float(np.mean(returns)),
                        "std_return": float(np.std(returns)),
                        "episodes": len(returns),
                        "wall_time": round(time.monotonic() - self._start, 3),
                    }
                )
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

    def _run_episodes(
        self, task_id: int, split: str, policy: Policy, eval_index: int, split_id: int
    ) -> list[float]:
        env = self._env(task_id, split)
        n = env.num_envs
        targets = np.array([(self.episodes + i) // n for i in range(n)])
        counts = np.zeros(n, dtype=int)
        running = np.zeros(n, dtype=np.float64)
        returns: list[float] = []
        seed = task_seed(self.seed + _EVAL_SEED_OFFSET, eval_index, 2 * task_id + split_id)
        obs, _ = env.reset(seed=seed)
        task_ids = np.full(n, task_id)
        while (counts < targets).any():
            actions = policy(obs, task_ids)
            obs, rewards, terminations, truncations, _ = env.step(actions)
            running += rewards
            for i in np.flatnonzero(terminations | truncations):
                if counts[i] < targets[i]:
                    returns.append(float(running[i]))
                    counts[i] += 1
                running[i] = 0.0
        return returns
