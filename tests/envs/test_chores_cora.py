"""CHORES as CORA's env (crl_alfred@9539acc2 alfred_demo_based_thor_env.py, ALFRED reward.py):
interaction targets, cooling rewards, demonstration choice, observations, robustness."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

import cl_suites
from cl_suites.core.evaluation import Evaluator
from cl_suites.envs.chores import (
    ACTIONS,
    AlfredDataNotFoundError,
    ChoresEnv,
    DemonstrationReplayError,
    sequence_tasks,
)
from cl_suites.envs.chores.data import parse_demonstration
from cl_suites.envs.chores.goal_images import cache_path
from cl_suites.envs.chores.thor import resolve_thor_build
from cl_suites.suites import chores as chores_suite
from tests.helpers.chores_double import (
    COOL_TRAJ,
    CUP,
    FRIDGE,
    SINK,
    TOWEL,
    TRAJ,
    FakeThorController,
    write_demos,
)

A = {name: i for i, name in enumerate(ACTIONS)}
COOL_TASK = sequence_tasks("MultiTraj")[0]  # cool_cup_19: 3 train + 3 test demonstrations
# the cool demonstration's plan as agent actions, without the fridge's final close
COOL_PLAN = [
    "MoveAhead_25", "MoveAhead_25", "PickupObject",  # go to the cup, pick it up
    "MoveAhead_25", "MoveAhead_25",  # go to the fridge
    "OpenObject", "PutObject", "CloseObject", "OpenObject", "PickupObject",  # cool it
    "RotateRight_90", "RotateRight_90", "MoveAhead_25", "MoveAhead_25",  # go to the sink
    "PutObject",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    for var in ("CL_SUITES_ALFRED_DATA", "CL_SUITES_THOR_BUILD", "CL_SUITES_CHORES_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    FakeThorController.instances.clear()


@pytest.fixture
def cool_data(tmp_path):
    root = tmp_path / "cora_trajs"
    write_demos(root, "train", COOL_TASK.train_demos, COOL_TRAJ)
    write_demos(root, "valid_seen", COOL_TASK.test_demos, COOL_TRAJ)
    return root


def cool_env(root, tmp_path, split="train", **kwargs):
    kwargs.setdefault("controller_factory", FakeThorController)
    return ChoresEnv(
        COOL_TASK,
        split,
        alfred_data_dir=root,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
        **kwargs,
    )


def play(env, actions):
    rewards, infos = [], []
    for name in actions:
        _, reward, terminated, truncated, info = env.step(A[name])
        rewards.append(reward)
        infos.append(info)
        if terminated or truncated:
            break
    return rewards, infos


# -- interaction targets ----------------------------------------------------------------
def test_cora_targets_one_object_per_subgoal_from_its_last_low_action():
    demo = parse_demonstration(COOL_TRAJ, "cool", Path("cool"))
    cora = {k: demo.target(k, "PickupObject") for k in range(demo.num_subgoals)}
    # GotoLocation subgoals end with a move (no object); CoolObject ends by closing the
    # fridge, so in CORA's env every interaction of that subgoal acts on the fridge
    assert cora == {0: None, 1: CUP, 2: None, 3: FRIDGE, 4: None, 5: SINK}
    assert demo.target(3, "OpenObject") == demo.target(3, "ToggleObjectOn") == FRIDGE
    per_action = {
        name: demo.target(3, name, "per_action")
        for name in ("OpenObject", "PutObject", "CloseObject", "PickupObject", "SliceObject")
    }
    assert per_action == {
        "OpenObject": FRIDGE,
        "PutObject": FRIDGE,
        "CloseObject": FRIDGE,
        "PickupObject": CUP,
        "SliceObject": None,
    }
    # CORA reads the subgoal's last recorded frame's low_idx; without images: last low action
    shifted = {**COOL_TRAJ, "images": [im for im in COOL_TRAJ["images"] if im["low_idx"] != 10]}
    assert parse_demonstration(shifted, "c", Path("c")).target(3, "PutObject") == CUP
    no_images = {**COOL_TRAJ, "images": []}
    assert parse_demonstration(no_images, "c", Path("c")).target(3, "PutObject") == FRIDGE
    with pytest.raises(ValueError, match=r"interaction_targets 'nearest' is unknown"):
        demo.target(3, "PutObject", "nearest")


def test_under_cora_targets_the_cooled_cup_cannot_be_taken_out_of_the_fridge(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path)
    env.reset(seed=0)
    rewards, infos = play(env, COOL_PLAN)
    # goto 0.2 + 4.2, pickup 2, goto 0.2 + 4.2, cool: open 0, put 0, close (cold) 2,
    # reopen 2, then "PickupObject" acts on the fridge: it fails, the subgoal never ends
    assert rewards[:10] == pytest.approx([0.2, 4.2, 2, 0.2, 4.2, 0, 0, 2, 2, 0])
    assert infos[9]["target_object_id"] == FRIDGE and not infos[9]["action_success"]
    assert [i["subgoal_type"] for i in infos[9:]] == ["CoolObject"] * 6
    assert not infos[-1]["goal_satisfied"]


def test_per_action_targets_complete_the_cool_task(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path, interaction_targets="per_action")
    env.reset(seed=0)
    rewards, infos = play(env, COOL_PLAN)
    assert infos[9]["target_object_id"] == CUP and infos[9]["action_success"]
    # ... pickup completes CoolObject (+2); goto the sink (shaping + 4); put: +2, goal +5
    assert rewards == pytest.approx([0.2, 4.2, 2, 0.2, 4.2, 0, 0, 2, 2, 2, 0.2, 0.2, 0.2, 4.2, 7.0])
    assert infos[-1]["goal_satisfied"] and infos[-1]["subgoals_completed"] == 6


# -- cooling rewards --------------------------------------------------------------------
COOL_AGAIN = COOL_PLAN[:9]  # up to the reopened fridge: +2 (cold) and +2 (reopened)


def test_cooling_rewards_are_paid_once_per_env_as_in_alfred_and_cora(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path)
    env.reset(seed=0)
    assert sum(play(env, COOL_AGAIN)[0]) == pytest.approx(14.8)
    env.reset()  # a new episode of the same env: ALFRED's flags were never reset
    assert sum(play(env, COOL_AGAIN)[0]) == pytest.approx(10.8)
    env.reset(seed=1)  # a seeded reset starts over as a fresh env
    assert sum(play(env, COOL_AGAIN)[0]) == pytest.approx(14.8)


def test_cooling_rewards_per_episode_option(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path, cooling_rewards="per_episode")
    for seed in (0, None):
        env.reset(seed=seed)
        assert sum(play(env, COOL_AGAIN)[0]) == pytest.approx(14.8)
    with pytest.raises(ValueError, match=r"cooling_rewards 'never' is unknown"):
        cool_env(cool_data, tmp_path, cooling_rewards="never")


# -- demonstration choice -----------------------------------------------------------------
def test_training_cycles_the_demonstrations_from_demo_zero(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path)
    demos = [env.reset(seed=123)[1]["demo_id"]] + [env.reset()[1]["demo_id"] for _ in range(4)]
    train = list(COOL_TASK.train_demos)
    assert demos == train + train[:2]
    assert env.reset(seed=7)[1]["demo_id"] == train[0]  # a seeded reset starts over


def test_evaluation_plays_each_episode_as_a_fresh_env_on_demo_zero(cool_data, tmp_path):
    for other in sequence_tasks("MultiTraj")[1:]:
        write_demos(cool_data, "train", other.train_demos, COOL_TRAJ)
        write_demos(cool_data, "valid_seen", other.test_demos, COOL_TRAJ)
    seq = chores_suite.build_multitraj(
        alfred_data_dir=cool_data,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
    )
    task = seq.tasks[0]
    assert task.make_train_eval.keywords["evaluation"] is True
    assert task.make_test.keywords["evaluation"] is True
    assert "evaluation" not in task.make_train.keywords
    env = task.make_test()
    for _ in range(3):  # demo 0 every time, and the cooling rewards are paid every time
        assert env.reset()[1]["demo_id"] == COOL_TASK.test_demos[0]
        assert sum(play(env, COOL_AGAIN)[0]) == pytest.approx(14.8)
    evaluator = Evaluator(
        cl_suites.make_sequence(
            "CHORES-MultiTraj",
            eval_episodes=2,
            alfred_data_dir=cool_data,
            controller_factory=FakeThorController,
            goal_image_cache_dir=tmp_path / "goals",
            render_size=64,
            max_steps=3,
        ),
        seed=0,
        num_envs=1,
    )
    records = evaluator.evaluate(0, lambda obs, ids: np.full(len(obs), A["RotateLeft_90"]))
    assert {(r["split"], r["episodes"]) for r in records} == {("train", 2), ("test", 2)}
    assert len(records) == 6


# -- observations -------------------------------------------------------------------------
def test_observation_resizes_with_inter_linear_and_uses_the_stored_goal_frames(
    tmp_path,
):
    import cv2

    task = sequence_tasks("VaryRoom")[0]
    rng = np.random.default_rng(0)
    stored = {
        f"{2 * i + 1:09d}.png": rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)
        for i in range(len(TRAJ["plan"]["low_actions"]))
    }
    root = tmp_path / "cora_trajs"
    write_demos(root, "train", task.train_demos, TRAJ, images=stored)
    env = ChoresEnv(
        task,
        alfred_data_dir=root,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
    )
    assert env.quality == "High" and env.render_size == 300
    obs, _ = env.reset(seed=0)
    # subgoal 0's goal frame: the last image recorded in it (low action 1, "after" frame)
    expected = cv2.resize(stored["000000003.png"], (64, 64), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(obs[..., 3:], expected)
    frame = FakeThorController.instances[-1].last_event.frame
    assert frame.shape == (300, 300, 3)
    expected_view = cv2.resize(frame, (64, 64), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(obs[..., :3], expected_view)
    assert FakeThorController.instances[-1].kwargs["quality"] == "High"


def test_render_rgb_array_returns_the_simulator_frame(cool_data, tmp_path):
    assert cool_env(cool_data, tmp_path).render() is None  # no render_mode
    env = cool_env(cool_data, tmp_path, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame, FakeThorController.instances[-1].last_event.frame)
    with pytest.raises(ValueError, match=r"render_mode 'human' is unknown"):
        cool_env(cool_data, tmp_path, render_mode="human")
    seq = chores_suite.build_multitraj(  # the suite's factories take the keyword
        alfred_data_dir=cool_data,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
    )
    env = seq.tasks[0].make_test(render_mode="rgb_array")
    env.reset()
    assert env.render().shape == (64, 64, 3)


# -- robustness -------------------------------------------------------------------------
class FailingPoses(FakeThorController):
    def _do_SetObjectPoses(self, objectPoses, placeStationary=True):
        return self._ok("object poses could not be placed")


class NoReachablePositions(FakeThorController):
    def _do_GetReachablePositions(self, gridSize=0.25):
        return self._ok(extra=[])


def test_scene_setup_failure_names_trajectory_scene_and_call(cool_data, tmp_path):
    with pytest.raises(DemonstrationReplayError) as err:
        cool_env(cool_data, tmp_path, controller_factory=FailingPoses)
    message = str(err.value)
    assert f"trajectory train/{COOL_TASK.train_demos[0]} (FloorPlan19)" in message
    assert "SetObjectPoses" in message and "could not be placed" in message


def test_a_trajectory_that_does_not_replay_fails_at_construction_with_its_id(tmp_path):
    broken = {**COOL_TRAJ, "plan": {**COOL_TRAJ["plan"]}}
    lows = [dict(low) for low in COOL_TRAJ["plan"]["low_actions"]]
    lows[2] = {**lows[2], "api_action": {"action": "PickupObject", "objectId": "Mug|9|9|9"}}
    broken["plan"]["low_actions"] = lows
    root = tmp_path / "cora_trajs"
    write_demos(root, "train", COOL_TASK.train_demos, COOL_TRAJ)
    write_demos(root, "train", COOL_TASK.train_demos[1:2], broken)
    with pytest.raises(DemonstrationReplayError) as err:
        cool_env(root, tmp_path)
    message = str(err.value)
    assert COOL_TASK.train_demos[1] in message and "plan step 2 PickupObject" in message
    assert "Object ID appears to be invalid" in message


def test_empty_reachable_positions_fail_at_reset_naming_the_trajectory(cool_data, tmp_path):
    env = cool_env(cool_data, tmp_path, controller_factory=NoReachablePositions)
    with pytest.raises(DemonstrationReplayError, match=r"FloorPlan19.*GetReachablePositions"):
        env.reset(seed=0)


def test_unreadable_trajectory_fails_at_construction_with_its_path(cool_data, tmp_path):
    path = cool_data / "train" / COOL_TASK.train_demos[2] / "traj_data.json"
    path.write_text("{not json")
    with pytest.raises(AlfredDataNotFoundError, match=r"traj_data.json' is not readable JSON"):
        cool_env(cool_data, tmp_path)


def test_goal_image_cache_is_keyed_by_build_and_render_settings(cool_data, tmp_path):
    cool_env(cool_data, tmp_path)
    replays = len(FakeThorController.instances)
    demo = COOL_TASK.train_demos[0]
    assert cache_path(tmp_path / "goals", "fake-build", "High", 64, 64, "train", demo).is_file()
    cool_env(cool_data, tmp_path)  # same build and settings: no replay
    assert len(FakeThorController.instances) == replays

    class OtherBuild(FakeThorController):
        build_id = "other-build"

    cool_env(cool_data, tmp_path, controller_factory=OtherBuild)
    cool_env(cool_data, tmp_path, quality="Very High")
    assert len(FakeThorController.instances) == replays + 2
    assert cache_path(tmp_path / "goals", "other-build", "High", 64, 64, "train", demo).is_file()
    assert (
        cache_path(
            tmp_path / "goals", "fake-build", "Very High", 64, 64, "train", demo
        ).parent.parent.parent.parent.name
        == "Very_High-r64-s64"
    )


def test_gym_make_checks_data_and_build_at_construction(tmp_path):
    with pytest.raises(AlfredDataNotFoundError, match="no data directory was given"):
        cl_suites.make_env("CHORES-VaryRoom", controller_factory=FakeThorController)
    root = tmp_path / "cora_trajs"
    for task in sequence_tasks("VaryRoom"):
        write_demos(root, "train", task.train_demos, TRAJ)
    env = cl_suites.make_env(
        "CHORES-VaryRoom",
        alfred_data_dir=root,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
    )
    assert FakeThorController.instances == []  # the preflight never starts the simulator
    _, info = env.reset(seed=0)
    assert info["demo_id"] == sequence_tasks("VaryRoom")[0].train_demos[0]
    _, _, _, _, info = env.step(A["MoveAhead_25"])
    assert info["target_object_id"] is None
    assert TOWEL in {o["objectId"] for o in FakeThorController.instances[-1].objects}


def test_a_cloudrendering_build_given_by_path_keeps_its_platform(tmp_path, monkeypatch):
    pytest.importorskip("ai2thor")
    import ai2thor.platform

    from cl_suites.envs.chores.thor import external_build_controller_class

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("DISPLAY", raising=False)
    name = "thor-CloudRendering-f0825767cd50d69f666c7f282e54abfe58f1e917"
    exe = tmp_path / name / name
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    build = resolve_thor_build(exe)
    assert (build.platform, build.build_id) == ("CloudRendering", name.split("-")[-1])
    controller = external_build_controller_class()(thor_build=build, download_only=True)
    assert controller._build.platform is ai2thor.platform.CloudRendering
    assert controller._build.executable_path == str(exe)
    # a build whose name says nothing: CloudRendering on a machine without a display
    other = tmp_path / "mybuild"
    other.write_text("")
    other.chmod(0o755)
    assert resolve_thor_build(other).platform == "CloudRendering"
    monkeypatch.setenv("DISPLAY", ":0")
    assert resolve_thor_build(other).platform == "Linux64"
    assert resolve_thor_build(other).build_id.startswith("path-")


def test_simulator_settings_are_alfreds(cool_data, tmp_path):
    ChoresEnv(
        COOL_TASK,
        alfred_data_dir=cool_data,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
    )
    assert FakeThorController.instances[-1].kwargs == {
        "width": 300,  # ALFRED's 300x300 frames
        "height": 300,
        "quality": "High",  # CORA's ThorEnv(quality="High")
        "gridSize": 0.25,  # ALFRED's AGENT_STEP_SIZE
        "snapToGrid": True,
        "rotateStepDegrees": 90,
        "visibilityDistance": 1.5,  # ALFRED's VISIBILITY_DISTANCE
        "renderDepthImage": False,
        "renderInstanceSegmentation": False,
    }
