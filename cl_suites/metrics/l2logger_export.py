"""Export a run log to the l2logger TSV layout read by DARPA's ``l2metrics`` tool.

Layout (l2logger log format 1.1)::

    OUT_DIR/                        the "scenario directory" passed to l2metrics -l
      logger_info.json              {"metrics_columns": ["reward"], "log_format_version": "1.1"}
      scenario_info.json            {"scenario_type": "custom", "author": ..., run metadata}
      WORKER/
        0-test/data-log.tsv         Evaluation Block 0 (before the first Learning Block)
        1-train/data-log.tsv        Learning Block 0 (training episodes of segment 0)
        2-test/data-log.tsv         Evaluation Block 1
        ...

``data-log.tsv`` columns, in order: ``block_num, exp_num, worker_id, block_type,
block_subtype, task_name, task_params, exp_status, timestamp`` then the extra columns in
alphabetical order, ``reward, steps``. One row per training episode (train blocks, reward =
episode return) and per task evaluation (test blocks, reward = mean eval return, test split
where the task has one). ``exp_num`` increases over the whole log; ``steps`` is the agent
step; ``timestamp`` is ``%Y%m%dT%H%M%S.%f`` from the run's start time plus wall time
(interpolated over steps for episodes). Task names are lower-case with ``_`` replaced by
``-`` (l2metrics splits names on ``_``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from cl_suites.metrics.l2m import l2m_task_name, lifetime_log
from cl_suites.metrics.runs import RunData, load_run
from cl_suites.metrics.safe_names import safe_name

LOG_FORMAT_VERSION = "1.1"
STANDARD_COLUMNS = (
    "block_num",
    "exp_num",
    "worker_id",
    "block_type",
    "block_subtype",
    "task_name",
    "task_params",
    "exp_status",
    "timestamp",
)
METRIC_COLUMNS = ("reward", "steps")
TSV_COLUMNS = STANDARD_COLUMNS + METRIC_COLUMNS


def _start_time(run: RunData) -> _dt.datetime:
    raw = run.metadata.get("start_time")
    try:
        return _dt.datetime.fromisoformat(raw) if raw else _dt.datetime(1970, 1, 1)
    except (TypeError, ValueError):
        return _dt.datetime(1970, 1, 1)


def export_l2logger(
    run: RunData | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    worker: str | None = None,
    scenario_info: dict | None = None,
) -> Path:
    """Write one run in the l2logger layout under ``out_dir`` (the scenario directory).

    The rows are :func:`~cl_suites.metrics.l2m.lifetime_log`, the same experiences
    :func:`~cl_suites.metrics.l2m.l2m_metrics` scores. A training segment without a finished
    episode cannot be expressed in the l2logger format (a block needs at least one
    experience): it is left out with a :class:`UserWarning` naming the segment, so
    ``l2metrics`` sees two Evaluation Blocks in a row there.

    Args:
        run: a loaded run or its directory.
        out_dir: scenario directory to create (files in it are overwritten).
        worker: worker directory / ``worker_id`` (default ``"<method>-seed<seed>"``), made
            safe for a directory name (:func:`~cl_suites.metrics.safe_names.safe_name`).
        scenario_info: extra keys for ``scenario_info.json`` (e.g. ``complexity``,
            ``difficulty``; l2metrics warns when they are missing).

    Returns:
        ``out_dir`` as a Path.
    """
    if not isinstance(run, RunData):
        run = load_run(run)
    out = Path(out_dir)
    worker_id = safe_name(worker or f"{run.method}-seed{run.seed}", what="worker")
    names = dict(zip(run.schedule["task_id"].astype(int), run.schedule["task_name"], strict=False))
    for t in run.metadata.get("tasks") or []:
        names.setdefault(int(t["task_id"]), t["task_name"])
    start = _start_time(run)
    log = lifetime_log(run)
    trained = set(log.loc[log["block_type"] == "train", "block"].astype(int))
    for k, seg in run.schedule.sort_values("start_step").reset_index(drop=True).iterrows():
        if k not in trained and int(seg["start_step"]) <= run.last_step:
            warnings.warn(
                f"{run.path}: training segment {k} (task {int(seg['task_id'])} "
                f"{seg['task_name']}, steps {int(seg['start_step'])}-{int(seg['end_step'])}) "
                "has no finished episode; the l2logger format cannot express an empty "
                "block, so the export has no Learning Block there",
                UserWarning,
                stacklevel=2,
            )
    out.mkdir(parents=True, exist_ok=True)
    (out / "logger_info.json").write_text(
        json.dumps(
            {"metrics_columns": ["reward"], "log_format_version": LOG_FORMAT_VERSION}, indent=2
        )
    )
    info = {
        "author": "cl-suites",
        "scenario_type": "custom",
        "suite_id": run.metadata.get("suite_id"),
        "method": run.method,
        "seed": run.seed,
        "schedule": run.metadata.get("schedule"),
    }
    info.update(scenario_info or {})
    (out / "scenario_info.json").write_text(json.dumps(info, indent=2, default=str))
    stamps = [
        (start + _dt.timedelta(seconds=float(w))).strftime("%Y%m%dT%H%M%S.%f")
        for w in np.nan_to_num(log["wall_time"].to_numpy(dtype=float))
    ]
    frame = pd.DataFrame(
        {
            "block_num": log["block_num"].to_numpy(),
            "exp_num": log["exp_num"].to_numpy(),
            "worker_id": worker_id,
            "block_type": log["block_type"].to_numpy(),
            "block_subtype": "wake",
            "task_name": [l2m_task_name(names.get(int(t), t)) for t in log["task_id"]],
            "task_params": [
                json.dumps({"task_id": int(t), "split": str(sp)})
                for t, sp in zip(log["task_id"], log["split"], strict=False)
            ],
            "exp_status": "complete",
            "timestamp": stamps,
            "reward": log["perf"].to_numpy(dtype=float),
            "steps": log["total_step"].to_numpy(dtype=np.int64),
        }
    )
    for (block_num, block_type), rows in frame.groupby(["block_num", "block_type"], sort=True):
        block_dir = out / worker_id / f"{block_num}-{block_type}"
        block_dir.mkdir(parents=True, exist_ok=True)
        rows[list(TSV_COLUMNS)].to_csv(
            block_dir / "data-log.tsv", sep="\t", index=False, lineterminator="\n"
        )
    return out
