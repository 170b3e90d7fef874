"""The main job behind ``cl-suites run``: train a baseline over a whole suite.

One job serves every suite. ``run_main_job`` resolves the run (``resolve_job``), builds
the suite's training env and its SB3 view, the learner with the CL method
(``baselines_sb3.factory``), evaluates on the suite's schedule with the core
``Evaluator`` (greedy policy), logs training episodes, checkpoints periodically, resumes
after a kill, and writes the metrics report at the end.

MEAL suites train with the JAX IPPO by default (learner ``ppo-jax``, package
``baselines_jax``): ``run_main_job`` hands them to ``baselines_sb3.jax_job`` with the
shared pieces of this module (run log and metadata, evaluator, progress, resume checks,
report), and ``run_seed_group`` trains several seeds of one configuration vmapped in one
program, one run directory each. With ``learner="ppo"`` (SB3/torch)
the multi-agent suites (``MEAL-<N>``) plug in three small pieces: the batched JAX env
(``MealBatchedEnv`` -> ``MealSB3VecEnv``, one SB3 slot per agent: parameter sharing,
i.e. IPPO), MEAL's eval env source (all kitchens in one jitted call, sparse delivery
returns) and the score normalisers in the metadata. Their steps are **env steps** (one
joint action of all agents); every other suite counts **agent steps** (``env.step``
calls summed over sub-envs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import CallbackList

from baselines_sb3 import presets
from baselines_sb3.callbacks import (
    ContinualEvalCallback,
    ProgressBarCallback,
    make_episode_source,
)
from baselines_sb3.checkpoint import (
    CheckpointCallback,
    apply_checkpoint,
    checkpoint_dir,
    checkpoint_step,
    load_resume_state,
    truncate_logs,
)
from baselines_sb3.cl import METHODS, attach_method, make_method
from baselines_sb3.cl.clear import replay_storage
from baselines_sb3.factory import LEARNERS, build_model, learner_class, wrap_env
from baselines_sb3.jax_options import (
    JAX_LEARNER,
    TORCH_ONLY_JOB_OPTIONS,
    check_no_jax_options,
    make_config,
    resolve_jax,
    route_jax_overrides,
    torch_only_options,
)
from baselines_sb3.option_specs import check_options, job_size_warnings
from baselines_sb3.tracking import configure_logger, track_run_log
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.progress import RunProgress, plan_text
from cl_suites.core.runlog import METADATA_FILE, RunLog, read_metadata
from cl_suites.core.task import Segment, TaskSequence, check_positive_int
from cl_suites.core.video import VideoRecorder
from cl_suites.meal.suite import is_meal_id
from cl_suites.suites import SuiteInfo, find_suite

JOB_OPTIONS: tuple[str, ...] = (
    "checkpoint_every",
    "vectorization_mode",
    "replay_on_disk",
    "multi_head",
    "task_id_input",
    "progress",
    "device",
    "report",
    "tensorboard",
    "wandb",
    "capture_video",
    "video_every",
    "video_length",
    "eval_at_start",
    "eval_per_task",
    "eval_deterministic",
    "eval_max_episode_steps",
    "torch_threads",
    "update_threads",
)
"""``overrides`` keys consumed by the job itself; every other key goes to the suite builder,
except keys of the learner or method preset (``learning_rate``, ``lam``, ...), which
override those.

