"""Run directories: metadata, evaluation table and training-episode table.

One run = one directory::

    RUN_DIR/
      metadata.json   suite id and kwargs, seed, method, package versions, start time,
                      the schedule (which task runs over which step range) and the
                      suite's metric settings
      eval.csv        one row per (eval point, task, split)
      episodes.csv    one row per finished training episode
      remedy.csv      what a plasticity remedy did: one row per (act, layer)
                      (``REMEDY_COLUMNS``; only runs with a remedy)
      plasticity.csv  plasticity diagnostics: one row per (eval point, network, layer,
                      diagnostic) (``PLASTICITY_COLUMNS``); plasticity_probe.npz its
                      probe batch
      heterogeneity.csv  multi-agent suites (MEAL): the role-heterogeneity index of every
                      evaluation, one row per (eval point, task, split)
      episode_soups.csv  MEAL: the soups of every training episode (MEAL's training signal)
      resources.csv   the training process's memory (resident, GPU) and rate over time
                      (``RESOURCE_COLUMNS``)
      packnet.csv     PackNet runs: capacity left and sparsity per layer at every task's
                      end (``PACKNET_COLUMNS``)
      .lock           while a writer holds the directory (``RunDirLock``)
      tb/             optional TensorBoard scalars

Both tables are CSV (``\\n`` line endings), appended whole rows at a time (one
``os.write`` per batch, fsynced), so ``pandas.read_csv`` reads them while the run is still
going and a killed run loses nothing that was written and leaves no torn row; a torn last
line from an older writer or a full disk is dropped on resume (:func:`repair_table`).
All step counts are **agent steps** (``env.step`` calls summed over sub-envs), never
emulator frames.
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata
import io
import json
import logging
import os
import platform
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from cl_suites.errors import MissingSimulatorError, RunDirExistsError, RunFileError
from cl_suites.rundir.fsutil import append_text, disk_error, write_text_atomic
from cl_suites.rundir.runlock import RunDirLock

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

PLASTICITY_COLUMNS: tuple[str, ...] = (
    "total_step",
    "task_id",
    "network",
    "layer",
    "metric",
    "value",
    "reason",
)
"""Columns of ``plasticity.csv``: ``total_step`` is the eval point (the run's step),
``task_id`` the task trained up to it, ``network`` ``actor``/``critic`` (P&C:
``kb/actor``, ...), ``layer`` a layer's name or ``all`` (whole network), ``metric`` one of
``cl_suites.metrics.plasticity_tracker.METRICS``, ``value`` a float (``nan`` when it could
not be computed, ``reason`` then says why; empty otherwise). Definitions and units:
``docs/metrics.md``."""

HETEROGENEITY_COLUMNS: tuple[str, ...] = (
    "total_step",
    "task_id",
    "task_name",
    "split",
    "heterogeneity",
    "envs",
)
"""Columns of ``heterogeneity.csv`` (multi-agent suites: MEAL): one row per (eval point,
task, split), ``heterogeneity`` MEAL's role-heterogeneity index of that evaluation (the
agents' greedy-action distributions' Jensen-Shannon divergence, base 2, averaged over
agent pairs and eval envs; ``cl_suites.metrics.meal.role_heterogeneity``), ``envs`` the
eval envs it averages."""

EPISODE_SOUPS_COLUMNS: tuple[str, ...] = ("total_step", "task_id", "soups", "episode_length")
"""Columns of ``episode_soups.csv`` (MEAL runs): one row per training episode of one env,
at the step it ended (as ``episodes.csv``), with the soups the team delivered in it (MEAL's
training ``Soup`` signal, without shaping); ``episode_length`` in env steps (an episode cut
by a task switch is shorter than the suite's ``episode_len``)."""

logger = logging.getLogger(__name__)

REMEDY_COLUMNS: tuple[str, ...] = ("total_step", "task_id", "update", "event", "layer", "units")
"""``remedy.csv``: one row per (act of a plasticity remedy, layer): ``event`` ``recycled``
(ReDo), ``replaced`` (continual backprop), ``reset``, ``injected``, ``shrunk`` (a task
switch's shrink-and-perturb); ``update`` the update's count within the task; ``units`` the
units recycled or replaced in ``layer`` (``all``: the remedy acted on the whole network or
its heads, ``units`` then 0)."""

RESOURCE_COLUMNS: tuple[str, ...] = (
    "total_step",
    "task_id",
    "time",
    "steps_per_s",
    "rss_mb",
    "gpu_mb",
)
"""``resources.csv``: the run's memory every 30 s of training and at each task's end
(``RunProgress``): ``time`` Unix seconds, ``steps_per_s`` the training rate so far,
``rss_mb`` the resident memory of the training process (MiB), ``gpu_mb`` the GPU memory its
learner holds (empty on a CPU run)."""

PACKNET_COLUMNS: tuple[str, ...] = (
    "total_step",
    "task_id",
    "layer",
    "weights",
    "kept",
    "capacity_left",
    "sparsity",
)
"""``packnet.csv`` (PackNet runs, ``baselines_jax.cl.packnet``): one row per (task end,
prunable layer) and one with ``layer`` ``all`` (every prunable layer together), written
after the task's fine-tuning ended: ``weights`` the layer's prunable weights, ``kept`` the
weights some finished task's mask holds, ``capacity_left`` ``1 - kept / weights`` (the
share later tasks can still train), ``sparsity`` the share of the layer's kernel entries
with ``|w| < 1e-7`` (``all``: of every kernel, critic and heads included, MEAL 057f862's
``_compute_sparsity``)."""

PLASTICITY_FILE = "plasticity.csv"
PACKNET_FILE = "packnet.csv"
REMEDY_FILE = "remedy.csv"
RESOURCES_FILE = "resources.csv"
HETEROGENEITY_FILE = "heterogeneity.csv"
EPISODE_SOUPS_FILE = "episode_soups.csv"
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


class CorruptRunLogError(RunFileError):
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


_INT, _FLOAT, _STR = "int", "float", "str"
COLUMN_TYPES: dict[str, str] = {
    "total_step": _INT,
    "task_id": _INT,
    "task_name": _STR,
    "split": _STR,
    "mean_return": _FLOAT,
    "std_return": _FLOAT,
    "episodes": _INT,
    "wall_time": _FLOAT,
    "episode_return": _FLOAT,
    "episode_length": _INT,
    "value": _FLOAT,
    "heterogeneity": _FLOAT,
    "envs": _INT,
    "soups": _FLOAT,
}
"""How a row's cells must parse (``int`` cells may be written as ``12.0``)."""


def _parse_row(line: str, columns: tuple[str, ...]) -> int | None:
    """The row's ``total_step`` when every cell of ``line`` parses, else ``None``."""
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != len(columns):
        return None
    step = None
    for name, cell in zip(columns, cells, strict=True):
        kind = COLUMN_TYPES.get(name, _STR)
        if kind == _STR:
            continue
        try:
            value = float(cell)
        except ValueError:
            return None
        if kind == _INT:
            if not value.is_integer():
                return None
            if name == "total_step":
                step = int(value)
    return step if step is not None else 0


def _newline_of(header: bytes) -> bytes:
    return b"\r\n" if header.endswith(b"\r\n") else b"\n"


def repair_table(
    path: str | os.PathLike[str], columns: tuple[str, ...], max_step: int | None = None
) -> dict[str, int]:
    """Make a run table safe to append to, and cut it back to a checkpoint.

    Drops a last line without its newline (a torn write), every row that does not parse
    (wrong number of cells, a number that is not one) and, when ``max_step`` is given,
    every row with ``total_step > max_step``. Kept lines are rewritten in the file's own
    line-ending convention (the header's). Torn and unparsable rows are reported through
    the ``cl_suites.rundir.runlog`` logger (a warning naming them).

    Returns:
        ``{"torn": n, "unparsable": n, "after_step": n}``: rows dropped per reason.

    Raises:
        CorruptRunLogError: the header is not ``columns``.
        RunDiskError: the repaired file cannot be written.
    """
    path = Path(path)
    dropped = {"torn": 0, "unparsable": 0, "after_step": 0}
    if not path.exists():
        return dropped
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    if torn:
        dropped["torn"] = 1
    if not lines:  # not even a whole header: start the table over
        if torn:
            _note(path, f"dropped a torn header line {torn[:60]!r}")
            write_text_atomic(path, "")
        return dropped
    header, rows = lines[0], lines[1:]
    newline = _newline_of(header + b"\n")
    names = next(csv.reader([header.decode(errors="replace").rstrip("\r")]), [])
    if tuple(names) != columns:
        raise CorruptRunLogError(f"{path} has columns {names}, expected {list(columns)}")
    kept, bad = [header.rstrip(b"\r")], []
    for number, raw in enumerate(rows, start=2):
        line = raw.rstrip(b"\r").decode(errors="replace")
        step = _parse_row(line, columns)
        if step is None:
            bad.append(f"line {number}: {line[:60]!r}")
        elif max_step is not None and step > max_step:
            dropped["after_step"] += 1
        else:
            kept.append(raw.rstrip(b"\r"))
    dropped["unparsable"] = len(bad)
    notes = []
    if torn:
        notes.append(f"a torn last line without newline {torn[:60]!r}")
    if bad:
        more = " ..." if len(bad) > 3 else ""
        notes.append(f"{len(bad)} unparsable row(s) ({'; '.join(bad[:3])}{more})")
    if notes:
        _note(path, "dropped " + " and ".join(notes))
    if any(dropped.values()):
        write_text_atomic(path, (newline.join(kept) + newline).decode(errors="replace"))
    return dropped


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline off ``path`` (reads only the file's tail)."""
    size = path.stat().st_size if path.exists() else 0
    if size == 0:
        return
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        start, tail = size, b""
        while start > 0 and b"\n" not in tail:
            step = min(start, 1 << 16)
            start -= step
            f.seek(start)
            tail = f.read(step) + tail
    cut = start + tail.rfind(b"\n") + 1
    with open(path, "rb") as f:
        f.seek(cut)
        torn = f.read(60)
    _note(path, f"dropped a torn last line without newline {torn!r}")
    try:
        os.truncate(path, cut)
    except OSError as e:
        raise (disk_error(e, path) or e) from e


def _note(path: Path, message: str) -> None:
    logger.warning("%s: %s", path, message)


def truncate_logs(run_dir: str | os.PathLike[str], max_step: int) -> dict[str, int]:
    """Cut ``eval.csv``, ``episodes.csv``, ``plasticity.csv``, ``remedy.csv``,
    ``heterogeneity.csv``, ``episode_soups.csv``, ``packnet.csv`` and ``resources.csv`` back
    to a checkpoint at agent step ``max_step``.

    Rows with ``total_step > max_step`` were written after the checkpoint and will be
    written again by the resumed run; torn last lines and unparsable rows are dropped with
    a warning (see :func:`repair_table`). Holds the run directory's lock while it works.

    Returns:
        rows dropped per file name (all reasons together).
    """
    run_dir = Path(run_dir)
    with RunDirLock(run_dir, reentrant=True):
        return {
            name: sum(repair_table(run_dir / name, columns, max_step).values())
            for name, columns in (
                (EVAL_FILE, EVAL_COLUMNS),
                (EPISODES_FILE, EPISODE_COLUMNS),
                (PLASTICITY_FILE, PLASTICITY_COLUMNS),
                (REMEDY_FILE, REMEDY_COLUMNS),
                (HETEROGENEITY_FILE, HETEROGENEITY_COLUMNS),
                (EPISODE_SOUPS_FILE, EPISODE_SOUPS_COLUMNS),
                (RESOURCES_FILE, RESOURCE_COLUMNS),
                (PACKNET_FILE, PACKNET_COLUMNS),
            )
        }


class _CsvAppender:
    """Appends dict rows to a CSV file with a fixed header.

    Each ``write`` is one ``os.write`` of complete lines on an ``O_APPEND`` descriptor,
    fsynced, cut back if the disk fills up half-way (:func:`append_text`): a row is never
    split across writes, and a crash leaves at most whole rows. New files use ``\\n``
    line endings; an existing file keeps its own (its header's).
    """

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path = path
        self.columns = columns
        is_new = not path.exists() or path.stat().st_size == 0
        self.newline = "\n"
        if not is_new:
            _drop_torn_tail(path)
            with path.open("rb") as f:
                first = f.readline()
            header = next(csv.reader([first.decode(errors="replace").rstrip("\r\n")]), [])
            if tuple(header) != columns:
                raise CorruptRunLogError(f"{path} has columns {header}, expected {list(columns)}")
            self.newline = _newline_of(first).decode()
        self._fd = -1
        self._open()
        if is_new:
            self._append([dict(zip(columns, columns, strict=True))])

    def _open(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            raise (disk_error(e, self.path) or e) from e

    def _append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=self.columns, extrasaction="raise", lineterminator=self.newline
        )
        writer.writerows(rows)
        if not buffer.tell():
            return
        try:  # truncate_logs replaces the file: follow it
            replaced = os.stat(self.path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            replaced = True
        if replaced:
            self._open()
        append_text(self._fd, self.path, buffer.getvalue())

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self._append(rows)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


ScalarSink = Callable[[Mapping[str, float], int], None]
"""``sink(values, step)``: scalars (name -> value) at agent step ``step``."""


class RunLog:
    """Writer for one run directory, and the directory's only writer.

    Opening takes the run directory's lock (:class:`~cl_suites.rundir.runlock.RunDirLock`):
    a second ``RunLog`` on the same directory in another process is refused with a
    one-line :class:`~cl_suites.rundir.runlock.RunDirLockedError` naming the pid and host
    that hold it; a lock left by a dead process is taken over with a warning. ``close``
    releases it.

    Opening an existing directory with ``resume=True`` appends to its tables; rows
    already on disk are kept (a torn last line is dropped with a warning). With
    ``resume=False`` an existing run directory is refused so that no run is overwritten by
    accident. Disk errors (full, read-only) raise a one-line
    :class:`~cl_suites.rundir.fsutil.RunDiskError`.

    Args:
        run_dir: directory of the run (created if missing).
        metadata: JSON-serialisable run description (suite id, kwargs, seed, method,
            schedule, ...). ``start_time`` and ``versions`` are added.
        resume: continue an existing run directory.
        tensorboard: also write the eval returns and training-episode returns as
            TensorBoard scalars under ``run_dir/tb`` (needs the ``tensorboard`` package).
            The main job leaves this off and routes the same scalars through the SB3
            logger's writers instead (``cl_suites.job.tracking``).
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
        self._lock = RunDirLock(self.run_dir).acquire()
        self._sinks: list[ScalarSink] = []
        self._write_lock = threading.Lock()  # evaluations may log from their own thread
        self._closers: list[Callable[[], None]] = []
        self._eval = self._episodes = self._plasticity = self._remedy = None
        self._optional: dict[str, _CsvAppender] = {}
        try:
            meta_path = self.run_dir / METADATA_FILE
            if meta_path.exists() and not resume:
                raise RunDirExistsError(
                    f"run directory {self.run_dir} already holds a run; pass resume=True "
                    "(CLI: --resume) to continue it or choose another directory"
                )
            if resume and meta_path.exists():
                self.metadata = read_metadata(self.run_dir)
            else:
                self.metadata = dict(metadata or {})
                self.metadata.setdefault(
                    "start_time",
                    _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                )
                self.metadata.setdefault("versions", package_versions())
                write_text_atomic(
                    meta_path, json.dumps(self.metadata, indent=2, default=_json_default)
                )
            self._eval = _CsvAppender(self.run_dir / EVAL_FILE, EVAL_COLUMNS)
            self._episodes = _CsvAppender(self.run_dir / EPISODES_FILE, EPISODE_COLUMNS)
            if tensorboard:
                self._add_tensorboard(self.run_dir / "tb")
        except BaseException:
            self.close()
            raise

    def add_scalar_sink(self, sink: ScalarSink, close: Callable[[], None] | None = None) -> None:
        """Also send the eval returns (``eval/<task_id>-<task_name>/<split>``) and the mean
        training-episode return per task and logging call
        (``train/episode_return/<task_id>``) to ``sink(values, step)``; ``close`` is
        called by :meth:`close`."""
        self._sinks.append(sink)
        if close is not None:
            self._closers.append(close)

    def _add_tensorboard(self, path: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise MissingSimulatorError(
                "RunLog(tensorboard=True) needs the tensorboard package: "
                'pip install "cl-suites[baselines]"'
            ) from e
        writer = SummaryWriter(str(path))

        def sink(values: Mapping[str, float], step: int) -> None:
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()

        self.add_scalar_sink(sink, writer.close)

    def _emit(self, values: Mapping[str, float], step: int) -> None:
        for sink in self._sinks:
            sink(values, step)

    def log_eval(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append evaluation records (mappings with the keys of ``EVAL_COLUMNS``)."""
        records = list(records)
        with self._write_lock:
            self._log_eval(records)

    def _log_eval(self, records: list[Mapping[str, Any]]) -> None:
        self._eval.write(records)
        if self._sinks:
            by_step: dict[int, dict[str, float]] = {}
            for r in records:
                key = f"eval/{r['task_id']}-{r['task_name']}/{r['split']}"
                by_step.setdefault(int(r["total_step"]), {})[key] = float(r["mean_return"])
            for step, values in sorted(by_step.items()):
                self._emit(values, step)

    def log_episodes(self, episodes: Iterable[Mapping[str, Any]]) -> None:
        """Append finished training episodes (keys of ``EPISODE_COLUMNS``)."""
        episodes = list(episodes)
        if not episodes:
            return
        with self._write_lock:
            self._log_episodes(episodes)

    def _log_episodes(self, episodes: list[Mapping[str, Any]]) -> None:
        self._episodes.write(episodes)
        if self._sinks:
            returns: dict[str, list[float]] = {}
            for e in episodes:
                returns.setdefault(f"train/episode_return/{e['task_id']}", []).append(
                    float(e["episode_return"])
                )
            step = max(int(e["total_step"]) for e in episodes)
            self._emit({k: sum(v) / len(v) for k, v in returns.items()}, step)

    def log_plasticity(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append plasticity-diagnostic rows (keys of ``PLASTICITY_COLUMNS``) to
        ``plasticity.csv`` (created at the first call); whole-network values also go to the
        scalar sinks as ``plasticity/<network>/<metric>``."""
        rows = list(rows)
        if not rows:
            return
        with self._write_lock:
            if self._plasticity is None:
                self._plasticity = _CsvAppender(self.run_dir / PLASTICITY_FILE, PLASTICITY_COLUMNS)
            self._plasticity.write(rows)
            if self._sinks:
                by_step: dict[int, dict[str, float]] = {}
                for r in rows:
                    if r["layer"] == "all":
                        key = f"plasticity/{r['network']}/{r['metric']}"
                        by_step.setdefault(int(r["total_step"]), {})[key] = float(r["value"])
                for step, values in sorted(by_step.items()):
                    self._emit(values, step)

    def log_remedy(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append what a plasticity remedy did (keys of ``REMEDY_COLUMNS``) to ``remedy.csv``
        (created at the first call); each step's units per event also go to the scalar sinks
        as ``remedy/<event>``."""
        rows = list(rows)
        if not rows:
            return
        with self._write_lock:
            if self._remedy is None:
                self._remedy = _CsvAppender(self.run_dir / REMEDY_FILE, REMEDY_COLUMNS)
            self._remedy.write(rows)
            if self._sinks:
                by_step: dict[int, dict[str, float]] = {}
                for r in rows:
                    values = by_step.setdefault(int(r["total_step"]), {})
                    key = f"remedy/{r['event']}"
                    values[key] = values.get(key, 0.0) + float(r["units"])
                for step, values in sorted(by_step.items()):
                    self._emit(values, step)

    def _log_optional(self, name: str, columns: tuple[str, ...], rows: list) -> None:
        """Append ``rows`` to the optional table ``name`` (created at the first call)."""
        if not rows:
            return
        with self._write_lock:
            table = self._optional.get(name)
            if table is None:
                table = self._optional[name] = _CsvAppender(self.run_dir / name, columns)
            table.write(rows)

    def log_heterogeneity(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append role-heterogeneity rows (keys of ``HETEROGENEITY_COLUMNS``) to
        ``heterogeneity.csv`` (created at the first call)."""
        self._log_optional(HETEROGENEITY_FILE, HETEROGENEITY_COLUMNS, list(rows))

    def log_episode_soups(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append training-episode soups (keys of ``EPISODE_SOUPS_COLUMNS``) to
        ``episode_soups.csv`` (created at the first call)."""
        self._log_optional(EPISODE_SOUPS_FILE, EPISODE_SOUPS_COLUMNS, list(rows))

    def log_resources(self, row: Mapping[str, Any]) -> None:
        """Append one memory row (keys of ``RESOURCE_COLUMNS``) to ``resources.csv``
        (created at the first call); ``RunProgress``'s ``on_memory``."""
        self._log_optional(RESOURCES_FILE, RESOURCE_COLUMNS, [row])

    def log_packnet(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append PackNet's task-end rows (keys of ``PACKNET_COLUMNS``) to ``packnet.csv``
        (created at the first call)."""
        self._log_optional(PACKNET_FILE, PACKNET_COLUMNS, list(rows))

    def close(self) -> None:
        """Close the tables and scalar writers and release the run directory's lock."""
        tables = (self._eval, self._episodes, self._plasticity, self._remedy)
        for table in (*tables, *self._optional.values()):
            if table is not None:
                table.close()
        closers, self._closers, self._sinks = self._closers, [], []
        for close in closers:
            close()
        self._lock.release()

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


def read_plasticity(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The plasticity-diagnostic table of a run (empty when the run has none)."""
    path = Path(run_dir) / PLASTICITY_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in PLASTICITY_COLUMNS})
    frame = _read_table(path, PLASTICITY_COLUMNS)
    frame["reason"] = frame["reason"].fillna("")
    return frame


def read_remedy(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """``remedy.csv`` of a run (empty, with the columns, when no remedy acted)."""
    path = Path(run_dir) / REMEDY_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in REMEDY_COLUMNS})
    return _read_table(path, REMEDY_COLUMNS)


def read_heterogeneity(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The role-heterogeneity table of a run (empty when the run has none)."""
    path = Path(run_dir) / HETEROGENEITY_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in HETEROGENEITY_COLUMNS})
    return _read_table(path, HETEROGENEITY_COLUMNS)


def read_packnet(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """``packnet.csv`` (empty with the columns when the run has none)."""
    path = Path(run_dir) / PACKNET_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in PACKNET_COLUMNS})
    return _read_table(path, PACKNET_COLUMNS)


def read_episode_soups(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The training-episode soups of a run (empty when the run has none)."""
    path = Path(run_dir) / EPISODE_SOUPS_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in EPISODE_SOUPS_COLUMNS})
    return _read_table(path, EPISODE_SOUPS_COLUMNS)


def read_resources(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The memory table of a run (empty when the run has none)."""
    path = Path(run_dir) / RESOURCES_FILE
    if not path.exists():
        return pd.DataFrame({c: [] for c in RESOURCE_COLUMNS})
    return _read_table(path, RESOURCE_COLUMNS)


def read_episodes(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The training-episode table of a run (possibly still running) as a DataFrame."""
    return _read_table(Path(run_dir) / EPISODES_FILE, EPISODE_COLUMNS)
