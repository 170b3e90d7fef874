"""One CHORES task as a gymnasium env over AI2-THOR, as CORA's ``AlfredDemoBasedThorEnv``.

Observation: ``uint8`` array ``(64, 64, 6)``: the agent's current RGB view and the goal
image of the current subgoal, stacked on the channel axis, each resized from the
simulator's 300x300 frame with ``cv2.INTER_LINEAR``. Actions: ``Discrete(12)``
(``cl_suites.envs.chores.actions.ACTIONS``); interactions act on the current subgoal's
task-relevant object (``interaction_targets``). Reward: ALFRED's dense subgoal reward.
An episode ends when the task is done or after ``max_fails`` failed actions
(``terminated``), or after ``max_steps`` agent steps (``truncated``). One ``step`` is one
agent step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.envs.chores.actions import ACTIONS, INTERACTIONS, ActionRunner
from cl_suites.envs.chores.data import (
    TARGET_RULES,
    Demonstration,
    check_demonstrations,
    load_demonstration,
    resolve_data_dir,
)
from cl_suites.envs.chores.errors import ChoresSetupError, DemonstrationReplayError
from cl_suites.envs.chores.goal_images import (
    cache_path,
    load_stored_goal_images,
    replayed_goal_images,
)
from cl_suites.envs.chores.goal_images import goal_image_cache_dir as resolve_cache_dir
from cl_suites.envs.chores.navigation import NavGrid
from cl_suites.envs.chores.rewards import CoolingRewardFlags, SubgoalReward, WorldState
from cl_suites.envs.chores.scene import describe, init_scene, resize_frame
from cl_suites.envs.chores.tasks import ChoresTask
from cl_suites.envs.chores.thor import ControllerFactory, thor_controller_factory

OBS_SIZE = 64
OBSERVATION_SPACE = gym.spaces.Box(0, 255, (OBS_SIZE, OBS_SIZE, 6), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(len(ACTIONS))
COOLING_REWARDS: tuple[str, ...] = ("per_env", "per_episode")
MAX_STEPS = 1002
"""CORA's step cap: its env, configured with ``max_steps=1000``, ends an episode on its
1002nd step (the check ``current_step > max_steps`` runs before the increment)."""
QUALITY = "High"
"""CORA's ``ThorEnv(quality="High")``."""


