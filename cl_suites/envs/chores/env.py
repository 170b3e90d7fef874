"""One CHORES task as a gymnasium env over AI2-THOR.

Observation: ``uint8`` array ``(64, 64, 6)``: the agent's current RGB view and the goal
image of the current subgoal, stacked on the channel axis. Actions: ``Discrete(12)``
(``cl_suites.envs.chores.actions.ACTIONS``); interactions act on the current subgoal's
task-relevant object. Reward: ALFRED's dense subgoal reward. An episode ends when the
task is done or after ``max_fails`` failed actions (``terminated``), or after
``max_steps`` agent steps (``truncated``). One ``step`` is one agent step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.envs.chores.actions import ACTIONS, INTERACTIONS, ActionRunner
from cl_suites.envs.chores.data import (
    Demonstration,
    check_demonstrations,
    load_demonstration,
    resolve_data_dir,
)
from cl_suites.envs.chores.errors import ChoresSetupError
from cl_suites.envs.chores.goal_images import goal_image_cache_dir as resolve_cache_dir
from cl_suites.envs.chores.goal_images import load_or_render
from cl_suites.envs.chores.navigation import NavGrid
from cl_suites.envs.chores.rewards import SubgoalReward, WorldState
from cl_suites.envs.chores.scene import init_scene, resize_frame
from cl_suites.envs.chores.tasks import ChoresTask
from cl_suites.envs.chores.thor import ControllerFactory, thor_controller_factory

OBS_SIZE = 64
OBSERVATION_SPACE = gym.spaces.Box(0, 255, (OBS_SIZE, OBS_SIZE, 6), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(len(ACTIONS))


class ChoresEnv(gym.Env):
    """One CHORES task (one split) on AI2-THOR, initialised from ALFRED demonstrations.

    Construction checks that the demonstrations and a local simulator build exist and
    raises ``ChoresSetupError`` (``AlfredDataNotFoundError`` / ``ThorBuildNotFoundError``)
    saying how to provide them; it never downloads anything. The simulator starts at the
    first ``reset``.

    Each ``reset`` initialises the scene from the next demonstration of the split
    (round robin, starting at a demonstration drawn from the seed; ``options=
    {"demo_index": i}`` picks one): object poses and states, then the agent's pose.

    Args:
        task: the CHORES task.
        split: ``"train"`` or ``"test"`` (held-out demonstrations; MultiTraj only).
        alfred_data_dir: demonstration directory (default ``$CL_SUITES_ALFRED_DATA``).
        thor_local_executable_path: Unity build executable (default
            ``$CL_SUITES_THOR_BUILD``, then ai2thor's cache ``~/.ai2thor/releases``).
        controller_factory: ``factory(**kwargs) -> controller`` with ai2thor's Controller
            API; replaces the real simulator (tests use a double). No build check then.
        goal_image_cache_dir: where rendered goal images are cached.
        max_steps: step cap per episode, in agent steps (paper: 1000).
        max_fails: failed actions that end an episode (paper: 10).
        render_size: side of the simulator frame in pixels, resized to 64 (ALFRED: 300).
        quality: ai2thor rendering quality.
        count_unsuccessful_as_failed: also count every action the simulator reports as
            unsuccessful (blocked move, object out of reach) as failed (ALFRED's
            evaluation rule); default False follows CORA's environment, where only
            actions that cannot be executed count.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def __init__(
        self,
        task: ChoresTask,
        split: str = "train",
        *,
        alfred_data_dir: str | os.PathLike | None = None,
        thor_local_executable_path: str | os.PathLike | None = None,
        controller_factory: ControllerFactory | None = None,
        goal_image_cache_dir: str | os.PathLike | None = None,
        max_steps: int = 1000,
        max_fails: int = 10,
        render_size: int = 300,
        quality: str = "MediumCloseFitShadows",
        count_unsuccessful_as_failed: bool = False,
    ):
        self.task = task
        self.split = split
        self.demo_ids = task.demos(split)
        self.folder = task.demo_folder(split)
        self.max_steps = int(max_steps)
        self.max_fails = int(max_fails)
        self.render_size = int(render_size)
        self.count_unsuccessful_as_failed = count_unsuccessful_as_failed
        problems: list[ChoresSetupError] = []
        try:
            self.data_dir: Path = resolve_data_dir(alfred_data_dir)
            check_demonstrations(self.data_dir, self.folder, self.demo_ids)
        except ChoresSetupError as e:
            problems.append(e)
        if controller_factory is None:
            try:
                controller_factory = thor_controller_factory(thor_local_executable_path)
            except ChoresSetupError as e:
                problems.append(e)
        if len(problems) == 1:
            raise problems[0]
        if problems:
            raise ChoresSetupError("\n\n".join(str(p) for p in problems))
        self._factory = controller_factory
        self._controller_kwargs = {
            "width": self.render_size,
            "height": self.render_size,
            "quality": quality,
            "gridSize": 0.25,
            "snapToGrid": True,
            "rotateStepDegrees": 90,
            "visibilityDistance": 1.5,
            "renderDepthImage": False,
            "renderInstanceSegmentation": False,
        }
        self.cache_dir = resolve_cache_dir(goal_image_cache_dir)
        self._controller: Any = None
        self._demos: dict[int, Demonstration] = {}
        self._goal_images: dict[int, np.ndarray] = {}
        self._nav: dict[int, NavGrid] = {}
        self._next_demo: int | None = None
        self._reward: SubgoalReward | None = None

    # -- gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        n = len(self.demo_ids)
        if seed is not None or self._next_demo is None:
            self._next_demo = int(self.np_random.integers(n))
        index = (options or {}).get("demo_index")
        if index is None:
            index, self._next_demo = self._next_demo, (self._next_demo + 1) % n
        elif not 0 <= int(index) < n:
            raise ValueError(
                f"demo_index {index!r} out of range; task {self.task.name!r} "
                f"has {n} {self.split} demonstration(s)"
            )
        self._demo_index = index = int(index)
        demo = self._demo(index)
        if index not in self._goal_images:
            self._goal_images[index] = load_or_render(
                self._get_controller,
                demo,
                self.folder,
                self.cache_dir,
                OBS_SIZE,
                self.render_size,
            )
        controller = self._get_controller()
        init_scene(controller, demo)
        if index not in self._nav:
            event = controller.step(action="GetReachablePositions")
            self._nav[index] = NavGrid(event.metadata.get("actionReturn") or ())
        world = WorldState()
        self._runner = ActionRunner(controller, world)
        self._reward = SubgoalReward(demo, self._nav[index], world)
        self._reward.reset(controller.last_event.metadata)
        self._targets = demo.targets(0)
        self._steps = 0
        self._fails = 0
        return self._observation(), self._info(success=True, failed=False)

    def step(self, action: Any):
        if self._reward is None:
            raise RuntimeError("call reset() before step()")
        name = ACTIONS[int(action)]
        target = self._targets.get(name) if name in INTERACTIONS else None
        outcome, failed = self._runner.run(name, target)
        if self.count_unsuccessful_as_failed and not outcome.success:
            failed = True
        reward = 0.0
        if failed:
            self._fails += 1
        else:
            before = self._reward.goal_idx
            reward = self._reward.step(outcome)
            if self._reward.goal_idx != before:
                self._targets = self._demo(self._demo_index).targets(self._reward.goal_idx)
        self._steps += 1
        terminated = self._reward.goal_finished or self._fails >= self.max_fails
        truncated = not terminated and self._steps >= self.max_steps
        info = self._info(success=outcome.success, failed=failed, target=target)
        return self._observation(), float(reward), terminated, truncated, info

    def close(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    # -- internals --------------------------------------------------------------------
    def _get_controller(self) -> Any:
        if self._controller is None:
            self._controller = self._factory(**self._controller_kwargs)
        return self._controller

    def _demo(self, index: int) -> Demonstration:
        if index not in self._demos:
            self._demos[index] = load_demonstration(
                self.data_dir, self.folder, self.demo_ids[index]
            )
        return self._demos[index]

    def _observation(self) -> np.ndarray:
        frame = resize_frame(self._controller.last_event.frame, OBS_SIZE)
        goal = self._goal_images[self._demo_index][self._reward.goal_idx]
        return np.concatenate([frame, goal], axis=-1)

    def _info(self, *, success: bool, failed: bool, target: str | None = None) -> dict[str, Any]:
        reward = self._reward
        return {
            "demo_id": self.demo_ids[self._demo_index],
            "subgoal": reward.goal_idx,
            "subgoal_type": reward.subgoal["action"],
            "subgoals_completed": reward.completed,
            "num_subgoals": reward.demo.num_subgoals,
            "goal_satisfied": reward.goal_finished,
            "action_success": success,
            "action_failed": failed,
            "failed_actions": self._fails,
            "target_object_id": target,
        }
