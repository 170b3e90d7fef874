"""Loading and validating run directories for the metrics.

A *run* is one directory written by :class:`cl_suites.rundir.runlog.RunLog`. This module turns
one or many of them into tidy pandas frames that every metric consumes:

* ``eval`` frame: one row per (run, eval point, task, split) with the columns of ``eval.csv``
  plus ``run`` (str), ``method``, ``suite``, ``seed``;
* ``schedule`` frame: one row per training segment (``index, cycle, task_id, task_name,
  start_step, end_step``; agent steps, end exclusive).

Bad input gets a defined result or a :class:`MetricsInputError` that names the bad value
(see :func:`clean_eval`). Every non-fatal repair is recorded in ``RunData.issues`` so the
report can say what was done.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cl_suites.errors import InputError
from cl_suites.rundir.progress import read_progress
from cl_suites.rundir.runlock import live_writer
from cl_suites.rundir.runlog import (
    METADATA_FILE,
    CorruptRunLogError,
    read_episode_soups,
    read_episodes,
    read_eval,
    read_heterogeneity,
    read_metadata,
)

SCHEDULE_COLUMNS = ("index", "cycle", "task_id", "task_name", "start_step", "end_step")
MAX_ABS_RETURN = 1e100
"""Largest |return| the metrics accept: sums of squares over millions of rows must stay
finite (a return of 1e308 would overflow every mean to inf)."""


class MetricsInputError(InputError):
    """Input that no metric can be computed from; the message names the bad value."""


@dataclass
class RunData:
    """One loaded run.

    Attributes:
        path: run directory.
        metadata: parsed ``metadata.json``.
        eval: cleaned evaluation table (see :func:`clean_eval`).
        episodes: training-episode table (``total_step, task_id, episode_return,
            episode_length``), returns clipped like ``eval``.
        schedule: training segments (:func:`schedule_frame`).
        issues: human-readable notes on repairs and missing data.
        heterogeneity: ``heterogeneity.csv`` (multi-agent runs; empty otherwise).
        episode_soups: ``episode_soups.csv`` (MEAL runs; empty otherwise).
    """

    path: Path
    metadata: dict[str, Any]
    eval: pd.DataFrame
    episodes: pd.DataFrame
    schedule: pd.DataFrame
    issues: list[str] = field(default_factory=list)
    heterogeneity: pd.DataFrame = field(default_factory=pd.DataFrame)
    episode_soups: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def run_id(self) -> str:
        return str(self.path)

    @property
    def method(self) -> str:
        return str(self.metadata.get("method", "unknown"))

    @property
    def suite(self) -> str:
        return str(self.metadata.get("suite") or self.metadata.get("suite_id") or "unknown")

    @property
    def seed(self) -> int:
        return int(self.metadata.get("seed", 0))

    @property
    def last_step(self) -> int:
        """Largest agent step with an evaluation (``-1`` when there is none)."""
        return int(self.eval["total_step"].max()) if len(self.eval) else -1

    @property
    def smoothing_window(self) -> int:
        settings = self.metadata.get("metric_settings") or {}
        return int(settings.get("smoothing_window") or 20)

    @property
    def step_unit(self) -> str:
        """The unit of the run's steps for axis labels: ``"agent steps"``, or MEAL's
        ``"env steps"`` (metadata ``step_unit`` up to its explanation in brackets; runs
        logged without one count agent steps)."""
        return str(self.metadata.get("step_unit") or "agent steps").split(" (")[0]

    @property
    def is_single_task_expert(self) -> bool:
        """True for single-task-expert (STE) runs: method ``"ste"`` or one task only."""
        return self.method.lower() in {"ste", "single_task", "single-task"} or (
            len(self.schedule) > 0 and self.schedule["task_id"].nunique() == 1
        )


def schedule_frame(metadata: Mapping[str, Any]) -> pd.DataFrame:
    """The training schedule as a frame sorted by ``start_step``.

    Args:
        metadata: run metadata holding ``"schedule"`` (list of segment dicts).

    Returns:
        Frame with columns ``index, cycle, task_id, task_name, start_step, end_step``
        (agent steps, ``end_step`` exclusive), one row per segment.

    Raises:
        MetricsInputError: schedule missing, empty, or with ``end_step <= start_step``.
    """
    segments = metadata.get("schedule")
    if not segments:
        raise MetricsInputError("metadata has no 'schedule' (list of training segments)")
    frame = pd.DataFrame(list(segments))
    missing = [c for c in SCHEDULE_COLUMNS if c not in frame.columns]
    if missing:
        raise MetricsInputError(f"schedule segments lack the keys {missing}")
    frame = frame[list(SCHEDULE_COLUMNS)].sort_values("start_step", kind="stable")
    bad = frame[frame["end_step"] <= frame["start_step"]]
    if len(bad):
        row = bad.iloc[0]
        raise MetricsInputError(
            f"schedule segment {int(row['index'])} has end_step={row['end_step']} "
            f"<= start_step={row['start_step']}"
        )
    return frame.reset_index(drop=True).astype(
        {"index": int, "cycle": int, "task_id": int, "start_step": np.int64, "end_step": np.int64}
    )


def clean_eval(
    frame: pd.DataFrame, clip_min: float | None = None, issues: list[str] | None = None
) -> pd.DataFrame:
    """Validate and repair an evaluation table.

    Rules (each repair is appended to ``issues``):

    * empty table -> :class:`MetricsInputError` ("has no evaluation rows");
    * a last row with missing fields (a write cut short) is dropped;
    * any other row with a non-numeric ``total_step``/``task_id`` -> error naming the row;
    * ``split`` must be ``"train"`` or ``"test"`` -> error naming the value;
    * NaN, infinite and huge (``|mean_return| > MAX_ABS_RETURN``: they would overflow)
      ``mean_return`` rows are dropped (treated as a missing evaluation; curves interpolate
      across them, end-of-task values use the last valid point); a task left without rows
      gets a note that its metrics are n/a; no usable row at all -> error;
    * returns below ``clip_min`` are clipped (CORA appendix C.2: CHORES clip at -10).

    Args:
        frame: rows of ``eval.csv``.
        clip_min: lower clip for ``mean_return`` (``None``: no clipping).
        issues: list that receives notes on repairs.

    Returns:
        A sorted copy (by ``task_id, split, total_step``) with numeric dtypes.
    """
    notes = issues if issues is not None else []
    if len(frame) == 0:
        raise MetricsInputError("eval.csv has no evaluation rows (empty log)")
    frame = frame.copy()
    numeric = ["total_step", "task_id", "mean_return", "std_return", "episodes", "wall_time"]
    for col in numeric:
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    last = frame.iloc[-1]
    if last[["total_step", "task_id", "mean_return"]].isna().any() or pd.isna(last["split"]):
        notes.append("dropped a truncated last row of eval.csv (a write cut short)")
        frame = frame.iloc[:-1]
        if len(frame) == 0:
            raise MetricsInputError("eval.csv has no complete evaluation rows (truncated log)")
    bad = frame[frame["total_step"].isna() | frame["task_id"].isna()]
    if len(bad):
        raise MetricsInputError(
            f"eval.csv row {int(bad.index[0]) + 2} has a non-numeric total_step or task_id: "
            f"{bad.iloc[0].to_dict()}"
        )
    frame["split"] = frame["split"].astype(str)
    bad_split = sorted(set(frame["split"]) - {"train", "test"})
    if bad_split:
        raise MetricsInputError(f"eval.csv has unknown split value(s) {bad_split}")
    returns = frame["mean_return"].to_numpy(dtype=float)
    unusable = ~np.isfinite(returns) | (np.abs(returns) > MAX_ABS_RETURN)
    tasks = frame["task_id"].astype(int).to_numpy()
    dead = ~np.isin(tasks, tasks[~unusable])
    if dead.all():
        raise MetricsInputError(
            "eval.csv has no usable mean_return at all (only NaN, inf or values beyond "
            f"±{MAX_ABS_RETURN:g}); nothing can be computed"
        )
    for task in sorted(set(tasks[dead])):
        values = sorted({f"{v:g}" for v in returns[tasks == task]})
        notes.append(
            f"task {task} has no usable mean_return in eval.csv (only {', '.join(values)}; "
            f"NaN, inf and values beyond ±{MAX_ABS_RETURN:g} cannot be averaged): its "
            "metrics are n/a"
        )
    frame.loc[dead, "mean_return"] = np.nan  # kept: that task's metrics come out n/a
    drop = unusable & ~dead
    if drop.any():
        rows = frame[drop]
        notes.append(
            f"dropped {int(drop.sum())} evaluation(s) with NaN/inf mean_return or one beyond "
            f"±{MAX_ABS_RETURN:g} (first: {rows['mean_return'].iloc[0]:g}, task "
            f"{int(rows['task_id'].iloc[0])} {rows['split'].iloc[0]} at step "
            f"{int(rows['total_step'].iloc[0])})"
        )
        frame = frame[~drop]
    if clip_min is not None:
        frame["mean_return"] = frame["mean_return"].clip(lower=float(clip_min))
    frame["total_step"] = frame["total_step"].astype(np.int64)
    frame["task_id"] = frame["task_id"].astype(int)
    frame = frame.drop_duplicates(["task_id", "split", "total_step"], keep="last")
    return frame.sort_values(["task_id", "split", "total_step"], kind="stable").reset_index(
        drop=True
    )


_METADATA_TYPES: dict[str, tuple[type, ...]] = {
    "method": (str,),
    "suite": (str,),
    "suite_id": (str,),
    "seed": (int,),
    "schedule": (list,),
    "tasks": (list,),
    "metric_settings": (dict,),
    "score_normalizers": (dict,),
}


def check_metadata(metadata: object, path: Path) -> None:
    """Raise :class:`MetricsInputError` unless ``metadata`` is a JSON object whose known keys
    have the right types (``method``/``suite`` strings, ``seed`` an integer, ``schedule``
    and ``tasks`` lists, ``metric_settings``/``score_normalizers`` objects)."""
    if not isinstance(metadata, dict):
        raise MetricsInputError(
            f"{path}/metadata.json must hold a JSON object, not a {type(metadata).__name__}"
        )
    for key, types in _METADATA_TYPES.items():
        value = metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, types) or (types == (int,) and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in types)
            raise MetricsInputError(
                f"{path}/metadata.json: {key!r} must be {names}, got {value!r:.60}"
            )
    for seg in metadata.get("schedule") or []:
        if not isinstance(seg, dict):
            raise MetricsInputError(
                f"{path}/metadata.json: schedule entries must be objects, got {seg!r:.60}"
            )


def _unfinished_note(path: Path, last_step: int, total: int, schedule: pd.DataFrame) -> str:
    """Why a run's log stops at ``last_step`` before ``total``: still running (its writer
    holds the run directory's lock and its ``progress.json`` says so), or ended."""
    done = int((schedule["end_step"] <= last_step).sum())
    progress = read_progress(path) or {}
    writer = live_writer(path) if progress.get("state") == "running" else None
    if writer is not None:
        step = progress.get("total_step")
        at = f"at step {int(step)} of {total}" if isinstance(step, int | float) else "now"
        return (
            f"run is still running ({at}, pid {writer.get('pid', '?')} on "
            f"{writer.get('host', '?')}); evaluated up to step {last_step} ({done}/"
            f"{len(schedule)} segments complete): metrics that need later segments are n/a "
            "until it ends"
        )
    return (
        f"run ended mid-sequence at step {last_step} of {total} "
        f"({done}/{len(schedule)} segments complete); metrics that need later "
        "segments are n/a for this run"
    )


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """Read and clean one run directory.

    Raises:
        MetricsInputError: empty or unusable log (message names the directory and value).
    """
    path = Path(run_dir)
    try:
        metadata = read_metadata(path)
        check_metadata(metadata, path)
        raw_eval = read_eval(path)
        try:
            episodes = read_episodes(path)
        except CorruptRunLogError:
            episodes = pd.DataFrame(
                {"total_step": [], "task_id": [], "episode_return": [], "episode_length": []}
            )
    except CorruptRunLogError as e:
        raise MetricsInputError(str(e) if str(path) in str(e) else f"{path}: {e}") from e
    except OSError as e:
        raise MetricsInputError(f"{path}: cannot read the run: {e.strerror or e}") from e
    issues: list[str] = []
    settings = metadata.get("metric_settings") or {}
    clip_min = settings.get("return_clip_min")
    try:
        eval_frame = clean_eval(raw_eval, clip_min, issues)
        schedule = schedule_frame(metadata)
    except MetricsInputError as e:
        raise MetricsInputError(f"{path}: {e}") from e
    episodes = episodes.apply(pd.to_numeric, errors="coerce").dropna()
    huge = episodes["episode_return"].abs() > MAX_ABS_RETURN
    if huge.any():
        row = episodes[huge].iloc[0]
        raise MetricsInputError(
            f"{path}: episodes.csv has episode_return {row['episode_return']:g} at step "
            f"{int(row['total_step'])}; returns beyond ±{MAX_ABS_RETURN:g} cannot be "
            "averaged without overflow"
        )
    if clip_min is not None and len(episodes):
        episodes["episode_return"] = episodes["episode_return"].clip(lower=float(clip_min))
    run = RunData(path, metadata, eval_frame, episodes, schedule, issues)
    for attr, read in (
        ("heterogeneity", read_heterogeneity),
        ("episode_soups", read_episode_soups),
    ):
        try:
            frame = read(path)
        except CorruptRunLogError as e:
            issues.append(f"{e}; left out")
            continue
        setattr(run, attr, frame)
    run.eval.insert(0, "run", run.run_id)
    run.eval["method"] = run.method
    run.eval["suite"] = run.suite
    run.eval["seed"] = run.seed
    total = int(schedule["end_step"].max())
    if run.last_step < total:
        issues.append(_unfinished_note(path, run.last_step, total, schedule))
    tasks = metadata.get("tasks") or []
    for task in tasks:
        if "test" not in task.get("splits", ["train"]):
            continue
        if not ((eval_frame["task_id"] == task["task_id"]) & (eval_frame["split"] == "test")).any():
            issues.append(f"task {task['task_id']} declares a test split but has no test rows")
    return run