class ChoresEnv(gym.Env):
    """One CHORES task (one split) on AI2-THOR, initialised from ALFRED demonstrations.

    Construction checks that the demonstrations and a local simulator build exist, and
    that every demonstration of the split replays on it (once per build and render
    settings, then cached); it raises ``ChoresSetupError`` (``AlfredDataNotFoundError`` /
    ``ThorBuildNotFoundError`` / ``DemonstrationReplayError``) saying what is missing or
    which trajectory and call failed. It never downloads anything.

    Demonstrations (CORA): each ``reset`` starts the next demonstration of the split,
    round robin from demonstration 0; ``reset(seed=...)`` starts over as a fresh env
    (demonstration 0, cooling rewards payable again). With ``evaluation=True`` every
    episode is played as by a freshly built env (CORA builds one per evaluation episode):
    demonstration 0, cooling rewards payable. ``options={"demo_index": i}`` picks one.

    Args:
        task: the CHORES task.
        split: ``"train"`` or ``"test"`` (held-out demonstrations; MultiTraj only).
        alfred_data_dir: demonstration directory (default ``$CL_SUITES_ALFRED_DATA``).
        thor_local_executable_path: Unity build executable (default
            ``$CL_SUITES_THOR_BUILD``, then ai2thor's cache ``~/.ai2thor/releases``).
        controller_factory: ``factory(**kwargs) -> controller`` with ai2thor's Controller
            API; replaces the real simulator (tests use a double). No build check then.
        goal_image_cache_dir: where replayed goal images are cached.
        max_steps: step cap per episode, in agent steps (CORA's env: 1002; paper: 1000).
        max_fails: failed actions that end an episode (CORA and paper: 10).
        render_size: side of the simulator frame in pixels, resized to 64 (CORA: 300).
        quality: ai2thor rendering quality (CORA: ``"High"``).
        interaction_targets: ``"cora"`` (CORA's env: one object per subgoal, the object
            of the demonstration's last low-level action in the subgoal) or
            ``"per_action"`` (each interaction acts on the first object the subgoal's
            plan uses that interaction on).
        cooling_rewards: ``"per_env"`` (ALFRED and CORA: CoolObject's two intermediate
            rewards are paid once per env lifetime) or ``"per_episode"``.
        evaluation: play every episode as a fresh env (see above).
        count_unsuccessful_as_failed: also count every action the simulator reports as
            unsuccessful (blocked move, object out of reach) as failed (ALFRED's
            evaluation rule); default False follows CORA's environment, where only
            actions that cannot be executed count.
        render_mode: ``None`` or ``"rgb_array"`` (``render()``: the simulator's current
            RGB frame, ``(render_size, render_size, 3)``).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}
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
        max_steps: int = MAX_STEPS,
        max_fails: int = 10,
        render_size: int = 300,
        quality: str = QUALITY,
        interaction_targets: str = "cora",
        cooling_rewards: str = "per_env",
        evaluation: bool = False,
        count_unsuccessful_as_failed: bool = False,
        render_mode: str | None = None,
    ):
        _check_choice("interaction_targets", interaction_targets, TARGET_RULES)
        _check_choice("cooling_rewards", cooling_rewards, COOLING_REWARDS)
        _check_choice("render_mode", render_mode, (None, *self.metadata["render_modes"]))
        self.task = task
        self.split = split
        self.demo_ids = task.demos(split)
        self.folder = task.demo_folder(split)
        self.max_steps = int(max_steps)
        self.max_fails = int(max_fails)
        self.render_size = int(render_size)
        self.quality = quality
        self.interaction_targets = interaction_targets
        self.cooling_rewards = cooling_rewards
        self.evaluation = bool(evaluation)
        self.count_unsuccessful_as_failed = count_unsuccessful_as_failed
        self.render_mode = render_mode
        self.data_dir, self._factory = check_setup(
            self.folder, self.demo_ids, alfred_data_dir, thor_local_executable_path,
            controller_factory,
        )  # fmt: skip
        self.build_id = str(getattr(self._factory, "build_id", "custom-controller"))
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
        self._nav: dict[int, NavGrid] = {}
        self._next_demo = 0
        self._cooling = CoolingRewardFlags()
        self._reward: SubgoalReward | None = None
        self._demos = [
            load_demonstration(self.data_dir, self.folder, demo_id) for demo_id in self.demo_ids
        ]
        self._goal_images = [self._prepare_goal_images(demo) for demo in self._demos]

    # -- gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        fresh = seed is not None or self.evaluation
        if fresh:
            self._next_demo = 0
        if fresh or self.cooling_rewards == "per_episode":
            self._cooling = CoolingRewardFlags()
        n = len(self.demo_ids)
        index = (options or {}).get("demo_index")
        if index is None:
            index, self._next_demo = self._next_demo, (self._next_demo + 1) % n
        elif not 0 <= int(index) < n:
            raise ValueError(
                f"demo_index {index!r} out of range; task {self.task.name!r} "
                f"has {n} {self.split} demonstration(s)"
            )
        self._demo_index = index = int(index)
        demo = self._demos[index]
        controller = self._get_controller()
        init_scene(controller, demo)
        if index not in self._nav:
            event = controller.step(action="GetReachablePositions")
            positions = event.metadata.get("actionReturn") or ()
            if not event.metadata.get("lastActionSuccess") or not positions:
                raise DemonstrationReplayError(
                    f"{describe(demo)}: GetReachablePositions returned no positions "
                    f"({event.metadata.get('errorMessage') or 'empty'})"
                )
            self._nav[index] = NavGrid(positions)
        world = WorldState()
        self._runner = ActionRunner(controller, world)
        self._reward = SubgoalReward(demo, self._nav[index], world, self._cooling)
        self._reward.reset(controller.last_event.metadata)
        self._steps = 0
        self._fails = 0
        return self._observation(), self._info(success=True, failed=False)

    def step(self, action: Any):
        if self._reward is None:
            raise RuntimeError("call reset() before step()")
        name = ACTIONS[int(action)]
        target = None
        if name in INTERACTIONS:
            target = self._demos[self._demo_index].target(
                self._reward.goal_idx, name, self.interaction_targets
            )
        outcome, failed = self._runner.run(name, target)
        if self.count_unsuccessful_as_failed and not outcome.success:
            failed = True
        reward = 0.0
        if failed:
            self._fails += 1
        else:
            reward = self._reward.step(outcome)
        self._steps += 1
        terminated = self._reward.goal_finished or self._fails >= self.max_fails
        truncated = not terminated and self._steps >= self.max_steps
        info = self._info(success=outcome.success, failed=failed, target=target)
        return self._observation(), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The simulator's current RGB frame (``render_mode="rgb_array"``), else ``None``."""
        if self.render_mode != "rgb_array" or self._controller is None:
            return None
        return np.asarray(self._controller.last_event.frame, dtype=np.uint8)[..., :3].copy()

    def close(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    # -- internals --------------------------------------------------------------------
    def _get_controller(self) -> Any:
        if self._controller is None:
            self._controller = self._factory(**self._controller_kwargs)
        return self._controller

    def _prepare_goal_images(self, demo: Demonstration) -> np.ndarray:
        """Replay ``demo`` once per build and settings (cached), and return its goal
        images: the data's recorded frames when it has them, else the replay's."""
        path = cache_path(
            self.cache_dir, self.build_id, self.quality, self.render_size, OBS_SIZE,
            self.folder, demo.demo_id,
        )  # fmt: skip
        replayed = replayed_goal_images(self._get_controller, demo, path, OBS_SIZE)
        stored = load_stored_goal_images(demo, OBS_SIZE)
        return replayed if stored is None else stored

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


def _check_choice(name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} {value!r} is unknown; use one of {allowed}")


def check_setup(
    folder: str,
    demo_ids: tuple[str, ...],
    alfred_data_dir: str | os.PathLike | None,
    thor_local_executable_path: str | os.PathLike | None,
    controller_factory: ControllerFactory | None,
) -> tuple[Path, ControllerFactory]:
    """The data directory and controller factory, or one ``ChoresSetupError`` naming every
    missing piece (demonstrations, simulator build). Touches neither the simulator nor
    the demonstrations' content."""
    problems: list[ChoresSetupError] = []
    data_dir = None
    try:
        data_dir = resolve_data_dir(alfred_data_dir)
        check_demonstrations(data_dir, folder, demo_ids)
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
    return data_dir, controller_factory
