"""MEAL's pluggable piece of the core ``Evaluator``: its eval env source.

All kitchens share one padded grid, so one jitted step advances ``tasks x episodes``
envs at once (in groups of at most ``max_batch`` envs). Every env has ``num_agents``
agents that act with one shared policy (parameter sharing: agent ``i`` of env ``e`` is
policy row ``e * num_agents + i``). The reward an eval env reports is the **sparse
delivery return** (20 per soup the team delivers, shaping excluded), so an eval record's
``mean_return / score_normalizers[task_id]`` is MEAL's normalised score (soups / the
single-agent max-soup bound).

Use::

    evaluator = meal_evaluator(suite, seed=0, run_log=log)   # a core Evaluator
    evaluator.maybe_evaluate(total_step, policy)              # env steps
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cl_suites.core.evaluation import EvalBatch, Evaluator
from cl_suites.core.task import check_positive_int
from cl_suites.meal.batched import shared_engine
from cl_suites.meal.engine import MealEngine, jax
from cl_suites.meal.layouts import REWARD_PER_SOUP
from cl_suites.meal.render import load_pygame
from cl_suites.meal.suite import MealSuite
from cl_suites.rundir.runlog import RunLog


class MealEvalEnv:
    """``N`` MEAL envs for evaluation or fresh rollouts; env ``j`` plays ``task_ids[j]``
    (the envs of a task form one contiguous block).

    ``reset()`` returns ``obs (N, num_agents, H, W, C)``; ``step(actions (N, num_agents))``
    returns ``(obs, rewards (N,), terminations (N,), truncations (N,), {})`` where
    ``rewards`` is 20 x the soups the team delivered this step. Episodes last
    ``episode_len`` steps (truncation) and restart in the same step with the envs' own
    PRNG keys carried on. ``render_sub_envs(indices)`` draws kitchens with meal-bench's
    visualizer.
    """

    def __init__(self, suite: MealSuite, engine: MealEngine, task_ids: np.ndarray, keys: Any):
        self.suite = suite
        self.engine = engine
        self.task_ids = np.asarray(task_ids)
        self.num_envs = len(self.task_ids)
        self.num_agents = suite.num_agents
        self._keys = keys
        self._state = None
        self._t = 0
        self._no = np.zeros(self.num_envs, dtype=bool)
        self._yes = np.ones(self.num_envs, dtype=bool)
        self._visualizer = None

    def reset(self) -> np.ndarray:
        self._state, obs = self.engine.reset(self.task_ids, self._keys)
        self._t = 0
        return np.asarray(obs)

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions).reshape(self.num_envs, self.num_agents)
        self._state, obs, _, soups = self.engine.step(self._state, actions, 0.0)
        obs, soups = jax.device_get((obs, soups))
        self._t += 1
        rewards = REWARD_PER_SOUP * np.asarray(soups, dtype=np.float64)
        if self._t < self.suite.episode_len:
            return np.asarray(obs), rewards, self._no, self._no, {}
        self._keys = self._state.keys
        return self.reset(), rewards, self._no, self._yes, {}

    def render_sub_envs(self, indices: Sequence[int]) -> list[np.ndarray]:
        """``(H, W, 3)`` uint8 frames of the envs ``indices`` (meal-bench's visualizer)."""
        if self._visualizer is None:
            self._visualizer = make_visualizer(self.num_agents)
        host = jax.device_get(self._state.env_state)
        return [
            self._visualizer.render(jax.tree.map(lambda x, i=i: np.asarray(x)[i], host))
            for i in indices
        ]

    def close(self) -> None:
        self._state = None


def make_visualizer(num_agents: int) -> Any:
    """meal-bench's ``OvercookedVisualizer`` (headless: SDL's dummy video driver)."""
    load_pygame()  # before meal-bench imports it
    from meal.visualization.visualizer import OvercookedVisualizer

    return OvercookedVisualizer(num_agents=num_agents)


class MealEvalSource:
    """The core ``Evaluator``'s env source for a MEAL suite (split ``"train"`` only).

    Args:
        suite: the MEAL suite.
        engine: share the training env's ``MealEngine`` (default: the suite's shared one).
        max_batch: most envs stepped together; tasks are grouped so that a group's
            ``tasks x episodes`` envs fit (the last group is padded to the same size, so
            one compiled step serves every group).
    """

    def __init__(self, suite: MealSuite, engine: MealEngine | None = None, max_batch: int = 1024):
        self.suite = suite
        self.engine = engine or shared_engine(suite)
        self.max_batch = check_positive_int("max_batch", max_batch)

    def start(
        self, keys: Sequence[tuple[int, str]], seeds: dict[tuple[int, str], int], episodes: int
    ) -> list[EvalBatch]:
        tasks = [t for t, _ in keys]
        group = max(1, min(len(tasks), self.max_batch // episodes))
        batches = []
        for first in range(0, len(tasks), group):
            chunk = tasks[first : first + group]
            padded = chunk + [chunk[-1]] * (group - len(chunk))  # a static batch shape
            env_keys = jax.numpy.concatenate(
                [self.engine.env_keys(seeds[(t, "train")], episodes) for t in padded]
            )
            task_ids = np.repeat(padded, episodes)
            targets = np.repeat([1] * len(chunk) + [0] * (group - len(chunk)), episodes)
            env = MealEvalEnv(self.suite, self.engine, task_ids, env_keys)
            obs = env.reset()
            splits = ("train",) * len(task_ids)
            batches.append(EvalBatch(env, obs, task_ids, splits, targets, self.suite.num_agents))
        return batches

    def start_rollout(self, task_id: int, num_envs: int, seed: int) -> EvalBatch:
        env = MealEvalEnv(
            self.suite,
            self.engine,
            np.full(num_envs, task_id),
            self.engine.env_keys(seed, num_envs),
        )
        obs = env.reset()
        ones = np.ones(num_envs, dtype=np.int64)
        return EvalBatch(env, obs, env.task_ids, ("train",) * num_envs, ones, self.suite.num_agents)

    def check_render(self) -> None:
        try:
            make_visualizer(self.suite.num_agents)
        except ImportError as e:
            raise ValueError(
                f"MEAL kitchens cannot be drawn ({e}); run without capture_video"
            ) from e

    def close(self) -> None:
        pass


def meal_evaluator(
    suite: MealSuite,
    *,
    seed: int = 0,
    run_log: RunLog | None = None,
    engine: MealEngine | None = None,
    max_batch: int = 1024,
    **kwargs: Any,
) -> Evaluator:
    """The core ``Evaluator`` over ``suite`` with MEAL's env source; ``kwargs`` go to
    ``Evaluator`` (``every``, ``episodes``, ``first_eval_step``, ``segments``, ``video``)."""
    return Evaluator(
        suite.sequence,
        seed=seed,
        run_log=run_log,
        env_source=MealEvalSource(suite, engine, max_batch),
        **kwargs,
    )


def cross_play(
    suite: MealSuite,
    task_id: int,
    policies: Sequence[Any],
    *,
    episodes: int = 64,
    seed: int = 0,
    engine: MealEngine | None = None,
) -> float:
    """Soups per episode when agent ``i`` of every env acts with ``policies[i]`` on task
    ``task_id``'s kitchen: one cell of MEAL's coordination matrix (``TTomilin/MEAL@057f862
    experiments/results/coordination_matrix.py:120-168``: 64 envs, one episode each,
    greedy actions; ``cl_suites.metrics.meal.coordination_matrix`` divides by the bound).

    Each policy is ``policy(obs, task_ids) -> actions`` (as the evaluator's) and sees only
    its agent's rows, with ``task_id`` as the task (MEAL: both play with the task's head).
    The envs are those of ``start_rollout(task_id, episodes, seed)``.
    """
    if len(policies) != suite.num_agents:
        raise ValueError(
            f"cross_play needs one policy per agent ({suite.num_agents}), got {len(policies)}"
        )
    batch = MealEvalSource(suite, engine).start_rollout(int(task_id), int(episodes), int(seed))
    n, k = batch.num_envs, suite.num_agents
    for _ in range(suite.episode_len):
        obs, ids = batch.policy_rows()
        actions = np.empty(n * k, dtype=np.int64)
        for i, policy in enumerate(policies):
            rows = np.arange(n) * k + i
            actions[rows] = np.asarray(policy(obs[rows], ids[rows])).reshape(-1)
        batch.step(actions)
    return float(batch.running.sum() / REWARD_PER_SOUP / n)