def load_runs(run_dirs: Iterable[str | os.PathLike[str]]) -> list[RunData]:
    """:func:`load_run` for every run directory of :func:`expand_run_dirs` (order kept)."""
    return [load_run(d) for d in expand_run_dirs(run_dirs)]


def expand_run_dirs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The run directories named by ``paths``, in order: a run directory (it holds
    ``metadata.json``) stands for itself; a directory holding run directories (the
    ``RUN_DIR/seed-<s>`` of ``cl-suites run --seeds``, a sweep's ``runs/`` or the sweep
    directory itself) stands for every run directory below it, sorted by path, without
    looking inside a run directory. A path that is neither is passed on as given, so that
    :func:`load_run` names what is wrong with it; a directory with no run below it is a
    :class:`MetricsInputError`. A run named twice is loaded once."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir() and not (path / METADATA_FILE).exists():
            below = _runs_below(path)
            if not below:
                raise MetricsInputError(
                    f"{path} is not a run directory and holds none: no {METADATA_FILE} in it "
                    "or in its subdirectories"
                )
            found += below
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def _runs_below(directory: Path) -> list[Path]:
    """The run directories under ``directory`` (not descending into a run directory)."""
    runs: list[Path] = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        if (sub / METADATA_FILE).exists():
            runs.append(sub)
        else:
            runs += _runs_below(sub)
    return runs


