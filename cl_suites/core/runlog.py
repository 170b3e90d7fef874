"""Run directories: metadata, evaluation table and training-episode table.

One run = one directory::

    RUN_DIR/
      metadata.json   suite id and kwargs, seed, method, package versions, start time,
                      the schedule (which task runs over which step range) and the
                      suite's metric settings
      eval.csv        one row per (eval point, task, split)
      episodes.csv    one row per finished training episode
      tb/             optional TensorBoard scalars (when tensorboard is installed)

Both tables are CSV, appended and flushed row by row, so ``pandas.read_csv`` reads them
while the run is still going and a killed run loses nothing that was written. All step
counts are **agent steps** (``env.step`` calls summed over sub-envs), never emulator
frames.
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata
import json
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

EVAL_COLUMNS: tuple[str, ...] = (
    "total_step",
    "task_id",
    "task_name",
    "split",
    "mean_return",
    "std_return",
    "episodes",
    "wall_time",
)
"""Columns of ``eval.csv``: ``total_step`` is the agent step of the eval point,
``wall_time`` seconds since the run started."""

EPISODE_COLUMNS: tuple[str, ...] = ("total_step", "task_id", "episode_return", "episode_length")
"""Columns of ``episodes.csv``: ``total_step`` is the agent step at which the episode
ended, ``episode_length`` is in agent steps."""

METADATA_FILE = "metadata.json"
EVAL_FILE = "eval.csv"
EPISODES_FILE = "episodes.csv"

_VERSIONED_PACKAGES = (
    "cl-suites",
    "gymnasium",
    "numpy",
    "torch",
    "stable-baselines3",
    "sb3-contrib",
    "procgen2",
    "ale-py",
    "nle",
    "minihack",
    "meal-bench",
    "jax",
    "ai2thor",
    "pettingzoo",
)


class CorruptRunLogError(ValueError):
    """A run directory whose files are missing, unreadable or have the wrong columns."""


def package_versions(names: Iterable[str] = _VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` for packages that are not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


class _CsvAppender:
    """Appends dict rows to a CSV file with a fixed header, flushing after every write."""

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path = path
        self.columns = columns
        is_new = not path.exists() or path.stat().st_size == 0
        if not is_new:
            with path.open(newline="") as f:
                header = next(csv.reader(f), [])
            if tuple(header) != columns:
                raise CorruptRunLogError(f"{path} has columns {header}, expected {list(columns)}")
        self._file = path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=columns, extrasaction="raise")
        if is_new:
            self._writer.writeheader()
            self._file.flush()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self._writer.writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class RunLog:
    """Writer for one run directory.

    Opening an existing directory with ``resume=True`` appends to its tables; rows
    already on disk are kept. With ``resume=False`` an existing, non-empty run
    directory is refused so that no run is overwritten by accident.

    Args:
        run_dir: directory of the run (created if missing).
        metadata: JSON-serialisable run description (suite id, kwargs, seed, method,
            schedule, ...). ``start_time`` and ``versions`` are added.
        resume: continue an existing run directory.
        tensorboard: also write TensorBoard scalars under ``run_dir/tb`` when
            tensorboard is installed (silently skipped otherwise).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        metadata: Mapping[str, Any] | None = None,
        *,
        resume: bool = False,
        tensorboard: bool = False,
    ):
        self.run_dir = Path(run_dir)
        meta_path = self.run_dir / METADATA_FILE
        if meta_path.exists() and not resume:
            raise FileExistsError(
                f"run directory {self.run_dir} already holds a run; pass resume=True "
                "(CLI: --resume) to continue it or choose another directory"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume and meta_path.exists():
            self.metadata = read_metadata(self.run_dir)
        else:
            self.metadata = dict(metadata or {})
            self.metadata.setdefault(
                "start_time", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            )
            self.metadata.setdefault("versions", package_versions())
            tmp = meta_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.metadata, indent=2, default=_json_default))
            tmp.replace(meta_path)
        self._eval = _CsvAppender(self.run_dir / EVAL_FILE, EVAL_COLUMNS)
        self._episodes = _CsvAppender(self.run_dir / EPISODES_FILE, EPISODE_COLUMNS)
        self._tb = _make_tb_writer(self.run_dir / "tb") if tensorboard else None

    def log_eval(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append evaluation records (mappings with the keys of ``EVAL_COLUMNS``)."""
        records = list(records)
        self._eval.write(records)
        if self._tb is not None:
            for r in records:
                self._tb.add_scalar(
                    f"eval/{r['task_id']}-{r['task_name']}/{r['split']}",
                    r["mean_return"],
                    r["total_step"],
                )

    def log_episodes(self, episodes: Iterable[Mapping[str, Any]]) -> None:
        """Append finished training episodes (keys of ``EPISODE_COLUMNS``)."""
        episodes = list(episodes)
        if not episodes:
            return
        self._episodes.write(episodes)
        if self._tb is not None:
            for e in episodes:
                self._tb.add_scalar(
                    f"train/episode_return/{e['task_id']}", e["episode_return"], e["total_step"]
                )

    def close(self) -> None:
        self._eval.close()
        self._episodes.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json_default(obj: object) -> object:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _make_tb_writer(path: Path):  # pragma: no cover - depends on an optional package
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(path))


def read_metadata(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``metadata.json`` of a run directory."""
    path = Path(run_dir) / METADATA_FILE
    if not path.exists():
        raise CorruptRunLogError(f"{run_dir} is not a run directory: {METADATA_FILE} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CorruptRunLogError(f"{path} is not valid JSON: {e}") from e


def _read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    if not path.exists():
        raise CorruptRunLogError(f"{path} is missing")
    try:
        frame = pd.read_csv(path, on_bad_lines="error")
    except pd.errors.EmptyDataError:
        return pd.DataFrame({c: [] for c in columns})
    except pd.errors.ParserError as e:
        raise CorruptRunLogError(f"{path} cannot be parsed: {e}") from e
    if tuple(frame.columns) != columns:
        raise CorruptRunLogError(
            f"{path} has columns {list(frame.columns)}, expected {list(columns)}"
        )
    return frame


def read_eval(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The evaluation table of a run (possibly still running) as a DataFrame."""
    return _read_table(Path(run_dir) / EVAL_FILE, EVAL_COLUMNS)


def read_episodes(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The training-episode table of a run (possibly still running) as a DataFrame."""
    return _read_table(Path(run_dir) / EPISODES_FILE, EPISODE_COLUMNS)
