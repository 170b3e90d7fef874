"""The 12 CHORES actions and how they run on an ai2thor (5.x) controller.

Interaction actions carry no object argument: the env applies them to the
task-relevant object of the current subgoal (``Demonstration.targets``). Navigation
follows ALFRED's discrete settings: 0.25 m moves, 90-degree turns, 15-degree looks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cl_suites.envs.chores.rewards import Outcome, WorldState, get_object

ACTIONS: tuple[str, ...] = (
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
"""Action index -> CHORES action name (ALFRED's discrete action names, sorted)."""

INTERACTIONS: frozenset[str] = frozenset(
    {
        "CloseObject",
        "OpenObject",
        "PickupObject",
        "PutObject",
        "SliceObject",
        "ToggleObjectOff",
        "ToggleObjectOn",
    }
)

_NAVIGATION: dict[str, dict[str, Any]] = {
    "MoveAhead_25": {"action": "MoveAhead", "moveMagnitude": 0.25, "forceAction": True},
    "RotateLeft_90": {"action": "RotateLeft", "degrees": 90, "forceAction": True},
    "RotateRight_90": {"action": "RotateRight", "degrees": 90, "forceAction": True},
    "LookUp_15": {"action": "LookUp", "degrees": 15, "forceAction": True},
    "LookDown_15": {"action": "LookDown", "degrees": 15, "forceAction": True},
}
_INTERACTION_ARGS: dict[str, dict[str, Any]] = {
    "OpenObject": {"openness": 1.0},
    "CloseObject": {"forceAction": True},
    "PutObject": {"forceAction": True, "placeStationary": True},
}


def thor_action(name: str, object_id: str | None = None) -> dict[str, Any]:
    """The ``controller.step(**kwargs)`` arguments of CHORES action ``name``."""
    if name in _NAVIGATION:
        return dict(_NAVIGATION[name])
    if name not in INTERACTIONS:
        raise ValueError(f"unknown CHORES action {name!r}; use one of {ACTIONS}")
    return {"action": name, "objectId": object_id, **_INTERACTION_ARGS.get(name, {})}


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    pa, pb = a["position"], b["position"]
    return math.dist((pa["x"], pa["y"], pa["z"]), (pb["x"], pb["y"], pb["z"]))


def _contents(obj: Mapping[str, Any] | None) -> set[str]:
    return set((obj or {}).get("receptacleObjectIds") or ())


class ActionRunner:
    """Runs CHORES actions on a controller and keeps ALFRED's clean/cool/heat bookkeeping.

    A step *fails* (counts towards the episode's failed-action limit) when it cannot be
    executed at all: the simulator rejects it as invalid (ai2thor raises ``ValueError``),
    or ``SliceObject`` is tried without a knife in hand. An interaction whose current
    subgoal has no object for it is not sent to the simulator; it is an unsuccessful,
    not failed, step (it still scores the subgoal's invalid-action reward).
    """

    def __init__(self, controller: Any, world: WorldState):
        self.controller = controller
        self.world = world

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.controller.last_event.metadata

    def run(self, name: str, object_id: str | None) -> tuple[Outcome, bool]:
        """Execute ``name`` on ``object_id``; returns the outcome and whether it failed."""
        kwargs = thor_action(name, object_id)
        sim_action = kwargs["action"]
        if name == "SliceObject":  # ALFRED refuses to slice without a knife in hand
            held = self.metadata.get("inventoryObjects") or []
            if not held or "Knife" not in held[0].get("objectType", ""):
                return Outcome(sim_action, False, self.metadata), True
        if name in INTERACTIONS and not object_id:
            return Outcome(sim_action, False, self.metadata), False
        try:
            event = self.controller.step(**kwargs)
        except ValueError:
            return Outcome(sim_action, False, self.metadata), True
        success = bool(event.metadata.get("lastActionSuccess"))
        if success:
            self._track_state(name, object_id)
        return Outcome(sim_action, success, self.metadata), False

    def _track_state(self, name: str, object_id: str | None) -> None:
        meta = self.metadata
        if name == "ToggleObjectOn" and object_id and "Faucet" in object_id:
            self._clean(object_id)
        elif name == "ToggleObjectOn" and object_id and "Microwave" in object_id:
            self.world.heated |= _contents(get_object(object_id, meta))
        elif name == "CloseObject" and object_id and "Fridge" in object_id:
            self.world.cooled |= _contents(get_object(object_id, meta))

    def _clean(self, faucet_id: str) -> None:
        """Everything in the sink basin under a running faucet becomes clean (ALFRED)."""
        meta = self.controller.step(action="Pass").metadata  # let isDirty update
        faucet = get_object(faucet_id, meta)
        basins = [o for o in meta.get("objects", ()) if o.get("objectType") == "SinkBasin"]
        if faucet is None or not basins:
            return
        basin = min(basins, key=lambda o: _distance(o, faucet))
        for obj_id in _contents(basin):
            obj = get_object(obj_id, meta)
            if obj is not None and obj.get("dirtyable") and obj.get("isDirty"):
                self.controller.step(action="CleanObject", objectId=obj_id)
        self.world.cleaned |= _contents(basin)
