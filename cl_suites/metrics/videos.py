"""Evaluation videos of a run directory, for the report.

``cl-suites run --capture-video`` records one evaluation episode per task and split at the
chosen evaluation points into
``RUN_DIR/videos/eval-step{total_step:09d}-task{task_id:02d}-{split}.mp4`` (agent steps).
:func:`find_videos` lists them; the report embeds the latest video of every task and split
and links all others (relative links, so the report and the run directories move together).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

VIDEO_DIR = "videos"
_NAME = re.compile(r"eval-step(?P<step>\d+)-task(?P<task>\d+)-(?P<split>train|test)\.mp4")


@dataclass(frozen=True)
class EvalVideo:
    """One recorded evaluation episode.

    Attributes:
        path: the mp4 file.
        total_step: agent step of the evaluation point (``None`` if the name does not say).
        task_id: task id (``None`` if the name does not say).
        split: ``"train"``/``"test"`` (``None`` if the name does not say).
    """

    path: Path
    total_step: int | None
    task_id: int | None
    split: str | None


def find_videos(run_dir: str | os.PathLike[str]) -> list[EvalVideo]:
    """Every ``*.mp4`` under ``RUN_DIR/videos``, sorted by task, split and step.

    Files that do not follow the naming scheme are kept (step, task and split ``None``)
    and sort last. An unreadable or missing folder gives an empty list.
    """
    folder = Path(run_dir) / VIDEO_DIR
    try:
        files = sorted(p for p in folder.rglob("*.mp4") if p.is_file())
    except OSError:
        return []
    out = []
    for p in files:
        m = _NAME.fullmatch(p.name)
        if m:
            out.append(EvalVideo(p, int(m["step"]), int(m["task"]), m["split"]))
        else:
            out.append(EvalVideo(p, None, None, None))

    def key(v: EvalVideo) -> tuple:
        known = v.task_id is not None
        return (not known, v.task_id or 0, v.split or "", v.total_step or 0, str(v.path))

    return sorted(out, key=key)


def latest_per_task(videos: list[EvalVideo]) -> list[EvalVideo]:
    """The video of the last evaluation point of each (task, split)."""
    last: dict[tuple[int, str], EvalVideo] = {}
    for v in videos:
        if v.task_id is None or v.split is None:
            continue
        k = (v.task_id, v.split)
        if k not in last or (v.total_step or 0) > (last[k].total_step or 0):
            last[k] = v
    return [last[k] for k in sorted(last)]
