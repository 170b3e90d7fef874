"""A strict test double of ai2thor's ``Controller`` for the CHORES tests, plus hand-made
ALFRED-format demonstrations.

``FakeThorController`` is a tiny scripted world, not a simulator: a corridor of
reachable cells (``x = 0``, ``z = 0..4`` in 0.25 m cells) holding a few objects. It is
as strict as ai2thor 5.0's controller where CHORES touches it (checked against
``ai2thor/controller.py`` and the Unity ``ActionDispatcher`` / agent controller):

* constructor keywords are ``Controller``'s own or known initialization parameters;
  anything else, an unknown ``quality`` or a bad scene raises ``ValueError``;
* ``step`` dispatches on the action name and its keyword names: an unknown action, an
  unknown argument name (``InvalidArgument``) or a missing required one
  (``MissingArguments``; e.g. ``TeleportFull`` without ``standing``) raises
  ``ValueError``, as ``Controller.step`` does for those error codes;
* an unknown ``objectId`` is a failed action (``lastActionSuccess=False`` and an
  ``errorMessage``), not an exception;
* object interactions need the object visible: within ``visibilityDistance`` (1.5 m) and
  inside the 90-degree field of view, and not inside a closed receptacle, unless
  ``forceAction=True``; ``PutObject`` into a closed openable receptacle always fails;
* ``LookUp``/``LookDown`` fail beyond 30 degrees up / 60 degrees down, and so does a
  ``TeleportFull`` to such a horizon without ``forceAction``.

Scenes: ``FloorPlan4xx`` (bathrooms) hold a hand towel and a bathtub basin; kitchens
``FloorPlan1..30`` a cup, a fridge, a sink basin and a faucet. Frames are constant images
whose value counts the events (so every frame differs).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

TOWEL = "HandTowel|-02.09|+01.44|+05.11"
BASIN = "Bathtub|-02.90|+00.67|+02.86|BathtubBasin"
CUP = "Cup|+01.28|+00.91|+00.87"
FRIDGE = "Fridge|+01.98|+00.00|-00.54"
SINK = "Sink|-01.33|+00.92|-01.23|SinkBasin"
FAUCET = "Faucet|-01.49|+01.20|-01.23"
CORRIDOR = [(0, z) for z in range(5)]  # reachable cells (x, z), 0.25 m each

QUALITIES = {"Very Low", "Low", "Medium", "MediumCloseFitShadows", "High", "Very High", "Ultra"}
CONTROLLER_KWARGS = {
    "quality", "fullscreen", "headless", "port", "start_unity", "local_executable_path",
    "local_build", "commit_id", "branch", "width", "height", "x_display", "host", "scene",
    "image_dir", "save_image_per_frame", "depth_format", "add_depth_noise", "download_only",
    "include_private_scenes", "server_class", "gpu_device", "platform", "server_timeout",
    "server_start_timeout",
}  # fmt: skip
INIT_PARAMS = {
    "agentMode", "gridSize", "snapToGrid", "rotateStepDegrees", "visibilityDistance",
    "renderDepthImage", "renderInstanceSegmentation", "renderSemanticSegmentation",
    "fieldOfView", "makeAgentsVisible",
}  # fmt: skip
_INTERACT = {"objectId", "forceAction"}
# action -> (allowed argument names, required argument names)
SIGNATURES: dict[str, tuple[set[str], set[str]]] = {
    "MoveAhead": ({"moveMagnitude", "forceAction", "objectId", "manualInteract"}, set()),
    "RotateLeft": ({"degrees", "forceAction", "manualInteract"}, set()),
    "RotateRight": ({"degrees", "forceAction", "manualInteract"}, set()),
    "LookUp": ({"degrees", "forceAction", "manualInteract"}, set()),
    "LookDown": ({"degrees", "forceAction", "manualInteract"}, set()),
    "TeleportFull": (
        {"x", "y", "z", "rotation", "horizon", "standing", "forceAction"},
        {"x", "y", "z", "rotation", "horizon", "standing"},
    ),
    "PickupObject": (_INTERACT | {"manualInteract"}, {"objectId"}),
    "PutObject": (_INTERACT | {"placeStationary"}, {"objectId"}),
    "OpenObject": (_INTERACT | {"openness"}, {"objectId"}),
    "CloseObject": (_INTERACT, {"objectId"}),
    "ToggleObjectOn": (_INTERACT, {"objectId"}),
    "ToggleObjectOff": (_INTERACT, {"objectId"}),
    "SliceObject": (_INTERACT, {"objectId"}),
    "CleanObject": (_INTERACT, {"objectId"}),
    "SetObjectStates": ({"SetObjectStates"}, {"SetObjectStates"}),
    "SetObjectPoses": ({"objectPoses", "placeStationary"}, {"objectPoses"}),
    "GetReachablePositions": ({"gridSize"}, set()),
    "Pass": (set(), set()),
}
MAX_UP, MAX_DOWN = 30.0, 60.0


def _obj(object_id: str, kind: str, position: tuple[float, float, float], **props: Any):
    obj = {
        "objectId": object_id,
        "objectType": kind,
        "position": dict(zip("xyz", position, strict=True)),
        "pickupable": False,
        "receptacle": False,
        "openable": False,
        "isOpen": False,
        "toggleable": False,
        "isToggled": False,
        "sliceable": False,
        "isSliced": False,
        "dirtyable": False,
        "isDirty": False,
        "receptacleObjectIds": None,
    }
    obj.update(props)
    return obj


BATHROOM = [
    _obj(TOWEL, "HandTowel", (0.0, 1.4, 1.0), pickupable=True),
    _obj(BASIN, "BathtubBasin", (0.0, 0.6, -0.5), receptacle=True, receptacleObjectIds=[]),
]
KITCHEN = [
    _obj(CUP, "Cup", (0.0, 0.9, 1.0), pickupable=True, dirtyable=True),
    _obj(
        FRIDGE, "Fridge", (0.0, 0.0, 2.25), receptacle=True, openable=True, receptacleObjectIds=[]
    ),
    _obj(SINK, "SinkBasin", (0.0, 0.9, -0.5), receptacle=True, receptacleObjectIds=[]),
    _obj(FAUCET, "Faucet", (0.0, 1.2, -0.75), toggleable=True),
]


def _scene_objects(scene: str) -> list[dict[str, Any]]:
    number = int(scene.removeprefix("FloorPlan").removesuffix("_physics"))
    if 1 <= number <= 30:
        return copy.deepcopy(KITCHEN)
    if 401 <= number <= 430:
        return copy.deepcopy(BATHROOM)
    return []


def _low(high_idx: int, action: str, **api: Any) -> dict[str, Any]:
    return {
        "high_idx": high_idx,
        "api_action": {"action": action.split("_")[0], **api},
        "discrete_action": {"action": action, "args": {}},
    }


def _images(lows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ALFRED's ``images`` list: a before and an after frame per low-level action."""
    return [
        {"high_idx": low["high_idx"], "low_idx": i, "image_name": f"{2 * i + k:09d}.png"}
        for i, low in enumerate(lows)
        for k in (0, 1)
    ]


