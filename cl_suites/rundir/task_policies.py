"""The policy of every task's end, kept in the run directory (job option ``keep_task_policies``).

``RUN_DIR/checkpoint/task-NNN.<ext>``, one file per segment of the run's schedule: ``NNN``
is the segment's index (3 digits or more), so a sequence repeated with ``cycles > 1``
keeps every repetition's policy. ``.pt`` (the torch learners: the policy's state dict,
read with ``torch.load(weights_only=True)``) or ``.npz`` (``ppo-jax``: the parameter tree
as plain arrays, read with ``np.load(allow_pickle=False)``); each holds what the policy
needs to act, and the segment, task, cycle and step it ended. The learner's run metadata
(``metadata.json``) says how to rebuild the network (``cl_suites.job.task_policies``).

Each file is written atomically at its task's end, with the parameters the evaluation of
that end acted with, and before the checkpoint of that step. The checkpoint retention
keeps ``step-*.pt`` / ``jax_state*.npz`` and never touches these files. A resume removes
the files of the segments that end after the checkpoint it resumes from (as it cuts the
logs back) and writes them again when it gets there: the same bytes where the resume is
exact (``docs/baselines.md``, "Resume").
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHECKPOINT_DIR = "checkpoint"
TASK_POLICY_GLOB = f"{CHECKPOINT_DIR}/task-*"
"""Where a run's task policies are (``task-NNN.pt`` / ``task-NNN.npz``)."""
_NAME = re.compile(r"^task-(\d{3,})\.(pt|npz)$")


def task_policy_path(run_dir: str | os.PathLike[str], segment: int, ext: str) -> Path:
    """``RUN_DIR/checkpoint/task-NNN.<ext>`` of schedule segment ``segment``."""
    return Path(run_dir) / CHECKPOINT_DIR / f"task-{int(segment):03d}.{ext}"


def task_policy_files(run_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """``{segment: file}`` of the run's task policies, by segment (temporary files of an
    unfinished write are not among them)."""
    directory = Path(run_dir) / CHECKPOINT_DIR
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def remove_task_policies_after(
    run_dir: str | os.PathLike[str], schedule: Sequence[Any], step: int
) -> list[Path]:
    """Remove the task policies of the segments of ``schedule`` that end after ``step``
    (the step a resume continues from; ``-1``: a run that starts over). Returns them."""
    removed = []
    for segment, path in task_policy_files(run_dir).items():
        if segment >= len(schedule) or int(schedule[segment].end_step) > int(step):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
