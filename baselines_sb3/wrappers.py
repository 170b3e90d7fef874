"""SB3 VecEnv wrappers that build what the baselines' policies and learners see.

Observation layout (read by :class:`baselines_sb3.policies.ContinualPolicy`): the
simulator's observation alone, or a ``Dict`` ``{"obs": ..., "task_id": ...,
"prev_action": ..., "prev_reward": ...}`` built by these wrappers (each adds its keys to
the Dict the previous one built):

* :class:`TaskIdObservation`: the task id from the sequence env's ``info["task_id"]``.
* :class:`PreviousActionReward`: the previous action and the previous reward clipped to
  [-1, 1] (CORA's IMPALA inputs).

Rewards and episode ends as the learner sees them:

* :class:`VecClipReward` / :class:`VecSignReward`: CORA's reward clipping (IMPALA clamps
  to [-1, 1]; CORA's PPO takes the sign). Episode statistics stay in simulator units.
* :class:`VecTimeLimitAsTermination`: an episode ended by the env's time limit is treated
  as terminal (no value bootstrap), as in the reference code; task-switch truncations
  still bootstrap.

:func:`restart_observation` builds the wrapped observation for fresh simulator
observations (a resumed run whose simulator could not be restored).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecTransposeImage

from baselines_sb3.policies import OBS_KEY, PREV_ACTION_KEY, PREV_REWARD_KEY, TASK_KEY


def _with_keys(space: spaces.Space, extra: dict[str, spaces.Space]) -> spaces.Dict:
    base = dict(space.spaces) if isinstance(space, spaces.Dict) else {OBS_KEY: space}
    return spaces.Dict({**base, **extra})


def _add(obs: Any, extra: dict[str, np.ndarray]) -> dict[str, Any]:
    base = dict(obs) if isinstance(obs, dict) else {OBS_KEY: obs}
    return {**base, **extra}


class TaskIdObservation(VecEnvWrapper):
    """Adds the ``task_id`` of a sequence env's infos as an observation key.

    The space gains ``task_id: Discrete(num_tasks)`` (values ``(E,)`` int64). The task id
    of a step's observation is the one in that step's ``info`` (after a switch: the new
    task); the ``terminal_observation`` of an episode keeps the task id it was played on.
    Works on ``SB3VecEnv`` over ``SequenceVectorEnv``, ``MealSB3VecEnv`` and any VecEnv
    whose infos carry ``task_id`` (rows without one get task 0).
    """

    def __init__(self, venv: VecEnv, num_tasks: int):
        self.num_tasks = int(num_tasks)
        space = _with_keys(venv.observation_space, {TASK_KEY: spaces.Discrete(self.num_tasks)})
        super().__init__(venv, observation_space=space)
        self._task_ids = np.zeros(venv.num_envs, dtype=np.int64)

    def _ids(self, infos: list[dict[str, Any]]) -> np.ndarray:
        return np.array([int(info.get("task_id", 0)) for info in infos], dtype=np.int64)

    def reset(self) -> dict[str, np.ndarray]:
        obs = self.venv.reset()
        infos = getattr(self.venv, "reset_infos", None) or [{}] * self.num_envs
        self._task_ids = self._ids(infos)
        return _add(obs, {TASK_KEY: self._task_ids.copy()})

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        previous = self._task_ids
        self._task_ids = self._ids(infos)
        for i, info in enumerate(infos):
            if "terminal_observation" in info:
                info["terminal_observation"] = _add(
                    info["terminal_observation"], {TASK_KEY: np.int64(previous[i])}
                )
        return _add(obs, {TASK_KEY: self._task_ids.copy()}), rewards, dones, infos

    @property
    def task_ids(self) -> np.ndarray:
        return self._task_ids

    def set_task_ids(self, task_ids: np.ndarray) -> None:
        """Restore the current task ids (checkpoint resume)."""
        self._task_ids = np.asarray(task_ids, dtype=np.int64).copy()

    def fresh_observation(self, obs: Any) -> dict[str, Any]:
        return _add(obs, {TASK_KEY: self._task_ids.copy()})


class PreviousActionReward(VecEnvWrapper):
    """Adds the previous action and the previous reward (clipped to [-1, 1]) as keys.

    As CORA's IMPALA (``torchbeast/core/environment.py``, ``nets.py``): both are zero at
    the start of a task (CORA starts new actors per task; here: at ``reset`` and at every
    step whose infos report ``task_switched``), and after every step they are that step's
    action and clipped reward, also across episode ends (the first observation of an
    episode carries the last action and reward of the previous one). With
    ``reset_at_episode_start`` they are zeroed at every episode start instead.

    Keys: ``prev_action: Discrete(n)`` (``(E,)`` int64), ``prev_reward: Box(-1, 1, (1,))``
    (``(E, 1)`` float32). A ``terminal_observation`` carries the action and reward of the
    step that ended its episode. Discrete action spaces only.
    """

    def __init__(self, venv: VecEnv, reset_at_episode_start: bool = False):
        if not isinstance(venv.action_space, spaces.Discrete):
            raise ValueError(
                f"PreviousActionReward needs a Discrete action space, got {venv.action_space}"
            )
        space = _with_keys(
            venv.observation_space,
            {
                PREV_ACTION_KEY: spaces.Discrete(int(venv.action_space.n)),
                PREV_REWARD_KEY: spaces.Box(-1.0, 1.0, (1,), np.float32),
            },
        )
        super().__init__(venv, observation_space=space)
        self.reset_at_episode_start = bool(reset_at_episode_start)
        self._actions = np.zeros(venv.num_envs, dtype=np.int64)

    def _zeros(self) -> dict[str, np.ndarray]:
        return {
            PREV_ACTION_KEY: np.zeros(self.num_envs, dtype=np.int64),
            PREV_REWARD_KEY: np.zeros((self.num_envs, 1), dtype=np.float32),
        }

    def reset(self) -> dict[str, np.ndarray]:
        return _add(self.venv.reset(), self._zeros())

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs).copy()
        self.venv.step_async(actions)

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        action = self._actions
        reward = np.clip(np.asarray(rewards, dtype=np.float32), -1.0, 1.0).reshape(-1, 1)
        for i, info in enumerate(infos):
            if "terminal_observation" in info:
                info["terminal_observation"] = _add(
                    info["terminal_observation"],
                    {PREV_ACTION_KEY: np.int64(action[i]), PREV_REWARD_KEY: reward[i].copy()},
                )
        keys = {PREV_ACTION_KEY: action.copy(), PREV_REWARD_KEY: reward}
        if infos and infos[0].get("task_switched"):
            keys = self._zeros()
        elif self.reset_at_episode_start and np.any(dones):
            keys[PREV_ACTION_KEY][dones] = 0
            keys[PREV_REWARD_KEY][dones] = 0.0
        return _add(obs, keys), rewards, dones, infos

    def fresh_observation(self, obs: Any) -> dict[str, Any]:
        return _add(obs, self._zeros())


class VecClipReward(VecEnvWrapper):
    """Clips training rewards to ``[low, high]`` (CORA's IMPALA: ``[-1, 1]``). Episode
    statistics in ``info["episode"]`` stay in the simulator's units.

    Not gymnasium's vector ``ClipReward``: it wraps a gymnasium ``VectorEnv``, while the
    learner's stack (:func:`baselines_sb3.factory.wrap_env`) is built on SB3 VecEnvs, one
    of which (MEAL's ``MealSB3VecEnv``) has no gymnasium vector env below it; using it
    would split one wrapper chain into two kinds for three lines of clipping."""

    def __init__(self, venv: VecEnv, low: float = -1.0, high: float = 1.0):
        super().__init__(venv)
        self.low, self.high = float(low), float(high)

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, np.clip(rewards, self.low, self.high), dones, infos


class VecSignReward(VecEnvWrapper):
    """Training rewards replaced by their sign (CORA's PPO, ``clip_reward=True``)."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, np.sign(rewards).astype(np.float32), dones, infos


class VecTimeLimitAsTermination(VecEnvWrapper):
    """Episodes that the env truncates (time limit) end as terminal for the learner.

    SB3 bootstraps ``gamma * V(terminal_observation)`` on ``info["TimeLimit.truncated"]``;
    the reference code does not (CORA's old-gym ``done``, MEAL's ``done`` at 400 steps),
    so this wrapper sets the flag to False, except at a task switch (``task_switched``),
    where the cut episode still bootstraps.
    """

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if info.get("TimeLimit.truncated") and not info.get("task_switched"):
                info["TimeLimit.truncated"] = False
        return obs, rewards, dones, infos


def restart_observation(env: VecEnv, obs: np.ndarray) -> Any:
    """What ``env`` (the learner's, wrappers included) returns for fresh simulator
    observations ``obs`` at the start of a task: task ids as the ``TaskIdObservation``
    holds them, zero previous action and reward, images transposed as SB3's
    ``VecTransposeImage`` does. Used when a resumed run restarts its simulator."""
    chain: list[VecEnv] = []
    layer: Any = env
    while isinstance(layer, VecEnvWrapper):
        chain.append(layer)
        layer = layer.venv
    out: Any = obs
    for wrapper in reversed(chain):
        if hasattr(wrapper, "fresh_observation"):
            out = wrapper.fresh_observation(out)
    if isinstance(env, VecTransposeImage):
        out = env.transpose_observations(out)
    return out
