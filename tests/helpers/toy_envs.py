"""Tiny deterministic envs for testing the sequence machinery without a simulator."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np

from cl_suites.core.task import TaskSequence, TaskSpec

OBS_SPACE = gym.spaces.Box(0, 1000, (2,), np.int64)
ACTION_SPACE = gym.spaces.Discrete(3)


class CountingEnv(gym.Env):
    """Observation ``[task_marker, step_in_episode]``; reward = action; episodes of
    ``episode_length`` steps. The first step count after ``reset(seed)`` is drawn from the
    seed so that seeding is observable."""

    observation_space = OBS_SPACE
    action_space = ACTION_SPACE

    def __init__(self, marker: int, episode_length: int = 7):
        self.marker = marker
        self.episode_length = episode_length
        self.t = 0
        self.offset = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.offset = int(self.np_random.integers(100))
        self.t = 0
        return np.array([self.marker, self.offset], dtype=np.int64), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.marker, self.offset + self.t], dtype=np.int64)
        return obs, float(action), self.t >= self.episode_length, False, {}


def toy_sequence(
    num_tasks: int = 3,
    budget: int = 20,
    cycles: int = 2,
    episode_length: int = 7,
    with_test: bool = True,
    eval_every: int = 10,
    eval_episodes: int = 3,
) -> TaskSequence:
    tasks = tuple(
        TaskSpec(
            name=f"task{i}",
            budget=budget,
            make_train=partial(CountingEnv, 10 * i, episode_length),
            make_test=partial(CountingEnv, 10 * i + 5, episode_length) if with_test else None,
        )
        for i in range(num_tasks)
    )
    return TaskSequence(
        name="Toy",
        tasks=tasks,
        observation_space=OBS_SPACE,
        action_space=ACTION_SPACE,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
    )


class PaintEnv(gym.Env):
    """Episodes of ``length`` steps; renders a frame whose brightness is the step count."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 5, render_mode: str | None = None):
        self.length, self.render_mode, self.t = length, render_mode, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}

    def render(self):
        return np.full((16, 24, 3), 40 * self.t, dtype=np.uint8)


def paint_sequence(length: int = 5) -> TaskSequence:
    """Two tasks of :class:`PaintEnv` (test split: one step longer), evaluated every 10 steps."""
    tasks = tuple(
        TaskSpec(
            f"paint{i}", partial(PaintEnv, length), 10, make_test=partial(PaintEnv, length + 1)
        )
        for i in range(2)
    )
    return TaskSequence(
        "Paint", tasks, PaintEnv.observation_space, PaintEnv.action_space, eval_every=10
    )