* ``checkpoint_every``: steps between checkpoints (default: the suite's ``eval_every``).
* ``progress``: draw the rich progress bar (default False: library calls stay quiet; the
  CLI asks). ``RUN_DIR/progress.json`` is written either way.
* ``capture_video``: record one evaluation episode per task and split into
  ``RUN_DIR/videos/`` at the first evaluation, and at the first evaluation after each
  task's training (or after every ``video_every`` steps); ``video_length`` caps the
  frames per video (default: the whole episode).
* ``eval_at_start``: evaluate before training (default True; MEAL: False, as MEAL).
* ``eval_per_task``: count ``eval_every`` from the start of every task (MEAL's "every N
  updates" of each task; default for MEAL) instead of the global grid ``k * eval_every``.
* ``eval_deterministic``: greedy (default) or sampled actions in evaluation.
* ``device``, ``vectorization_mode``, ``replay_on_disk``, ``torch_threads``,
  ``update_threads``: options of the torch learners only (refused with ``ppo-jax``,
  which takes its device from JAX, ``JAX_PLATFORMS``). With ``ppo-jax``, ``tensorboard``
  and ``wandb`` get the run log's eval and episode returns (no learner losses).
* ``eval_max_episode_steps``: an evaluation-only episode cap, in steps of one eval env
  (default ``None``: whole episodes, the papers' protocol; CORA evaluates Atari on whole
  games). Training episodes keep the suite's own cap.
* ``torch_threads``: torch's intra-op threads while training (default ``TORCH_THREADS``,
  1, every suite; a sweep run: its ``--cpus-per-run``).
* ``update_threads``: torch's intra-op threads in the learner's updates (the epochs over
  each rollout; default: ``torch_threads``). More threads gain 1.1-1.25x on a quiet
  machine (MEAL-2, 16-256 envs) and lose many times that on a busy one.
"""

TORCH_THREADS = 1
"""The default of ``torch_threads`` (and so of ``update_threads``) for every suite: the one
place the thread default is set. torch's own default is one intra-op thread per core, and
its OpenMP workers spin after each operation; next to other processes on the same cores
(a cluster node, a laptop) the spinning workers and the other processes take turns and a
run collapses: a Diagnostic small run took 438 s wall and 83 s CPU with torch's default
next to other jobs on 2 cores, 23 s and 6 s with 1 thread; a MEAL run that steps JAX and
torch in turn in one process was 5-10x slower with one thread per core
(``benchmarks/bench_contention.py``, ``benchmarks/bench_meal.py``). One thread costs at
most 1.1-1.25x on a quiet machine."""

MEAL_LEARNERS: tuple[str, ...] = (JAX_LEARNER, "ppo")
"""Learners of MEAL suites: the JAX IPPO (default) and the SB3/torch IPPO."""
MEAL_RUN_SUITE: dict[str, Any] = {"random_reset": True}
"""Suite options of MEAL runs (unless overridden): MEAL's paper-time training code resets
every episode to random agent positions, inventories and pot states (its Overcooked's
``random_reset=True``, for training and evaluation envs alike)."""
_RESUME_KEYS = ("suite", "method", "learner", "preset", "seed", "num_envs")


def _check_choice(kind: str, value: str, valid: tuple[str, ...] | list[str]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(valid)}")


@dataclass
class JobSpec:
    """A main-job run resolved from its arguments, before any env is built.

    Attributes:
        suite: the catalog entry; ``sequence`` the suite's task sequence with the run's
            kwargs (``suite_kwargs``), built without touching a simulator.
        method / learner / preset: the resolved names (``learner`` never ``None``).
        hp: ``presets.resolve`` output after the overrides (``learner``, ``method``,
            ``network``, ``net_arch``, ``reward_clip``, ...).
        job: job options (keys of ``JOB_OPTIONS``).
        num_envs: envs of the training env (MEAL: envs, each with ``num_agents`` agents).
        multi_head / task_id_input: policy options.
        meal: the ``MealSuite`` (kitchens, agents) of a MEAL run, else ``None``.
    """

    suite: SuiteInfo
    method: str
    learner: str
    preset: str
    hp: dict[str, Any]
    job: dict[str, Any]
    suite_kwargs: dict[str, Any]
    sequence: TaskSequence
    num_envs: int
    multi_head: bool
    task_id_input: bool
    meal: Any = None

    @property
    def num_agents(self) -> int:
        """Agents per env: SB3 slots per env (1 for single-agent suites)."""
        return self.meal.num_agents if self.meal is not None else 1

    @property
    def step_unit(self) -> str:
        if self.meal is not None:
            return "env steps (one joint action of all agents)"
        return "agent steps (env.step calls summed over sub-envs)"

    def config(self) -> dict[str, Any]:
        """The resolved configuration as JSON-ready data (what ``--print-config`` shows)."""
        return {
            "suite": self.suite.id,
            "method": self.method,
            "learner": self.learner,
            "preset": self.preset,
            "num_envs": self.num_envs,
            "suite_kwargs": dict(self.suite_kwargs),
            "job": dict(self.job),
            "hyperparameters": self.hyperparameters(),
        }

    def hyperparameters(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.hp.items() if k not in ("suite_defaults", "num_envs")},
            "multi_head": self.multi_head,
            "task_id_input": self.task_id_input,
        }

    def eval_at_start(self) -> bool:
        return bool(self.job.get("eval_at_start", self.meal is None))

    def eval_per_task(self) -> bool:
        return bool(self.job.get("eval_per_task", self.meal is not None))


def resolve_job(
    *,
    suite: str,
    method: str,
    learner: str | None,
    preset: str,
    num_envs: int | None,
    overrides: dict[str, Any] | None,
    seed: int = 0,
) -> JobSpec:
    """Resolve a run's configuration (presets + overrides) without building any env.

    ``learner=None`` takes the suite's default learner under ``preset``
    (``presets.default_learner``). ``seed`` is the run seed: MEAL generates its kitchens
    from it unless ``overrides`` fixes ``layout_seed`` (MEAL trains its seeds on different
    generated sequences). MEAL budgets are whole PPO updates, as in MEAL's code: each
    task trains ``steps_per_task // (n_steps * num_envs)`` updates.

    Raises ``ValueError`` naming an unknown method, learner, preset or option and the
    valid ones, or an option's value outside its declared type and range
    (``option_specs.OPTION_SPECS``), and ``KeyError`` for an unknown suite.
    """
    overrides = check_options({k: v for k, v in dict(overrides or {}).items() if v is not None})
    _check_choice("method", method, list(METHODS))
    _check_choice("preset", preset, presets.PRESETS)
    meal = is_meal_id(suite)
    if meal:
        from cl_suites.meal.suite import suite_info

        info = suite_info(str(suite).split(":", 1)[-1])
        _check_choice("method for MEAL", method, presets.MEAL_METHODS)
    else:
        info = find_suite(suite)
    preset_suite = "MEAL" if meal else info.name
    learner = learner or presets.default_learner(preset_suite, preset)
    valid = MEAL_LEARNERS if meal else LEARNERS
    if learner in (*LEARNERS, *MEAL_LEARNERS) and learner not in valid:
        raise ValueError(
            f"learner {learner!r} is not available for {info.name}; valid: {', '.join(valid)}"
        )
    _check_choice("learner", learner, valid)
    hp = presets.resolve(preset_suite, "ppo" if learner == JAX_LEARNER else learner, method, preset)
    job = {k: overrides.pop(k) for k in JOB_OPTIONS if k in overrides}
    if learner == JAX_LEARNER:
        hp, overrides = _resolve_jax_learner(hp, method, job, overrides)
    else:
        if meal:
            check_no_jax_options(overrides, learner)
        overrides = presets.route_overrides(hp, learner, method, overrides)
    suite_kwargs = {**hp["suite_defaults"], **overrides}
    n_envs = int(num_envs or hp["num_envs"])
    if learner == JAX_LEARNER:
        hp["learner"]["num_envs"] = n_envs
        make_config(hp["learner"])  # IPPOConfig checks its values: bad ones fail here
    meal_suite = None
    if meal:
        meal_suite, suite_kwargs = _resolve_meal_suite(info, hp, suite_kwargs, n_envs, seed)
        sequence = meal_suite.sequence
    else:
        sequence = info.build(**suite_kwargs)
    return JobSpec(
        suite=info,
        method=method,
        learner=learner,
        preset=preset,
        hp=hp,
        job=job,
        suite_kwargs=suite_kwargs,
        sequence=sequence,
        num_envs=n_envs,
        multi_head=bool(job.get("multi_head", hp["multi_head"])),
        task_id_input=bool(job.get("task_id_input", hp["task_id_input"])),
        meal=meal_suite,
    )


def _resolve_jax_learner(
    hp: dict[str, Any], method: str, job: dict[str, Any], overrides: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(hp, suite overrides)`` of a ``ppo-jax`` run: ``hp["learner"]`` holds every
    ``IPPOConfig`` field (the preset's values, then the run's overrides)."""
    torch_job = sorted(k for k in job if k in TORCH_ONLY_JOB_OPTIONS)
    if torch_job:
        raise ValueError(
            f"option(s) {', '.join(map(repr, torch_job))} belong to the torch learner 'ppo', "
            f"not to learner {JAX_LEARNER!r}; run with --learner ppo or drop them"
        )
    torch_only = torch_only_options(hp, presets.accepted_options(learner_class("ppo")))
    values = resolve_jax(hp, method)
    if "cl_method" in overrides:
        raise ValueError("set the CL method with --method, not with the option cl_method")
    overrides = route_jax_overrides(values, overrides, torch_only)
    for key in ("multi_head", "task_id_input"):
        if key in job and key in values:
            values[key] = bool(job[key])
    jax_hp = {
        "learner": values,
        "method": {},
        "num_envs": hp["num_envs"],
        "multi_head": bool(values.get("multi_head", hp["multi_head"])),
        "task_id_input": bool(values.get("task_id_input", hp["task_id_input"])),
        "suite_defaults": hp["suite_defaults"],
    }
    return jax_hp, overrides


def rollout_steps(hp: dict[str, Any]) -> int:
    """Steps per env in one PPO update (torch ``n_steps``, JAX ``num_steps``)."""
    learner = hp["learner"]
    return int(learner.get("n_steps", learner.get("num_steps", 1)))


def _resolve_meal_suite(
    info: SuiteInfo, hp: dict[str, Any], suite_kwargs: dict[str, Any], n_envs: int, seed: int
) -> tuple[Any, dict[str, Any]]:
    from cl_suites.meal.suite import PAPER_STEPS_PER_TASK, build_suite

    if "seed" in suite_kwargs:
        raise ValueError(
            "MEAL's kitchens follow the run seed; to fix them whatever the run seed, pass "
            f"layout_seed (got seed={suite_kwargs['seed']!r} as a suite option)"
        )
    kwargs = {"layout_seed": int(seed), **MEAL_RUN_SUITE, **suite_kwargs}
    rollout = rollout_steps(hp) * n_envs
    requested = check_positive_int(
        "steps_per_task", kwargs.get("steps_per_task", PAPER_STEPS_PER_TASK)
    )
    if requested < rollout:
        raise ValueError(
            f"steps_per_task {requested} is less than one PPO update of {rollout} env steps "
            f"(n_steps x num_envs); use at least {rollout}"
        )
    kwargs["steps_per_task"] = requested // rollout * rollout
    return build_suite(info.name, **kwargs), kwargs


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
    run_dir = Path(run_dir)
    kwargs = dict(suite=suite, method=method, learner=learner, preset=preset, num_envs=num_envs)
    if seeds is not None:
        run_seed_group(
            **kwargs,
            seeds=seeds,
            run_dirs=seed_run_dirs(run_dir, seeds),
            resume=resume,
            overrides=overrides,
        )
        return run_dir
    spec = resolve_job(**kwargs, overrides=overrides, seed=seed)
    for line in job_size_warnings(spec):
        print(f"warning: {line}", file=sys.stderr, flush=True)
    if spec.learner == JAX_LEARNER:
        _run_jax([spec], [int(seed)], [run_dir], resume)
        return run_dir
    sequence, job, hp, n_envs = spec.sequence, spec.job, spec.hp, spec.num_envs
    agents = spec.num_agents
    schedule = sequence.schedule(n_envs)
    metadata = _metadata(spec, seed, schedule)
    state, ckpt_file = None, None
    if resume and (run_dir / METADATA_FILE).exists():
        _check_resumable(run_dir, metadata)
        state, ckpt_file = load_resume_state(run_dir) or (None, None)
        truncate_logs(run_dir, checkpoint_step(state) if state is not None else -1)
    if state is not None and state.get("finished"):
        print(f"run {run_dir} is already complete; writing the report only")
        _write_report(run_dir, job)
        return run_dir

    th.manual_seed(seed)
    run_log = RunLog(run_dir, metadata, resume=resume)
    train_env, sb3_env, eval_source = _training_env(spec)
    sb3_env.seed(int(seed))
    env, task_wrapper = wrap_env(
        sb3_env, sequence, hp, multi_head=spec.multi_head, task_id_input=spec.task_id_input
    )
    method_kwargs = dict(hp["method"])
    if spec.method == "clear":  # RAM if the buffer fits, else run_dir/replay (or refuse)
        storage = replay_storage(job.get("replay_on_disk"))
        method_kwargs.update(disk_dir=run_dir / "replay", storage=storage)
    elif spec.method in ("ewc", "online-ewc", "pnc") and job.get("replay_on_disk"):
        method_kwargs["disk_dir"] = run_dir / "replay"  # CORA's per-task frame buffers
    cl = make_method(spec.method, seed=int(seed), **method_kwargs)
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
        device=job.get("device", "auto"),
    )
    configure_logger(model, run_dir, job, run_log=run_log)  # --tensorboard / --wandb
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
        int(job.get("checkpoint_every", sequence.eval_every)),
        cl,
        train_env,
        evaluator,
    )
    unit = "env steps" if spec.meal is not None else "agent steps"
    start_step = train_env.cursor.total_step if state is not None else 0
    if job.get("progress", False):
        print(plan_text(schedule, unit, evaluator, start_step), flush=True)
    progress = RunProgress(
        schedule,
        run_dir=run_dir,
        show=bool(job.get("progress", False)),
        unit=unit,
        initial_step=start_step,
        evaluator=evaluator,
    )
    callbacks = CallbackList(
        [
            cl_callback,
            ContinualEvalCallback(
                evaluator,
                run_log,
                schedule,
                cl,
                agents_per_env=agents,
                deterministic=bool(job.get("eval_deterministic", True)),
            ),
            ckpt_cb,
            ProgressBarCallback(progress, agents),
        ]
    )
    outcome = "failed"
    threads = job.get("torch_threads", TORCH_THREADS)
    previous_threads = th.get_num_threads()
    model.update_threads = job.get("update_threads", threads)
    th.set_num_threads(threads)
    try:
        model.learn(
            total_timesteps=schedule[-1].end_step * agents - model.num_timesteps,
            callback=callbacks,
            reset_num_timesteps=state is None,
        )
        ckpt_cb.save(finished=True)
        outcome = "finished"
    finally:
        th.set_num_threads(previous_threads)
        progress.close(outcome)
        evaluator.close()
        run_log.close()
        env.close()
        if hasattr(cl, "buffer") and cl.buffer is not None:
            cl.buffer.close()
    _write_report(run_dir, job)
    return run_dir


