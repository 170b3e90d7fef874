"""Progress of a run over a sequence: one rich progress bar and ``RUN_DIR/progress.json``.

Every long loop of the package (the main job, ``run_random_agent``) reports through
:class:`RunProgress`, so there is one style and one steps/s figure: steps done by this
process divided by its wall time since it started the loop (evaluation included). The
bar is shown only when asked (the CLI asks; library calls stay quiet); the JSON file is
written whenever a run directory is given::

    {"state": "running" | "finished" | "failed", "total_step", "total_steps", "task_id",
     "task_name", "cycle", "steps_per_s", "compile_s", "updated" (ISO time, UTC), "pid",
     "host"}

``compile_s``: seconds the loop spent compiling (a JIT learner reports them with
:meth:`RunProgress.add_compile_time`); they are kept out of ``steps_per_s``.

It is replaced atomically (temporary file + rename), at most every 2 s and at the end.
Steps are the run's unit (agent steps; env steps for MEAL).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cl_suites.core.task import Segment

PROGRESS_FILE = "progress.json"
WRITE_EVERY_S = 2.0
REFRESH_EVERY_S = 0.25


def read_progress(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The parsed ``progress.json`` of a run directory, or ``None`` when there is none."""
    path = Path(run_dir) / PROGRESS_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class RunProgress:
    """Progress display and file of one run.

    Args:
        schedule: the run's segments (the total is the last segment's end).
        run_dir: where ``progress.json`` goes (``None``: no file).
        show: draw a rich progress bar on stderr.
        unit: the step unit shown next to the counts.
        initial_step: the step the loop starts from (a resumed run's checkpoint step).
    """

    def __init__(
        self,
        schedule: Sequence[Segment],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        show: bool = False,
        unit: str = "steps",
        initial_step: int = 0,
    ):
        self.schedule = tuple(schedule)
        self._ends = [s.end_step for s in self.schedule]
        self.total_steps = self._ends[-1]
        self.path = Path(run_dir) / PROGRESS_FILE if run_dir is not None else None
        self.unit = unit
        self._start_step = self.total_step = int(initial_step)
        self._t0 = time.monotonic()
        self.compile_s = 0.0
        self._written = self._drawn = -1e9
        self._bar: Any = None
        if show:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,.0f}/{task.total:,.0f} " + unit),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._task = self._bar.add_task(
                self._label(), total=self.total_steps, completed=self.total_step, rate=""
            )
            self._bar.start()
        self.update(self.total_step, force=True)

    def segment(self, total_step: int) -> Segment:
        """The segment trained at ``total_step`` (the last one once the run is over)."""
        i = bisect.bisect_right(self._ends, max(int(total_step) - 1, 0))
        return self.schedule[min(i, len(self.schedule) - 1)]

    @property
    def steps_per_s(self) -> float:
        """Steps per second of wall time since the loop started, compile time excluded."""
        elapsed = time.monotonic() - self._t0 - self.compile_s
        return (self.total_step - self._start_step) / max(elapsed, 1e-9)

    def add_compile_time(self, seconds: float) -> None:
        """Report ``seconds`` of compiling: shown apart, kept out of ``steps_per_s``."""
        self.compile_s += max(float(seconds), 0.0)

    def update(self, total_step: int, force: bool = False) -> None:
        """Report that the run reached ``total_step`` (cheap; redraws and writes are
        throttled unless ``force``)."""
        self.total_step = int(total_step)
        now = time.monotonic()
        if self._bar is not None and (force or now - self._drawn >= REFRESH_EVERY_S):
            self._drawn = now
            self._bar.update(
                self._task,
                completed=self.total_step,
                description=self._label(),
                rate=f"{self.steps_per_s:,.0f} {self.unit}/s"
                + (f" (compile {self.compile_s:,.0f} s apart)" if self.compile_s else ""),
            )
        if self.path is not None and (force or now - self._written >= WRITE_EVERY_S):
            self._written = now
            self._write("running")

    def close(self, state: str = "finished") -> None:
        """Final update: ``state`` is ``"finished"`` or ``"failed"``."""
        if self._bar is not None:
            self.update(self.total_step, force=True)
            self._bar.stop()
            self._bar = None
        if self.path is not None:
            self._write(state)

    def _label(self) -> str:
        seg = self.segment(self.total_step)
        return f"task {seg.task_id}:{seg.task_name} cycle {seg.cycle}"

    def _write(self, state: str) -> None:
        seg = self.segment(self.total_step)
        data = {
            "state": state,
            "total_step": self.total_step,
            "total_steps": self.total_steps,
            "task_id": seg.task_id,
            "task_name": seg.task_name,
            "cycle": seg.cycle,
            "steps_per_s": round(self.steps_per_s, 3),
            "compile_s": round(self.compile_s, 3),
            "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(self.path)
        except OSError:  # progress is advisory: never let it end a run
            pass
