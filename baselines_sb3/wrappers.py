"""SB3 VecEnv wrappers: the task id as an observation key, and reward clipping."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from baselines_sb3.policies import OBS_KEY, TASK_KEY


class TaskIdObservation(VecEnvWrapper):
    """Turns the ``task_id`` info of a sequence env into an observation key.

    Observations become ``{"obs": obs, "task_id": (E,) int64}`` with the space
    ``Dict(obs=<space>, task_id=Discrete(num_tasks))``. The task id of a step's
    observation is the one in that step's ``info`` (after a switch: the new task); the
    ``terminal_observation`` of an episode keeps the task id it was played on.
    Works on ``SB3VecEnv`` over ``SequenceVectorEnv`` and on any VecEnv whose infos carry
    ``task_id`` (rows without one get task 0).
    """

    def __init__(self, venv: VecEnv, num_tasks: int):
        self.num_tasks = int(num_tasks)
        space = spaces.Dict(
            {OBS_KEY: venv.observation_space, TASK_KEY: spaces.Discrete(self.num_tasks)}
        )
        super().__init__(venv, observation_space=space)
        self._task_ids = np.zeros(venv.num_envs, dtype=np.int64)

    def _ids(self, infos: list[dict[str, Any]]) -> np.ndarray:
        return np.array([int(info.get("task_id", 0)) for info in infos], dtype=np.int64)

    def reset(self) -> dict[str, np.ndarray]:
        obs = self.venv.reset()
        infos = getattr(self.venv, "reset_infos", None) or [{}] * self.num_envs
        self._task_ids = self._ids(infos)
        return {OBS_KEY: obs, TASK_KEY: self._task_ids.copy()}

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        previous = self._task_ids
        self._task_ids = self._ids(infos)
        for i, info in enumerate(infos):
            if "terminal_observation" in info:
                info["terminal_observation"] = {
                    OBS_KEY: info["terminal_observation"],
                    TASK_KEY: np.int64(previous[i]),
                }
        return {OBS_KEY: obs, TASK_KEY: self._task_ids.copy()}, rewards, dones, infos

    @property
    def task_ids(self) -> np.ndarray:
        return self._task_ids

    def set_task_ids(self, task_ids: np.ndarray) -> None:
        """Restore the current task ids (checkpoint resume)."""
        self._task_ids = np.asarray(task_ids, dtype=np.int64).copy()


class VecClipReward(VecEnvWrapper):
    """Clips training rewards to ``[low, high]`` (CORA: ``[-1, 1]`` for Atari and Procgen).
    Episode statistics in ``info["episode"]`` stay in the simulator's units."""

    def __init__(self, venv: VecEnv, low: float = -1.0, high: float = 1.0):
        super().__init__(venv)
        self.low, self.high = float(low), float(high)

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, np.clip(rewards, self.low, self.high), dones, infos
