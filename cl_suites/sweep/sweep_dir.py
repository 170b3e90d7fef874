"""The sweep directory: which sweep it holds, where each run goes, what happened to it.

Layout (every path derived from the grid, so a restarted driver finds everything)::

    SWEEP_DIR/
      sweep.json          the grid (identity of the sweep) and the last execution settings
      runs/<run name>/    one unchanged main-job run directory per run
      status/<run name>.json
                          written by the run's Ray worker: state and one record per
                          attempt (pid, host, Ray node, start/end, outcome, error)
      logs/<run name>.log the worker's stdout/stderr, one header line per attempt
      summary.json        the driver's final state of every run
      report/             the metrics report over all finished runs

All JSON files are written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_suites.sweep.grid import SweepError, SweepSpec

SWEEP_FILE = "sweep.json"
SWEEP_FORMAT = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (tmp + fsync + replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        json.dump(data, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` when it is missing or torn."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class SweepDir:
    """Paths of one sweep directory."""

    path: Path

    @property
    def sweep_file(self) -> Path:
        return self.path / SWEEP_FILE

    @property
    def report_dir(self) -> Path:
        return self.path / "report"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    def run_dir(self, name: str) -> Path:
        return self.path / "runs" / name

    def status_file(self, name: str) -> Path:
        return self.path / "status" / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    def read_status(self, name: str) -> dict[str, Any]:
        """The run's status record (``{}`` before its first attempt)."""
        return read_json(self.status_file(name)) or {}

    def mark_interrupted(self, name: str, reason: str) -> None:
        """Record that the run ``name`` was stopped with its sweep: a ``running`` status
        and run ``progress.json`` become ``interrupted`` with ``reason`` (its worker was
        killed and could not say so itself); other states are left as they are."""
        path = self.status_file(name)
        status = read_json(path)
        if status is not None and status.get("state") == "running":
            attempts = status.get("attempts") or []
            if attempts and not attempts[-1].get("outcome"):
                attempts[-1].update(ended=now_iso(), outcome="interrupted")
            status.update(state="interrupted", error=reason)
            write_json(path, status)
        progress_file = self.run_dir(name) / "progress.json"
        progress = read_json(progress_file)
        if progress is not None and progress.get("state") == "running":
            progress.update(state="interrupted", reason=reason, updated=now_iso())
            write_json(progress_file, progress)

    def is_finished(self, name: str) -> bool:
        return self.read_status(name).get("state") == "finished"

    def stored(self) -> dict[str, Any] | None:
        """Contents of ``sweep.json`` (``None`` when this is not a sweep directory)."""
        return read_json(self.sweep_file)

    def stored_spec(self) -> SweepSpec:
        """The grid of the sweep this directory holds (``SweepError`` when it holds none)."""
        stored = self.stored()
        if stored is None:
            hint = (
                f"{self.path} is a run directory, not a sweep directory"
                if (self.path / "metadata.json").exists()
                else f"{self.path} holds no sweep ({SWEEP_FILE} is missing or unreadable)"
            )
            raise SweepError(f"cannot resume: {hint}")
        return SweepSpec.from_dict(stored["spec"])

    def check_new(self, spec: SweepSpec) -> None:
        """Refuse to start ``spec`` in a directory that already holds something."""
        if not self.path.exists():
            return
        if not self.path.is_dir():
            raise SweepError(f"sweep directory {self.path} is a file")
        stored = self.stored()
        if stored is not None:
            diffs = spec_differences(SweepSpec.from_dict(stored["spec"]), spec)
            if not diffs:
                raise SweepError(
                    f"{self.path} already holds this sweep; continue it with "
                    f"`cl-suites sweep --resume {self.path}`"
                )
            raise SweepError(
                f"{self.path} belongs to another sweep ({'; '.join(diffs)}); choose another "
                f"--sweep-dir, or continue that sweep with `cl-suites sweep --resume {self.path}`"
            )
        if (self.path / "metadata.json").exists():
            raise SweepError(f"{self.path} is a run directory, not a sweep directory")
        entries = sorted(p.name for p in self.path.iterdir())
        if entries:
            raise SweepError(
                f"sweep directory {self.path} is not empty and holds no sweep "
                f"({', '.join(entries[:5])}{', ...' if len(entries) > 5 else ''})"
            )

    def check_resume(self, spec: SweepSpec | None) -> SweepSpec:
        """The stored grid, after checking that ``spec`` (if given) is the same sweep."""
        stored = self.stored_spec()
        if spec is not None:
            diffs = spec_differences(stored, spec)
            if diffs:
                raise SweepError(
                    f"{self.path} belongs to another sweep ({'; '.join(diffs)}); "
                    f"run `cl-suites sweep --resume {self.path}` without grid options"
                )
        return stored

    def write_identity(self, spec: SweepSpec, execution: dict[str, Any]) -> None:
        """Write (or refresh) ``sweep.json``; the creation time and history are kept."""
        stored = self.stored() or {"format": SWEEP_FORMAT, "created": now_iso(), "history": []}
        stored.update(
            kind="cl-suites sweep",
            spec=spec.to_dict(),
            runs=[run.name for run in spec.runs()],
            execution=execution,
        )
        stored.setdefault("history", []).append({"started": now_iso(), **execution})
        write_json(self.sweep_file, stored)

    def stored_execution(self) -> dict[str, Any]:
        return dict((self.stored() or {}).get("execution") or {})


def spec_differences(old: SweepSpec, new: SweepSpec) -> list[str]:
    """Human-readable differences of two grids (empty: the same sweep)."""
    a, b = old.to_dict(), new.to_dict()
    return [f"{key}: it has {a[key]!r}, requested {b[key]!r}" for key in a if a[key] != b[key]]
