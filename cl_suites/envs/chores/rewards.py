"""ALFRED's dense subgoal reward, as CHORES uses it.

Each demonstration's plan is a list of subgoals (GotoLocation, PickupObject, PutObject,
CleanObject, CoolObject, ...). Every step the current subgoal scores the transition;
when it reports completion the next subgoal becomes current. Completing the whole task
adds a goal reward, and every step beyond the demonstration's length costs a small
penalty. The values are ALFRED's dense-reward configuration (``rewards.json`` of
askforalfred/alfred); rewards are in ALFRED's units, unclipped (metrics clip returns at
-10 per the suite's ``metric_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cl_suites.envs.chores.data import Demonstration
from cl_suites.envs.chores.navigation import NavGrid, discrete_pose, parse_location

GOAL_REWARD = 5.0
STEP_PENALTY = -0.01
MIN_REACH_DISTANCE = 3
NAV_DISTANCE_FACTOR = 0.2

# subgoal -> (positive, negative, invalid_action)
SUBGOAL_REWARDS: dict[str, tuple[float, float, float]] = {
    "GotoLocation": (4.0, 0.0, -0.5),
    "PickupObject": (2.0, -1.0, -0.1),
    "PutObject": (2.0, -1.0, -0.1),
    "OpenObject": (2.0, -0.05, -0.1),
    "CloseObject": (1.0, 0.0, -0.1),
    "ToggleObject": (1.0, -1.0, -0.1),
    "SliceObject": (1.0, -4.0, -0.1),
    "CleanObject": (2.0, 0.0, -0.1),
    "HeatObject": (2.0, 0.0, -0.1),
    "CoolObject": (2.0, 0.0, -0.1),
}
# the simulator actions each subgoal accepts; any other action scores ``invalid_action``
VALID_ACTIONS: dict[str, frozenset[str]] = {
    "GotoLocation": frozenset({"MoveAhead", "RotateLeft", "RotateRight", "LookUp", "LookDown"}),
    "PickupObject": frozenset({"PickupObject", "OpenObject", "CloseObject"}),
    "PutObject": frozenset({"PutObject", "OpenObject", "CloseObject"}),
    "OpenObject": frozenset({"OpenObject"}),
    "CloseObject": frozenset({"CloseObject"}),
    "ToggleObject": frozenset({"ToggleObjectOn", "ToggleObjectOff"}),
    "SliceObject": frozenset({"SliceObject", "OpenObject", "CloseObject"}),
    "CleanObject": frozenset({"PutObject", "PickupObject", "ToggleObjectOn", "ToggleObjectOff"}),
    "HeatObject": frozenset(
        {
            "OpenObject",
            "CloseObject",
            "PickupObject",
            "PutObject",
            "ToggleObjectOn",
            "ToggleObjectOff",
        }
    ),
    "CoolObject": frozenset({"OpenObject", "CloseObject", "PickupObject", "PutObject"}),
}


@dataclass
class WorldState:
    """Object state changes THOR does not track itself (ALFRED's bookkeeping), cleared at
    every episode start (ALFRED's ``ThorEnv.reset_states``)."""

    cleaned: set[str] = field(default_factory=set)
    cooled: set[str] = field(default_factory=set)
    heated: set[str] = field(default_factory=set)


@dataclass
class CoolingRewardFlags:
    """Whether the CoolObject subgoal's two intermediate rewards (the object got cold,
    the fridge was reopened) were paid. ALFRED and CORA keep them on the simulator
    wrapper and never reset them, so each is paid once per env lifetime; the env decides
    how long one object lives (``ChoresEnv(cooling_rewards=...)``)."""

    cooled: bool = False
    reopened: bool = False


@dataclass(frozen=True)
class Outcome:
    """What one step did: the simulator action name, whether it succeeded, and the
    simulator metadata after it."""

    action: str
    success: bool
    metadata: Mapping[str, Any]


def get_object(object_id: str | None, metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for obj in metadata.get("objects", ()):
        if obj["objectId"] == object_id:
            return obj
    return None


def _objects_with(name: str, prop: str, metadata: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [o for o in metadata.get("objects", ()) if name in o["objectId"] and o.get(prop)]


def _held_id(metadata: Mapping[str, Any]) -> str | None:
    inventory = metadata.get("inventoryObjects") or []
    return inventory[0]["objectId"] if inventory else None


def _unsliced(object_id: str) -> str:
    return object_id.split("Sliced")[0]


def _contains(receptacle: Mapping[str, Any], object_id: str) -> bool:
    return object_id in (receptacle.get("receptacleObjectIds") or ())


def goal_conditions(
    demo: Demonstration, metadata: Mapping[str, Any], world: WorldState
) -> tuple[int, int]:
    """(satisfied, total) goal conditions of the demonstration's task type."""
    params = demo.pddl_params
    target = params["object_target"] + ("Sliced" if params.get("object_sliced") else "")
    receptacles = _objects_with(params["parent_target"], "receptacle", metadata)
    pickupables = _objects_with(target, "pickupable", metadata)
    sliced = "Sliced" in target
    done, total = 0, 0
    if demo.task_type == "pick_two_obj_and_place":
        total = 2
        if sliced:
            total += 2
            done += min(sum("Sliced" in p["objectId"] for p in pickupables), 2)
        counts = [sum(_contains(r, p["objectId"]) for p in pickupables) for r in receptacles]
        return done + min(max(counts, default=0), 2), total
    if sliced:
        total += 1
        done += any("Sliced" in p["objectId"] for p in pickupables)
    in_place = [
        p["objectId"] for p in pickupables for r in receptacles if _contains(r, p["objectId"])
    ]
    if demo.task_type == "pick_and_place_simple":
        return done + bool(in_place), total + 1
    changed = {
        "pick_clean_then_place_in_recep": world.cleaned,
        "pick_cool_then_place_in_recep": world.cooled,
        "pick_heat_then_place_in_recep": world.heated,
    }[demo.task_type]
    treated = [p["objectId"] for p in pickupables if p["objectId"] in changed]
    done += bool(in_place) + bool(treated) + any(o in treated for o in in_place)
    return done, total + 3


class SubgoalReward:
    """ALFRED's dense reward over one episode of one demonstration.

    Attributes:
        goal_idx: index of the current subgoal (stays on the last one once done).
        completed: number of subgoals completed so far.
        goal_finished: the whole task's goal conditions hold.
    """

    def __init__(
        self,
        demo: Demonstration,
        nav: NavGrid | None,
        world: WorldState,
        cooling: CoolingRewardFlags | None = None,
    ):
        self.demo = demo
        self.nav = nav
        self.world = world
        self.cooling = cooling if cooling is not None else CoolingRewardFlags()
        self.reset({})

    def reset(self, metadata: Mapping[str, Any]) -> None:
        self.goal_idx = 0
        self.completed = 0
        self.step_num = 0
        self.goal_finished = False
        self.prev_metadata = metadata

    @property
    def subgoal(self) -> Mapping[str, Any]:
        return self.demo.subgoals[self.goal_idx]

    def step(self, outcome: Outcome) -> float:
        """The reward of the transition that produced ``outcome``."""
        if self.goal_finished:
            return 0.0
        reward, done = self._subgoal_reward(outcome)
        if done:
            self.completed += 1
            if self.goal_idx + 1 < self.demo.num_subgoals:
                self.goal_idx += 1
        satisfied, total = goal_conditions(self.demo, outcome.metadata, self.world)
        if satisfied == total:
            reward += GOAL_REWARD
            self.goal_finished = True
        if self.step_num > len(self.demo.low_actions):
            reward += STEP_PENALTY
        self.prev_metadata = outcome.metadata
        self.step_num += 1
        return reward

    def _subgoal_reward(self, outcome: Outcome) -> tuple[float, bool]:
        kind = self.subgoal["action"]
        key = "ToggleObject" if kind.startswith("ToggleObject") else kind
        positive, negative, invalid = SUBGOAL_REWARDS[key]
        if outcome.action not in VALID_ACTIONS[key]:
            return invalid, False
        meta, sub = outcome.metadata, self.subgoal
        if key == "GotoLocation":
            return self._goto_reward(meta, positive)
        if key == "PickupObject":
            held = _held_id(meta)
            if held is None:
                return 0.0, False
            ok = _unsliced(held) == _unsliced(sub["objectId"])
            return (positive, True) if ok else (negative, False)
        if key == "PutObject":
            recep = get_object(sub["receptacleObjectId"], meta)
            if recep is None:
                return 0.0, False
            return (positive, True) if _contains(recep, sub["objectId"]) else (negative, False)
        if key in ("OpenObject", "CloseObject", "ToggleObject", "SliceObject"):
            obj = get_object(sub["objectId"], meta)
            if obj is None:
                return 0.0, False
            ok = {
                "OpenObject": lambda: obj.get("isOpen"),
                "CloseObject": lambda: not obj.get("isOpen"),
                "ToggleObject": lambda: obj.get("isToggled"),
                "SliceObject": lambda: obj.get("isSliced"),
            }[key]()
            return (positive, True) if ok else (negative, False)
        if key == "CleanObject":
            ok = sub["cleanObjectId"] in self.world.cleaned
            return (positive, True) if ok else (negative, False)
        if key == "HeatObject":
            put_id = self._later_put_object()
            if put_id is None:
                return 0.0, False
            return (positive, True) if put_id in self.world.heated else (negative, False)
        return self._cool_reward(outcome, positive)

    def _later_put_object(self) -> str | None:
        # heat/cool is followed by GotoLocation then PutObject of the treated object
        idx = self.goal_idx + 2
        return self.demo.subgoals[idx]["objectId"] if idx < self.demo.num_subgoals else None

    def _goto_reward(self, meta: Mapping[str, Any], positive: float) -> tuple[float, bool]:
        if self.nav is None or "agent" not in meta or "agent" not in self.prev_metadata:
            return 0.0, False
        target = parse_location(self.subgoal["location"])
        now = self.nav.distance(discrete_pose(meta["agent"]), target)
        before = self.nav.distance(discrete_pose(self.prev_metadata["agent"]), target)
        reward = 0.0
        if now is not None and before is not None:
            reward = (before - now) * NAV_DISTANCE_FACTOR
        done = now is not None and now < MIN_REACH_DISTANCE
        return (reward + positive, True) if done else (reward, False)

    def _cool_reward(self, outcome: Outcome, positive: float) -> tuple[float, bool]:
        cool_id = self._later_put_object()
        if cool_id is None or cool_id not in self.world.cooled:
            return 0.0, False
        if not self.cooling.cooled:  # intermediate: the object got cold
            self.cooling.cooled = True
            return positive, False
        if outcome.action == "OpenObject":  # intermediate: fridge reopened
            fridge = get_object(self.subgoal["objectId"], outcome.metadata)
            if fridge is not None and fridge.get("isOpen") and not self.cooling.reopened:
                self.cooling.reopened = True
                return positive, False
            return 0.0, False
        if outcome.action == "PickupObject" and _held_id(outcome.metadata) == cool_id:
            return positive, True
        return 0.0, False
