"""Stable-baselines3 view of a batched MEAL sequence: one slot per agent per env.

Slot ``e * num_agents + i`` is agent ``i`` of env ``e``, so one SB3 policy acts for every
agent (parameter sharing: IPPO). The whole batch is stepped by one jitted call; the
adapter only reshapes arrays and builds SB3's per-slot info dicts.

With ``observation_device`` set, observations come as torch tensors on that device, taken
from the engine's JAX arrays with ``torch.from_dlpack`` (no copy; the torch learner's job
decides it: ``cl_suites.job.torch.device_observations``).

The view reads the batched env through its attributes only (``MealBatchedEnv``'s
``reset``/``step``, ``cursor``, ``suite``, ``sequence``, ``num_agents``, ``num_envs``,
``autoreset``, ``device_observations``), so this room imports no MEAL module (the env
machinery and the errors only); ``cl_suites.meal.make_sb3_vec_env`` builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cl_suites.core.task import TASK_EPISODE_KEY, Segment, TaskSwitchCallback
from cl_suites.errors import require

if TYPE_CHECKING:
    from cl_suites.meal.batched import MealBatchedEnv

require("stable_baselines3", extra="baselines")

import torch as th  # noqa: E402

from cl_suites.sb3.adapter import ForwardingVecEnv  # noqa: E402

SCHEDULE_KEYS = (
    "task_id",
    "task_name",
    "cycle",
    "task_step",
    "total_step",
    "task_switched",
    "sequence_done",
)


class MealSB3VecEnv(ForwardingVecEnv):
    """SB3 ``VecEnv`` over a ``MealBatchedEnv`` (``num_envs = M * num_agents`` slots).

    Like ``cl_suites.sb3.adapter.SB3VecEnv``, every slot's info dict carries
    ``task_id, task_name, cycle, task_step, total_step, task_switched, sequence_done``
    (``task_step``/``total_step`` count env steps of the whole batch), and at episode
    ends ``episode = {"r": agent's return, "l": length, "soups", "score", "task_id"}``,
    ``terminal_observation`` and ``TimeLimit.truncated`` (True: MEAL episodes end by time
    or task switch, and SB3 then bootstraps from the final observation; the main job's
    ``baselines_sb3.wrappers.VecTimeLimitAsTermination`` makes full-length episodes
    terminal, as MEAL's training code treats its ``done``).
    ``.cursor`` is the shared ``SequenceCursor`` and
    ``.on_task_switch(callback)`` subscribes to switches. ``.task_ids()`` gives each
    slot's current task id (for multi-head policies); ``.vector_env`` is the batched env.

    Rewards are returned per slot (shared team reward by default).

    ``observation_device`` (``"cpu"``, ``"cuda:N"``: the device of the engine's arrays,
    ``cl_suites.job.torch.device_observations.observation_device``): observations are torch
    tensors on it, shared with the engine's arrays (``torch.from_dlpack``); terminal
    observations in the infos stay numpy (one host copy per episode end). ``None``: numpy.
    """

    def __init__(self, batched: MealBatchedEnv, observation_device: str | None = None):
        if not batched.autoreset:
            raise ValueError("MealSB3VecEnv needs a MealBatchedEnv with autoreset=True")
        self.vector_env = batched
        self.suite = batched.suite
        self.sequence = batched.sequence
        self.num_agents = batched.num_agents
        self.num_batch_envs = batched.num_envs
        super().__init__(
            batched.num_envs * batched.num_agents,
            batched.sequence.observation_space,
            batched.sequence.action_space,
        )
        self._obs_flat = (self.num_envs, *batched.sequence.observation_space.shape)
        self._actions: np.ndarray | None = None
        self._seed: int | None = None
        self.observation_device = observation_device
        batched.device_observations = observation_device is not None

    def _observations(self, obs: Any) -> Any:
        """The batch's ``(M, n, ...)`` observations as ``(M * n, ...)`` slots: a torch view
        of the engine's array with ``observation_device``, else numpy."""
        if self.observation_device is not None:
            return th.from_dlpack(obs).reshape(self._obs_flat)
        return obs.reshape(self._obs_flat)

    # -- continual-learning hooks ---------------------------------------------------------
    @property
    def cursor(self):
        return self.vector_env.cursor

    def on_task_switch(self, callback: TaskSwitchCallback):
        """Subscribe ``callback(TaskSwitch)`` to task switches; returns an unsubscribe function."""
        return self.vector_env.on_task_switch(callback)

    def schedule(self) -> tuple[Segment, ...]:
        return self.vector_env.schedule()

    @property
    def current_task(self) -> Segment:
        return self.vector_env.current_task

    def task_ids(self) -> np.ndarray:
        """``(num_envs,)`` task id of every slot (all equal: envs switch together)."""
        return np.full(self.num_envs, self.cursor.segment.task_id)

    # -- VecEnv API -----------------------------------------------------------------------
    def reset(self) -> np.ndarray:
        obs, info = self.vector_env.reset(seed=self._seed)
        self._seed = None
        base = {k: info[k] for k in SCHEDULE_KEYS}
        self.reset_infos = [dict(base) for _ in range(self.num_envs)]
        return self._observations(obs)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        self._seed = seed
        return [seed] * self.num_envs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_batch_envs, self.num_agents)

    def step_wait(self):
        obs, rewards, terms, truncs, info = self.vector_env.step(self._actions)
        dones = (terms | truncs).reshape(-1)
        base = {k: info[k] for k in SCHEDULE_KEYS}
        if TASK_EPISODE_KEY not in info:
            # no slot ended: SB3 only reads these dicts during the step (episode stats,
            # terminal observations of done slots), so every slot shares one fresh dict
            infos = [base] * self.num_envs
        else:  # episodes end together (time limit or task switch): one dict per slot
            ep = info[TASK_EPISODE_KEY]
            final = np.asarray(info.get("final_obs", obs))  # on the host: one copy
            n = self.num_agents
            task_id = int(ep["task_id"])
            r, length = ep["r"].tolist(), ep["l"].tolist()
            soups, score = ep["soups"].tolist(), ep["score"].tolist()
            truncated = (truncs & ~terms).tolist()
            infos = []
            for e in range(self.num_batch_envs):
                episode_e = (int(length[e]), int(soups[e]), float(score[e]))
                for i in range(n):
                    slot_info = dict(base)
                    slot_info["episode"] = {
                        "r": float(r[e][i]),
                        "l": episode_e[0],
                        "soups": episode_e[1],
                        "score": episode_e[2],
                        "task_id": task_id,
                    }
                    slot_info["terminal_observation"] = final[e, i]
                    slot_info["TimeLimit.truncated"] = bool(truncated[e][i])
                    infos.append(slot_info)
        return self._observations(obs), rewards.reshape(-1), dones, infos