def task_names(runs: Sequence[RunData]) -> dict[int, str]:
    """``task_id -> task_name`` from the runs' schedules (first run wins)."""
    names: dict[int, str] = {}
    for run in runs:
        for tid, name in zip(run.schedule["task_id"], run.schedule["task_name"], strict=False):
            names.setdefault(int(tid), str(name))
    return dict(sorted(names.items()))


def metric_split(eval_frame: pd.DataFrame, prefer: str = "test") -> pd.DataFrame:
    """Rows of the split the metrics use per task: ``prefer`` where a task has it, else train.

    CORA section 4.1(b): tables use the unseen test environments when available.

    Returns:
        Subset of ``eval_frame`` with one split per (run, task).
    """
    return eval_frame[metric_split_mask(eval_frame, prefer)]


def _codes(col: pd.Series) -> np.ndarray:
    """``pd.factorize`` codes of a label column; O(1) per row for a constant column."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy()
    arr = col.to_numpy()
    if arr.size and not pd.isna(arr[0]) and (arr == arr[0]).all():
        return np.zeros(arr.size, dtype=np.intp)
    return pd.factorize(col)[0]


def metric_split_mask(eval_frame: pd.DataFrame, prefer: str = "test") -> np.ndarray:
    """Boolean row mask of :func:`metric_split` (numpy group codes, no groupby)."""
    split = eval_frame["split"].to_numpy()
    is_pref = np.asarray(split == prefer, dtype=bool)
    # group code of every row's (run, task_id) pair; rows with a missing key form no group
    # (as in a pandas groupby) and keep the preferred split
    run_codes = _codes(eval_frame["run"])
    task_codes, task_uniques = pd.factorize(eval_frame["task_id"])
    n_tasks = max(len(task_uniques), 1)
    missing = (run_codes < 0) | (task_codes < 0)
    key = np.where(missing, 0, run_codes.astype(np.int64) * n_tasks + task_codes)
    has_pref = np.bincount(key[is_pref & ~missing], minlength=key.max(initial=0) + 1) > 0
    has_pref_row = has_pref[key] | missing
    return np.where(has_pref_row, is_pref, np.asarray(split == "train", dtype=bool))


def metric_split_wide(
    eval_frame: pd.DataFrame, prefer: str = "test", value: str = "mean_return"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`metric_split` of one run as a (step x task) matrix, forward-filled over steps.

    The same table as ``metric_split(eval_frame, prefer).pivot_table(index="total_step",
    columns="task_id", values=value).sort_index().ffill()`` built with numpy (the pivot is
    the hot spot of per-run metrics). Frames with repeated (step, task) rows or missing values
    take the pandas path (its mean aggregation and NaN handling).

    Returns:
        ``(steps, task_ids, values)``: sorted agent steps ``(S,)``, sorted task ids ``(T,)``
        and ``values`` ``(S, T)``; NaN before a task's first eval point.
    """
    keep = metric_split_mask(eval_frame, prefer)
    steps_col = eval_frame["total_step"].to_numpy()[keep]
    tasks_col = eval_frame["task_id"].to_numpy()[keep]
    vals_col = eval_frame[value].to_numpy(dtype=float)[keep]
    steps, s_idx = np.unique(steps_col, return_inverse=True)
    tasks, t_idx = np.unique(tasks_col, return_inverse=True)
    flat = s_idx.astype(np.int64) * len(tasks) + t_idx
    fast = (
        np.issubdtype(steps.dtype, np.number)
        and np.issubdtype(tasks.dtype, np.number)
        and np.isfinite(vals_col).all()
        and np.unique(flat).size == flat.size
    )
    if not fast:
        pivot = eval_frame[keep].pivot_table(
            index="total_step", columns="task_id", values=value, observed=False, dropna=False
        )  # dropna=False: a task without any usable return keeps its (all-NaN) column
        pivot = pivot.sort_index().ffill()
        return pivot.index.to_numpy(), pivot.columns.to_numpy(), pivot.to_numpy(dtype=float)
    wide = np.full((len(steps), len(tasks)), np.nan)
    wide.ravel()[flat] = vals_col
    return steps, tasks, pd.DataFrame(wide).ffill().to_numpy()


CATEGORY_COLUMNS = ("run", "method", "suite", "split", "task_name")


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its label columns as categoricals (fast grouping; same values)."""
    todo = [
        c
        for c in CATEGORY_COLUMNS
        if c in frame and not isinstance(frame[c].dtype, pd.CategoricalDtype)
    ]
    if not todo:
        return frame
    return frame.assign(**{c: frame[c].astype("category") for c in todo})


def combined_eval(runs: Sequence[RunData]) -> pd.DataFrame:
    """All runs' eval frames stacked (columns: run, eval columns, method, suite, seed).

    Label columns are categoricals (see :func:`compact`).
    """
    if not runs:
        raise MetricsInputError("no runs given")
    return compact(pd.concat([r.eval for r in runs], ignore_index=True))
