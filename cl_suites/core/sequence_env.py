"""The single-environment view of a task sequence."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from cl_suites.core.task import (
    RENDER_MODES,
    TASK_EPISODE_KEY,
    ScheduleAccessors,
    Segment,
    SequenceCursor,
    SequenceDoneError,
    TaskSequence,
    check_render_mode,
)
from cl_suites.core.turns import TurnWatch


def action_validator(space: gym.Space) -> Callable[[Any], bool]:
    """A fast membership test for ``space`` (the hot path of every ``step``).

    ``Discrete.contains`` costs about 2 us per call for numpy integers; for ``Discrete``
    and batched ``MultiDiscrete`` spaces of one size this test gives the same answer
    with plain comparisons (and refuses non-integer arrays, which ``MultiDiscrete``
    would accept), and falls back to ``space.contains`` for anything else.
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
                if isinstance(actions, np.ndarray):
                    return (
                        actions.dtype.kind in "iu"
                        and actions.shape == shape
                        and actions.min() >= 0
                        and actions.max() < high
                    )
                return space.contains(actions)

            return valid_batch
    return space.contains


RAW_ALE_ATTRIBUTES = frozenset({"ale", "get_action_meanings", "_frameskip"})
"""What gymnasium's ``AtariPreprocessing`` and SB3's Atari wrappers read from
``env.unwrapped`` (an ALE env's)."""

_INT_TYPES = (int, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32)


def check_action(space: gym.Space, action: Any) -> None:
    """Raise ``ValueError`` when ``action`` is not an element of ``space``.

    Discrete actions must be integers: a float array is refused even where its values are
    whole numbers (``MultiDiscrete.contains`` would accept it).
    """
    discrete = isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
    dtype = getattr(action, "dtype", None)
    integral = dtype is None or dtype.kind in "iu"
    if isinstance(action, (float, bool, np.bool_)) or (discrete and not integral):
        raise ValueError(
            f"action {action!r} has type {dtype or type(action).__name__}; {space} takes "
            "integer actions"
        )
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


def running_games(env: gym.Env | gym.vector.VectorEnv) -> dict[str, np.ndarray]:
    """The games a ``records_episodes`` task env is playing, as its gymnasium
    ``RecordEpisodeStatistics`` counts them: return so far ``"r"``, length so far ``"l"``
    (agent steps, the automatic presses after a lost life included, as in the finished
    games' lengths) and seconds since the game began ``"t"``, each ``(N,)`` for a vector
    env's N sub-envs and ``(1,)`` for a single env."""
    if isinstance(env, gym.vector.VectorEnv):
        get = env.get_attr
    else:

        def get(name: str) -> tuple[Any]:
            return (env.get_wrapper_attr(name),)

    started = np.asarray(get("episode_start_time"), dtype=np.float64)
    return {
        "r": np.asarray(get("episode_returns"), dtype=np.float64),
        "l": np.asarray(get("episode_lengths"), dtype=np.int64),
        "t": np.round(time.perf_counter() - started, 6),
    }


def own_spaces(sequence: TaskSequence) -> tuple[gym.Space, gym.Space]:
    """Copies of the sequence's observation and action spaces for one env instance (so
    that seeding one env's ``action_space`` does not seed another's)."""
    return copy.deepcopy(sequence.observation_space), copy.deepcopy(sequence.action_space)


