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
import re
from pathlib import Path

import numpy as np
import pandas as pd

from cl_suites.metrics.runs import RunData, load_run, metric_split

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
_WORKER_OK = re.compile(r"[^0-9a-zA-Z_\-.]")


def _task_label(name: str) -> str:
    return str(name).lower().replace("_", "-").replace(" ", "-")


def _start_time(run: RunData) -> _dt.datetime:
    raw = run.metadata.get("start_time")
    try:
        return _dt.datetime.fromisoformat(raw) if raw else _dt.datetime(1970, 1, 1)
    except ValueError:
        return _dt.datetime(1970, 1, 1)


def export_l2logger(
    run: RunData | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    worker: str | None = None,
    scenario_info: dict | None = None,
) -> Path:
    """Write one run in the l2logger layout under ``out_dir`` (the scenario directory).

    Args:
        run: a loaded run or its directory.
        out_dir: scenario directory to create (files in it are overwritten).
        worker: worker directory / ``worker_id`` (default ``"<method>-seed<seed>"``).
        scenario_info: extra keys for ``scenario_info.json`` (e.g. ``complexity``,
            ``difficulty``; l2metrics warns when they are missing).

    Returns:
        ``out_dir`` as a Path.
    """
    if not isinstance(run, RunData):
        run = load_run(run)
    out = Path(out_dir)
    worker_id = _WORKER_OK.sub("-", worker or f"{run.method}-seed{run.seed}")
    names = dict(zip(run.schedule["task_id"].astype(int), run.schedule["task_name"], strict=False))
    for t in run.metadata.get("tasks") or []:
        names.setdefault(int(t["task_id"]), t["task_name"])
    start = _start_time(run)

    ev = metric_split(run.eval)
    wall = ev.groupby("total_step", observed=True)["wall_time"].max().sort_index()
    seg = run.schedule.sort_values("start_step").reset_index(drop=True)
    bounds = np.r_[seg["start_step"].to_numpy(), seg["end_step"].to_numpy()[-1:]]
    ev_steps = wall.index.to_numpy()

    blocks: list[pd.DataFrame] = []
    ep = run.episodes.sort_values("total_step", kind="stable")
    for k, bound in enumerate(bounds):
        # Evaluation Block k: the eval point at or before the boundary (if reached)
        if len(ev_steps) and bound <= ev_steps.max():
            at = ev_steps[np.searchsorted(ev_steps, bound, side="right") - 1]
            rows = ev[ev["total_step"] == at].sort_values("task_id")
            blocks.append(
                pd.DataFrame(
                    {
                        "block_type": "test",
                        "task_id": rows["task_id"].to_numpy(),
                        "split": rows["split"].to_numpy(),
                        "reward": rows["mean_return"].to_numpy(),
                        "steps": rows["total_step"].to_numpy(),
                        "wall": rows["wall_time"].to_numpy(dtype=float),
                    }
                )
            )
        if k == len(seg):
            break
        s = seg.iloc[k]
        m = (
            (ep["total_step"] >= s["start_step"])
            & (ep["total_step"] < s["end_step"])
            & (ep["task_id"] == s["task_id"])
        )
        part = ep[m]
        if part.empty:
            continue
        steps = part["total_step"].to_numpy()
        wt = np.interp(steps, ev_steps, wall.to_numpy()) if len(ev_steps) else np.zeros(len(steps))
        blocks.append(
            pd.DataFrame(
                {
                    "block_type": "train",
                    "task_id": part["task_id"].astype(int).to_numpy(),
                    "split": "train",
                    "reward": part["episode_return"].to_numpy(),
                    "steps": steps,
                    "wall": wt,
                }
            )
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
    exp = 0
    for block_num, b in enumerate(blocks):
        n = len(b)
        stamps = [
            (start + _dt.timedelta(seconds=float(w))).strftime("%Y%m%dT%H%M%S.%f")
            for w in np.nan_to_num(b["wall"].to_numpy(dtype=float))
        ]
        frame = pd.DataFrame(
            {
                "block_num": block_num,
                "exp_num": np.arange(exp, exp + n),
                "worker_id": worker_id,
                "block_type": b["block_type"].to_numpy(),
                "block_subtype": "wake",
                "task_name": [_task_label(names.get(int(t), t)) for t in b["task_id"]],
                "task_params": [
                    json.dumps({"task_id": int(t), "split": str(sp)})
                    for t, sp in zip(b["task_id"], b["split"], strict=False)
                ],
                "exp_status": "complete",
                "timestamp": stamps,
                "reward": b["reward"].to_numpy(),
                "steps": b["steps"].to_numpy(dtype=np.int64),
            }
        )
        exp += n
        block_dir = out / worker_id / f"{block_num}-{b['block_type'].iloc[0]}"
        block_dir.mkdir(parents=True, exist_ok=True)
        frame[list(TSV_COLUMNS)].to_csv(
            block_dir / "data-log.tsv", sep="\t", index=False, lineterminator="\n"
        )
    return out