def _traj(task_type, scene, target, parent, poses, subgoals, lows) -> dict[str, Any]:
    return {
        "task_type": task_type,
        "task_id": "trial_fake",
        "pddl_params": {
            "object_target": target,
            "parent_target": parent,
            "object_sliced": False,
            "toggle_target": "",
            "mrecep_target": "",
        },
        "scene": {
            "scene_num": scene,
            "floor_plan": f"FloorPlan{scene}",
            "dirty_and_empty": False,
            "object_toggles": [],
            "object_poses": poses,
            "init_action": {
                "action": "TeleportFull",
                "x": 0.0,
                "y": 0.9,
                "z": 0.0,
                "rotation": 0,
                "horizon": 30,
                "rotateOnTeleport": True,
                "standing": True,
            },
        },
        "plan": {
            "high_pddl": [
                {"high_idx": i, "planner_action": s}
                for i, s in enumerate([*subgoals, {"action": "End", "value": 1}])
            ],
            "low_actions": lows,
        },
        "images": _images(lows),
    }


# hand towel into the bathtub: go (2 moves), pick up, go (turn around), put in the basin
TRAJ = _traj(
    "pick_and_place_simple",
    402,
    "HandTowel",
    "BathtubBasin",
    [
        {
            "objectName": "HandTowel_1",
            "position": {"x": 0.0, "y": 1.4, "z": 1.0},
            "rotation": {"x": 0.0, "y": 0.0, "z": 0.0},
        }
    ],
    [
        {"action": "GotoLocation", "location": "loc|0|4|0|30"},
        {"action": "PickupObject", "objectId": TOWEL},
        {"action": "GotoLocation", "location": "loc|0|0|2|30"},
        {"action": "PutObject", "objectId": TOWEL, "receptacleObjectId": BASIN},
    ],
    [
        _low(0, "MoveAhead_25"),
        _low(0, "MoveAhead_25"),
        _low(1, "PickupObject", objectId=TOWEL),
        _low(2, "RotateRight_90"),
        _low(2, "RotateRight_90"),
        _low(3, "PutObject", objectId=BASIN, forceAction=True, placeStationary=True),
    ],
)

