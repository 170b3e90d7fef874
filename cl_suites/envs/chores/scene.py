"""Putting an AI2-THOR scene into a demonstration's initial state, and frame resizing."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from cl_suites.envs.chores.data import Demonstration


def init_scene(controller: Any, demo: Demonstration) -> Any:
    """Load the demonstration's floor plan and restore its initial state: object
    toggles, dirty/empty objects, object poses, then the agent's pose. Returns the event."""
    controller.reset(scene=f"FloorPlan{demo.scene}")
    for toggle in demo.object_toggles:
        controller.step(action="SetObjectStates", SetObjectStates=toggle)
    if demo.dirty_and_empty:
        for object_type in sorted({p["objectName"].split("_")[0] for p in demo.object_poses}):
            controller.step(
                action="SetObjectStates",
                SetObjectStates={
                    "objectType": object_type,
                    "stateChange": "dirtyable",
                    "isDirty": True,
                },
            )
            controller.step(
                action="SetObjectStates",
                SetObjectStates={
                    "objectType": object_type,
                    "stateChange": "canFillWithLiquid",
                    "isFilledWithLiquid": False,
                },
            )
    controller.step(action="SetObjectPoses", objectPoses=[dict(p) for p in demo.object_poses])
    init = demo.init_action
    return controller.step(
        action="TeleportFull",
        x=init["x"],
        y=init["y"],
        z=init["z"],
        rotation={"x": 0.0, "y": float(init["rotation"]), "z": 0.0},
        horizon=float(init["horizon"]),
        standing=True,
        forceAction=True,
    )


def resize_frame(frame: np.ndarray, size: int) -> np.ndarray:
    """An ``(H, W, 3)`` RGB frame as ``(size, size, 3)`` uint8 (bilinear)."""
    frame = np.asarray(frame, dtype=np.uint8)[..., :3]
    if frame.shape[:2] == (size, size):
        return frame.copy()
    return np.asarray(Image.fromarray(frame).resize((size, size), Image.BILINEAR), dtype=np.uint8)
