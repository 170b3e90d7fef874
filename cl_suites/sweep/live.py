"""The live table of a sweep: state, task, cycle, steps, steps/s and ETA of every run.

Progress is read from the run directory. ``RUN_DIR/progress.json`` (written by the main
job: ``total_step``, ``total_steps``, ``task_name``, ``cycle``, ``steps_per_s``, ...) is
used when it exists; otherwise the position comes from the last rows of ``episodes.csv``
and ``eval.csv`` looked up in ``metadata.json``'s schedule, and steps/s from how fast that
position moves between refreshes. All steps are agent steps.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from cl_suites.sweep.sweep_dir import read_json

PROGRESS_FILE = "progress.json"
STALE_PROGRESS_S = 30.0
"""A progress.json older than this gives no steps/s (its writer is gone)."""


@dataclass
class RunProgress:
    """Where a run is. ``total_step``/``total_steps`` in agent steps; ``eta_s`` seconds."""

    total_step: int
    total_steps: int | None
    task_name: str | None
    cycle: int | None
    steps_per_s: float | None

    @property
    def eta_s(self) -> float | None:
        if not self.steps_per_s or self.total_steps is None:
            return None
        return max(0.0, (self.total_steps - self.total_step) / self.steps_per_s)


class ProgressReader:
    """Reads runs' progress; remembers schedules and recent positions between calls."""

    def __init__(self) -> None:
        self._schedules: dict[Path, list[dict[str, Any]]] = {}
        self._first_seen: dict[Path, tuple[float, int]] = {}

    def read(self, run_dir: Path) -> RunProgress | None:
        data = read_json(run_dir / PROGRESS_FILE)
        if data is not None and "total_step" in data:
            return self._from_progress_file(data)
        schedule = self._schedule(run_dir)
        if not schedule:
            return None
        step = max(_last_step(run_dir / "episodes.csv"), _last_step(run_dir / "eval.csv"), 0)
        segment = next((s for s in schedule if s["start_step"] <= step < s["end_step"]), None)
        segment = segment or schedule[-1]
        return RunProgress(
            total_step=step,
            total_steps=int(schedule[-1]["end_step"]),
            task_name=segment.get("task_name"),
            cycle=segment.get("cycle"),
            steps_per_s=self._rate(run_dir, step),
        )

    @staticmethod
    def _from_progress_file(data: dict[str, Any]) -> RunProgress:
        rate = data.get("steps_per_s")
        try:
            updated = _dt.datetime.fromisoformat(str(data["updated"]))
            age = (_dt.datetime.now(updated.tzinfo) - updated).total_seconds()
        except (KeyError, ValueError, TypeError):
            age = 0.0
        if age > STALE_PROGRESS_S or data.get("state") != "running":
            rate = None
        return RunProgress(
            total_step=int(data["total_step"]),
            total_steps=data.get("total_steps"),
            task_name=data.get("task_name"),
            cycle=data.get("cycle"),
            steps_per_s=float(rate) if rate else None,
        )

    def _schedule(self, run_dir: Path) -> list[dict[str, Any]]:
        if run_dir not in self._schedules:
            meta = read_json(run_dir / "metadata.json")
            if not meta or not meta.get("schedule"):
                return []
            self._schedules[run_dir] = list(meta["schedule"])
        return self._schedules[run_dir]

    def _rate(self, run_dir: Path, step: int) -> float | None:
        now = time.monotonic()
        first = self._first_seen.get(run_dir)
        if first is None or step < first[1]:  # first look, or a resume cut the logs back
            self._first_seen[run_dir] = (now, step)
            return None
        elapsed = now - first[0]
        return (step - first[1]) / elapsed if step > first[1] and elapsed > 0 else None


def _last_step(path: Path) -> int:
    """``total_step`` of the last complete row of a run-log CSV (``-1`` if none)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return -1
    for line in reversed(tail.split("\n")[:-1]):  # the part after the last newline is torn
        head = line.split(",", 1)[0].strip()
        if head.isdigit():
            return int(head)
    return -1


STATE_STYLES = {
    "queued": "dim",
    "running": "cyan",
    "retrying": "yellow",
    "finished": "green",
    "skipped": "green",
    "failed": "red",
    "lost": "red",
}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def render_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """One line per run: ``rows`` hold ``name``, ``state``, ``attempt``, ``progress``
    (``RunProgress`` or ``None``) and ``note``."""
    table = Table(title=title, title_justify="left")
    for column, justify in (
        ("run", "left"),
        ("state", "left"),
        ("try", "right"),
        ("task", "left"),
        ("cycle", "right"),
        ("agent steps", "right"),
        ("steps/s", "right"),
        ("ETA", "right"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify, no_wrap=True, overflow="ellipsis")
    for row in rows:
        progress: RunProgress | None = row.get("progress")
        style = STATE_STYLES.get(row["state"], "")
        steps = ""
        if progress is not None:
            steps = f"{progress.total_step:,}"
            if progress.total_steps:
                pct = 100.0 * progress.total_step / progress.total_steps
                steps += f"/{progress.total_steps:,} ({pct:.0f}%)"
        running = row["state"] in ("running", "retrying")
        table.add_row(
            row["name"],
            f"[{style}]{row['state']}[/{style}]" if style else row["state"],
            str(row.get("attempt") or ""),
            (progress.task_name or "") if progress else "",
            "" if progress is None or progress.cycle is None else str(progress.cycle),
            steps,
            f"{progress.steps_per_s:,.0f}" if running and progress and progress.steps_per_s else "",
            _duration(progress.eta_s) if running and progress else "",
            escape(row.get("note") or ""),
        )
    return table