# cool a cup in the fridge, then put it in the sink (crl_alfred's CoolObject expansion:
# open, put, close (cools), open, pick up, close)
COOL_TRAJ = _traj(
    "pick_cool_then_place_in_recep",
    19,
    "Cup",
    "SinkBasin",
    [],
    [
        {"action": "GotoLocation", "location": "loc|0|4|0|30"},
        {"action": "PickupObject", "objectId": CUP},
        {"action": "GotoLocation", "location": "loc|0|4|2|30"},
        {"action": "CoolObject", "objectId": FRIDGE},
        {"action": "GotoLocation", "location": "loc|0|0|2|30"},
        {"action": "PutObject", "objectId": CUP, "receptacleObjectId": SINK},
    ],
    [
        _low(0, "MoveAhead_25"),
        _low(0, "MoveAhead_25"),
        _low(1, "PickupObject", objectId=CUP),
        _low(2, "MoveAhead_25"),
        _low(2, "MoveAhead_25"),
        _low(3, "OpenObject", objectId=FRIDGE),
        _low(3, "PutObject", objectId=FRIDGE, forceAction=True, placeStationary=True),
        _low(3, "CloseObject", objectId=FRIDGE),
        _low(3, "OpenObject", objectId=FRIDGE),
        _low(3, "PickupObject", objectId=CUP),
        _low(3, "CloseObject", objectId=FRIDGE),
        _low(4, "RotateRight_90"),
        _low(4, "RotateRight_90"),
        _low(4, "MoveAhead_25"),
        _low(4, "MoveAhead_25"),
        _low(5, "PutObject", objectId=SINK, forceAction=True, placeStationary=True),
    ],
)


def write_demos(
    root: Path,
    folder: str,
    demo_ids: list[str] | tuple[str, ...],
    traj: dict[str, Any] = TRAJ,
    images: dict[str, np.ndarray] | None = None,
) -> None:
    """Write ``traj`` under every id in ``demo_ids``; ``images`` (file name -> RGB array)
    go to each demonstration's ``raw_images/`` as PNGs."""
    from PIL import Image

    for demo_id in demo_ids:
        path = root / folder / demo_id / "traj_data.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(traj))
        for name, image in (images or {}).items():
            (path.parent / "raw_images").mkdir(exist_ok=True)
            Image.fromarray(image).save(path.parent / "raw_images" / name)


class FakeEvent:
    def __init__(self, metadata: dict[str, Any], frame: np.ndarray):
        self.metadata = metadata
        self.frame = frame


