"""SB3 callbacks: continual evaluation + episode logging, progress, fresh-episode source.

One evaluation callback serves every suite. Multi-agent suites (MEAL) train one shared
policy with one SB3 env slot per agent (``agents_per_env`` slots per env); the callback
then counts the run's steps as ``num_timesteps // agents_per_env`` (env steps) and logs
one training episode per env (its first agent's slot).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.cl.base import EpisodeSource, FreshEpisodes
from baselines_sb3.policies import OBS_KEY, TASK_KEY
from baselines_sb3.policy_lag import frozen_copy, wait_for_update
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.task import Segment
from cl_suites.rundir.progress import RunProgress
from cl_suites.rundir.runlog import RunLog


def make_eval_policy(
    model: BaseAlgorithm, method: Any = None, deterministic: bool = True, policy: Any = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids[, prev_actions, prev_rewards]) -> actions`` for the core
    ``Evaluator``: the model's policy (or ``policy``, e.g. a frozen copy of it), greedy
    (argmax) by default as CORA and MEAL evaluate, sampled with ``deterministic=False``;
    the policy's observation layout is built by its ``build_observation`` (task ids,
    previous action and reward); P&C acts with its knowledge base."""
    policy = model.policy if policy is None else policy

    def act(
        obs: np.ndarray,
        task_ids: np.ndarray,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
    ) -> np.ndarray:
        net = method.eval_policy_module(policy) if method is not None else policy
        if hasattr(net, "build_observation"):
            obs = net.build_observation(obs, task_ids, prev_actions, prev_rewards)
        elif getattr(net, "task_aware", False):
            obs = {OBS_KEY: obs, TASK_KEY: np.asarray(task_ids, dtype=np.int64)}
        mode = getattr(net, "evaluation_mode", None)
        if mode is None:
            return net.predict(obs, deterministic=deterministic)[0]
        with mode():
            return net.predict(obs, deterministic=deterministic)[0]

    act.needs_previous_action_reward = bool(getattr(policy, "previous_action_reward", False))
    return act


def make_episode_source(
    evaluator: Evaluator,
    model: BaseAlgorithm,
    current_step: Callable[[], int],
    num_agents: int = 1,
) -> EpisodeSource:
    """The fresh-episode source of CL methods that estimate importances from fresh
    episodes of the finished task (``ContinualMethod.set_episode_source``, interface 11).

    ``episodes`` envs of the task's training split play ``max_steps`` steps each (an
    episode that ends restarts) with the model's sampled policy: each of the ``num_agents``
    agents of an env on its own observation, or with ``lead_agent=True`` every agent
    playing the action sampled from agent 0's observation (MEAL 7d81858's Fisher
    episodes, ``cl_methods/EWC.py:131-174``). The result holds every observation the
    policy saw as the policy takes it (``{"obs", "task_id"}`` when it is task-aware) and
    the actions played, one "step" per (time step, env), with each step's index in its
    chunk and whether the env's first episode was still running. The envs are the
    evaluator's, seeded from the run seed, the task and ``current_step()``.
    """
    act = make_eval_policy(model, None, deterministic=False)
    agents = int(num_agents)

    def source(
        task_id: int, episodes: int, max_steps: int, lead_agent: bool = False
    ) -> FreshEpisodes:
        played: list[np.ndarray] = []

        def policy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
            if lead_agent:  # rows are env by env, then agent by agent
                actions = np.repeat(np.asarray(act(obs[::agents], task_ids[::agents])), agents)
            else:
                actions = np.asarray(act(obs, task_ids))
            played.append(actions)
            return actions

        training = model.policy.training
        try:
            obs, task_ids, ended = evaluator.rollout_observations(
                task_id, episodes, max_steps, policy, current_step()
            )
        finally:  # SB3's predict leaves the policy in evaluation mode
            model.policy.set_training_mode(training)
        if getattr(model.policy, "task_aware", False):
            obs = {OBS_KEY: obs, TASK_KEY: task_ids.astype(np.int64)}
        steps, envs = ended.shape
        ended_before = np.cumsum(ended, axis=0) - ended > 0  # an end at an earlier step
        return FreshEpisodes(
            observations=obs,
            num_agents=len(task_ids) // (steps * envs),
            step_in_episode=np.repeat(np.arange(steps), envs),
            alive=~ended_before.reshape(-1),
            actions=np.concatenate(played).reshape(steps * envs, -1),
        )

    return source


