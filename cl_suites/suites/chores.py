"""CHORES (CORA section 3.4, appendix C.2): four task sequences on AI2-THOR.

* VaryRoom: hand towel into the bathtub, in bathrooms 402, 419, 423.
* VaryTask: bathroom 402, toilet paper: hang it, put two in the cabinet, two on the counter.
* VaryObject: kitchen 24, clean a fork (then counter), a knife (counter), a spoon (drawer).
* MultiTraj: cool then put in the sink: cup (kitchen 19), sliced potato (13), sliced
  lettuce (2); 3 training demonstrations per task and a test split of 3 held-out ones.

The memorization sequences (the first three) are evaluated on the training setting.
Budgets count agent steps: 1M per task, 2 cycles, evaluation every 50k steps with 10
episodes. Metrics smooth over 5 evaluation points and clip returns at -10.

Evaluation plays every episode as CORA does, in a freshly built env: demonstration 0
of the split (so MultiTraj is evaluated on its first training and first test
demonstration) with the cooling rewards payable again.

Building a sequence touches neither the simulator nor the data. Constructing a sequence
env (``gym.make``, ``make_vec``) checks that the data and a simulator build exist
(``TaskSequence.preflight``); each task's env replays its demonstrations when it is
constructed (see ``cl_suites.envs.chores.ChoresEnv``).
"""

from __future__ import annotations

import inspect
import os
from functools import partial
from typing import Any

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.envs.chores import ACTION_SPACE, OBSERVATION_SPACE, ChoresEnv
from cl_suites.envs.chores.env import MAX_STEPS, check_setup
from cl_suites.envs.chores.tasks import ChoresTask, has_test_split, sequence_tasks
from cl_suites.envs.chores.thor import ControllerFactory

METRIC_SETTINGS = {"smoothing_window": 5, "return_clip_min": -10}


def build_sequence(
    variant: str,
    *,
    steps_per_task: int = 1_000_000,
    cycles: int = 2,
    eval_every: int = 50_000,
    eval_episodes: int = 10,
    alfred_data_dir: str | os.PathLike | None = None,
    thor_local_executable_path: str | os.PathLike | None = None,
    controller_factory: ControllerFactory | None = None,
    goal_image_cache_dir: str | os.PathLike | None = None,
    max_steps: int = MAX_STEPS,
    max_fails: int = 10,
    render_size: int = 300,
    **env_options: Any,
) -> TaskSequence:
    """The ``CHORES-<variant>`` sequence (every count in agent steps).

    Args:
        variant: ``"VaryRoom"``, ``"VaryTask"``, ``"VaryObject"`` or ``"MultiTraj"``.
        steps_per_task: training budget of each task per cycle.
        cycles: passes over the three tasks.
        eval_every: evaluation cadence in agent steps.
        eval_episodes: episodes per task and split at each evaluation.
        alfred_data_dir / thor_local_executable_path / controller_factory /
            goal_image_cache_dir / max_steps / max_fails / render_size / env_options:
            passed to every ``ChoresEnv`` (e.g. ``interaction_targets="per_action"``,
            ``cooling_rewards="per_episode"``, ``quality=...``).
    """
    env_kwargs = {
        "alfred_data_dir": alfred_data_dir,
        "thor_local_executable_path": thor_local_executable_path,
        "controller_factory": controller_factory,
        "goal_image_cache_dir": goal_image_cache_dir,
        "max_steps": max_steps,
        "max_fails": max_fails,
        "render_size": render_size,
        **env_options,
    }
    test = has_test_split(variant)
    evaluation = {**env_kwargs, "evaluation": True}
    chores_tasks = sequence_tasks(variant)
    tasks = tuple(
        TaskSpec(
            name=task.name,
            budget=steps_per_task,
            make_train=partial(ChoresEnv, task, "train", **env_kwargs),
            make_train_eval=partial(ChoresEnv, task, "train", **evaluation),
            make_test=partial(ChoresEnv, task, "test", **evaluation) if test else None,
        )
        for task in chores_tasks
    )
    preflight = partial(
        _preflight,
        chores_tasks,
        test,
        alfred_data_dir,
        thor_local_executable_path,
        controller_factory,
    )
    return TaskSequence(
        name=f"CHORES-{variant}",
        tasks=tasks,
        observation_space=OBSERVATION_SPACE,
        action_space=ACTION_SPACE,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        extra="chores",
        required_modules=("ai2thor", "cv2"),
        metric_settings=dict(METRIC_SETTINGS),
        preflight=preflight,
    )


def _preflight(
    tasks: tuple[ChoresTask, ...],
    test: bool,
    alfred_data_dir: str | os.PathLike | None,
    thor_local_executable_path: str | os.PathLike | None,
    controller_factory: ControllerFactory | None,
) -> None:
    """Raise the ``ChoresSetupError`` of the first task whose data or build is missing."""
    for task in tasks:
        for split in ("train", "test") if test else ("train",):
            check_setup(
                task.demo_folder(split),
                task.demos(split),
                alfred_data_dir,
                thor_local_executable_path,
                controller_factory,
            )


def build_varyroom(**kwargs: Any) -> TaskSequence:
    """CHORES-VaryRoom: hand towel into the bathtub in bathrooms 402, 419, 423."""
    return build_sequence("VaryRoom", **kwargs)


def build_varytask(**kwargs: Any) -> TaskSequence:
    """CHORES-VaryTask: three toilet-paper tasks in bathroom 402."""
    return build_sequence("VaryTask", **kwargs)


def build_varyobject(**kwargs: Any) -> TaskSequence:
    """CHORES-VaryObject: clean a fork, a knife, a spoon in kitchen 24."""
    return build_sequence("VaryObject", **kwargs)


def build_multitraj(**kwargs: Any) -> TaskSequence:
    """CHORES-MultiTraj: cool-then-sink tasks with held-out test demonstrations."""
    return build_sequence("MultiTraj", **kwargs)


def _forwarded_signature() -> inspect.Signature:
    """:func:`build_sequence`'s keywords, which every builder above forwards (so that
    ``cl-suites options`` lists them)."""
    sig = inspect.signature(build_sequence)
    return sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "variant"])


for _builder in (build_varyroom, build_varytask, build_varyobject, build_multitraj):
    _builder.__signature__ = _forwarded_signature()  # type: ignore[attr-defined]
