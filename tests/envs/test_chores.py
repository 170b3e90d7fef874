"""CHORES: task data, action mapping, rewards, goal images, episode limits, missing-build errors.

Everything runs against ``FakeThorController`` (tests/helpers/chores_double.py) except the
missing-build tests, which use the real ai2thor package with the network blocked.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from pathlib import Path

import numpy as np
import pytest

from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.envs.chores import (
    ACTIONS,
    AlfredDataNotFoundError,
    ChoresEnv,
    ThorBuildNotFoundError,
    resolve_thor_build,
    sequence_tasks,
)
from cl_suites.envs.chores.actions import ActionRunner, thor_action
from cl_suites.envs.chores.data import parse_demonstration
from cl_suites.envs.chores.goal_images import cache_path
from cl_suites.envs.chores.rewards import (
    CoolingRewardFlags,
    Outcome,
    SubgoalReward,
    WorldState,
    goal_conditions,
)
from cl_suites.suites import chores as chores_suite
from tests.helpers.chores_double import BASIN, TOWEL, FakeThorController, write_demos

A = {name: i for i, name in enumerate(ACTIONS)}
# the demonstration's plan, as agent actions
OPTIMAL = [
    "MoveAhead_25",
    "MoveAhead_25",
    "PickupObject",
    "RotateRight_90",
    "RotateRight_90",
    "PutObject",
]
OPTIMAL_REWARDS = [0.2, 4.2, 2.0, 0.2, 4.2, 7.0]  # distance shaping, subgoal, goal rewards


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    for var in ("CL_SUITES_ALFRED_DATA", "CL_SUITES_THOR_BUILD", "CL_SUITES_CHORES_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    FakeThorController.instances.clear()


@pytest.fixture
def task():
    return sequence_tasks("VaryRoom")[0]


@pytest.fixture
def data_dir(tmp_path, task):
    root = tmp_path / "cora_trajs"
    write_demos(root, "train", task.train_demos)
    return root


def make_env(task, data_dir, tmp_path, **kwargs):
    kwargs.setdefault("controller_factory", FakeThorController)
    return ChoresEnv(
        task,
        alfred_data_dir=data_dir,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
        **kwargs,
    )


def goal_cache(task, tmp_path, build="fake-build", quality="High", render_size=64):
    return cache_path(
        tmp_path / "goals", build, quality, render_size, 64, "train", task.train_demos[0]
    )


def prefill_goal_images(task, tmp_path, values=(10, 20, 30, 40)):
    path = goal_cache(task, tmp_path)
    path.parent.mkdir(parents=True)
    np.save(path, np.stack([np.full((64, 64, 3), v, np.uint8) for v in values]))


# -- task data ------------------------------------------------------------------------
def test_task_order_of_all_four_sequences():
    expected = {
        "VaryRoom": [
            ("handtowel_bathtub_402", 402),
            ("handtowel_bathtub_419", 419),
            ("handtowel_bathtub_423", 423),
        ],
        "VaryTask": [
            ("hang_toilet_paper_402", 402),
            ("two_toilet_paper_cabinet_402", 402),
            ("two_toilet_paper_countertop_402", 402),
        ],
        "VaryObject": [("clean_fork_24", 24), ("clean_knife_24", 24), ("clean_spoon_24", 24)],
        "MultiTraj": [
            ("cool_cup_19", 19),
            ("cool_sliced_potato_13", 13),
            ("cool_sliced_lettuce_2", 2),
        ],
    }
    builders = {
        "VaryRoom": chores_suite.build_varyroom,
        "VaryTask": chores_suite.build_varytask,
        "VaryObject": chores_suite.build_varyobject,
        "MultiTraj": chores_suite.build_multitraj,
    }
    for variant, tasks in expected.items():
        seq = builders[variant]()
        assert seq.name == f"CHORES-{variant}"
        assert [t.name for t in seq.tasks] == [name for name, _ in tasks]
        assert [t.scene for t in sequence_tasks(variant)] == [scene for _, scene in tasks]
        assert [t.budget for t in seq.tasks] == [1_000_000] * 3
        assert (seq.cycles, seq.eval_every, seq.eval_episodes) == (2, 50_000, 10)
        assert dict(seq.metric_settings) == {"smoothing_window": 5, "return_clip_min": -10}
        test = variant == "MultiTraj"
        assert [t.splits for t in seq.tasks] == [("train", "test") if test else ("train",)] * 3
    multi = sequence_tasks("MultiTraj")
    assert [len(t.train_demos) for t in multi] == [3, 3, 3]
    assert [len(t.test_demos) for t in multi] == [3, 3, 3]
    assert not set(multi[0].train_demos) & set(multi[0].test_demos)
    assert [(t.object, t.sliced) for t in multi] == [
        ("Cup", False),
        ("Potato", True),
        ("Lettuce", True),
    ]


def test_building_sequences_touches_neither_simulator_nor_data(tmp_path):
    def explode(**kwargs):
        raise AssertionError("the simulator was started while building a sequence")

    seq = chores_suite.build_multitraj(
        alfred_data_dir=tmp_path / "absent", controller_factory=explode
    )
    assert len(seq.tasks) == 3 and seq.tasks[0].make_test is not None


# -- actions --------------------------------------------------------------------------
def test_action_space_and_thor_mapping():
    assert ACTIONS == (
        "CloseObject",
        "LookDown_15",
        "LookUp_15",
        "MoveAhead_25",
        "OpenObject",
        "PickupObject",
        "PutObject",
        "RotateLeft_90",
        "RotateRight_90",
        "SliceObject",
        "ToggleObjectOff",
        "ToggleObjectOn",
    )
    assert thor_action("MoveAhead_25") == {
        "action": "MoveAhead",
        "moveMagnitude": 0.25,
        "forceAction": True,
    }
    assert thor_action("RotateLeft_90") == {
        "action": "RotateLeft",
        "degrees": 90,
        "forceAction": True,
    }
    assert thor_action("LookDown_15") == {"action": "LookDown", "degrees": 15, "forceAction": True}
    assert thor_action("PutObject", "Cabinet|1") == {
        "action": "PutObject",
        "objectId": "Cabinet|1",
        "forceAction": True,
        "placeStationary": True,
    }
    assert thor_action("OpenObject", "Fridge|1") == {
        "action": "OpenObject",
        "objectId": "Fridge|1",
        "openness": 1.0,
    }
    with pytest.raises(ValueError, match="unknown CHORES action 'Jump'"):
        thor_action("Jump")


def test_interactions_target_the_current_subgoals_object(task, data_dir, tmp_path):
    env = make_env(task, data_dir, tmp_path)
    env.reset(seed=0)
    fake = FakeThorController.instances[-1]
    fake.calls.clear()
    # during GotoLocation no object is task-relevant: not sent, not failed, invalid reward
    _, reward, _, _, info = env.step(A["PickupObject"])
    assert (reward, info["target_object_id"], info["action_failed"]) == (-0.5, None, False)
    assert fake.calls == []
    env.step(A["MoveAhead_25"])
    env.step(A["MoveAhead_25"])
    fake.calls.clear()
    _, _, _, _, info = env.step(A["PickupObject"])
    assert fake.calls == [{"action": "PickupObject", "objectId": TOWEL}]
    assert info["target_object_id"] == TOWEL and info["action_success"]
    env.step(A["RotateRight_90"])
    env.step(A["RotateRight_90"])
    fake.calls.clear()
    env.step(A["PutObject"])  # PutObject acts on the receptacle
    assert fake.calls == [
        {"action": "PutObject", "objectId": BASIN, "forceAction": True, "placeStationary": True}
    ]


# -- rewards, goal images, observations -----------------------------------------------
def test_subgoal_rewards_accrue_and_complete_the_task(task, data_dir, tmp_path):
    prefill_goal_images(task, tmp_path)
    env = make_env(task, data_dir, tmp_path)
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 64, 6) and obs.dtype == np.uint8
    assert (info["subgoal"], info["num_subgoals"], info["subgoal_type"]) == (0, 4, "GotoLocation")
    rewards, completed, goal_values = [], [], []
    for name in OPTIMAL:
        obs, reward, terminated, truncated, info = env.step(A[name])
        assert obs.shape == (64, 64, 6) and obs.dtype == np.uint8
        assert env.observation_space.contains(obs)
        rewards.append(reward)
        completed.append(info["subgoals_completed"])
        goal_values.append(int(obs[0, 0, 3]))
    assert rewards == pytest.approx(OPTIMAL_REWARDS)
    assert completed == [0, 1, 2, 2, 3, 4]
    # the goal image follows the current subgoal (the last one stays once all are done)
    assert goal_values == [10, 20, 30, 30, 40, 40]
    assert (terminated, truncated, info["goal_satisfied"]) == (True, False, True)
    # the current view is the simulator frame, resized
    fake = FakeThorController.instances[-1]
    assert np.array_equal(obs[..., :3], fake.last_event.frame)


def test_wrong_interactions_are_penalised(task, data_dir, tmp_path):
    prefill_goal_images(task, tmp_path)
    env = make_env(task, data_dir, tmp_path)
    env.reset(seed=0)
    env.step(A["MoveAhead_25"])
    env.step(A["MoveAhead_25"])
    # PickupObject subgoal: a navigation action is invalid there (-0.1)
    assert env.step(A["RotateLeft_90"])[1] == pytest.approx(-0.1)
    # GotoLocation back: moving away from the target is negative shaping
    env.step(A["RotateRight_90"])  # back to facing +z, still the pickup subgoal: -0.1
    env.step(A["PickupObject"])
    _, reward, *_ = env.step(A["MoveAhead_25"])  # z=3: farther from (0, 0, south)
    assert reward == pytest.approx(-0.2)


def test_goal_images_rendered_once_by_replay_at_construction_and_cached(task, data_dir, tmp_path):
    env = make_env(task, data_dir, tmp_path)  # the replay runs here, not at reset
    fake = FakeThorController.instances[-1]
    replayed = [c["action"] for c in fake.calls if c["action"] in ("PickupObject", "PutObject")]
    assert replayed == ["PickupObject", "PutObject"]
    env.reset(seed=0)
    path = goal_cache(task, tmp_path)
    images = np.load(path)
    assert images.shape == (4, 64, 64, 3) and images.dtype == np.uint8
    # one image per subgoal, each taken after the subgoal's last plan step: all differ
    assert len({int(im[0, 0, 0]) for im in images}) == 4
    env.close()
    assert fake.stopped

    instances = len(FakeThorController.instances)
    env2 = make_env(task, data_dir, tmp_path)
    assert len(FakeThorController.instances) == instances  # cached: no simulator needed
    obs, _ = env2.reset(seed=0)
    fake2 = FakeThorController.instances[-1]
    assert fake2 is not fake
    assert [c for c in fake2.calls if c["action"] in ("PickupObject", "PutObject")] == []
    assert np.array_equal(obs[..., 3:], images[0])


# -- episode limits -------------------------------------------------------------------
def test_ten_failed_actions_end_the_episode(task, data_dir, tmp_path):
    prefill_goal_images(task, tmp_path)
    env = make_env(task, data_dir, tmp_path)
    env.reset(seed=0)
    for i in range(1, 11):  # slicing without a knife cannot be executed
        _, reward, terminated, truncated, info = env.step(A["SliceObject"])
        assert (reward, info["failed_actions"], info["action_failed"]) == (0.0, i, True)
        assert terminated == (i == 10) and not truncated
    env.reset()
    assert env.step(A["SliceObject"])[4]["failed_actions"] == 1  # reset clears the counter


def test_unsuccessful_actions_are_not_failures_unless_asked(task, data_dir, tmp_path):
    prefill_goal_images(task, tmp_path)
    env = make_env(task, data_dir, tmp_path)
    env.reset(seed=0)
    env.step(A["RotateLeft_90"])
    info = env.step(A["MoveAhead_25"])[4]  # into the corridor wall
    assert (info["action_success"], info["action_failed"], info["failed_actions"]) == (
        False,
        False,
        0,
    )
    strict = make_env(task, data_dir, tmp_path, count_unsuccessful_as_failed=True, max_fails=2)
    strict.reset(seed=0)
    strict.step(A["RotateLeft_90"])
    assert strict.step(A["MoveAhead_25"])[2:4] == (False, False)
    _, _, terminated, _, info = strict.step(A["MoveAhead_25"])
    assert (terminated, info["failed_actions"]) == (True, 2)


def test_step_cap_truncates(task, data_dir, tmp_path):
    prefill_goal_images(task, tmp_path)
    assert make_env(task, data_dir, tmp_path).max_steps == 1002  # CORA's env: 1000 + 2
    assert make_env(task, data_dir, tmp_path).max_fails == 10
    env = make_env(task, data_dir, tmp_path, max_steps=5)
    env.reset(seed=0)
    flags = [env.step(A["RotateLeft_90"])[2:4] for _ in range(5)]
    assert flags == [(False, False)] * 4 + [(False, True)]


def test_sequence_env_plays_chores_with_the_double(tmp_path):
    seq_tasks = sequence_tasks("VaryRoom")
    root = tmp_path / "cora_trajs"
    for t in seq_tasks:
        write_demos(root, "train", t.train_demos)
    seq = chores_suite.build_varyroom(
        steps_per_task=3,
        cycles=1,
        alfred_data_dir=root,
        controller_factory=FakeThorController,
        goal_image_cache_dir=tmp_path / "goals",
        render_size=64,
    )
    env = SequenceEnv(seq)
    obs, info = env.reset(seed=0)
    names = [info["task_name"]]
    for _ in range(9):
        obs, _, _, truncated, info = env.step(A["RotateLeft_90"])
        assert obs.shape == (64, 64, 6)
        if truncated and not info["sequence_done"]:
            obs, info = env.reset()
            names.append(info["task_name"])
    assert names == [t.name for t in seq_tasks]
    assert info["sequence_done"]


# -- missing data / build -------------------------------------------------------------
def test_missing_demonstrations_fail_fast(task, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AlfredDataNotFoundError) as err:
        make_env(task, empty, tmp_path)
    message = str(err.value)
    assert str(empty / "train" / task.train_demos[0] / "traj_data.json") in message
    assert "CL_SUITES_ALFRED_DATA" in message and "wget" in message
    with pytest.raises(AlfredDataNotFoundError, match="no data directory was given"):
        ChoresEnv(task, controller_factory=FakeThorController)
    assert FakeThorController.instances == []


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test; a hang is cut after 30 s."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    previous = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("timed out (hang)"))
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_missing_build_fails_fast_with_real_ai2thor(task, data_dir, tmp_path, no_network):
    pytest.importorskip("ai2thor")
    with pytest.raises(ThorBuildNotFoundError) as err:
        ChoresEnv(task, alfred_data_dir=data_dir)
    message = str(err.value)
    assert "CL_SUITES_THOR_BUILD" in message and "download_only=True" in message
    assert str(tmp_path / "home" / ".ai2thor" / "releases") in message
    # gym-style construction fails at construction too, with the same class
    with pytest.raises(ThorBuildNotFoundError):
        SequenceEnv(chores_suite.build_varyroom(alfred_data_dir=data_dir))


def test_missing_build_and_data_reports_both(task, tmp_path, no_network):
    pytest.importorskip("ai2thor")
    with pytest.raises(Exception) as err:
        ChoresEnv(task)
    assert "CL_SUITES_ALFRED_DATA" in str(err.value) and "CL_SUITES_THOR_BUILD" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def test_local_builds_are_found_without_network(tmp_path, monkeypatch, no_network):
    pytest.importorskip("ai2thor")
    import ai2thor.build

    exe = tmp_path / "thor-Linux64-local" / "thor-Linux64-local"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    with pytest.raises(ThorBuildNotFoundError, match="not executable"):
        resolve_thor_build(exe)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    build = resolve_thor_build(exe)
    assert (build.external, build.platform, build.build_id) == (True, "Linux64", "local")
    assert resolve_thor_build(exe.parent).executable_path == exe  # the build folder works too
    monkeypatch.setenv("CL_SUITES_THOR_BUILD", str(tmp_path / "nope"))
    with pytest.raises(ThorBuildNotFoundError, match=r"\$CL_SUITES_THOR_BUILD"):
        resolve_thor_build()
    monkeypatch.delenv("CL_SUITES_THOR_BUILD")
    # a build in ai2thor's own cache is started by commit and platform, offline
    commit = ai2thor.build.COMMIT_ID
    name = f"thor-CloudRendering-{commit}"
    cached = Path(os.environ["HOME"]) / ".ai2thor" / "releases" / name
    cached.mkdir(parents=True)
    (cached / name).write_text("")
    (cached / "metadata.json").write_text("{}")
    build = resolve_thor_build()
    assert build.controller_kwargs["commit_id"] == commit == build.build_id
    assert build.controller_kwargs["platform"].name() == "CloudRendering"


# -- clean / cool subgoals (VaryObject, MultiTraj) --------------------------------------
def _demo(task_type, subgoals, target="Cup"):
    # 20 plan steps: no step penalty during these short tests
    low = {"high_idx": 0, "api_action": {}, "discrete_action": {"action": "MoveAhead_25"}}
    lows = [low] * 20
    traj = {
        "task_type": task_type,
        "pddl_params": {
            "object_target": target,
            "parent_target": "SinkBasin",
            "object_sliced": False,
        },
        "scene": {"scene_num": 19, "object_poses": [], "init_action": {}},
        "plan": {"high_pddl": [{"planner_action": s} for s in subgoals], "low_actions": lows},
    }
    return parse_demonstration(traj, "demo", Path("demo"))


def _meta(held=None, fridge_open=False, sink=()):
    return {
        "inventoryObjects": [{"objectId": held}] if held else [],
        "objects": [
            {
                "objectId": "Fridge|1",
                "isOpen": fridge_open,
                "receptacle": True,
                "receptacleObjectIds": [],
            },
            {"objectId": "Sink|1|SinkBasin", "receptacle": True, "receptacleObjectIds": list(sink)},
            {"objectId": "Cup|1", "pickupable": True, "receptacleObjectIds": None},
        ],
    }


def test_cool_subgoal_rewards_cooling_reopening_and_pickup():
    cool = {"action": "CoolObject", "objectId": "Fridge|1"}
    goto = {"action": "GotoLocation", "location": "loc|0|0|0|30"}
    put = {"action": "PutObject", "objectId": "Cup|1", "receptacleObjectId": "Sink|1|SinkBasin"}
    demo = _demo("pick_cool_then_place_in_recep", [cool, goto, put])
    world = WorldState()
    reward = SubgoalReward(demo, None, world, CoolingRewardFlags())
    reward.reset(_meta())
    assert reward.step(Outcome("MoveAhead", True, _meta())) == pytest.approx(-0.1)
    assert reward.step(Outcome("CloseObject", True, _meta())) == 0.0  # not cold yet
    world.cooled.add("Cup|1")
    assert reward.step(Outcome("CloseObject", True, _meta())) == 2.0  # got cold
    assert reward.step(Outcome("OpenObject", True, _meta(fridge_open=True))) == 2.0
    assert reward.step(Outcome("OpenObject", True, _meta(fridge_open=True))) == 0.0  # once
    assert (reward.goal_idx, reward.completed) == (0, 0)
    assert reward.step(Outcome("PickupObject", True, _meta(held="Cup|1"))) == 2.0
    assert (reward.goal_idx, reward.completed) == (1, 1)
    # placing the cold cup in the sink satisfies all 3 goal conditions (+5 on top)
    assert goal_conditions(demo, _meta(sink=["Cup|1"]), world) == (3, 3)
    assert goal_conditions(demo, _meta(sink=["Cup|1"]), WorldState()) == (1, 3)


def test_faucet_cleans_the_basin_and_fridge_cools_its_contents():
    class Controller:
        def __init__(self):
            self.calls = []
            meta = _meta(sink=["Cup|1"])
            meta["objects"].append(
                {
                    "objectId": "Faucet|1",
                    "objectType": "Faucet",
                    "position": {"x": 0, "y": 1, "z": 0},
                }
            )
            meta["objects"][1].update(objectType="SinkBasin", position={"x": 0, "y": 0, "z": 0})
            meta["objects"][2].update(dirtyable=True, isDirty=True)
            meta["objects"][0]["receptacleObjectIds"] = ["Apple|1"]
            meta["lastActionSuccess"] = True
            self.last_event = type("E", (), {"metadata": meta, "frame": None})()

        def step(self, **kwargs):
            self.calls.append(kwargs)
            return self.last_event

    ctl, world = Controller(), WorldState()
    runner = ActionRunner(ctl, world)
    outcome, failed = runner.run("ToggleObjectOn", "Faucet|1")
    assert (outcome.action, outcome.success, failed) == ("ToggleObjectOn", True, False)
    assert world.cleaned == {"Cup|1"}
    assert ctl.calls[1:] == [{"action": "Pass"}, {"action": "CleanObject", "objectId": "Cup|1"}]
    runner.run("CloseObject", "Fridge|1")
    assert world.cooled == {"Apple|1"}