class ContinualEvalCallback(BaseCallback):
    """Plugs the core :class:`Evaluator` and :class:`RunLog` into SB3 training.

    * Evaluates as soon as the step reaches the evaluator's next point, after the
      learner's update when the point is a rollout boundary (as MEAL evaluates after
      update ``k``): points inside a rollout are evaluated at that step, points at the
      end of a rollout at the start of the next one. Also before training when the
      evaluator's first point is 0, and once more when the sequence ends (unless the last
      evaluation was at that step).
    * Logs every finished training episode (``info["episode"]``) with the step at which
      it ended and the task it was played on (an episode cut by a task switch belongs to
      the old task); with ``agents_per_env > 1`` one row per env.
    * Stops training where the sequence env reports ``sequence_done``; when that step
      completes a rollout and ends the learner's budget, the rollout is still trained on.

    Steps are the run's unit: ``num_timesteps // agents_per_env`` (agent steps, or env
    steps for MEAL).

    Args:
        evaluator: the core evaluator (owns the cadence and the run log for evals).
        run_log: where training episodes go (``None``: not logged).
        schedule: the run's segments (``venv.schedule()``); optional.
        method: the CL method (for P&C's evaluation network); optional.
        agents_per_env: SB3 env slots per env (MEAL: ``num_agents``).
        deterministic: evaluate with the greedy action (default) or a sampled one.
        beside_training: evaluate in a background thread with a frozen copy of the
            network while training goes on (``Evaluator.submit``; greedy only); the rows
            are those of an evaluation in place.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        run_log: RunLog | None,
        schedule: tuple[Segment, ...] | None = None,
        method: Any = None,
        *,
        agents_per_env: int = 1,
        deterministic: bool = True,
        beside_training: bool = False,
    ):
        super().__init__()
        if beside_training and not deterministic:
            raise ValueError(
                "evaluating beside training needs the greedy policy (eval_deterministic=true): "
                "sampled actions would draw from torch's global generator beside training"
            )
        self.beside_training = bool(beside_training)
        self.evaluator = evaluator
        self.run_log = run_log
        self.schedule = tuple(schedule) if schedule is not None else ()
        self._ends = [s.end_step for s in self.schedule]
        self.method = method
        self.agents_per_env = int(agents_per_env)
        self.deterministic = bool(deterministic)
        self.sequence_done = False
        self._policy_fn: Callable | None = None

    @property
    def total_step(self) -> int:
        """The run's step: agent steps, or env steps when ``agents_per_env > 1``."""
        return self.num_timesteps // self.agents_per_env

    def task_at(self, step: int) -> int:
        """Task id trained at step ``step`` (0-based) per the schedule."""
        i = min(bisect.bisect_right(self._ends, step), len(self.schedule) - 1)
        return self.schedule[i].task_id

    def policy(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        if self._policy_fn is None:
            self._policy_fn = make_eval_policy(self.model, self.method, self.deterministic)
        return self._policy_fn

    def _evaluate(self, step: int) -> None:
        """Evaluate at ``step`` if it is an evaluation point, with the learner after its
        update in flight (``policy_lag=1``), as in lockstep: in place, or beside training
        with a copy of the network as it is now."""
        if not self.evaluator.due(step):
            return
        wait_for_update(self.model)
        if not self.beside_training:
            self.evaluator.evaluate(step, self.policy())
            return
        frozen = frozen_copy(self.model.policy)
        act = make_eval_policy(self.model, self.method, self.deterministic, policy=frozen)
        self.evaluator.submit(step, act)

    def _on_rollout_start(self) -> None:
        self._evaluate(self.total_step)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        step = self.total_step
        if self.run_log is not None:
            ended = [info["episode"] for info in infos[:: self.agents_per_env] if "episode" in info]
            episodes = [
                {
                    "total_step": step,
                    "task_id": int(ep.get("task_id", self.task_at(step - 1))),
                    "episode_return": ep["r"],
                    "episode_length": ep["l"],
                }
                for ep in ended
            ]
            self.run_log.log_episodes(episodes)
            soups = [  # MEAL: the soups of each episode (its training signal, no shaping)
                {
                    **{k: e[k] for k in ("total_step", "task_id", "episode_length")},
                    "soups": ep["soups"],
                }
                for e, ep in zip(episodes, ended, strict=True)
                if "soups" in ep
            ]
            if soups and hasattr(self.run_log, "log_episode_soups"):
                self.run_log.log_episode_soups(soups)
        rollout_full = self.locals.get("n_steps", -2) + 1 >= self.model.n_steps
        if not rollout_full:  # a point at a rollout's end waits for the update
            self._evaluate(step)
        if infos and infos[0].get("sequence_done", False):
            self.sequence_done = True
            budget_spent = self.num_timesteps >= getattr(self.model, "_total_timesteps", 0)
            return rollout_full and budget_spent
        return True

    def _on_training_end(self) -> None:
        self.evaluator.wait()
        if self.sequence_done and self.evaluator.last_eval_step != self.total_step:
            self.evaluator.evaluate(self.total_step, self.policy())


class ProgressBarCallback(BaseCallback):
    """Reports the run's step to a :class:`~cl_suites.rundir.progress.RunProgress` (rich
    bar with the current task, cycle and one steps/s figure; ``RUN_DIR/progress.json``).
    Steps: ``num_timesteps // agents_per_env``."""

    def __init__(self, progress: RunProgress, agents_per_env: int = 1):
        super().__init__()
        self.progress = progress
        self.agents_per_env = int(agents_per_env)

    def _on_step(self) -> bool:
        self.progress.update(self.num_timesteps // self.agents_per_env)
        return True

    def _on_training_end(self) -> None:
        self.progress.update(self.num_timesteps // self.agents_per_env, force=True)
