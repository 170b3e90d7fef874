"""The batched view of a task sequence, and its stable-baselines3 adapter."""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from cl_suites.core.sequence_env import action_validator, check_action, check_spaces
from cl_suites.core.task import (
    ScheduleAccessors,
    Segment,
    SequenceCursor,
    TaskSequence,
    TaskSpec,
)

VectorizationMode = Literal["sync", "async"]
VECTORIZATION_MODES: tuple[str, ...] = ("sync", "async")


def make_task_vector_env(
    task: TaskSpec,
    split: str,
    num_envs: int,
    vectorization_mode: VectorizationMode = "sync",
    evaluation: bool = False,
) -> VectorEnv:
    """A batched env of one task and split with same-step autoreset.

    Uses the task's native batched factory when it has one (e.g. Procgen's
    ``ProcgenGym3Env(num=N)``); otherwise gymnasium's ``SyncVectorEnv`` or, with
    ``vectorization_mode="async"``, ``AsyncVectorEnv`` (one worker process per sub-env).
    ``evaluation=True`` selects the split's evaluation variant (``TaskSpec.make_train_eval``).
    """
    native = task.vec_env_factory(split)
    if native is not None and not (evaluation and task.make_train_eval and split == "train"):
        return native(num_envs)
    factory = task.env_factory(split, evaluation=evaluation)
    if vectorization_mode == "sync":
        return gym.vector.SyncVectorEnv(
            [factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
        )
    if vectorization_mode == "async":
        return gym.vector.AsyncVectorEnv(
            [factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
        )
    raise ValueError(
        f"vectorization_mode {vectorization_mode!r} is unknown; use one of {VECTORIZATION_MODES}"
    )


class EpisodeTracker:
    """Per-sub-env running returns and lengths of a batched env.

    ``update`` takes one vector step and returns the finished episodes' returns and
    lengths with a mask, in the layout of gymnasium's ``RecordEpisodeStatistics``
    (``info["episode"] = {"r": (N,), "l": (N,)}``, ``info["_episode"]`` mask).
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> None:
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def update(
        self, rewards: np.ndarray, ended: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        self.returns += rewards
        self.lengths += 1
        episode = {"r": np.where(ended, self.returns, 0.0), "l": np.where(ended, self.lengths, 0)}
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        return episode, ended.copy()


class SequenceVectorEnv(ScheduleAccessors, VectorEnv):
    """``num_envs`` copies of a task sequence that switch task together.

    The budget is counted globally: one vector step counts ``num_envs`` agent steps, and
    all sub-envs switch at the first vector step that spends the task's budget (see
    ``TaskSequence.schedule(num_envs)`` for the exact step ranges). Sub-envs autoreset in
    the same step (``AutoresetMode.SAME_STEP``): at an episode end the returned
    observation already starts the next episode and the last one is in
    ``infos["final_obs"]``. At a task switch every sub-env is truncated, the returned
    observations are the first of the new task and ``infos["task_switched"]`` is True.

    ``infos`` holds, per sub-env, the keys of ``SequenceEnv`` (``task_id``, ``task_name``,
    ``cycle``, ``task_step``, ``total_step``, ``task_switched``, ``sequence_done``; here
    ``task_step`` and ``total_step`` count the global agent steps) and
    ``infos["episode"] = {"r", "l", "task_id"}``/``infos["_episode"]`` for finished
    episodes (``task_id`` is the task the episode was played on: at a switch step the
    other keys already describe the new task, whose first observations are returned).
    When the tasks restrict their actions (``TaskSequence.action_masks()``),
    ``infos["action_mask"]`` is bool ``(num_envs, n_actions)``: the current task's mask
    in every row.

    Args:
        sequence: the task sequence.
        num_envs: number of sub-envs.
        vectorization_mode: for tasks without a native batched backend, ``"sync"``
            (one process) or ``"async"`` (one worker process per sub-env).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        sequence: TaskSequence,
        num_envs: int,
        vectorization_mode: VectorizationMode = "sync",
    ):
        sequence.check_installed()
        if vectorization_mode not in VECTORIZATION_MODES:
            raise ValueError(
                f"vectorization_mode {vectorization_mode!r} is unknown; "
                f"use one of {VECTORIZATION_MODES}"
            )
        self.sequence = sequence
        self.cursor = SequenceCursor(sequence, num_envs=num_envs)
        self.num_envs = self.cursor.num_envs
        self.vectorization_mode = vectorization_mode
        self.single_observation_space = sequence.observation_space
        self.single_action_space = sequence.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._valid_actions = action_validator(self.action_space)
        self._backend: VectorEnv | None = None
        self._episodes = EpisodeTracker(self.num_envs)
        self._ones = np.ones(self.num_envs, dtype=bool)
        self._static_info: dict[str, np.ndarray] = {}
        self._static_info_index = -1
        self._action_masks = sequence.action_masks()

    # -- VectorEnv API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """(Re)start the sequence from step 0. ``seed`` seeds the whole run."""
        if isinstance(seed, (list, tuple)):
            seed = seed[0]
        self.cursor.start(
            int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        )
        obs, infos = self._activate(self.cursor.segment)
        return obs, self._add_sequence_info(infos, task_switched=True)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._backend is None:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if not self._valid_actions(actions):
            check_action(self.action_space, actions)
        spent = self.cursor.advance(self.num_envs)
        obs, rewards, terminations, truncations, infos = self._backend.step(actions)
        if spent:
            truncations = self._ones.copy()
        ended = terminations | truncations
        episode, has_episode = self._episodes.update(rewards, ended)
        if self.sequence.tasks[self.cursor.segment.task_id].records_episodes:
            # the task env reports true episodes itself (e.g. a whole Atari game)
            final_info = infos.get("final_info", {})
            if "episode" in final_info:
                infos["episode"] = final_info["episode"]
                infos["_episode"] = final_info["_episode"] & infos["_final_info"]
        else:
            infos["episode"], infos["_episode"] = episode, has_episode
        if "episode" in infos:  # the task each finished episode was played on
            infos["episode"]["task_id"] = np.full(self.num_envs, self.cursor.segment.task_id)
        if spent:
            infos = self._switch(obs, infos)
            obs = infos.pop("_next_obs", obs)
        return (
            obs,
            rewards,
            terminations,
            truncations,
            self._add_sequence_info(infos, task_switched=spent and not self.cursor.done),
        )

    def close_extras(self, **kwargs: Any) -> None:
        if getattr(self, "_backend", None) is not None:
            self._backend.close()
            self._backend = None

    # -- internals --------------------------------------------------------------------
    def _activate(self, segment: Segment) -> tuple[np.ndarray, dict[str, Any]]:
        self.close_extras()
        task = self.sequence.tasks[segment.task_id]
        backend = make_task_vector_env(task, "train", self.num_envs, self.vectorization_mode)
        check_spaces(self.sequence, task.name, backend)
        self._backend = backend
        self._episodes.reset()
        return backend.reset(seed=self.cursor.env_seed(segment))

    def _switch(self, obs: np.ndarray, infos: dict[str, Any]) -> dict[str, Any]:
        """Truncate every sub-env, move to the next segment and start its task."""
        final_obs = np.empty(self.num_envs, dtype=object)
        already_final = infos.get("_final_obs", np.zeros(self.num_envs, dtype=bool))
        for i in range(self.num_envs):
            final_obs[i] = infos["final_obs"][i] if already_final[i] else obs[i]
        infos["final_obs"], infos["_final_obs"] = final_obs, self._ones.copy()
        segment = self.cursor.next_segment()
        if segment is not None:
            next_obs, reset_infos = self._activate(segment)
            infos = {**reset_infos, **infos, "_next_obs": next_obs}
        return infos

    def _add_sequence_info(self, infos: dict[str, Any], task_switched: bool) -> dict[str, Any]:
        """Add the sequence keys; arrays that only change at a switch are built once per
        segment and shared between steps (treat them as read-only)."""
        n = self.num_envs
        cursor = self.cursor
        if task_switched or cursor.done or self._static_info_index != cursor.index:
            self._static_info = {}
            for key, value in cursor.info(task_switched).items():
                if key not in ("task_step", "total_step"):
                    self._static_info[key] = np.full(n, value)
                    self._static_info["_" + key] = self._ones
            if self._action_masks is not None:
                mask = self._action_masks[cursor.segment.task_id]
                self._static_info["action_mask"] = np.tile(mask, (n, 1))
                self._static_info["_action_mask"] = self._ones
            # the next step of this segment reports task_switched=False again
            self._static_info_index = -1 if task_switched or cursor.done else cursor.index
        infos.update(self._static_info)
        infos["task_step"] = np.full(n, cursor.task_step)
        infos["total_step"] = np.full(n, cursor.total_step)
        infos["_task_step"] = infos["_total_step"] = self._ones
        return infos