class FakeThorController:
    """A strict scripted stand-in for ``ai2thor.controller.Controller`` (module docstring)."""

    instances: list[FakeThorController] = []
    build_id = "fake-build"

    def __init__(self, **kwargs: Any):
        unknown = sorted(set(kwargs) - CONTROLLER_KWARGS - INIT_PARAMS)
        if unknown:
            raise ValueError(f"unknown Controller arguments {unknown}")
        quality = kwargs.get("quality", "Ultra")
        if quality not in QUALITIES:
            raise ValueError(f"Quality {quality} is invalid")
        self.kwargs = kwargs
        self.calls: list[dict[str, Any]] = []
        self.stopped = False
        self.width = int(kwargs.get("width", 300))
        self.height = int(kwargs.get("height", 300))
        self.visibility = float(kwargs.get("visibilityDistance", 1.5))
        self.field_of_view = float(kwargs.get("fieldOfView", 90))
        self._events = 0
        FakeThorController.instances.append(self)
        self.reset(scene=kwargs.get("scene", "FloorPlan402"))
        self.calls.clear()

    # -- ai2thor API ------------------------------------------------------------------
    def reset(self, scene: str | None = None, **init_params: Any) -> FakeEvent:
        unknown = sorted(set(init_params) - INIT_PARAMS - {"width", "height"})
        if unknown:
            raise ValueError(f"unknown initialization parameters {unknown}")
        number = (scene or "").removeprefix("FloorPlan").removesuffix("_physics")
        if not number.isdigit():
            raise ValueError(f"Scene '{scene}' not contained in build")
        self.scene = scene
        self.calls.append({"action": "reset", "scene": scene})
        self.objects = _scene_objects(scene)
        self.inventory: list[dict[str, Any]] = []
        self.agent = {
            "position": {"x": 0.0, "y": 0.9, "z": 0.0},
            "rotation": {"x": 0.0, "y": 0.0, "z": 0.0},
            "cameraHorizon": 0.0,
            "isStanding": True,
        }
        return self._event("Initialize", True)

    def step(self, action: str | dict[str, Any] | None = None, **action_args: Any) -> FakeEvent:
        args = dict(action) if isinstance(action, dict) else {"action": action}
        args.update(action_args)
        name = args.pop("action")
        args.pop("raise_for_failure", None)
        self.calls.append({"action": name, **args})
        if name not in SIGNATURES:
            raise ValueError(f"Invalid action: {name}")
        allowed, required = SIGNATURES[name]
        invalid = sorted(set(args) - allowed)
        if invalid:
            raise ValueError(f"InvalidArgument: {name} got unknown arguments {invalid}")
        missing = sorted(required - set(args))
        if missing:
            raise ValueError(f"MissingArguments: {name} needs {missing}")
        if "objectId" in required and self._get(args["objectId"]) is None:
            return self._event(name, False, error="Object ID appears to be invalid.")
        success, extra, error = getattr(self, f"_do_{name}")(**args)
        return self._event(name, success, extra, error)

    def stop(self) -> None:
        self.stopped = True

    @property
    def last_event(self) -> FakeEvent:
        return self._last

    # -- world ------------------------------------------------------------------------
    def _event(self, action: str, success: bool, extra: Any = None, error: str = "") -> FakeEvent:
        self._events += 1
        metadata = {
            "lastAction": action,
            "lastActionSuccess": success,
            "errorMessage": "" if success else (error or f"{action} failed"),
            "agent": copy.deepcopy(self.agent),
            "objects": copy.deepcopy(self.objects),
            "inventoryObjects": copy.deepcopy(self.inventory),
            "actionReturn": extra,
            "sceneName": self.scene,
        }
        frame = np.full((self.height, self.width, 3), self._events % 256, dtype=np.uint8)
        self._last = FakeEvent(metadata, frame)
        return self._last

    def _get(self, object_id: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["objectId"] == object_id), None)

    def _container(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return next(
            (o for o in self.objects if obj["objectId"] in (o["receptacleObjectIds"] or ())),
            None,
        )

    def _visible(self, obj: dict[str, Any]) -> bool:
        container = self._container(obj)
        if container is not None and container["openable"] and not container["isOpen"]:
            return False
        pos, agent = obj["position"], self.agent["position"]
        dx, dz = pos["x"] - agent["x"], pos["z"] - agent["z"]
        if math.hypot(dx, dz) > self.visibility:
            return False
        if math.hypot(dx, dz) < 1e-9:
            return True
        facing = math.radians(self.agent["rotation"]["y"])
        cos = (dx * math.sin(facing) + dz * math.cos(facing)) / math.hypot(dx, dz)
        return cos >= math.cos(math.radians(self.field_of_view / 2)) - 1e-9

    def _reachable(self, obj: dict[str, Any], force: bool) -> str:
        return "" if force or self._visible(obj) else f"{obj['objectId']} is not visible"

    @staticmethod
    def _ok(error: str = "", extra: Any = None) -> tuple[bool, Any, str]:
        return not error, extra, error

    # -- actions ----------------------------------------------------------------------
    def _do_TeleportFull(self, x, y, z, rotation, horizon, standing, forceAction=False):
        if not forceAction and not -MAX_UP <= float(horizon) <= MAX_DOWN:
            return self._ok(f"horizon {horizon} outside [-{MAX_UP}:{MAX_DOWN}]")
        rotation = rotation if isinstance(rotation, dict) else {"x": 0, "y": rotation, "z": 0}
        self.agent.update(
            position={"x": x, "y": y, "z": z},
            rotation={k: float(v) for k, v in rotation.items()},
            cameraHorizon=float(horizon),
            isStanding=bool(standing),
        )
        return self._ok()

    def _do_Pass(self):
        return self._ok()

    def _do_SetObjectStates(self, SetObjectStates):
        return self._ok()

    def _do_SetObjectPoses(self, objectPoses, placeStationary=True):
        return self._ok()

    def _do_GetReachablePositions(self, gridSize=0.25):
        return self._ok(extra=[{"x": x * 0.25, "y": 0.9, "z": z * 0.25} for x, z in CORRIDOR])

    def _do_MoveAhead(self, moveMagnitude=0.25, **_):
        rot = round(self.agent["rotation"]["y"] / 90) % 4
        dx, dz = {0: (0, 1), 1: (1, 0), 2: (0, -1), 3: (-1, 0)}[rot]
        pos = self.agent["position"]
        cell = (round(pos["x"] / 0.25) + dx, round(pos["z"] / 0.25) + dz)
        if cell not in CORRIDOR:
            return self._ok("blocked")
        pos["x"], pos["z"] = cell[0] * 0.25, cell[1] * 0.25
        return self._ok()

    def _rotate(self, sign, degrees=90, **_):
        self.agent["rotation"]["y"] = (self.agent["rotation"]["y"] + sign * degrees) % 360
        return self._ok()

    def _do_RotateRight(self, **kw):
        return self._rotate(+1, **kw)

    def _do_RotateLeft(self, **kw):
        return self._rotate(-1, **kw)

    def _look(self, sign, degrees=30, **_):
        horizon = self.agent["cameraHorizon"] + sign * degrees
        if not -MAX_UP <= horizon <= MAX_DOWN:
            return self._ok(f"can't look beyond the horizon limit ({horizon})")
        self.agent["cameraHorizon"] = horizon
        return self._ok()

    def _do_LookDown(self, **kw):
        return self._look(+1, **kw)

    def _do_LookUp(self, **kw):
        return self._look(-1, **kw)

    def _do_PickupObject(self, objectId, forceAction=False, manualInteract=False):
        obj = self._get(objectId)
        if error := self._reachable(obj, forceAction):
            return self._ok(error)
        if self.inventory or not obj["pickupable"]:
            return self._ok(f"cannot pick up {objectId}")
        container = self._container(obj)
        if container is not None:
            container["receptacleObjectIds"].remove(objectId)
        self.inventory = [{"objectId": objectId, "objectType": obj["objectType"]}]
        return self._ok()

    def _do_PutObject(self, objectId, forceAction=False, placeStationary=True):
        recep = self._get(objectId)
        if error := self._reachable(recep, forceAction):
            return self._ok(error)
        if not self.inventory or not recep["receptacle"]:
            return self._ok(f"cannot put anything into {objectId}")
        if recep["openable"] and not recep["isOpen"]:
            return self._ok(
                "Target openable Receptacle is CLOSED, can't place if target is not open!"
            )
        held = self._get(self.inventory.pop()["objectId"])
        held["position"] = dict(recep["position"])
        recep["receptacleObjectIds"].append(held["objectId"])
        return self._ok()

    def _set(self, capability, key, value, objectId, forceAction=False, **_):
        obj = self._get(objectId)
        if error := self._reachable(obj, forceAction):
            return self._ok(error)
        if not obj[capability]:
            return self._ok(f"{objectId} is not {capability}")
        obj[key] = value
        return self._ok()

    def _do_OpenObject(self, objectId, forceAction=False, openness=1.0):
        return self._set("openable", "isOpen", openness > 0, objectId, forceAction)

    def _do_CloseObject(self, **kw):
        return self._set("openable", "isOpen", False, **kw)

    def _do_ToggleObjectOn(self, **kw):
        return self._set("toggleable", "isToggled", True, **kw)

    def _do_ToggleObjectOff(self, **kw):
        return self._set("toggleable", "isToggled", False, **kw)

    def _do_SliceObject(self, **kw):
        return self._set("sliceable", "isSliced", True, **kw)

    def _do_CleanObject(self, **kw):
        return self._set("dirtyable", "isDirty", False, **kw)