def seed_run_dirs(run_dir: Path, seeds: Sequence[int]) -> list[Path]:
    """The run directories of a several-seed run: ``run_dir/seed-<s>`` per seed."""
    return [Path(run_dir) / f"seed-{int(s)}" for s in seeds]


def resolve_seed_group(
    *,
    suite: str,
    method: str,
    learner: str | None,
    preset: str,
    seeds: Sequence[int],
    num_envs: int | None,
    overrides: dict[str, Any] | None,
) -> list[JobSpec]:
    """The ``JobSpec`` of every seed of a several-seed run, checked, building nothing.

    The seeds train on one set of kitchens: ``layout_seed`` when ``overrides`` gives it,
    else the first seed's (a MEAL run's kitchens otherwise follow its seed; seed ``s`` of
    the group equals the single-seed run ``--seed s --set layout_seed=<that>``). Raises
    ``ValueError`` for duplicate or bad seeds, and for a suite or learner that cannot
    train seeds in one program (only MEAL with ``ppo-jax``).
    """
    from cl_suites.config import check_seeds

    seeds = check_seeds(seeds)
    overrides = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    if is_meal_id(suite):
        overrides.setdefault("layout_seed", seeds[0])
    specs = [
        resolve_job(
            suite=suite,
            method=method,
            learner=learner,
            preset=preset,
            num_envs=num_envs,
            overrides=overrides,
            seed=s,
        )
        for s in seeds
    ]
    spec = specs[0]
    if spec.meal is None or spec.learner != JAX_LEARNER:
        raise ValueError(
            f"several seeds in one program need a MEAL suite and learner {JAX_LEARNER!r}; got "
            f"suite {spec.suite.name} with learner {spec.learner!r} (train its seeds one by "
            "one, e.g. with cl-suites sweep --seeds)"
        )
    return specs


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
    :func:`resolve_seed_group` for the kitchens; ``resume`` continues every seed from
    their newest common checkpoint."""
    specs = resolve_seed_group(
        suite=suite,
        method=method,
        learner=learner,
        preset=preset,
        seeds=seeds,
        num_envs=num_envs,
        overrides=overrides,
    )
    if len(run_dirs) != len(specs):
        raise ValueError(
            f"{len(specs)} seeds need {len(specs)} run directories, got {len(run_dirs)}"
        )
    run_dirs = [Path(d) for d in run_dirs]
    _run_jax(specs, [int(s) for s in seeds], run_dirs, resume)
    return run_dirs


def _run_jax(specs: list[JobSpec], seeds: list[int], run_dirs: list[Path], resume: bool) -> None:
    """The ``ppo-jax`` job (``baselines_sb3.jax_job``) with this module's shared pieces."""
    from baselines_sb3.jax_job import run_jax_job
    from cl_suites.meal.evaluation import MealEvalSource

    schedule = specs[0].sequence.schedule(specs[0].num_envs)
    if resume:
        for spec, seed, run_dir in zip(specs, seeds, run_dirs, strict=True):
            if (run_dir / METADATA_FILE).exists():
                _check_resumable(run_dir, _metadata(spec, seed, schedule))

    def open_run(
        spec: JobSpec, seed: int, run_dir: Path, resume: bool, initial_step: int
    ) -> tuple[RunLog, Evaluator, RunProgress]:
        job = spec.job
        run_log = RunLog(
            run_dir,
            _metadata(spec, seed, schedule),
            resume=resume,
            tensorboard=bool(job.get("tensorboard")),
        )
        try:
            track_run_log(run_log, run_dir, job)  # --wandb: eval and episode returns
            source = MealEvalSource(spec.meal)
            evaluator = _evaluator(spec, seed, run_log, run_dir, schedule, source)
            progress = RunProgress(
                schedule,
                run_dir=run_dir,
                show=bool(job.get("progress", False)) and run_dir == run_dirs[0],
                unit="env steps",
                initial_step=initial_step,
            )
        except BaseException:
            run_log.close()
            raise
        return run_log, evaluator, progress

    run_jax_job(specs, seeds, run_dirs, resume, open_run)
    for run_dir in run_dirs:
        _write_report(run_dir, specs[0].job)


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
        vectorization_mode=spec.job.get("vectorization_mode", "sync"),
        first_eval_step=0 if spec.eval_at_start() else None,
        segments=schedule if spec.eval_per_task() else None,
        env_source=eval_source,
        video=_video_recorder(run_dir, spec.job, schedule),
        max_episode_steps=spec.job.get("eval_max_episode_steps"),
    )


