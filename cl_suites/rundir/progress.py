"""Progress of a run over a sequence: one rich progress bar and ``RUN_DIR/progress.json``.

Every long loop of the package (the main job, ``run_random_agent``) reports through
:class:`RunProgress`, so there is one style and one steps/s figure: steps done by this
process divided by its wall time since it started the loop (evaluation included). The
bar is shown only when asked (the CLI asks; library calls stay quiet); the JSON file is
written whenever a run directory is given::

    {"state": "running" | "finished" | "interrupted" | "failed", "reason",
     "phase": "training" | "evaluation", "total_step", "total_steps", "task_id",
     "task_name", "cycle", "steps_per_s", "compile_s", "eval_seconds", "eval_share",
     "eta_s", "rss_mb", "gpu_mb", "updated" (ISO time, UTC), "pid", "host"}

``interrupted``: Ctrl-C or SIGTERM stopped the run (``--resume`` continues it);
``failed``: an error; ``reason`` says which (``None`` while running and when finished).

``rss_mb``: the process's resident memory (MiB) when the file was written; ``gpu_mb``: the
GPU memory its learner holds (``None`` on a CPU run; :mod:`cl_suites.rundir.resources`).
The same figures go to the run log every ``memory_every_s`` seconds and at every task's
end (``on_memory``: ``RunLog.log_resources``, ``resources.csv``), and a warning is printed
when the resident memory at a task's end exceeds the previous task's end by more than
``memory_growth_warn`` (a leak grows per task: CORA's issue 3, sample-factory's 116).

``compile_s``: seconds the loop spent compiling (a JIT learner reports them with
:meth:`RunProgress.add_compile_time`); they are kept out of ``steps_per_s``.

It is replaced atomically (temporary file + rename), at most every 2 s and at the end.
Steps are the run's unit (agent steps; env steps for MEAL).

Evaluation is a phase of its own: given the run's :class:`~cl_suites.core.evaluation.Evaluator`,
the progress shows each evaluation as a second bar (episodes played of those due), counts
the seconds spent evaluating (``eval_seconds``; ``eval_share`` of the wall time), and,
once the run has trained ``WARMUP_S`` seconds (the warm-up), prints an estimated duration:
the remaining steps at the training rate measured so far plus the remaining evaluation
points at the mean duration of those played (``eta_s``). :func:`plan_text` is the pre-run
summary (total steps, evaluation work).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_suites.rundir.resources import memory_row

if TYPE_CHECKING:  # annotations only: the run directory sits below the env machinery
    from cl_suites.core.task import Segment

logger = logging.getLogger(__name__)

PROGRESS_FILE = "progress.json"
WRITE_EVERY_S = 2.0
REFRESH_EVERY_S = 0.25
WARMUP_S = 10.0
"""Seconds of training (evaluation apart) after which the duration estimate is printed."""
MEMORY_EVERY_S = 30.0
"""Seconds between two memory rows of the run log (and one at every task's end)."""
MEMORY_GROWTH_WARN = 0.25
"""Default ``memory_growth_warn``: the fraction of growth from one task's end to the next
that prints a warning."""


def _duration(seconds: float) -> str:
    """``"42 s"``, ``"12 min"``, ``"3.4 h"``, ``"2.1 days"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def plan_text(
    schedule: Sequence[Segment], unit: str, evaluator: Any = None, start_step: int = 0
) -> str:
    """The pre-run summary: total steps (tasks, budgets, cycles) and the evaluation work
    (points, episodes per point, the evaluation-only episode cap), from ``start_step``
    (a resumed run's checkpoint step) to the end of ``schedule``."""
    total = schedule[-1].end_step
    tasks = len({s.task_id for s in schedule})
    cycles = len({s.cycle for s in schedule})
    lines = [
        f"run: {total - start_step:,} {unit} to go of {total:,} ({tasks} task"
        f"{'s' if tasks != 1 else ''} x {cycles} cycle{'s' if cycles != 1 else ''})"
    ]
    if evaluator is not None:
        points = evaluator.points(start_step, total)
        per_point = evaluator.episodes_per_point()
        cap = evaluator.max_episode_steps
        lines.append(
            f"evaluation: {len(points):,} points x {per_point:,} episodes "
            f"({evaluator.episodes} per task and split) = {len(points) * per_point:,} "
            "episodes; "
            + (f"episodes capped at {cap:,} steps" if cap else "whole episodes (no cap)")
        )
    return "\n".join(lines)


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
        evaluator: the run's evaluator: its evaluations are shown as a phase and timed,
            and its remaining points enter the duration estimate.
        on_memory: called with each memory row (``total_step``, ``task_id``, ``time``
            (Unix seconds), ``steps_per_s``, ``rss_mb``, ``gpu_mb``) every
            ``memory_every_s`` seconds and at each task's end (``RunLog.log_resources``).
        memory_growth_warn: warn when the resident memory at a task's end exceeds the
            previous task's end by more than this fraction (``None``: never).
    """

    def __init__(
        self,
        schedule: Sequence[Segment],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        show: bool = False,
        unit: str = "steps",
        initial_step: int = 0,
        evaluator: Any = None,
        on_memory: Callable[[Mapping[str, Any]], None] | None = None,
        memory_every_s: float = MEMORY_EVERY_S,
        memory_growth_warn: float | None = MEMORY_GROWTH_WARN,
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
        self.phase = "training"
        self.eval_seconds = 0.0
        self._eval_t0 = 0.0
        self._eval_points_done = 0
        self._eval_points = (
            evaluator.points(self.total_step, self.total_steps) if evaluator is not None else []
        )
        self._estimated = 0  # 1: training measured, 2: evaluation too
        self.eta_s: float | None = None
        self.on_memory = on_memory
        self.memory_every_s = float(memory_every_s)
        self.memory_growth_warn = memory_growth_warn
        self._memory_logged = time.monotonic()
        self._segment_index = self._index(self.total_step)
        self._task_end_rss: float | None = None  # resident MiB at the last task's end
        self._last_logged = False
        self.memory: dict[str, float | None] = memory_row()
        if evaluator is not None:
            evaluator.progress = self
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
            self._eval_task = self._bar.add_task("evaluation", total=1, visible=False, rate="")
            self._bar.start()
        self.update(self.total_step, force=True)

    def _index(self, total_step: int) -> int:
        i = bisect.bisect_right(self._ends, max(int(total_step) - 1, 0))
        return min(i, len(self.schedule) - 1)

    def segment(self, total_step: int) -> Segment:
        """The segment trained at ``total_step`` (the last one once the run is over)."""
        return self.schedule[self._index(total_step)]

    @property
    def steps_per_s(self) -> float:
        """Steps per second of wall time since the loop started (evaluation included),
        compile time excluded."""
        elapsed = time.monotonic() - self._t0 - self.compile_s
        return (self.total_step - self._start_step) / max(elapsed, 1e-9)

    def add_compile_time(self, seconds: float) -> None:
        """Report ``seconds`` of compiling: shown apart, kept out of ``steps_per_s``."""
        self.compile_s += max(float(seconds), 0.0)

    @property
    def train_seconds(self) -> float:
        """Wall seconds since the loop started, evaluation (a running one too) and compile
        time apart."""
        now = time.monotonic()
        running = now - self._eval_t0 if self.phase == "evaluation" else 0.0
        return now - self._t0 - self.eval_seconds - running - self.compile_s

    @property
    def eval_share(self) -> float:
        """The share of the wall time spent evaluating (0 to 1)."""
        return self.eval_seconds / max(time.monotonic() - self._t0, 1e-9)

    # -- evaluation phase ---------------------------------------------------------------
    def begin_evaluation(self, total_step: int, episodes: int) -> None:
        """An evaluation of ``episodes`` episodes starts at ``total_step``."""
        self.phase = "evaluation"
        self._eval_t0 = time.monotonic()
        if self._bar is not None:
            self._bar.update(
                self._eval_task,
                description=f"evaluation at step {int(total_step):,}",
                total=episodes,
                completed=0,
                rate="episodes",
                visible=True,
            )
            self._bar.refresh()
        self.update(self.total_step, force=True)

    def evaluation_advance(self, episodes_done: int) -> None:
        """``episodes_done`` episodes of the running evaluation are played (throttled)."""
        now = time.monotonic()
        if self._bar is not None and now - self._drawn >= REFRESH_EVERY_S:
            self._drawn = now
            self._bar.update(self._eval_task, completed=episodes_done)

    def end_evaluation(self) -> None:
        """The running evaluation is over: its time counts as evaluation."""
        self.eval_seconds += time.monotonic() - self._eval_t0
        self._eval_points_done += 1
        self.phase = "training"
        if self._bar is not None:
            self._bar.update(self._eval_task, visible=False)
        self.update(self.total_step, force=True)

    def estimate(self) -> tuple[float, float] | None:
        """(remaining training seconds, remaining evaluation seconds), from the training
        rate so far and the mean duration of the evaluations played; ``None`` before the
        warm-up (``WARMUP_S`` seconds of training) is over."""
        trained = self.total_step - self._start_step
        if self.train_seconds < WARMUP_S or trained <= 0:
            return None
        train = (self.total_steps - self.total_step) * self.train_seconds / trained
        left = sum(1 for p in self._eval_points if p > self.total_step) + (
            self.phase == "evaluation"
        )
        done = self._eval_points_done
        return train, left * (self.eval_seconds / done if done else 0.0)

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
        ended = self.total_step >= self._ends[self._segment_index] and not self._last_logged
        if ended or now - self._memory_logged >= self.memory_every_s:
            self._log_memory(now, task_end=ended)
        if ended:
            self._last_logged = self.total_step >= self.total_steps
            following = max(self._index(self.total_step), self._segment_index + 1)
            self._segment_index = min(following, len(self.schedule) - 1)
        if self.path is not None and (force or now - self._written >= WRITE_EVERY_S):
            self._written = now
            self._update_estimate()
            self._write("running")

    def _log_memory(self, now: float, task_end: bool) -> None:
        """Measure the memory, hand the row to ``on_memory``; at a task's end, compare
        the resident memory with the previous task's end."""
        self._memory_logged = now
        self.memory = memory_row()
        if self.on_memory is not None:
            self.on_memory(
                {
                    "total_step": self.total_step,
                    "task_id": self.schedule[self._segment_index].task_id,
                    "time": round(time.time(), 3),
                    "steps_per_s": round(self.steps_per_s, 3),
                    **self.memory,
                }
            )
        if not task_end:
            return
        rss = float(self.memory["rss_mb"] or 0.0)
        before, self._task_end_rss = self._task_end_rss, rss
        limit = self.memory_growth_warn
        if before and limit is not None and rss > before * (1.0 + limit):
            seg = self.schedule[self._segment_index]
            message = (
                f"resident memory grew {100 * (rss / before - 1):.0f}% over task "
                f"{seg.task_id}:{seg.task_name} ({before:,.0f} -> {rss:,.0f} MiB), more than "
                f"memory_growth_warn={limit}: a leak grows like this"
            )
            logger.warning(message)
            if self._bar is not None:
                self._bar.console.print(f"[yellow]warning:[/] {message}")

    def _update_estimate(self) -> None:
        estimate = self.estimate()
        if estimate is None:
            return
        train, evaluation = estimate
        self.eta_s = train + evaluation
        # printed once training is measured, and once more when the first evaluation is
        evaluated = self._eval_points_done > 0 or not self._eval_points
        stage = 2 if evaluated else 1
        if self._bar is not None and self._estimated < stage:
            self._estimated = stage
            rate = (self.total_step - self._start_step) / self.train_seconds
            if evaluated:
                what = f"evaluation {_duration(evaluation)}"
            else:
                what = f"evaluation not measured yet (first at step {self._eval_points[0]:,})"
            self._bar.console.print(
                f"estimated time left: {_duration(self.eta_s)} (training {_duration(train)} "
                f"at {rate:,.0f} {self.unit}/s, {what})"
            )

    def close(self, state: str = "finished", reason: str | None = None) -> None:
        """Final update: ``state`` is ``"finished"``, ``"interrupted"`` or ``"failed"``,
        ``reason`` what stopped it (``cl_suites.core.interrupts.outcome_of`` gives both).
        The bar ends with the time spent evaluating and its share of the run."""
        if self._bar is not None:
            self.update(self.total_step, force=True)
            self._bar.stop()
            self._bar.console.print(self.time_split_text())
            self._bar = None
        if self.path is not None:
            self._write(state, reason)

    def time_split_text(self) -> str:
        """``"wall time 95 s: training 60 s, evaluation 35 s (37%)"``."""
        wall = time.monotonic() - self._t0
        return (
            f"wall time {_duration(wall)}: training {_duration(self.train_seconds)}, "
            f"evaluation {_duration(self.eval_seconds)} ({100 * self.eval_share:.0f}%)"
        )

    def _label(self) -> str:
        seg = self.segment(self.total_step)
        return f"task {seg.task_id}:{seg.task_name} cycle {seg.cycle}"

    def _write(self, state: str, reason: str | None = None) -> None:
        seg = self.segment(self.total_step)
        data = {
            "state": state,
            "reason": reason,
            "phase": self.phase,
            "total_step": self.total_step,
            "total_steps": self.total_steps,
            "task_id": seg.task_id,
            "task_name": seg.task_name,
            "cycle": seg.cycle,
            "steps_per_s": round(self.steps_per_s, 3),
            "compile_s": round(self.compile_s, 3),
            "eval_seconds": round(self.eval_seconds, 3),
            "eval_share": round(self.eval_share, 4),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            **memory_row(),
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
