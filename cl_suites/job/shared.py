"""The run pieces both wings of the job use: the run directory and its metadata, the
resume check, the evaluator, videos, progress, size warnings and the report.

A wing's job (``cl_suites.job.torch.train``, ``cl_suites.job.jax.train``) trains; what a
run directory holds around the training, and how a run is checked, opened and closed, is
here, once. Nothing here imports a learner family.

Steps are the suite's unit: **env steps** (one joint action of all agents) for MEAL,
**agent steps** (``env.step`` calls summed over sub-envs) for every other suite.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cl_suites.core.evaluation import Evaluator
from cl_suites.core.video import VideoRecorder
from cl_suites.errors import RunDirConflictError
from cl_suites.job.option_specs import job_size_warnings
from cl_suites.job.run_spec import JobOptions, JobSpec, cadence_note
from cl_suites.job.tracking import track_run_log
from cl_suites.job.vectorization import VectorizationChoice
from cl_suites.request import METADATA_RUN_KEYS
from cl_suites.rundir.fsutil import directory_entries, remove_unstarted
from cl_suites.rundir.progress import RunProgress, read_progress
from cl_suites.rundir.runlog import METADATA_FILE, RunLog, read_metadata
from cl_suites.training import run_metadata


def print_size_warnings(spec: JobSpec) -> None:
    """One ``warning:`` line on stderr per absurd size of the run (budget, memory, envs)."""
    for line in job_size_warnings(spec):
        print(f"warning: {line}", file=sys.stderr, flush=True)


def print_cadence_note(spec: JobSpec) -> None:
    """The ``note:`` line of a cadence that alone would leave a task's end out
    (``cadence_note``), once per job."""
    note = cadence_note(spec)
    if note is not None:
        print(f"note: {note}", file=sys.stderr, flush=True)


def vectorization_record(spec: JobSpec) -> dict[str, Any]:
    """``metadata.json``'s ``vectorization``: the mode, the env workers and why (``auto``:
    the cost model's reason; else the run set it)."""
    if spec.vectorization is not None:
        return {**spec.vectorization.record(), "auto": True}
    return {
        "mode": spec.options.vectorization_mode,
        "reason": "set by the run",
        "env_workers": spec.options.env_workers,
        "auto": False,
    }


def vectorization_line(spec: JobSpec) -> str | None:
    """The run header's line of an ``auto`` ``vectorization_mode`` on a suite it applies to
    (its envs step on the CPU): the choice and why; ``None`` otherwise."""
    if spec.vectorization is None or not spec.suite.runtime.steps_on_cpu:
        return None
    choice = spec.vectorization
    return f"envs: vectorization_mode={choice.mode} (auto: {choice.reason})"


def keep_recorded_vectorization(spec: JobSpec, run_dir: Path) -> JobSpec:
    """A resumed run with ``auto`` keeps the mode and env workers it started with (its
    ``metadata.json``; a saved env state is per worker, and another machine or affinity
    may choose otherwise); ``spec`` unchanged otherwise."""
    if spec.vectorization is None or not (Path(run_dir) / METADATA_FILE).exists():
        return spec
    old = read_metadata(run_dir).get("vectorization") or {}
    if not old.get("auto") or old.get("mode") is None:
        return spec
    choice = VectorizationChoice(
        old["mode"], f"as the run started ({old.get('reason')})", old.get("env_workers")
    )
    return dataclasses.replace(spec, options=choice.apply(spec.options), vectorization=choice)


