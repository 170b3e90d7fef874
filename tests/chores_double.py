"""Test double of ai2thor's Controller for the CHORES tests, plus a synthetic demonstration.

``FakeThorController`` is a tiny scripted world, not a simulator: a corridor of
reachable cells, a hand towel and a bathtub basin, with ai2thor's call signatures
(``reset(scene=)``, ``step(action=..., **kwargs) -> event``, ``last_event``, ``stop()``)
and metadata keys. Frames are constant images whose value counts the steps taken.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

TOWEL = "HandTowel|-02.09|+01.44|+05.11"
BASIN = "Bathtub|-02.90|+00.67|+02.86|BathtubBasin"
CORRIDOR = [(0, z) for z in range(5)]  # reachable cells (x, z), 0.25 m each

OBJECTS = [
    {
        "objectId": TOWEL,
        "objectType": "HandTowel",
        "pickupable": True,
        "receptacle": False,
        "position": {"x": 0.0, "y": 1.4, "z": 1.0},
        "receptacleObjectIds": None,
    },
    {
        "objectId": BASIN,
        "objectType": "BathtubBasin",
        "pickupable": False,
        "receptacle": True,
        "position": {"x": 0.0, "y": 0.6, "z": -0.5},
        "receptacleObjectIds": [],
    },
]

# 4 subgoals: go (4 moves away), pick up the towel, go (turn around), put it in the basin
TRAJ: dict[str, Any] = {
    "task_type": "pick_and_place_simple",
    "task_id": "trial_fake",
    "pddl_params": {
        "object_target": "HandTowel",
        "parent_target": "BathtubBasin",
        "object_sliced": False,
        "toggle_target": "",
        "mrecep_target": "",
    },
    "scene": {
        "scene_num": 402,
        "floor_plan": "FloorPlan402",
        "dirty_and_empty": False,
        "object_toggles": [],
        "object_poses": [
            {
                "objectName": "HandTowel_1",
                "position": {"x": 0.0, "y": 1.4, "z": 1.0},
                "rotation": {"x": 0.0, "y": 0.0, "z": 0.0},
            }
        ],
        "init_action": {
            "action": "TeleportFull",
            "x": 0.0,
            "y": 0.9,
            "z": 0.0,
            "rotation": 0,
            "horizon": 30,
            "rotateOnTeleport": True,
        },
    },
    "plan": {
        "high_pddl": [
            {
                "high_idx": 0,
                "planner_action": {"action": "GotoLocation", "location": "loc|0|4|0|30"},
            },
            {"high_idx": 1, "planner_action": {"action": "PickupObject", "objectId": TOWEL}},
            {
                "high_idx": 2,
                "planner_action": {"action": "GotoLocation", "location": "loc|0|0|2|30"},
            },
            {
                "high_idx": 3,
                "planner_action": {
                    "action": "PutObject",
                    "objectId": TOWEL,
                    "receptacleObjectId": BASIN,
                },
            },
            {"high_idx": 4, "planner_action": {"action": "End", "value": 1}},
        ],
        "low_actions": [
            {
                "high_idx": 0,
                "api_action": {"action": "MoveAhead"},
                "discrete_action": {"action": "MoveAhead_25", "args": {}},
            },
            {
                "high_idx": 0,
                "api_action": {"action": "MoveAhead"},
                "discrete_action": {"action": "MoveAhead_25", "args": {}},
            },
            {
                "high_idx": 1,
                "api_action": {"action": "PickupObject", "objectId": TOWEL},
                "discrete_action": {"action": "PickupObject", "args": {}},
            },
            {
                "high_idx": 2,
                "api_action": {"action": "RotateRight"},
                "discrete_action": {"action": "RotateRight_90", "args": {}},
            },
            {
                "high_idx": 2,
                "api_action": {"action": "RotateRight"},
                "discrete_action": {"action": "RotateRight_90", "args": {}},
            },
            {
                "high_idx": 3,
                "api_action": {
                    "action": "PutObject",
                    "objectId": TOWEL,
                    "receptacleObjectId": BASIN,
                },
                "discrete_action": {"action": "PutObject", "args": {}},
            },
        ],
    },
    "images": [],
}


def write_demos(root: Path, folder: str, demo_ids: list[str] | tuple[str, ...]) -> None:
    """Write the synthetic demonstration under every id in ``demo_ids``."""
    for demo_id in demo_ids:
        path = root / folder / demo_id / "traj_data.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(TRAJ))


class FakeEvent:
    def __init__(self, metadata: dict[str, Any], frame: np.ndarray):
        self.metadata = metadata
        self.frame = frame


class FakeThorController:
    """A scripted stand-in for ``ai2thor.controller.Controller`` (see module docstring)."""

    instances: list[FakeThorController] = []

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs
        self.calls: list[dict[str, Any]] = []
        self.stopped = False
        self.size = int(kwargs.get("width", 300))
        self._steps = 0
        FakeThorController.instances.append(self)
        self.reset(scene="FloorPlan402")
        self.calls.clear()

    # -- ai2thor API ------------------------------------------------------------------
    def reset(self, scene: str, **kwargs: Any) -> FakeEvent:
        self.calls.append({"action": "reset", "scene": scene})
        self.objects = copy.deepcopy(OBJECTS)
        self.inventory: list[dict[str, Any]] = []
        self.agent = {
            "position": {"x": 0.0, "y": 0.9, "z": 0.0},
            "rotation": {"x": 0, "y": 0.0, "z": 0},
            "cameraHorizon": 0.0,
        }
        return self._event("Initialize", True)

    def step(self, action: str, **kwargs: Any) -> FakeEvent:
        self.calls.append({"action": action, **kwargs})
        handler = getattr(self, f"_do_{action}", None)
        if handler is None:
            raise ValueError(f"Invalid action: {action}")
        success, extra = handler(**kwargs)
        return self._event(action, success, extra)

    def stop(self) -> None:
        self.stopped = True

    @property
    def last_event(self) -> FakeEvent:
        return self._last

    # -- helpers ----------------------------------------------------------------------
    def _event(self, action: str, success: bool, extra: Any = None) -> FakeEvent:
        self._steps += 1
        metadata = {
            "lastAction": action,
            "lastActionSuccess": success,
            "errorMessage": "" if success else f"{action} failed",
            "agent": copy.deepcopy(self.agent),
            "objects": copy.deepcopy(self.objects),
            "inventoryObjects": copy.deepcopy(self.inventory),
            "actionReturn": extra,
        }
        frame = np.full((self.size, self.size, 3), self._steps % 256, dtype=np.uint8)
        self._last = FakeEvent(metadata, frame)
        return self._last

    def _obj(self, object_id: str | None) -> dict[str, Any]:
        if not object_id:
            raise ValueError("objectId is required")
        for obj in self.objects:
            if obj["objectId"] == object_id:
                return obj
        raise ValueError(f"objectId {object_id} not in scene")

    def _do_TeleportFull(self, x, y, z, rotation, horizon, **_):
        self.agent = {
            "position": {"x": x, "y": y, "z": z},
            "rotation": dict(rotation),
            "cameraHorizon": horizon,
        }
        return True, None

    def _noop(self, **_):
        return True, None

    _do_SetObjectPoses = _do_SetObjectStates = _do_Pass = _do_CleanObject = _noop

    def _do_GetReachablePositions(self, **_):
        return True, [{"x": x * 0.25, "y": 0.9, "z": z * 0.25} for x, z in CORRIDOR]

    def _do_MoveAhead(self, moveMagnitude=0.25, **_):
        rot = int(self.agent["rotation"]["y"] // 90) % 4
        dx, dz = {0: (0, 1), 1: (1, 0), 2: (0, -1), 3: (-1, 0)}[rot]
        pos = self.agent["position"]
        cell = (round(pos["x"] / 0.25) + dx, round(pos["z"] / 0.25) + dz)
        if cell not in CORRIDOR:
            return False, None
        pos["x"], pos["z"] = cell[0] * 0.25, cell[1] * 0.25
        return True, None

    def _rotate(self, sign, degrees=90, **_):
        self.agent["rotation"]["y"] = (self.agent["rotation"]["y"] + sign * degrees) % 360
        return True, None

    def _do_RotateRight(self, **kw):
        return self._rotate(+1, **kw)

    def _do_RotateLeft(self, **kw):
        return self._rotate(-1, **kw)

    def _do_LookDown(self, degrees=15, **_):
        self.agent["cameraHorizon"] += degrees
        return True, None

    def _do_LookUp(self, degrees=15, **_):
        self.agent["cameraHorizon"] -= degrees
        return True, None

    def _do_PickupObject(self, objectId=None, **_):
        obj = self._obj(objectId)
        if self.inventory or not obj["pickupable"]:
            return False, None
        for other in self.objects:
            if other["receptacleObjectIds"] and objectId in other["receptacleObjectIds"]:
                other["receptacleObjectIds"].remove(objectId)
        self.inventory = [{"objectId": objectId, "objectType": obj["objectType"]}]
        return True, None

    def _do_PutObject(self, objectId=None, **_):
        recep = self._obj(objectId)
        if not self.inventory or not recep["receptacle"]:
            return False, None
        recep["receptacleObjectIds"].append(self.inventory.pop()["objectId"])
        return True, None

    def _set(self, key, value, objectId=None, **_):
        obj = self._obj(objectId)
        if key not in obj:
            return False, None
        obj[key] = value
        return True, None

    def _do_OpenObject(self, **kw):
        return self._set("isOpen", True, **kw)

    def _do_CloseObject(self, **kw):
        return self._set("isOpen", False, **kw)

    def _do_ToggleObjectOn(self, **kw):
        return self._set("isToggled", True, **kw)

    def _do_ToggleObjectOff(self, **kw):
        return self._set("isToggled", False, **kw)

    def _do_SliceObject(self, **kw):
        return self._set("isSliced", True, **kw)