def _training_env(spec: JobSpec) -> tuple[Any, Any, Any]:
    """(the env that keeps the schedule, its SB3 view, the evaluator's env source)."""
    if spec.meal is not None:
        from cl_suites.meal.batched import MealBatchedEnv
        from cl_suites.meal.evaluation import MealEvalSource
        from cl_suites.meal.sb3_vec import MealSB3VecEnv

        # shaping held per PPO update, as MEAL's trainer and ppo-jax
        batched = MealBatchedEnv(spec.meal, spec.num_envs, rollout_steps=rollout_steps(spec.hp))
        sb3_env = MealSB3VecEnv(batched)  # full 400-step episodes: terminal in wrap_env
        return batched, sb3_env, MealEvalSource(spec.meal, batched.engine)
    from cl_suites.core.sb3_adapter import SB3VecEnv
    from cl_suites.core.vector import SequenceVectorEnv

    venv = SequenceVectorEnv(
        spec.sequence, spec.num_envs, spec.job.get("vectorization_mode", "sync")
    )
    return venv, SB3VecEnv(venv), None


def _video_recorder(
    run_dir: Path, job: dict[str, Any], schedule: tuple[Segment, ...]
) -> VideoRecorder | None:
    if not job.get("capture_video"):
        return None
    every = job.get("video_every")
    end = schedule[-1].end_step
    if every:
        boundaries = list(range(0, end + 1, int(every)))
    else:
        boundaries = [0] + [s.end_step for s in schedule]
    return VideoRecorder(run_dir, boundaries, max_frames=job.get("video_length"))


