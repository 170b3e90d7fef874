"""The single-environment view of a task sequence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from cl_suites.core.task import (
    ScheduleAccessors,
    Segment,
    SequenceCursor,
    TaskSequence,
)


def action_validator(space: gym.Space) -> Callable[[Any], bool]:
    """A fast membership test for ``space`` (the hot path of every ``step``).

    ``Discrete.contains`` costs about 2 us per call for numpy integers; for ``Discrete``
    and batched ``MultiDiscrete`` spaces of one size this test gives the same answer
    with plain comparisons, and falls back to ``space.contains`` for anything else.
    """
    if type(space) is gym.spaces.Discrete:
        low, high = int(space.start), int(space.start + space.n)

        def valid_discrete(action: Any) -> bool:
            if action.__class__ in _INT_TYPES:
                return low <= action < high
            return space.contains(action)

        return valid_discrete
    if type(space) is gym.spaces.MultiDiscrete and np.all(space.start == 0):
        shape, high = space.shape, int(space.nvec.flat[0])
        if np.all(space.nvec == high):

            def valid_batch(actions: Any) -> bool:
                if isinstance(actions, np.ndarray) and actions.dtype.kind in "iu":
                    return actions.shape == shape and actions.min() >= 0 and actions.max() < high
                return space.contains(actions)

            return valid_batch
    return space.contains


_INT_TYPES = (int, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32)


def check_action(space: gym.Space, action: Any) -> None:
    """Raise ``ValueError`` when ``action`` is not an element of ``space``."""
    if not space.contains(action):
        shape = getattr(action, "shape", None)
        described = f"{action!r}" + (f" (shape {shape})" if shape is not None else "")
        raise ValueError(f"action {described} is not in the action space {space}")


def check_spaces(
    sequence: TaskSequence, task_name: str, env: gym.Env | gym.vector.VectorEnv
) -> None:
    """Raise when a task env's spaces differ from the sequence's fixed spaces."""
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    for kind, got, want in (
        ("observation", obs_space, sequence.observation_space),
        ("action", act_space, sequence.action_space),
    ):
        if got != want:
            raise ValueError(
                f"task {task_name!r} of {sequence.name} has {kind} space {got}, but the "
                f"sequence's fixed {kind} space is {want}"
            )


class SequenceEnv(ScheduleAccessors, gym.Env):
    """One non-stationary environment that plays a whole task sequence.

    The observation and action spaces are the sequence's and never change. Every
    ``step`` counts one agent step; when the current task's budget is spent the running
    episode is truncated (``truncated=True``) and the next ``reset()`` starts the next
    task (``info["task_switched"]`` is True on that reset). After the last step of the
    last cycle ``info["sequence_done"]`` is True and any further ``step`` raises.

    Every ``info`` carries ``task_id``, ``task_name``, ``cycle``, ``task_step``,
    ``total_step``, ``task_switched`` and ``sequence_done``. At the end of each episode
    (including one cut by a task switch) ``info["episode"] = {"r": return, "l": length}``
    holds the true episode return in the simulator's reward units. When the sequence's
    tasks restrict their actions (``TaskSequence.action_masks()`` is not ``None``, e.g.
    MiniHack15), every ``info`` also holds ``action_mask``: bool ``(n_actions,)``, the
    actions the current task accepts (sample with
    ``env.action_space.sample(mask=info["action_mask"].astype(np.int8))``).

    Seeding: ``reset(seed=s)`` (re)starts the sequence from step 0; each task's
    environment is then seeded from ``(s, cycle, task_id)``, so the same seed gives the
    same task order, levels and observations. Task environments live only while their
    task is trained.

    ``spec.nondeterministic`` is left False: given a seed, the built-in suites replay
    exactly (MiniHack's dynamics are stochastic but drawn from the seeded RNG).

    Args:
        sequence: the task sequence to play.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, sequence: TaskSequence):
        sequence.check_installed()
        self.sequence = sequence
        self.observation_space = sequence.observation_space
        self.action_space = sequence.action_space
        self._valid_action = action_validator(self.action_space)
        self.cursor = SequenceCursor(sequence, num_envs=1)
        self._env: gym.Env | None = None
        self._records_episodes = False
        self._segment_info: dict[str, Any] = {}
        self._action_masks = sequence.action_masks()
        self._episode_return = 0.0
        self._episode_length = 0

    # -- gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        switched = self.cursor.begin_episode(
            seed, draw_seed=lambda: int(self.np_random.integers(2**31))
        )
        if switched:
            obs, inner_info = self._activate(self.cursor.segment)
        else:
            obs, inner_info = self._env.reset()
        if switched or not self._records_episodes:
            # a records_episodes env (Atari) resets at every life loss mid-game
            self._episode_return, self._episode_length = 0.0, 0
        info = {**inner_info, **self.cursor.info(task_switched=switched)}
        if self._action_masks is not None:
            info["action_mask"] = self._action_masks[self.cursor.segment.task_id]
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.cursor.switch_pending or self._env is None:
            self._refuse_step()
        if not self._valid_action(action):
            check_action(self.action_space, action)
        spent = self.cursor.advance(1)
        obs, reward, terminated, truncated, inner_info = self._env.step(action)
        self._episode_return += float(reward)
        self._episode_length += 1
        cursor = self.cursor
        info = {
            **inner_info,
            **self._segment_info,
            "task_step": cursor.task_step,
            "total_step": cursor.total_step,
        }
        if "episode" in inner_info or ((terminated or truncated) and not self._records_episodes):
            info.setdefault("episode", self._episode_stats())
            self._episode_return, self._episode_length = 0.0, 0
        if spent:
            truncated = True
            if self._episode_length:
                info["episode"] = self._episode_stats()
            cursor.switch_pending = True
            cursor.next_segment()
            info["sequence_done"] = cursor.done
        return obs, reward, terminated, truncated, info

    def _refuse_step(self) -> None:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        if self.cursor.done:
            self.cursor.advance(1)  # raises the sequence-done error
        raise RuntimeError(
            f"the previous task spent its budget at step {self.cursor.total_step}; "
            f"call reset() to start the next task ({self.cursor.segment.task_name!r})"
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- internals --------------------------------------------------------------------
    def _episode_stats(self) -> dict[str, float | int]:
        return {"r": self._episode_return, "l": self._episode_length}

    def _activate(self, segment: Segment) -> tuple[Any, dict[str, Any]]:
        """Close the previous task env, build this segment's, and reset it with its seed."""
        self.close()
        task = self.sequence.tasks[segment.task_id]
        env = task.make_train()
        check_spaces(self.sequence, task.name, env)
        self._env = env
        self._records_episodes = task.records_episodes
        self._segment_info = {
            **self.cursor.info(task_switched=False),
            "task_switched": False,
            "sequence_done": False,
        }
        for key in ("task_step", "total_step"):
            del self._segment_info[key]
        if self._action_masks is not None:
            self._segment_info["action_mask"] = self._action_masks[segment.task_id]
        return env.reset(seed=self.cursor.env_seed(segment))
