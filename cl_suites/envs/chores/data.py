"""The ALFRED-format demonstrations that initialise CHORES episodes.

Layout (the CORA trajectory archive, unzipped)::

    <data dir>/train/<task folder>/<trial id>/traj_data.json
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

    @property
    def num_subgoals(self) -> int:
        return len(self.subgoals)

    def targets(self, high_idx: int) -> dict[str, str]:
        """Action name -> object id of the first interaction of that kind in subgoal
        ``high_idx`` (the task-relevant object an interaction action is applied to)."""
        found: dict[str, str] = {}
        for low in self.low_actions:
            if low.high_idx == high_idx and low.object_id and low.name not in found:
                found[low.name] = low.object_id
        return found


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
    )


def load_demonstration(data_dir: Path, folder: str, demo_id: str) -> Demonstration:
    """Read and parse one demonstration."""
    path = demo_path(data_dir, folder, demo_id)
    try:
        with open(path) as f:
            traj = json.load(f)
    except FileNotFoundError as e:
        raise AlfredDataNotFoundError(
            f"CHORES demonstration {str(path)!r} is missing.\n{DATA_HELP}"
        ) from e
    return parse_demonstration(traj, demo_id, path)