def _metadata(spec: JobSpec, seed: int, schedule: tuple[Segment, ...]) -> dict[str, Any]:
    sequence = spec.sequence
    description = spec.meal.describe() if spec.meal is not None else sequence.describe()
    metadata = {
        "suite_id": spec.suite.id,
        "suite": spec.suite.name,
        "method": spec.method,
        "learner": spec.learner,
        "preset": spec.preset,
        "seed": int(seed),
        "env_kwargs": spec.suite_kwargs,
        "tasks": description["tasks"],
        "schedule": [s.as_dict() for s in schedule],
        "steps_per_task": [t.budget for t in sequence.tasks],
        "cycles": sequence.cycles,
        "eval_every": sequence.eval_every,
        "eval_episodes": sequence.eval_episodes,
        "num_envs": spec.num_envs,
        "metric_settings": description["metric_settings"],
        "hyperparameters": spec.hyperparameters(),
        "evaluation": {
            "at_start": spec.eval_at_start(),
            "per_task": spec.eval_per_task(),
            "deterministic": bool(spec.job.get("eval_deterministic", True)),
            "max_episode_steps": spec.job.get("eval_max_episode_steps"),
        },
        "step_unit": spec.step_unit,
    }
    if spec.meal is not None:
        metadata.update(
            spec.meal.run_metadata(),
            multi_agent="IPPO: one policy shared by every agent (parameter sharing)",
        )
    return metadata


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
        raise ValueError(
            f"refusing to resume {run_dir}: it is a different run ({'; '.join(diffs)})"
        )


def _write_report(run_dir: Path, job: dict[str, Any]) -> None:
    if not job.get("report", True):
        return
    from cl_suites.metrics.report import build_report

    try:
        build_report([run_dir], run_dir / "report")
        print(f"metrics report written to {run_dir / 'report'}")
    except Exception as e:  # the report must never lose a finished run
        print(
            f"note: metrics report failed ({type(e).__name__}: {e}); run it later with "
            f"`cl-suites report {run_dir}`"
        )
