"""SB3 callbacks: continual evaluation + episode logging, progress bar, end of sequence."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.policies import OBS_KEY, TASK_KEY
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.runlog import RunLog
from cl_suites.core.task import Segment


def make_eval_policy(
    model: BaseAlgorithm, method: Any = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids[, prev_actions, prev_rewards]) -> actions`` for the core
    ``Evaluator``: the deterministic (argmax) action of the model's policy, as CORA
    evaluates; the policy's observation layout is built by its ``build_observation`` (task
    ids, previous action and reward); P&C acts with its knowledge base."""
    policy = model.policy

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
            return net.predict(obs, deterministic=True)[0]
        with mode():
            return net.predict(obs, deterministic=True)[0]

    act.needs_previous_action_reward = bool(getattr(policy, "previous_action_reward", False))
    return act


class ContinualEvalCallback(BaseCallback):
    """Plugs the core :class:`Evaluator` and :class:`RunLog` into SB3 training.

    * Evaluates (deterministic policy) whenever ``num_timesteps`` (agent steps summed
      over sub-envs) reaches the evaluator's next point, including step 0 before training.
    * Logs every finished training episode (``info["episode"]``) to the run log with the
      agent step at which it ended and the task it was played on (looked up in the
      schedule, so an episode cut by a task switch belongs to the old task).
    * Stops training at the step where the sequence env reports ``sequence_done``.

    Args:
        evaluator: the core evaluator (owns the cadence and the run log for evals).
        run_log: where training episodes go (``None``: not logged).
        schedule: the run's segments (``SequenceVectorEnv.schedule()``).
        method: the CL method (for P&C's evaluation network); optional.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        run_log: RunLog | None,
        schedule: tuple[Segment, ...],
        method: Any = None,
    ):
        super().__init__()
        self.evaluator = evaluator
        self.run_log = run_log
        self.schedule = schedule
        self._ends = [s.end_step for s in schedule]
        self.method = method
        self._policy_fn: Callable | None = None

    def task_at(self, step: int) -> int:
        """Task id trained at agent step ``step`` (0-based)."""
        i = min(bisect.bisect_right(self._ends, step), len(self.schedule) - 1)
        return self.schedule[i].task_id

    def _policy(self):
        if self._policy_fn is None:
            self._policy_fn = make_eval_policy(self.model, self.method)
        return self._policy_fn

    def _on_training_start(self) -> None:
        self.evaluator.maybe_evaluate(self.num_timesteps, self._policy())

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        if self.run_log is not None:
            task = self.task_at(self.num_timesteps - 1)
            episodes = [
                {
                    "total_step": self.num_timesteps,
                    "task_id": task,
                    "episode_return": info["episode"]["r"],
                    "episode_length": info["episode"]["l"],
                }
                for info in infos
                if "episode" in info
            ]
            self.run_log.log_episodes(episodes)
        self.evaluator.maybe_evaluate(self.num_timesteps, self._policy())
        return not (infos and infos[0].get("sequence_done", False))


class ProgressBarCallback(BaseCallback):
    """A tqdm bar over the whole sequence with the current task, cycle and steps/s."""

    def __init__(self, total_steps: int, schedule: tuple[Segment, ...], disable: bool = False):
        super().__init__()
        self.total_steps = int(total_steps)
        self.schedule = schedule
        self._ends = [s.end_step for s in schedule]
        self.disable = disable
        self.bar = None

    def _on_training_start(self) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=self.total_steps,
            initial=self.num_timesteps,
            unit="step",
            dynamic_ncols=True,
            disable=self.disable,
            smoothing=0.1,
        )
        self._t0, self._s0 = time.monotonic(), self.num_timesteps

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.bar is None:
            return
        self.bar.update(self.num_timesteps - self.bar.n)
        i = min(
            bisect.bisect_right(self._ends, max(self.num_timesteps - 1, 0)), len(self.schedule) - 1
        )
        seg = self.schedule[i]
        rate = (self.num_timesteps - self._s0) / max(time.monotonic() - self._t0, 1e-9)
        self.bar.set_postfix_str(
            f"task {seg.task_id}:{seg.task_name} cycle {seg.cycle} {rate:,.0f} steps/s"
        )

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.update(self.num_timesteps - self.bar.n)
            self.bar.close()
