"""Evaluation of a policy on every task of a MEAL sequence, in the common run-log format.

All tasks are evaluated together: their kitchens share one padded grid, so one jitted
step advances ``tasks x episodes`` envs at once (in groups of at most ``max_batch``
envs). Each record's ``mean_return`` is the **sparse delivery return** (20 per soup,
shaping excluded), so ``mean_return / score_normalizers[task_id]`` is MEAL's normalised
score (soups / single-agent max-soup bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from cl_suites.core.runlog import RunLog
from cl_suites.core.task import check_positive_int, task_seed
from cl_suites.meal.engine import MealEngine, jax
from cl_suites.meal.layouts import REWARD_PER_SOUP
from cl_suites.meal.suite import MealSuite

Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``policy(obs (B, H, W, C), task_ids (B,)) -> actions (B,)``: one row per agent of every
env (row ``e * num_agents + i`` is agent ``i`` of env ``e``); use greedy actions."""

_EVAL_SEED_OFFSET = 1_000_003


class MealEvaluator:
    """Runs ``episodes`` episodes of every task every ``every`` env steps.

    Args:
        suite: the MEAL suite; ``every``/``episodes`` default to its sequence's
            ``eval_every``/``eval_episodes``.
        seed: run seed; evaluation point ``k`` of task ``t`` uses the keys of
            ``task_seed(seed + 1_000_003, k, t)``, so evaluations replay exactly.
        run_log: where records are appended (optional).
        engine: share the training env's ``MealEngine`` (saves compilations).
        max_batch: most envs stepped together.
        first_eval_step: the first evaluation point (0: before training).
    """

    def __init__(
        self,
        suite: MealSuite,
        *,
        seed: int = 0,
        run_log: RunLog | None = None,
        every: int | None = None,
        episodes: int | None = None,
        engine: MealEngine | None = None,
        max_batch: int = 1024,
        first_eval_step: int = 0,
    ):
        self.suite = suite
        self.seed = int(seed)
        self.run_log = run_log
        self.every = check_positive_int("every", every or suite.sequence.eval_every)
        self.episodes = check_positive_int("episodes", episodes or suite.sequence.eval_episodes)
        self.engine = engine or MealEngine(suite)
        self.next_eval_step = first_eval_step
        self.last_eval_step: int | None = None
        num_tasks = len(suite.layouts)
        self.tasks_per_batch = max(
            1, min(num_tasks, check_positive_int("max_batch", max_batch) // self.episodes)
        )
        self._start = time.monotonic()

    def due(self, total_step: int) -> bool:
        return total_step >= self.next_eval_step

    def maybe_evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate if an evaluation point was reached; returns the new records (maybe none)."""
        return self.evaluate(total_step, policy) if self.due(total_step) else []

    def evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate every task now; one record per task (split ``"train"``)."""
        eval_index = total_step // self.every
        returns = self.returns(policy, eval_index)
        records = [
            {
                "total_step": int(total_step),
                "task_id": task_id,
                "task_name": layout.name,
                "split": "train",
                "mean_return": float(np.mean(returns[task_id])),
                "std_return": float(np.std(returns[task_id])),
                "episodes": len(returns[task_id]),
                "wall_time": round(time.monotonic() - self._start, 3),
            }
            for task_id, layout in enumerate(self.suite.layouts)
        ]
        self.next_eval_step = (eval_index + 1) * self.every
        self.last_eval_step = int(total_step)
        if self.run_log is not None:
            self.run_log.log_eval(records)
        return records

    def returns(self, policy: Policy, eval_index: int = 0) -> np.ndarray:
        """``(num_tasks, episodes)`` sparse delivery returns of ``policy``."""
        num_tasks, e, n = len(self.suite.layouts), self.episodes, self.suite.num_agents
        out = np.zeros((num_tasks, e))
        group = self.tasks_per_batch
        for first in range(0, num_tasks, group):
            tasks = list(range(first, min(first + group, num_tasks)))
            padded = tasks + [tasks[-1]] * (group - len(tasks))  # keep the batch shape static
            task_ids = np.repeat(padded, e)
            keys = jax.numpy.concatenate(
                [
                    self.engine.env_keys(task_seed(self.seed + _EVAL_SEED_OFFSET, eval_index, t), e)
                    for t in padded
                ]
            )
            state, obs = self.engine.reset(task_ids, keys)
            obs = np.asarray(obs)
            slot_tasks = np.repeat(task_ids, n)
            soups = np.zeros(len(task_ids), dtype=np.int64)
            for _ in range(self.suite.episode_len):
                flat = obs.reshape(len(slot_tasks), *obs.shape[2:])
                actions = np.asarray(policy(flat, slot_tasks)).reshape(len(task_ids), n)
                state, obs, _, step_soups = self.engine.step(state, actions, 0.0)
                obs, step_soups = jax.device_get((obs, step_soups))
                soups += step_soups
            for k, t in enumerate(tasks):
                out[t] = REWARD_PER_SOUP * soups[k * e : (k + 1) * e]
        return out
