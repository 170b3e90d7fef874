"""Diagnostic-v0: a tiny sequence where forgetting shows up in seconds on a CPU.

**A diagnostic, not a paper benchmark.** It exists to test continual-learning code
(baselines, metrics, resume) quickly: every task is a contextual bandit with episodes,
so a small MLP learns it in a few thousand agent steps, and the tasks conflict.

Each step shows a random cue ``c`` in ``{0, .., n_actions-1}`` (one-hot) and, with
``show_task=True``, the task's context (a one-hot of the task id). Task ``t`` rewards
the action ``(c + t) mod n_actions`` with +1 and every other action with -1, so the cue
to action mapping of one task is wrong for every other task: a learner that overwrites
its mapping on task 1 scores ``-episode_length`` (not chance) on task 0. With the
context visible one network can solve all tasks, so a method that protects old
knowledge can keep task 0.

Observation: ``Box(0, 3, (n_actions + n_tasks,), float32)`` (the context one-hot is
scaled by 3; all zero when ``show_task=False``); actions ``Discrete(n_actions)``; an
episode is ``episode_length`` steps; returns lie in ``[-episode_length,
episode_length]`` (chance: ``episode_length * (2 - n_actions) / n_actions``). Budgets
count agent steps. ``render_mode="rgb_array"`` draws the cue, the task context and the
last action (green when rewarded, red when not) as a small picture.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.core.task import TaskSequence, TaskSpec, check_positive_int, check_render_mode
from cl_suites.errors import BadValueError

TASK_NAMES: tuple[str, ...] = ("cue-identity", "cue-shift-1", "cue-shift-2")
CELL = 32
"""Pixels per cell of the rendered picture."""
RENDER_FPS = 4


class CueEnv(gym.Env):
    """One diagnostic task: reward 1 for action ``(cue + shift) % n_actions``.

    Args:
        shift: the task's action shift (its task id in Diagnostic-v0).
        n_tasks: length of the context one-hot.
        n_actions: number of cues and actions.
        episode_length: steps per episode (the episode is truncated after it).
        show_task: put the one-hot task context in the observation.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS}

    def __init__(
        self,
        shift: int,
        n_tasks: int = 3,
        n_actions: int = 3,
        episode_length: int = 10,
        show_task: bool = True,
        render_mode: str | None = None,
    ):
        self.render_mode = check_render_mode(render_mode)
        self.shift = int(shift)
        self.n_tasks = n_tasks
        self.n_actions = n_actions
        self.episode_length = episode_length
        self.show_task = show_task
        self.context_scale = 3.0
        self.observation_space = gym.spaces.Box(0.0, 3.0, (n_actions + n_tasks,), np.float32)
        self.action_space = gym.spaces.Discrete(n_actions)
        self._cue = 0
        self._t = 0
        self._last_action: tuple[int, bool] | None = None

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n_actions + self.n_tasks, dtype=np.float32)
        obs[self._cue] = 1.0
        if self.show_task:
            obs[self.n_actions + self.shift % self.n_tasks] = self.context_scale
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._cue = int(self.np_random.integers(self.n_actions))
        self._last_action = None
        return self._obs(), {}

    def step(self, action: Any):
        correct = int(action) == (self._cue + self.shift) % self.n_actions
        reward = 1.0 if correct else -1.0
        self._last_action = (int(action), correct)
        self._t += 1
        self._cue = int(self.np_random.integers(self.n_actions))
        truncated = self._t >= self.episode_length
        return self._obs(), reward, False, truncated, {}

    def render(self) -> np.ndarray | None:
        """``uint8 (3 * CELL, max(n_actions, n_tasks) * CELL, 3)``: row 0 the cue (white),
        row 1 the task context (blue, empty when hidden), row 2 the last action (green
        when rewarded, red when not)."""
        if self.render_mode is None:
            return None
        width = max(self.n_actions, self.n_tasks)
        frame = np.full((3 * CELL, width * CELL, 3), 40, dtype=np.uint8)
        frame[:, ::CELL] = frame[::CELL] = 90  # grid lines

        def fill(row: int, col: int, colour: tuple[int, int, int]) -> None:
            frame[row * CELL + 2 : (row + 1) * CELL - 1, col * CELL + 2 : (col + 1) * CELL - 1] = (
                colour
            )

        fill(0, self._cue, (255, 255, 255))
        if self.show_task:
            fill(1, self.shift % self.n_tasks, (70, 130, 255))
        if self._last_action is not None:
            action, correct = self._last_action
            fill(2, action, (60, 200, 80) if correct else (220, 60, 60))
        return frame


def build(
    *,
    steps_per_task: int = 4_000,
    cycles: int = 1,
    eval_every: int = 1_000,
    eval_episodes: int = 10,
    n_tasks: int = 3,
    n_actions: int = 3,
    episode_length: int = 10,
    show_task: bool = True,
) -> TaskSequence:
    """The Diagnostic-v0 sequence (every count in agent steps).

    Args:
        steps_per_task: training budget of each task per cycle.
        cycles: passes over the tasks.
        eval_every: evaluation cadence.
        eval_episodes: episodes per task at each evaluation (train split only).
        n_tasks: number of tasks (2 or 3 is typical; at most ``n_actions`` distinct ones).
        n_actions: number of cues and actions.
        episode_length: steps per episode.
        show_task: put the task context in the observation.
    """
    n_tasks = check_positive_int("n_tasks", n_tasks)
    n_actions = check_positive_int("n_actions", n_actions)
    check_positive_int("episode_length", episode_length)
    if n_actions < 2 or n_tasks > n_actions:
        raise BadValueError(
            f"Diagnostic needs 2 <= n_actions and n_tasks <= n_actions (distinct tasks), "
            f"got n_tasks={n_tasks}, n_actions={n_actions}"
        )
    names = TASK_NAMES if n_tasks <= len(TASK_NAMES) else ()
    tasks = tuple(
        TaskSpec(
            name=names[t] if names else f"cue-shift-{t}",
            budget=steps_per_task,
            make_train=partial(CueEnv, t, n_tasks, n_actions, episode_length, show_task),
        )
        for t in range(n_tasks)
    )
    probe = CueEnv(0, n_tasks, n_actions, episode_length, show_task)
    return TaskSequence(
        name="Diagnostic",
        tasks=tasks,
        observation_space=probe.observation_space,
        action_space=probe.action_space,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        extra=None,
        required_modules=(),
        metric_settings={"smoothing_window": 1, "return_clip_min": None},
        render_fps=RENDER_FPS,
    )
