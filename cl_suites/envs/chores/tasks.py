"""CHORES task definitions, read from the metadata shipped in ``cl_suites/data/chores``.

Pure data: nothing here touches the simulator or the demonstration files, so the
sequences can be listed on any machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

SEQUENCE_NAMES: tuple[str, ...] = ("VaryRoom", "VaryTask", "VaryObject", "MultiTraj")
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "pick_two_obj_and_place",
    "pick_clean_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_heat_then_place_in_recep",
)


@dataclass(frozen=True)
class ChoresTask:
    """One CHORES task: a scene, an ALFRED task type and its demonstrations.

    Attributes:
        name: task name (e.g. ``"cool_sliced_potato_13"``).
        sequence: the CHORES sequence it belongs to (``"MultiTraj"``).
        task_type: ALFRED task type (``"pick_cool_then_place_in_recep"``).
        scene: AI2-THOR floor plan number (``13`` is ``FloorPlan13``).
        object: target object type (``"Potato"``); ``sliced`` when it must be sliced first.
        receptacle: final receptacle type (``"SinkBasin"``).
        train_demos / test_demos: ALFRED demonstration ids
            (``"<task folder>/<trial id>"``); ``test_demos`` is empty when the paper
            evaluates on the training setting.
        demo_folders: data folder of each split (``{"train": "train", "test": "valid_seen"}``).
    """

    name: str
    sequence: str
    task_type: str
    scene: int
    object: str
    receptacle: str
    sliced: bool
    train_demos: tuple[str, ...]
    test_demos: tuple[str, ...] = ()
    demo_folders: tuple[tuple[str, str], ...] = (("train", "train"), ("test", "valid_seen"))

    @property
    def floor_plan(self) -> str:
        return f"FloorPlan{self.scene}"

    def demos(self, split: str) -> tuple[str, ...]:
        """The demonstration ids of ``split`` (``"train"`` or ``"test"``)."""
        if split == "train":
            return self.train_demos
        if split == "test" and self.test_demos:
            return self.test_demos
        have = ("train", "test") if self.test_demos else ("train",)
        raise ValueError(f"CHORES task {self.name!r} has no split {split!r}; it has {have}")

    def demo_folder(self, split: str) -> str:
        """The folder of ``split`` under the data directory (``"train"``/``"valid_seen"``)."""
        return dict(self.demo_folders)[split]


@lru_cache(maxsize=1)
def _metadata() -> dict[str, Any]:
    text = resources.files("cl_suites").joinpath("data/chores/sequences.json").read_text()
    return json.loads(text)


def sequence_tasks(sequence: str) -> tuple[ChoresTask, ...]:
    """The tasks of CHORES sequence ``sequence`` in training order."""
    meta = _metadata()
    if sequence not in meta["sequences"]:
        raise ValueError(f"unknown CHORES sequence {sequence!r}; use one of {SEQUENCE_NAMES}")
    folders = tuple(sorted(meta["demo_folders"].items()))
    return tuple(
        ChoresTask(
            name=t["name"],
            sequence=sequence,
            task_type=t["task_type"],
            scene=int(t["scene"]),
            object=t["object"],
            receptacle=t["receptacle"],
            sliced=bool(t["sliced"]),
            train_demos=tuple(t["train"]),
            test_demos=tuple(t.get("test", ())),
            demo_folders=folders,
        )
        for t in meta["sequences"][sequence]["tasks"]
    )


def has_test_split(sequence: str) -> bool:
    """Whether the paper evaluates ``sequence`` on held-out demonstrations."""
    sequence_tasks(sequence)  # validates the name
    return bool(_metadata()["sequences"][sequence]["test_split"])