def use_jax_cache(directory: str | None) -> None:
    """JAX's persistent compilation cache in ``directory`` (the job option
    ``jax_cache_dir``; ``None``: JAX's setting stays): a later run whose programs have the
    same shapes loads them instead of compiling (``benchmarks/README.md``)."""
    if directory is None:
        return
    import jax

    Path(directory).expanduser().mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(Path(directory).expanduser()))
    # every program, not only those over JAX's default of 1 s: a run compiles dozens of
    # small ones (per task and chunk length), which together take longer than the big ones
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def metadata(spec: JobSpec, seed: int, device: str, **extra: Any) -> dict[str, Any]:
    """The run's ``metadata.json``: the run, its sequence, schedule, settings and
    evaluation protocol, the ``device`` it trains on, what its suite adds (MEAL's score
    normalisers), and ``extra`` (a wing's own keys)."""
    out = run_metadata(
        spec.suite.id,
        spec.sequence,
        seed=seed,
        method=spec.method,
        learner=spec.learner,
        preset=spec.preset,
        num_envs=spec.num_envs,
        env_kwargs=spec.suite_kwargs,
        description=spec.instance.describe(),
        schedule=spec.schedule,
        hyperparameters=spec.hyperparameters(),
        evaluation={
            "at_start": spec.options.eval_at_start,
            "per_task": spec.options.eval_per_task,
            "deterministic": spec.options.eval_deterministic,
            "max_episode_steps": spec.options.eval_max_episode_steps,
            "task_ends": True,  # every task's end is a point, besides the cadence
            "cadence_note": cadence_note(spec),
        },
        step_unit=spec.step_unit,
        device=device,
        request=dict(spec.request),
    )
    out["vectorization"] = vectorization_record(spec)
    out.update(extra)
    out.update(spec.instance.run_metadata(), **spec.suite.runtime.training_metadata)
    return out


def check_resumable(run_dir: Path, metadata: dict[str, Any]) -> None:
    """``RunDirConflictError`` naming what differs when the run in ``run_dir`` is not the
    run described by ``metadata`` (its run keys, ``METADATA_RUN_KEYS``, its schedule)."""
    old = read_metadata(run_dir)
    diffs = [
        f"{k}: run has {old.get(k)!r}, requested {metadata[k]!r}"
        for k in METADATA_RUN_KEYS
        if old.get(k) != metadata[k]
    ]
    if json.dumps(old.get("schedule")) != json.dumps(metadata["schedule"]):
        diffs += schedule_differences(old, metadata) or ["schedule differs"]
    if diffs:
        raise RunDirConflictError(
            f"refusing to resume {run_dir}: it is a different run ({'; '.join(diffs)})"
        )


SCHEDULE_KEYS = ("steps_per_task", "cycles")
"""The metadata keys that shape a run's schedule (besides its tasks and ``num_envs``, a
run key)."""


def _task_order(metadata: dict[str, Any]) -> list[Any]:
    """The task names of the schedule's first cycle, in order."""
    return [s.get("task_name") for s in metadata.get("schedule") or [] if s.get("cycle", 0) == 0]


