"""Putting an AI2-THOR scene into a demonstration's initial state, and frame resizing."""

from __future__ import annotations

from typing import Any

import numpy as np

from cl_suites.envs.chores.data import Demonstration
from cl_suites.envs.chores.errors import DemonstrationReplayError
from cl_suites.errors import require


def describe(demo: Demonstration) -> str:
    """``trajectory <folder>/<demo id> (FloorPlanN)``: how errors name a trajectory."""
    folder = demo.path.parents[2].name
    return f"trajectory {folder}/{demo.demo_id} (FloorPlan{demo.scene})"


def checked_step(controller: Any, demo: Demonstration, call: str, **kwargs: Any) -> Any:
    """``controller.step(**kwargs)``; ``DemonstrationReplayError`` naming the trajectory,
    the scene and ``call`` when the simulator rejects it or reports a failure."""
    try:
        event = controller.step(**kwargs)
    except ValueError as e:
        raise DemonstrationReplayError(f"{describe(demo)}: {call} was rejected: {e}") from e
    if not event.metadata.get("lastActionSuccess"):
        message = event.metadata.get("errorMessage") or "no error message"
        raise DemonstrationReplayError(f"{describe(demo)}: {call} failed: {message}")
    return event


def init_scene(controller: Any, demo: Demonstration) -> Any:
    """Load the demonstration's floor plan and restore its initial state: object
    toggles, dirty/empty objects, object poses, then the agent's pose (ALFRED's
    ``setup_scene``). Every call must succeed (``DemonstrationReplayError`` otherwise).
    Returns the event."""
    controller.reset(scene=f"FloorPlan{demo.scene}")
    for toggle in demo.object_toggles:
        checked_step(
            controller, demo, f"SetObjectStates({toggle})",
            action="SetObjectStates", SetObjectStates=toggle,
        )  # fmt: skip
    if demo.dirty_and_empty:
        for object_type in sorted({p["objectName"].split("_")[0] for p in demo.object_poses}):
            for change, state in (("dirtyable", "isDirty"), ("canFillWithLiquid", None)):
                states = {"objectType": object_type, "stateChange": change}
                states |= {"isDirty": True} if state else {"isFilledWithLiquid": False}
                checked_step(
                    controller, demo, f"SetObjectStates({states})",
                    action="SetObjectStates", SetObjectStates=states,
                )  # fmt: skip
    checked_step(
        controller, demo, f"SetObjectPoses({len(demo.object_poses)} poses)",
        action="SetObjectPoses", objectPoses=[dict(p) for p in demo.object_poses],
    )  # fmt: skip
    init = demo.init_action
    pose = {
        "x": init["x"],
        "y": init["y"],
        "z": init["z"],
        "rotation": {"x": 0.0, "y": float(init["rotation"]), "z": 0.0},
        "horizon": float(init["horizon"]),
        "standing": bool(init.get("standing", True)),
    }
    return checked_step(
        controller, demo, f"TeleportFull({pose})", action="TeleportFull", **pose, forceAction=True
    )


def resize_frame(frame: np.ndarray, size: int) -> np.ndarray:
    """An ``(H, W, 3)`` RGB frame as ``(size, size, 3)`` uint8, resized with
    ``cv2.INTER_LINEAR`` (CORA's ``WarpFrame`` for CHORES)."""
    frame = np.ascontiguousarray(np.asarray(frame, dtype=np.uint8)[..., :3])
    if frame.shape[:2] == (size, size):
        return frame.copy()
    cv2 = require("cv2", extra="chores")
    return cv2.resize(frame, (size, size), interpolation=cv2.INTER_LINEAR)