class SequenceEnv(ScheduleAccessors, gym.Env):
    """One non-stationary environment that plays a whole task sequence.

    The observation and action spaces are the sequence's and never change (each env has
    its own space objects). Every ``step`` counts one agent step; when the current task's
    budget is spent the running episode is truncated (``truncated=True``) and the next
    ``reset()`` starts the next task (``info["task_switched"]`` is True on that reset).
    After the last step of the last cycle ``info["sequence_done"]`` is True, ``step``
    raises ``SequenceDoneError`` and ``reset()`` (without a seed) returns the last
    observation again, so a vector env's automatic reset does not fail.

    Every ``info`` carries ``task_id``, ``task_name``, ``cycle``, ``task_step``,
    ``total_step``, ``task_switched`` and ``sequence_done`` (and ``action_mask``, bool
    ``(n_actions,)``, when the sequence restricts actions per task, e.g. MiniHack15: sample
    with ``env.action_space.sample(mask=info["action_mask"].astype(np.int8))``). At the end
    of each episode (including one cut by a task switch)
    ``info["task_episode"] = {"r": return, "l": length, "task_id": id}``
    holds the true episode return in the simulator's reward units (for Atari the whole
    game's, across lives). ``info["episode"]`` is left free for gymnasium's
    ``RecordEpisodeStatistics``, which counts the episodes this env returns.

    One env is one sequence with the whole budget: batching copies of it (gymnasium's
    ``SyncVectorEnv([make_env] * N)``, SB3's ``make_vec_env``) plays N sequences, and
    stepping several envs of one suite in lockstep in one process warns (see
    ``cl_suites.core.turns``); ``make_vec`` builds N sub-envs that share one budget.

    Seeding: ``reset(seed=s)`` (re)starts the sequence from step 0; each task's
    environment is then seeded from ``(s, cycle, task_id)``, so the same seed gives the
    same task order, levels and observations. One task environment is built per task
    segment and lives while its task is trained.

    ``spec.nondeterministic`` is left False: given a seed, the built-in suites replay
    exactly (MiniHack's dynamics are stochastic but drawn from the seeded RNG).

    Args:
        sequence: the task sequence to play.
        render_mode: ``"rgb_array"`` to get frames from ``render()`` (passed on to the
            task environments' factories), or ``None``.
    """

    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES), "render_fps": 30}

    def __init__(self, sequence: TaskSequence, render_mode: str | None = None):
        sequence.check_installed()
        self.render_mode = check_render_mode(render_mode)
        self.metadata = {**type(self).metadata, "render_fps": sequence.render_fps}
        self.sequence = sequence
        self.observation_space, self.action_space = own_spaces(sequence)
        self._valid_action = action_validator(self.action_space)
        self._action_masks = sequence.action_masks()
        self.cursor = SequenceCursor(sequence, sequence.schedule(1))
        self._env: gym.Env | None = None
        self._records_episodes = False
        self._segment_info: dict[str, Any] = {}
        self._last_obs: Any = None
        self._episode_return = 0.0
        self._episode_length = 0
        self._turns = TurnWatch(
            sequence.name,
            f'gymnasium.make_vec("CLSuite/{sequence.name}-v0", num_envs=N) or '
            f"cl_suites.make_vec({sequence.name!r}, N) (for SB3: its .to_sb3())",
        )

    # -- gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None and self.cursor.done:
            # the sequence is over: hand back the last observation (steps still raise)
            return self._last_obs, {**self._segment_info, **self.cursor.info(False)}
        switched = self.cursor.begin_episode(
            seed, draw_seed=lambda: int(self.np_random.integers(2**31))
        )
        if switched:
            obs, inner_info = self._activate(self.cursor.segment)
        else:
            obs, inner_info = self._env.reset()
        self._episode_return, self._episode_length = 0.0, 0
        self._last_obs = obs
        return obs, {**inner_info, **self._segment_info, **self.cursor.info(switched)}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.cursor.switch_pending or self._env is None:
            self._refuse_step()
        if not self._valid_action(action):
            check_action(self.action_space, action)
        if TurnWatch.last is not self._turns:  # another env stepped last
            self._turns.new_turn(self.cursor.total_step)
        spent = self.cursor.advance(1)
        obs, reward, terminated, truncated, inner_info = self._env.step(action)
        self._last_obs = obs
        self._episode_return += float(reward)
        self._episode_length += 1
        cursor = self.cursor
        info = {
            **inner_info,
            **self._segment_info,
            "task_step": cursor.task_step,
            "total_step": cursor.total_step,
        }
        if self._records_episodes:
            game = info.pop("episode", None)  # the task env's own (whole-game) statistics
            if game is not None:
                self._end_episode(info, float(game["r"]), int(game["l"]))
        elif terminated or truncated:
            self._end_episode(info, self._episode_return, self._episode_length)
        if spent:
            truncated = True
            if TASK_EPISODE_KEY not in info:  # the episode (or game) cut by the switch
                if self._records_episodes:
                    game = running_games(self._env)
                    cut = float(game["r"][0]), int(game["l"][0])
                else:
                    cut = self._episode_return, self._episode_length
                if cut[1]:
                    self._end_episode(info, *cut)
            cursor.switch_pending = True
            cursor.next_segment()
            info["sequence_done"] = cursor.done
        return obs, reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The current frame of the task being played (``uint8 (H, W, 3)``), or ``None``
        without a render mode or before the first ``reset()``."""
        if self.render_mode is None:
            gym.logger.warn(
                "render() needs a render mode: make the env with render_mode='rgb_array'"
            )
            return None
        return None if self._env is None else self._env.render()

    def _refuse_step(self) -> None:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        if self.cursor.done:
            raise SequenceDoneError(
                f"the {self.sequence.name} sequence is done (all {len(self.cursor.segments)} "
                f"segments played, {self.cursor.total_step} agent steps); create a new env "
                "or call reset(seed=...) to start over"
            )
        raise RuntimeError(
            f"the previous task spent its budget at step {self.cursor.total_step}; "
            f"call reset() to start the next task ({self.cursor.segment.task_name!r})"
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def __getattr__(self, name: str) -> Any:
        """Only reached for attributes the env lacks: the raw-ALE names that Atari
        preprocessing wrappers ask for get a message saying what to do instead."""
        if name in RAW_ALE_ATTRIBUTES:
            sequence = self.sequence
            note = sequence.preprocessing or f"{sequence.name}'s tasks are not raw ALE games"
            message = f"{type(self).__name__} of {sequence.name} has no {name!r}: {note}"
            # AtariPreprocessing reads _frameskip with a default: only a non-AttributeError
            # gets through it
            raise (ValueError if name == "_frameskip" else AttributeError)(message)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- internals --------------------------------------------------------------------
    def _end_episode(self, info: dict[str, Any], episode_return: float, length: int) -> None:
        info[TASK_EPISODE_KEY] = {"r": episode_return, "l": length, "task_id": info["task_id"]}
        self._episode_return, self._episode_length = 0.0, 0

    def _activate(self, segment: Segment) -> tuple[Any, dict[str, Any]]:
        """Close the previous task env, build this segment's, and reset it with its seed."""
        self.close()
        task = self.sequence.tasks[segment.task_id]
        env = task.env_factory("train", render_mode=self.render_mode)()
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