def schedule_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes the schedule of the run ``old`` (its ``metadata.json``) differ from the
    requested ``new``: ``"steps_per_task: run has [...], requested [...]"``, ``cycles``, the
    task order, or else the first segment whose bounds differ (budgets cut to another
    env count)."""
    out = [
        f"{k}: run has {old.get(k)!r}, requested {new.get(k)!r}"
        for k in SCHEDULE_KEYS
        if old.get(k) != new.get(k)
    ]
    if _task_order(old) != _task_order(new):
        out.append(f"task order: run has {_task_order(old)!r}, requested {_task_order(new)!r}")
    if out:
        return out
    was, now = old.get("schedule") or [], new.get("schedule") or []
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        if a != b:
            return [
                f"segment {i} ({b.get('task_name')}): run has steps "
                f"{a.get('start_step')}-{a.get('end_step')}, requested "
                f"{b.get('start_step')}-{b.get('end_step')}"
            ]
    if len(was) != len(now):
        return [f"segments: run has {len(was)}, requested {len(now)}"]
    return []


def evaluator(
    spec: JobSpec, seed: int, run_log: RunLog, run_dir: Path, eval_source: Any
) -> Evaluator:
    """The run's evaluator: the suite's cadence (MEAL: per task, no step-0 evaluation)
    and every task's end, its env source, videos when asked, the evaluation-only episode
    cap."""
    job = spec.options
    return Evaluator(
        spec.sequence,
        seed=int(seed),
        run_log=run_log,
        # evaluation envs step in this process: workers per (task, split) would multiply
        vectorization_mode="sync"
        if job.vectorization_mode == "workers"
        else job.vectorization_mode,
        first_eval_step=0 if job.eval_at_start else None,
        segments=spec.schedule if job.eval_per_task else None,
        env_source=eval_source,
        video=video_recorder(run_dir, job, spec.schedule),
        max_episode_steps=job.eval_max_episode_steps,
        task_ends=[seg.end_step for seg in spec.schedule],
    )


def video_recorder(run_dir: Path, job: JobOptions, schedule: Sequence[Any]) -> VideoRecorder | None:
    """The evaluation videos of ``capture_video`` (per task, or every ``video_every``
    steps), else ``None``."""
    if not job.capture_video:
        return None
    every = job.video_every
    end = schedule[-1].end_step
    if every:
        boundaries = list(range(0, end + 1, int(every)))
    else:
        boundaries = [0] + [s.end_step for s in schedule]
    return VideoRecorder(run_dir, boundaries, max_frames=job.video_length)


def open_run(
    spec: JobSpec,
    seed: int,
    run_dir: Path,
    resume: bool,
    initial_step: int,
    *,
    meta: dict[str, Any],
    show_progress: bool,
) -> tuple[RunLog, Evaluator, RunProgress]:
    """One seed's run directory opened for a learner that logs through the run log only
    (no SB3 logger): its ``RunLog`` with ``meta`` (its ``metadata.json``, :func:`metadata`;
    TensorBoard and W&B from the run log's scalars), its evaluator on the suite's eval
    source and its ``RunProgress`` (drawn when ``show_progress``)."""
    job = spec.options
    run_log = RunLog(run_dir, meta, resume=resume, tensorboard=job.tensorboard)
    try:
        track_run_log(run_log, run_dir, {"wandb": job.wandb})  # eval and episode returns
        source = spec.suite.runtime.eval_source(spec.instance)
        run_evaluator = evaluator(spec, seed, run_log, run_dir, source)
        progress = RunProgress(
            spec.schedule,
            run_dir=run_dir,
            show=job.progress and show_progress,
            unit=spec.suite.step_unit.name,
            initial_step=initial_step,
            on_memory=run_log.log_resources,
            memory_growth_warn=job.memory_growth_warn,
        )
    except BaseException:
        run_log.close()
        raise
    return run_log, run_evaluator, progress


def clean_unstarted(run_dirs: Sequence[Path], resume: bool, train: Callable[[], None]) -> None:
    """Run ``train()``; when it fails before a run's first step, remove what it wrote to
    that run's directory (a new run, not a resume), so the same command can start it
    again."""
    before = [directory_entries(d) for d in run_dirs]
    try:
        train()
    except BaseException:
        for run_dir, entries in zip(run_dirs, before, strict=True):
            progress = read_progress(run_dir) or {}
            if not resume and not progress.get("total_step"):  # failed before its first step
                remove_unstarted(run_dir, entries)
        raise


def write_report(run_dir: Path, job: JobOptions, runs: Sequence[Path] | None = None) -> None:
    """The metrics report of the run in ``run_dir``, or of ``runs`` (the seeds of a
    ``--seeds`` run, below ``run_dir``), into ``run_dir/report``."""
    if not job.report:
        return
    from cl_suites.metrics.report import build_report

    try:
        build_report([run_dir] if runs is None else runs, run_dir / "report")
        print(f"metrics report written to {run_dir / 'report'}")
    except Exception as e:  # the report must never lose a finished run
        print(
            f"note: metrics report failed ({type(e).__name__}: {e}); run it later with "
            f"`cl-suites report {run_dir}`"
        )


def resume_checked(run_dir: Path, meta: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds a run to resume (``RunDirConflictError`` when it holds
    another run than the one ``meta`` describes)."""
    if not (run_dir / METADATA_FILE).exists():
        return False
    check_resumable(run_dir, meta)
    return True
