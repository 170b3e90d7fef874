"""The main job behind ``cl-suites run``: train a baseline over a whole suite.

One job serves every suite. ``run_main_job`` resolves the run (``resolve_job``), builds
the suite's training env and its SB3 view, the learner with the CL method
(``baselines_sb3.factory``), evaluates on the suite's schedule with the core
``Evaluator`` (greedy policy), logs training episodes, checkpoints periodically, resumes
after a kill, and writes the metrics report at the end.

MEAL suites train with the JAX IPPO by default (learner ``ppo-jax``, package
``baselines_jax``): ``run_main_job`` hands them to ``cl_suites.job.jax_job`` with the
shared pieces of this module (run log and metadata, evaluator, progress, resume checks,
report), and ``run_seed_group`` trains several seeds of one configuration vmapped in one
program, one run directory each. What differs between suites comes from the suite's
catalog entry (``cl_suites.suites.SuiteInfo``), never from "is this MEAL?" tests here:
its runtime builds the training env (``MEAL-<N>``: the batched JAX env ``MealBatchedEnv``)
and the evaluator's env source (MEAL: all kitchens in one jitted call); the torch wing
builds the SB3 view by the suite's family (``cl_suites.job.torch.sb3_env``; MEAL:
``MealSB3VecEnv``, one SB3 slot per agent: parameter sharing, i.e. IPPO); its
instance gives the agents per env and the run metadata (MEAL: score normalisers); its
fields give the evaluation defaults and the step unit: **env steps** (one joint action
of all agents) for MEAL, **agent steps** (``env.step`` calls summed over sub-envs) for
every other suite.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import CallbackList

from baselines_sb3.callbacks import (
    ContinualEvalCallback,
    ProgressBarCallback,
    make_episode_source,
)
from baselines_sb3.cl import ContinualMethod, attach_method, make_method, method_class
from baselines_sb3.cl.storage import replay_storage
from baselines_sb3.factory import build_model, wrap_env
from baselines_sb3.plasticity import PlasticityCallback, policy_probe
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.interrupts import outcome_of
from cl_suites.core.task import Segment
from cl_suites.core.video import VideoRecorder
from cl_suites.errors import BadValueError, RunDirConflictError
from cl_suites.job.checkpoint import (
    CheckpointCallback,
    apply_checkpoint,
    checkpoint_dir,
    checkpoint_step,
    load_resume_state,
    truncate_logs,
)
from cl_suites.job.option_specs import job_size_warnings
from cl_suites.job.run_spec import (
    JOB_OPTIONS,  # noqa: F401  (the job options' names; README names them here)
    TORCH_THREADS,  # noqa: F401  (the thread default, named in docs/fidelity.md)
    JobOptions,
    JobSpec,
    resolve,
    resolve_job,  # noqa: F401  (the library's keyword form of resolve)
    rollout_steps,
)
from cl_suites.job.torch.sb3_env import observation_location, sb3_env
from cl_suites.job.tracking import configure_logger, track_run_log
from cl_suites.metrics.plasticity_tracker import PROBE_FILE, PlasticityTracker
from cl_suites.request import RunRequest
from cl_suites.rundir import layout
from cl_suites.rundir.fsutil import directory_entries, remove_unstarted
from cl_suites.rundir.progress import RunProgress, plan_text, read_progress
from cl_suites.rundir.runlog import METADATA_FILE, RunLog, read_metadata
from cl_suites.training import run_metadata

_RESUME_KEYS = ("suite", "method", "learner", "preset", "seed", "num_envs")


def run_main_job(
    *,
    suite: str,
    method: str,
    learner: str | None = None,
    preset: str,
    seed: int,
    run_dir: Path,
    resume: bool,
    num_envs: int | None,
    overrides: dict[str, Any],
    seeds: Sequence[int] | None = None,
) -> Path:
    """Train ``learner`` + ``method`` over ``suite`` and write the run directory.

    Args:
        suite: suite name or id (``"Procgen6"``, ``"CLSuite/Diagnostic-v0"``, ``"MEAL-20"``).
        method: ``ft``, ``ewc``, ``online-ewc``, ``l2``, ``mas``, ``pnc`` or ``clear``
            (MEAL: ``ft``, ``ewc``, ``online-ewc``, ``l2``, ``mas``).
        learner: ``ppo`` or ``vtrace`` (MEAL: ``ppo-jax`` or ``ppo``); ``None``: the
            suite's default under ``preset`` (MEAL: ``ppo-jax``).
        preset: ``paper`` or ``small`` (tiny budgets/networks for a few-minute CPU run).
        seed: run seed (envs, network init, sampling, evaluation; MEAL's kitchens too
            unless ``layout_seed`` is given).
        run_dir: output directory (metadata.json, eval.csv, episodes.csv, progress.json,
            checkpoint/, report/, videos/).
        resume: continue the run in ``run_dir`` from its last checkpoint.
        num_envs: envs of the training env (default: the preset's).
        overrides: suite kwargs (``steps_per_task``, ``cycles``, ``eval_every``, ...), job
            options (``JOB_OPTIONS``) and learner/method hyperparameters.
        seeds: train these run seeds vmapped in one program (MEAL, learner ``ppo-jax``)
            instead of ``seed``; each writes the ordinary run directory
            ``run_dir/seed-<s>`` (see :func:`run_seed_group`).

    Returns:
        ``run_dir``.
    """
    request = RunRequest(suite, method, preset, learner, seed, seeds, num_envs, overrides)
    run_dir = Path(run_dir)
    run_resolved(resolve(request), request.run_seeds, layout.run_dirs(run_dir, seeds), resume)
    return run_dir


def run_resolved(
    specs: Sequence[JobSpec], seeds: Sequence[int], run_dirs: Sequence[Path], resume: bool
) -> None:
    """Train resolved runs (``resolve``), building nothing twice:
    one run (``specs[0]`` with ``seeds[0]`` into ``run_dirs[0]``), or the seeds of one
    ``ppo-jax`` configuration vmapped in one program. ``cl-suites run`` calls this with the
    specs it resolved and checked; ``run_main_job`` resolves, then calls this."""
    run_dirs = [Path(d) for d in run_dirs]
    use_jax_cache(specs[0].options.jax_cache_dir)
    if len(specs) > 1 or specs[0].learner_entry.family == "baselines_jax":
        if len(specs) == 1:
            _print_size_warnings(specs[0])
        _run_jax(list(specs), [int(s) for s in seeds], run_dirs, resume)
        return
    _print_size_warnings(specs[0])
    _run_torch(specs[0], int(seeds[0]), run_dirs[0], resume)


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


def _print_size_warnings(spec: JobSpec) -> None:
    for line in job_size_warnings(spec):
        print(f"warning: {line}", file=sys.stderr, flush=True)


def _run_torch(spec: JobSpec, seed: int, run_dir: Path, resume: bool) -> None:
    """One run of a torch learner (``ppo``, ``vtrace``) into ``run_dir``."""
    job, schedule = spec.options, spec.schedule
    metadata = _metadata(spec, seed, schedule)
    state, ckpt_file = None, None
    if resume and (run_dir / METADATA_FILE).exists():
        _check_resumable(run_dir, metadata)
        state, ckpt_file = load_resume_state(run_dir) or (None, None)
        truncate_logs(run_dir, checkpoint_step(state) if state is not None else -1)
    if state is not None and state.get("finished"):
        print(f"run {run_dir} is already complete; writing the report only")
        _write_report(run_dir, spec.options)
        return

    th.manual_seed(seed)
    cl = build_method(spec, seed, run_dir)  # a replay buffer that fits nowhere: refused here
    print(f"device: {spec.device} (device={job.device})", flush=True)
    before = directory_entries(run_dir)
    run_log = RunLog(run_dir, metadata, resume=resume)
    built: dict[str, Any] = {}
    try:
        _train_torch(spec, seed, cl, run_dir, run_log, state, ckpt_file, built)
    except BaseException:
        run_log.close()
        if not resume and getattr(built.get("model"), "num_timesteps", 0) == 0:
            remove_unstarted(run_dir, before)  # failed before its first step: run it again
        raise
    _write_report(run_dir, job)


def build_method(spec: JobSpec, seed: int, run_dir: Path) -> ContinualMethod:
    """The run's CL method, built once, before the run directory exists. A method that
    keeps replay buffers (CLEAR; CORA's EWC, online EWC and P&C) keeps them in RAM if they
    fit, else in ``run_dir/replay`` (the job option ``replay_on_disk``), and the memory
    guard plans them now: a buffer that fits nowhere raises ``ReplayMemoryError`` before
    anything is written (``baselines_sb3.cl.storage``)."""
    kwargs = dict(spec.hp["method"])
    if method_class(spec.method, kwargs.get("variant")).keeps_replay:
        storage = replay_storage(spec.options.replay_on_disk)
        kwargs.update(disk_dir=run_dir / "replay", storage=storage)
    method = make_method(spec.method, seed=int(seed), **kwargs)
    if method.keeps_replay:
        method.plan_storage(
            int(spec.hp["learner"].get("n_steps", 20)),
            spec.sequence.observation_space,
            int(spec.sequence.action_space.n),
            quiet=True,
        )
    return method


def _train_torch(
    spec: JobSpec,
    seed: int,
    cl: ContinualMethod,
    run_dir: Path,
    run_log: RunLog,
    state: dict[str, Any] | None,
    ckpt_file: Path | None,
    built: dict[str, Any],
) -> None:
    """Build the training env and the learner of ``spec`` and train them with the method
    ``cl``, logging into ``run_log``; ``built["model"]`` is the learner once it exists (its
    ``num_timesteps``: the steps taken)."""
    sequence, job, hp = spec.sequence, spec.options, spec.hp
    agents = spec.num_agents
    schedule = spec.schedule
    train_env, sb3_env, eval_source = _training_env(spec)
    sb3_env.seed(int(seed))
    env, task_wrapper = wrap_env(
        sb3_env, sequence, hp, multi_head=spec.multi_head, task_id_input=spec.task_id_input
    )
    model = build_model(
        spec.learner,
        env,
        sequence,
        hp,
        cl,
        method=spec.method,
        seed=int(seed),
        multi_head=spec.multi_head,
        task_id_input=spec.task_id_input,
        device=spec.device,
    )
    built["model"] = model
    tracking = {"tensorboard": job.tensorboard, "wandb": job.wandb}
    configure_logger(model, run_dir, tracking, run_log=run_log)  # --tensorboard / --wandb
    cl_callback = attach_method(model, cl, env)
    evaluator = _evaluator(spec, seed, run_log, run_dir, schedule, eval_source)
    if cl.needs_fresh_episodes:  # e.g. MEAL's Fisher: 5 fresh episodes x 500 steps
        cl.set_episode_source(
            make_episode_source(
                evaluator, model, lambda: train_env.cursor.total_step, spec.num_agents
            )
        )
    if state is not None:
        cut = apply_checkpoint(state, model, cl, train_env, evaluator, task_wrapper, ckpt_file)
        run_log.log_episodes(cut)
    ckpt_cb = CheckpointCallback(
        checkpoint_dir(run_dir),
        job.checkpoint_every,
        cl,
        train_env,
        evaluator,
    )
    unit = spec.suite.step_unit.name
    start_step = train_env.cursor.total_step if state is not None else 0
    if job.progress:
        print(plan_text(schedule, unit, evaluator, start_step), flush=True)
    progress = RunProgress(
        schedule,
        run_dir=run_dir,
        show=job.progress,
        unit=unit,
        initial_step=start_step,
        evaluator=evaluator,
    )
    plasticity_cb = _plasticity_callback(spec, model, run_log, run_dir, evaluator, state)
    if plasticity_cb is not None:
        ckpt_cb.extra_state = lambda: {"plasticity": plasticity_cb.tracker.state_dict()}
    callbacks = CallbackList(
        [
            cl_callback,
            ContinualEvalCallback(
                evaluator,
                run_log,
                schedule,
                cl,
                agents_per_env=agents,
                deterministic=job.eval_deterministic,
                beside_training=job.eval_beside_training,
            ),
            *([plasticity_cb] if plasticity_cb is not None else []),
            ckpt_cb,
            ProgressBarCallback(progress, agents),
        ]
    )
    error: BaseException | None = None
    previous_threads = th.get_num_threads()
    model.update_threads = job.update_threads
    th.set_num_threads(job.torch_threads)
    try:
        model.learn(
            total_timesteps=schedule[-1].end_step * agents - model.num_timesteps,
            callback=callbacks,
            reset_num_timesteps=state is None,
        )
        ckpt_cb.save(finished=True)
    except BaseException as e:
        error = e
        raise
    finally:
        th.set_num_threads(previous_threads)
        progress.close(*outcome_of(error))  # interrupted (Ctrl-C, SIGTERM) or failed: why
        evaluator.close()
        run_log.close()
        env.close()
        if hasattr(cl, "buffer") and cl.buffer is not None:
            cl.buffer.close()


def _plasticity_callback(
    spec: JobSpec,
    model: Any,
    run_log: RunLog,
    run_dir: Path,
    evaluator: Any,
    state: dict[str, Any] | None,
) -> PlasticityCallback | None:
    """The run's plasticity diagnostics (``None`` when ``plasticity=false``, or with one
    warning line when the policy has no layer they can read: the run goes on)."""
    job = spec.options
    if not job.plasticity:
        return None
    settings = job.plasticity_settings()
    try:
        probe = policy_probe(model.policy)
    except ValueError as e:
        print(f"warning: no plasticity diagnostics: {e}", file=sys.stderr, flush=True)
        return None
    tracker = PlasticityTracker(settings, run_log.log_plasticity, run_dir / PROBE_FILE)
    if state is not None and state.get("plasticity") is not None:
        tracker.load_state_dict(state["plasticity"])
    return PlasticityCallback(tracker, probe, evaluator, spec.schedule, spec.num_agents)


def run_seed_group(
    *,
    suite: str,
    method: str,
    learner: str | None = None,
    preset: str,
    seeds: Sequence[int],
    run_dirs: Sequence[Path],
    resume: bool,
    num_envs: int | None,
    overrides: dict[str, Any],
) -> list[Path]:
    """Train ``seeds`` of one MEAL configuration vmapped in one program (``ppo-jax``);
    seed ``seeds[i]`` writes the ordinary run directory ``run_dirs[i]``. See
    :func:`cl_suites.job.run_spec.resolve` for the kitchens; ``resume`` continues every
    seed from their newest common checkpoint."""
    request = RunRequest(
        suite, method, preset, learner, seeds=seeds, num_envs=num_envs, overrides=overrides
    )
    specs = resolve(request)
    if len(run_dirs) != len(specs):
        raise BadValueError(
            f"{len(specs)} seeds need {len(specs)} run directories, got {len(run_dirs)}"
        )
    run_resolved(specs, seeds, run_dirs, resume)
    return [Path(d) for d in run_dirs]


def _run_jax(specs: list[JobSpec], seeds: list[int], run_dirs: list[Path], resume: bool) -> None:
    """The ``ppo-jax`` job (``cl_suites.job.jax_job``) with this module's shared pieces."""
    from cl_suites.job.jax_job import run_jax_job

    schedule = specs[0].schedule
    if resume:
        for spec, seed, run_dir in zip(specs, seeds, run_dirs, strict=True):
            if (run_dir / METADATA_FILE).exists():
                _check_resumable(run_dir, _metadata(spec, seed, schedule))

    def open_run(
        spec: JobSpec, seed: int, run_dir: Path, resume: bool, initial_step: int
    ) -> tuple[RunLog, Evaluator, RunProgress]:
        job = spec.options
        run_log = RunLog(
            run_dir,
            _metadata(spec, seed, schedule),
            resume=resume,
            tensorboard=job.tensorboard,
        )
        try:
            track_run_log(run_log, run_dir, {"wandb": job.wandb})  # eval and episode returns
            source = spec.suite.runtime.eval_source(spec.instance)
            evaluator = _evaluator(spec, seed, run_log, run_dir, schedule, source)
            progress = RunProgress(
                schedule,
                run_dir=run_dir,
                show=job.progress and run_dir == run_dirs[0],
                unit=spec.suite.step_unit.name,
                initial_step=initial_step,
            )
        except BaseException:
            run_log.close()
            raise
        return run_log, evaluator, progress

    before = [directory_entries(d) for d in run_dirs]
    try:
        run_jax_job(specs, seeds, run_dirs, resume, open_run)
    except BaseException:
        for run_dir, entries in zip(run_dirs, before, strict=True):
            progress = read_progress(run_dir) or {}
            if not resume and not progress.get("total_step"):  # failed before its first step
                remove_unstarted(run_dir, entries)
        raise
    for run_dir in run_dirs:
        _write_report(run_dir, specs[0].options)
    parents = {run_dir.parent for run_dir in run_dirs}
    if len(run_dirs) > 1 and len(parents) == 1:  # --seeds: one report of all seeds, as a sweep
        _write_report(parents.pop(), specs[0].options, runs=run_dirs)


def _evaluator(
    spec: JobSpec,
    seed: int,
    run_log: RunLog,
    run_dir: Path,
    schedule: tuple[Segment, ...],
    eval_source: Any,
) -> Evaluator:
    """The run's evaluator: the suite's cadence (MEAL: per task, no step-0 evaluation),
    its env source, videos when asked, the evaluation-only episode cap."""
    return Evaluator(
        spec.sequence,
        seed=int(seed),
        run_log=run_log,
        # evaluation envs step in this process: workers per (task, split) would multiply
        vectorization_mode="sync"
        if spec.options.vectorization_mode == "workers"
        else spec.options.vectorization_mode,
        first_eval_step=0 if spec.options.eval_at_start else None,
        segments=schedule if spec.options.eval_per_task else None,
        env_source=eval_source,
        video=_video_recorder(run_dir, spec.options, schedule),
        max_episode_steps=spec.options.eval_max_episode_steps,
    )


def _training_env(spec: JobSpec) -> tuple[Any, Any, Any]:
    """(the env that keeps the schedule, its SB3 view, the evaluator's env source): the
    env and source from the suite's runtime (``SequenceVectorEnv``; MEAL: its batched
    engine), the view from the torch wing (``cl_suites.job.torch.sb3_env``)."""
    runtime = spec.suite.runtime
    env, eval_source = runtime.vector_env(
        spec.instance,
        spec.schedule,
        spec.options.vectorization_mode,
        rollout_steps=rollout_steps(spec.hp),
        env_workers=spec.options.env_workers,
    )
    wanted = spec.options.device_observations
    return env, sb3_env(spec.suite, env, spec.device, wanted), eval_source


def _video_recorder(
    run_dir: Path, job: JobOptions, schedule: tuple[Segment, ...]
) -> VideoRecorder | None:
    if not job.capture_video:
        return None
    every = job.video_every
    end = schedule[-1].end_step
    if every:
        boundaries = list(range(0, end + 1, int(every)))
    else:
        boundaries = [0] + [s.end_step for s in schedule]
    return VideoRecorder(run_dir, boundaries, max_frames=job.video_length)


def _metadata(spec: JobSpec, seed: int, schedule: tuple[Segment, ...]) -> dict[str, Any]:
    metadata = run_metadata(
        spec.suite.id,
        spec.sequence,
        seed=seed,
        method=spec.method,
        learner=spec.learner,
        preset=spec.preset,
        num_envs=spec.num_envs,
        env_kwargs=spec.suite_kwargs,
        description=spec.instance.describe(),
        schedule=schedule,
        hyperparameters=spec.hyperparameters(),
        evaluation={
            "at_start": spec.options.eval_at_start,
            "per_task": spec.options.eval_per_task,
            "deterministic": spec.options.eval_deterministic,
            "max_episode_steps": spec.options.eval_max_episode_steps,
        },
        step_unit=spec.step_unit,
        device=spec.device or _jax_device(),
        request=dict(spec.request),
    )
    if spec.device is not None:  # a torch learner: its observations on the host or device
        metadata["observations"] = observation_location(
            spec.suite, spec.instance, spec.device, spec.options.device_observations
        )
    metadata.update(spec.instance.run_metadata(), **spec.suite.runtime.training_metadata)
    return metadata


def _jax_device() -> str:
    """The platform JAX runs ``ppo-jax`` on (``cpu``, ``gpu``, ...)."""
    import jax

    return str(jax.default_backend())


def _check_resumable(run_dir: Path, metadata: dict[str, Any]) -> None:
    old = read_metadata(run_dir)
    diffs = [
        f"{k}: run has {old.get(k)!r}, requested {metadata[k]!r}"
        for k in _RESUME_KEYS
        if old.get(k) != metadata[k]
    ]
    if json.dumps(old.get("schedule")) != json.dumps(metadata["schedule"]):
        diffs.append("schedule differs (other steps_per_task / cycles / num_envs)")
    if diffs:
        raise RunDirConflictError(
            f"refusing to resume {run_dir}: it is a different run ({'; '.join(diffs)})"
        )


def _write_report(run_dir: Path, job: JobOptions, runs: Sequence[Path] | None = None) -> None:
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
