"""The batched view of a task sequence."""

from __future__ import annotations

import time
import warnings
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from cl_suites.core.env_state import (
    EnvStateError,
    load_env_state,
    save_env_state,
    simulator_handles,
)
from cl_suites.core.sequence_env import (
    action_validator,
    check_action,
    check_spaces,
    own_spaces,
    running_games,
)
from cl_suites.core.task import (
    RENDER_MODES,
    TASK_EPISODE_KEY,
    Schedule,
    ScheduleAccessors,
    Segment,
    SequenceCursor,
    TaskSequence,
    TaskSpec,
    check_render_mode,
)
from cl_suites.core.workers import WorkerVectorEnv, check_env_splits, usable_cores

VectorizationMode = Literal["sync", "async", "workers"]
VECTORIZATION_MODES: tuple[str, ...] = ("sync", "async", "workers")

STATE_FORMAT = 1
"""Version of ``SequenceVectorEnv.state_dict()``'s layout."""


def make_task_vector_env(
    task: TaskSpec,
    split: str,
    num_envs: int,
    vectorization_mode: VectorizationMode = "sync",
    evaluation: bool = False,
    render_mode: str | None = None,
    num_workers: int | None = None,
    observation_space: gym.Space | None = None,
    splits: int = 1,
) -> VectorEnv:
    """A batched env of one task and split with same-step autoreset.

    Uses the task's native batched factory when it has one (e.g. Procgen's
    ``ProcgenGym3Env(num=N)``, which steps its games on its own threads); otherwise
    gymnasium's ``SyncVectorEnv``; with ``vectorization_mode="async"``, ``AsyncVectorEnv``
    (one worker process per sub-env); with ``"workers"``, ``WorkerVectorEnv``
    (``num_workers`` processes, default one per usable core, each stepping a contiguous
    chunk of the sub-envs; the same results as ``"sync"`` bit for bit; ``observation_space``,
    when given, saves it building a sub-env in this process to learn the space; ``splits``:
    the blocks its workers can be started on one by one, ``WorkerVectorEnv.start_block``).
    ``evaluation=True`` selects the split's evaluation variant (``TaskSpec.make_train_eval``).
    With ``render_mode="rgb_array"`` its ``render()`` returns one frame per sub-env.
    """
    check_render_mode(render_mode)
    native = task.vec_env_factory(split, render_mode=render_mode)
    if native is not None and not (evaluation and task.make_train_eval and split == "train"):
        return native(num_envs)
    factory = task.env_factory(split, evaluation=evaluation, render_mode=render_mode)
    if vectorization_mode == "sync":
        return gym.vector.SyncVectorEnv(
            [factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
        )
    if vectorization_mode == "async":
        return gym.vector.AsyncVectorEnv(
            [factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
        )
    if vectorization_mode == "workers":
        return WorkerVectorEnv(
            factory,
            num_envs,
            num_workers or usable_cores(),
            name=f"task {task.name!r} ({split})",
            observation_space=observation_space,
            splits=splits,
        )
    raise ValueError(
        f"vectorization_mode {vectorization_mode!r} is unknown; use one of {VECTORIZATION_MODES}"
    )


class EpisodeTracker:
    """Per-sub-env running returns, lengths and start times of a batched env with
    same-step autoreset.

    ``update`` takes one vector step; when an episode ended it returns the finished
    episodes' returns, lengths (agent steps) and durations (seconds) with a mask
    (``{"r": (N,), "l": (N,), "t": (N,)}`` and a bool ``(N,)`` mask, the layout of
    gymnasium's ``RecordEpisodeStatistics``), else ``None``.
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.starts = np.full(num_envs, time.perf_counter())

    def reset(self) -> None:
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self.starts[:] = time.perf_counter()

    def update(
        self, rewards: np.ndarray, ended: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        self.returns += rewards
        self.lengths += 1
        if not ended.any():
            return None
        now = time.perf_counter()
        episode = {
            "r": np.where(ended, self.returns, 0.0),
            "l": np.where(ended, self.lengths, 0),
            "t": np.where(ended, np.round(now - self.starts, 6), 0.0),
        }
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        self.starts[ended] = now
        return episode, ended.copy()

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.returns[:] = state["returns"]
        self.lengths[:] = state["lengths"]
        self.starts[:] = time.perf_counter()


class SequenceVectorEnv(ScheduleAccessors, VectorEnv):
    """``num_envs`` copies of a task sequence that switch task together.

    The budget is counted globally: one vector step counts ``num_envs`` agent steps, and
    all sub-envs switch at the first vector step that spends the task's budget (see
    ``TaskSequence.schedule(num_envs)`` for the exact step ranges). Sub-envs autoreset in
    the same step (``AutoresetMode.SAME_STEP``): at an episode end the returned
    observation already starts the next episode and the last one is in
    ``infos["final_obs"]``. At a task switch every sub-env is truncated, the returned
    observations are the first of the new task and ``infos["task_switched"]`` is True.
    After the last switch ``infos["sequence_done"]`` is True and ``step`` raises
    ``SequenceDoneError``.

    ``infos`` holds, per sub-env, the keys of ``SequenceEnv`` (``task_id``, ``task_name``,
    ``cycle``, ``task_step``, ``total_step``, ``task_switched``, ``sequence_done``, and
    ``action_mask (num_envs, n_actions)`` when the sequence restricts actions; here
    ``task_step`` and ``total_step`` count the global agent steps). At a step where
    episodes end (those cut by a task switch included; for Atari, whole games),
    ``infos["task_episode"] = {"r", "l", "t", "task_id"}`` (``(N,)`` arrays: return, length
    in agent steps, seconds, the task the episode was played on: at a switch step the
    other keys already describe the new task) with the mask ``infos["_task_episode"]``.
    ``infos["episode"]`` is left to gymnasium's vector ``RecordEpisodeStatistics``, which
    counts the episodes this env returns (every sub-env is truncated at a switch, so the
    games a switch cuts are counted too; for Atari in training, one per life).

    One task env (a batch of ``num_envs``) is built per task segment. ``state_dict()`` /
    ``load_state_dict()`` save and restore the position, the running episodes and, where
    the simulator allows it (``exact_resume``), the task env itself.

    The package's ``cl_suites.SequenceVectorEnv`` (what ``make_vec`` returns) is this
    class with ``to_sb3()``, stable-baselines3's view, added above the env machinery
    (``cl_suites.api``): core imports no SB3.

    Args:
        sequence: the task sequence.
        num_envs: number of sub-envs (or give ``schedule``).
        schedule: the schedule to follow, ``sequence.schedule(num_envs)`` cut already
            (the job's); the env then has ``schedule.num_envs`` sub-envs.
        vectorization_mode: for tasks without a native batched backend, ``"sync"``
            (one process), ``"async"`` (one worker process per sub-env) or ``"workers"``
            (``env_workers`` processes, each stepping a chunk of the sub-envs).
        render_mode: ``"rgb_array"``: ``render()`` returns one frame per sub-env.
        env_workers: worker processes of ``"workers"`` (default: one per usable core,
            at most ``num_envs / env_splits``).
        env_splits: the equal contiguous blocks of sub-envs a learner acts on one at a
            time (2: double-buffered acting, :meth:`start_block`); it must divide
            ``num_envs``. Only ``"workers"`` steps a block while the next is acted on.
    """

    metadata: dict[str, Any] = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "render_modes": list(RENDER_MODES),
        "render_fps": 30,
    }

    def __init__(
        self,
        sequence: TaskSequence,
        num_envs: int | None = None,
        vectorization_mode: VectorizationMode = "sync",
        render_mode: str | None = None,
        env_workers: int | None = None,
        *,
        schedule: Schedule | None = None,
        env_splits: int = 1,
    ):
        sequence.check_installed()
        if vectorization_mode not in VECTORIZATION_MODES:
            raise ValueError(
                f"vectorization_mode {vectorization_mode!r} is unknown; "
                f"use one of {VECTORIZATION_MODES}"
            )
        self.render_mode = check_render_mode(render_mode)
        self.metadata = {**type(self).metadata, "render_fps": sequence.render_fps}
        self.sequence = sequence
        self.cursor = SequenceCursor(sequence, sequence.follow(num_envs, schedule))
        self.num_envs = self.cursor.num_envs
        self.vectorization_mode = vectorization_mode
        self.env_workers = env_workers
        self.single_observation_space, self.single_action_space = own_spaces(sequence)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._valid_actions = action_validator(self.action_space)
        self._action_masks = sequence.action_masks()
        self._backend: VectorEnv | None = None
        self.env_splits = env_splits
        self._episodes = EpisodeTracker(self.num_envs)
        self._ones = np.ones(self.num_envs, dtype=bool)
        self._static_info: dict[str, np.ndarray] = {}
        self._static_info_index = -1
        self._exact_cache: tuple[int, bool] | None = None
        self.interrupted_episodes: dict[str, np.ndarray] | None = None

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
            if self.cursor.done:
                self.cursor.advance(self.num_envs)  # raises SequenceDoneError
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if not self._valid_actions(actions):
            check_action(self.action_space, actions)
        spent = self.cursor.advance(self.num_envs)
        obs, rewards, terminations, truncations, infos = self._backend.step(actions)
        if spent:
            truncations = self._ones.copy()
        finished = self._episodes.update(rewards, terminations | truncations)
        if self.sequence.tasks[self.cursor.segment.task_id].records_episodes:
            finished = self._games(infos, spent)
        if finished is not None:
            episode, mask = finished
            episode["task_id"] = np.full(self.num_envs, self.cursor.segment.task_id)
            infos[TASK_EPISODE_KEY], infos["_" + TASK_EPISODE_KEY] = episode, mask
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

    @property
    def env_splits(self) -> int:
        """The blocks of sub-envs a learner acts on one at a time (:meth:`start_block`);
        it can be set until the first :meth:`reset` (``ValueError`` naming a count that
        does not divide ``num_envs``, with the allowed ones)."""
        return self._env_splits

    @env_splits.setter
    def env_splits(self, splits: int) -> None:
        if self._backend is not None:
            raise RuntimeError("env_splits is set before reset(): the task env is running")
        self._env_splits = check_env_splits(splits, self.num_envs)
        self._block_space = batch_space(self.single_action_space, self.num_envs // splits)
        self._valid_block = action_validator(self._block_space)

    def start_block(self, block: int, actions: np.ndarray) -> None:
        """Start stepping block ``block`` (sub-envs ``[block * M, (block + 1) * M)``, ``M =
        num_envs / env_splits``) with its ``actions`` ``(M,)`` and return at once, so the
        learner acts on the next block meanwhile; the next :meth:`step`, given the same
        actions for the started blocks, steps the rest. Blocks start in order. Only env
        workers step ahead: with any other task env this does nothing and :meth:`step`
        steps every sub-env."""
        backend = self._backend
        if isinstance(backend, WorkerVectorEnv) and not self.cursor.done:
            actions = np.asarray(actions)
            if not self._valid_block(actions):
                check_action(self._block_space, actions)  # raises naming the bad action
            backend.start_block(block, actions)

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One frame per sub-env (``uint8 (H, W, 3)`` each) of the task being played, as
        gymnasium's ``SyncVectorEnv.render`` returns them; ``None`` without a render mode
        or before the first ``reset()``."""
        if self.render_mode is None:
            gym.logger.warn(
                "render() needs a render mode: make the env with render_mode='rgb_array'"
            )
            return None
        return None if self._backend is None else self._backend.render()

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of each sub-env of the running task (gymnasium's
        ``VectorEnv.get_attr``); a batched backend's own attribute is repeated per sub-env."""
        backend = self._require_backend()
        if hasattr(backend, "get_attr"):
            return tuple(backend.get_attr(name))
        return (getattr(backend, name),) * self.num_envs

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of each sub-env of the running task (gymnasium's
        ``VectorEnv.call``)."""
        backend = self._require_backend()
        if hasattr(backend, "call"):
            return tuple(backend.call(name, *args, **kwargs))
        return (getattr(backend, name)(*args, **kwargs),) * self.num_envs

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of the sub-envs of the running task (gymnasium's
        ``VectorEnv.set_attr``; one value for all, or one per sub-env)."""
        backend = self._require_backend()
        if hasattr(backend, "set_attr"):
            backend.set_attr(name, values)
        else:
            setattr(backend, name, values)

    def close_extras(self, **kwargs: Any) -> None:
        if getattr(self, "_backend", None) is not None:
            self._backend.close()
            self._backend = None

    # -- checkpoints ------------------------------------------------------------------
    @property
    def exact_resume(self) -> bool:
        """True when ``state_dict()`` can save the running task env itself, so that
        ``load_state_dict()`` continues bit-identically (procgen, ALE, pure-Python envs
        in ``"sync"`` mode; not NetHack, nor ``"async"`` worker processes)."""
        backend = self._backend
        if backend is None:
            return False
        if self._exact_cache is None or self._exact_cache[0] != id(backend):
            try:
                if isinstance(backend, WorkerVectorEnv):
                    exact = backend.exact_resume
                else:
                    simulator_handles(backend)
                    exact = True
            except EnvStateError:
                exact = False
            self._exact_cache = (id(backend), exact)
        return self._exact_cache[1]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run later: the position in the schedule, the
        running episodes' returns and lengths, and the task env with its simulator state
        (``"task_env"``: bytes, or ``None`` when it cannot be saved; ``"task_env_note"``
        then says why)."""
        task_env, note = None, None
        if self._backend is not None and not self.cursor.done:
            try:
                if isinstance(self._backend, WorkerVectorEnv):
                    task_env = self._backend.save_state()  # one state per worker
                else:
                    task_env = save_env_state(self._backend)
            except EnvStateError as e:
                note = str(e)
        return {
            "format": STATE_FORMAT,
            "num_envs": self.num_envs,
            "cursor": self.cursor.state_dict(),
            "episodes": self._episodes.state_dict(),
            "task_env": task_env,
            "task_env_note": note,
        }

    def load_state_dict(self, state: dict[str, Any]) -> np.ndarray | None:
        """Continue from ``state_dict()``'s ``state``, in an env built like the saved one.

        Returns ``None`` when the task env was restored exactly (the caller keeps the
        observations it saved), else the first observations of the restarted task env.
        A restarted task env is reseeded from the segment's seed and the step reached, and
        the episodes that were running are cut: their returns and lengths so far are in
        ``interrupted_episodes`` (``{"r", "l", "task_id"}`` with a bool mask ``"_mask"``)
        for the caller to log. After the end of the sequence nothing is started.
        """
        if state.get("format") != STATE_FORMAT or state.get("num_envs") != self.num_envs:
            raise ValueError(
                f"this state (format {state.get('format')}, num_envs {state.get('num_envs')})"
                f" does not fit this env (format {STATE_FORMAT}, num_envs {self.num_envs})"
            )
        self.cursor.load_state_dict(state["cursor"])
        self._static_info_index = -1
        self.interrupted_episodes = None
        if self.cursor.done:
            self.close_extras()
            return None
        segment = self.cursor.segment
        resume_seed = int(
            np.random.SeedSequence(
                [self.cursor.env_seed(segment), self.cursor.task_step]
            ).generate_state(1)[0]
            >> 1
        )
        obs, _ = self._activate(segment, seed=resume_seed)
        if state["task_env"] is not None:
            fresh = self._backend
            try:
                if isinstance(fresh, WorkerVectorEnv):
                    fresh.load_state(state["task_env"])
                else:
                    self._backend = load_env_state(state["task_env"], fresh)
            except EnvStateError as e:
                warnings.warn(f"the task env restarts from a seed: {e}", stacklevel=2)
            else:
                if self._backend is not fresh:
                    fresh.closed = True  # its simulators now belong to the restored env
                self._episodes.load_state_dict(state["episodes"])
                return None
        lengths = np.asarray(state["episodes"]["lengths"])
        self.interrupted_episodes = {
            "r": np.asarray(state["episodes"]["returns"], dtype=np.float64),
            "l": lengths,
            "task_id": np.full(self.num_envs, segment.task_id),
            "_mask": lengths > 0,
        }
        return obs

    # -- internals --------------------------------------------------------------------
    def _require_backend(self) -> VectorEnv:
        if self._backend is None:
            raise RuntimeError("call reset() first: no task env is running")
        return self._backend

    def _activate(self, segment: Segment, seed: int | None = None) -> tuple[np.ndarray, dict]:
        """Close the previous task env, build this segment's (one batch of ``num_envs``)
        and reset it with the segment's seed (or ``seed``)."""
        self.close_extras()
        task = self.sequence.tasks[segment.task_id]
        backend = make_task_vector_env(
            task,
            "train",
            self.num_envs,
            self.vectorization_mode,
            render_mode=self.render_mode,
            num_workers=self.env_workers,
            observation_space=self.single_observation_space,
            splits=self.env_splits,
        )
        check_spaces(self.sequence, task.name, backend)
        self._backend = backend
        self._episodes.reset()
        return backend.reset(seed=self.cursor.env_seed(segment) if seed is None else seed)

    def _games(
        self, infos: dict[str, Any], spent: bool
    ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """The whole games that ended this step, for a task env that records its own
        episodes (Atari: ``RecordEpisodeStatistics`` under the episodic-life wrapper), and
        at a task switch also the games it cuts (their return and length so far, read
        from each sub-env's ``RecordEpisodeStatistics``), or ``None`` when none ended."""
        final_info = infos.get("final_info", {})
        ended = np.zeros(self.num_envs, dtype=bool)
        episode = {
            "r": np.zeros(self.num_envs),
            "l": np.zeros(self.num_envs, dtype=np.int64),
            "t": np.zeros(self.num_envs),
        }
        if "episode" in final_info:
            ended = final_info["_episode"] & infos["_final_info"]
            for key in episode:
                episode[key][ended] = np.asarray(final_info["episode"][key])[ended]
        if spent:
            running = running_games(self._backend)
            cut = ~ended & (running["l"] > 0)
            for key in episode:
                episode[key][cut] = running[key][cut]
            ended = ended | cut
        return (episode, ended) if ended.any() else None

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
