"""The ALFRED-format demonstrations that initialise CHORES episodes.

Layout (the CORA trajectory archive, unzipped)::

    <data dir>/train/<task folder>/<trial id>/traj_data.json
    <data dir>/train/<task folder>/<trial id>/raw_images/<image>.png   (when present)
    <data dir>/valid_seen/<task folder>/<trial id>/traj_data.json

The data directory is the ``alfred_data_dir=`` argument, else the environment variable
``CL_SUITES_ALFRED_DATA``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_suites.envs.chores.errors import AlfredDataNotFoundError

DATA_ENV_VAR = "CL_SUITES_ALFRED_DATA"
TRAJ_FILE = "traj_data.json"
DATA_URL = (
    "https://onedrive.live.com/download?cid=601D311D0FC404D4&resid=601D311D0FC404D4%2155915"
    "&authkey=APSnA-AKY4Yw_vA"
)
DATA_HELP = (
    "Get the CHORES demonstrations (about 1 GB, ALFRED format, from the CORA authors):\n"
    f'  wget -O cora_trajs.zip "{DATA_URL}" && unzip cora_trajs.zip\n'
    f"then point cl-suites at the unzipped folder (it holds train/ and valid_seen/):\n"
    f"  export {DATA_ENV_VAR}=$PWD/cora_trajs   (or pass alfred_data_dir=...)"
)


@dataclass(frozen=True)
class LowAction:
    """One low-level step of a demonstration's plan.

    ``name`` is the discrete CHORES action (``"MoveAhead_25"``), ``object_id`` the
    object it acts on (for ``PutObject``: the receptacle), ``high_idx`` its subgoal.
    """

    name: str
    object_id: str | None
    high_idx: int


@dataclass(frozen=True)
class ImageRecord:
    """One entry of ``traj_data.json``'s ``images``: a frame recorded while the plan ran,
    during low-level action ``low_idx`` of subgoal ``high_idx``."""

    high_idx: int
    low_idx: int
    image_name: str


TARGET_RULES: tuple[str, ...] = ("cora", "per_action")
"""How interactions pick their object (``Demonstration.target``)."""


@dataclass(frozen=True)
class Demonstration:
    """The parts of an ALFRED ``traj_data.json`` a CHORES episode needs."""

    demo_id: str
    path: Path
    task_type: str
    scene: int
    object_poses: tuple[dict[str, Any], ...]
    object_toggles: tuple[dict[str, Any], ...]
    dirty_and_empty: bool
    init_action: dict[str, Any]
    subgoals: tuple[dict[str, Any], ...]
    """``planner_action`` of each high-level subgoal, without the final ``End``."""
    low_actions: tuple[LowAction, ...]
    pddl_params: dict[str, Any]
    images: tuple[ImageRecord, ...] = ()

    @property
    def num_subgoals(self) -> int:
        return len(self.subgoals)

    def last_image(self, high_idx: int) -> ImageRecord | None:
        """The last recorded frame of subgoal ``high_idx`` (CORA's goal frame), if any."""
        return next((im for im in reversed(self.images) if im.high_idx == high_idx), None)

    def last_low_index(self, high_idx: int) -> int | None:
        """The low-level action CORA's env takes its target from: ``low_idx`` of the
        subgoal's last recorded frame, or (without ``images``) its last low action."""
        image = self.last_image(high_idx)
        if image is not None:
            return image.low_idx
        indices = [i for i, low in enumerate(self.low_actions) if low.high_idx == high_idx]
        return indices[-1] if indices else None

    def target(self, high_idx: int, action: str, rule: str = "cora") -> str | None:
        """The object interaction ``action`` acts on during subgoal ``high_idx``.

        ``rule="cora"`` (CORA's env): one object per subgoal, the object of the subgoal's
        last low-level action (``last_low_index``), whatever the interaction; ``None``
        when that action has no object (e.g. a GotoLocation subgoal ends with a move).
        ``rule="per_action"``: the object of the subgoal's first low-level ``action``.
        """
        if rule == "cora":
            index = self.last_low_index(high_idx)
            return None if index is None else self.low_actions[index].object_id
        if rule == "per_action":
            return next(
                (
                    low.object_id
                    for low in self.low_actions
                    if low.high_idx == high_idx and low.name == action and low.object_id
                ),
                None,
            )
        raise ValueError(f"interaction_targets {rule!r} is unknown; use one of {TARGET_RULES}")

    def stored_goal_images(self) -> list[Path] | None:
        """Paths of the frames CORA uses as goal images, one per subgoal (the last
        recorded frame of each, under ``raw_images/``, ``.png`` or ``.jpg``), or ``None``
        when the data does not hold them all."""
        paths = []
        for high_idx in range(self.num_subgoals):
            image = self.last_image(high_idx)
            if image is None:
                return None
            stem = self.path.parent / "raw_images" / Path(image.image_name).stem
            found = next((p for p in (stem.with_suffix(".png"), stem.with_suffix(".jpg"))
                          if p.is_file()), None)  # fmt: skip
            if found is None:
                return None
            paths.append(found)
        return paths


def resolve_data_dir(alfred_data_dir: str | os.PathLike | None = None) -> Path:
    """The demonstration directory: the argument, else ``$CL_SUITES_ALFRED_DATA``.

    Raises ``AlfredDataNotFoundError`` (with the download steps) when neither names an
    existing directory.
    """
    raw = alfred_data_dir if alfred_data_dir is not None else os.environ.get(DATA_ENV_VAR)
    if not raw:
        raise AlfredDataNotFoundError(
            "CHORES needs the ALFRED demonstration data, and no data directory was given "
            f"(neither alfred_data_dir= nor ${DATA_ENV_VAR} is set).\n{DATA_HELP}"
        )
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise AlfredDataNotFoundError(
            f"the CHORES data directory {str(path)!r} does not exist.\n{DATA_HELP}"
        )
    return path


def demo_path(data_dir: Path, folder: str, demo_id: str) -> Path:
    return data_dir / folder / demo_id / TRAJ_FILE


def check_demonstrations(data_dir: Path, folder: str, demo_ids: Sequence[str]) -> None:
    """Raise ``AlfredDataNotFoundError`` listing the demonstrations missing under ``data_dir``."""
    missing = [d for d in demo_ids if not demo_path(data_dir, folder, d).is_file()]
    if missing:
        listed = "\n".join(f"  {demo_path(data_dir, folder, d)}" for d in missing)
        raise AlfredDataNotFoundError(
            f"{len(missing)} CHORES demonstration(s) are missing from {str(data_dir)!r}:\n"
            f"{listed}\n{DATA_HELP}"
        )


def _target(api_action: dict[str, Any]) -> str | None:
    if api_action.get("action") == "PutObject":
        return api_action.get("receptacleObjectId") or api_action.get("objectId")
    return api_action.get("objectId") or None


def parse_demonstration(traj: dict[str, Any], demo_id: str, path: Path) -> Demonstration:
    """A ``Demonstration`` from the JSON content of a ``traj_data.json``."""
    scene = traj["scene"]
    high = [h["planner_action"] for h in traj["plan"]["high_pddl"]]
    if high and high[-1].get("action") == "End":
        high = high[:-1]
    lows = tuple(
        LowAction(
            name=low["discrete_action"]["action"],
            object_id=_target(low["api_action"]),
            high_idx=int(low["high_idx"]),
        )
        for low in traj["plan"]["low_actions"]
    )
    return Demonstration(
        demo_id=demo_id,
        path=path,
        task_type=traj["task_type"],
        scene=int(scene["scene_num"]),
        object_poses=tuple(scene["object_poses"]),
        object_toggles=tuple(scene.get("object_toggles") or ()),
        dirty_and_empty=bool(scene.get("dirty_and_empty", False)),
        init_action=dict(scene["init_action"]),
        subgoals=tuple(high),
        low_actions=lows,
        pddl_params=dict(traj["pddl_params"]),
        images=tuple(
            ImageRecord(int(im["high_idx"]), int(im["low_idx"]), str(im["image_name"]))
            for im in traj.get("images") or ()
        ),
    )


def load_demonstration(data_dir: Path, folder: str, demo_id: str) -> Demonstration:
    """Read and parse one demonstration (``AlfredDataNotFoundError`` naming the file when
    it is missing or not an ALFRED ``traj_data.json``)."""
    path = demo_path(data_dir, folder, demo_id)
    try:
        with open(path) as f:
            traj = json.load(f)
    except FileNotFoundError as e:
        raise AlfredDataNotFoundError(
            f"CHORES demonstration {str(path)!r} is missing.\n{DATA_HELP}"
        ) from e
    except (OSError, ValueError) as e:
        raise AlfredDataNotFoundError(
            f"CHORES demonstration {str(path)!r} is not readable JSON ({e})"
        ) from e
    try:
        return parse_demonstration(traj, demo_id, path)
    except (KeyError, TypeError, ValueError) as e:
        raise AlfredDataNotFoundError(
            f"CHORES demonstration {str(path)!r} is not an ALFRED traj_data.json "
            f"(missing or bad field: {e})"
        ) from e
