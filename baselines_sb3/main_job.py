"""The main job behind ``cl-suites run``: train a baseline over a whole suite.

``run_main_job`` builds the suite's sequence env (``SequenceVectorEnv`` -> ``SB3VecEnv``),
the learner (PPO or V-trace) with the CL method, evaluates on the suite's schedule with
the core ``Evaluator`` (deterministic policy), logs training episodes, checkpoints
periodically, resumes after a kill, and writes the metrics report at the end. Suites whose
name starts with ``MEAL`` go to ``baselines_sb3.meal_job.run_meal_job``.

All steps count agent steps (``env.step`` calls summed over sub-envs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import CallbackList

from baselines_sb3 import presets
from baselines_sb3.callbacks import ContinualEvalCallback, ProgressBarCallback
from baselines_sb3.checkpoint import (
    CheckpointCallback,
    apply_checkpoint,
    checkpoint_path,
    load_checkpoint,
    truncate_logs,
)
from baselines_sb3.cl import METHODS, attach_method, make_method
from baselines_sb3.factory import LEARNERS, build_model, wrap_env
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.runlog import METADATA_FILE, RunLog, read_metadata
from cl_suites.core.sb3_adapter import SB3VecEnv
from cl_suites.core.task import TaskSequence
from cl_suites.core.vector import SequenceVectorEnv
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
)
"""``overrides`` keys consumed by the job itself; every other key goes to the suite builder,
except keys of the learner or method preset (``learning_rate``, ``lam``, ...), which
override those."""

_RESUME_KEYS = ("suite", "method", "learner", "preset", "seed", "num_envs")


def _check_choice(kind: str, value: str, valid: tuple[str, ...] | list[str]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(valid)}")


@dataclass
class JobSpec:
    """A main-job run resolved from its arguments, before anything is built.

    Attributes:
        suite: the catalog entry; ``sequence`` the suite's task sequence with the run's
            kwargs (``suite_kwargs``), built without touching a simulator.
        method / learner / preset: the resolved names (``learner`` never ``None``).
        hp: ``presets.resolve`` output after the overrides (``learner``, ``method``,
            ``network``, ``net_arch``, ``reward_clip``, ...).
        job: job options (keys of ``JOB_OPTIONS``).
        num_envs: sub-envs of the training env.
        multi_head / task_id_input: policy options.
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


def resolve_job(
    *,
    suite: str,
    method: str,
    learner: str | None,
    preset: str,
    num_envs: int | None,
    overrides: dict[str, Any] | None,
) -> JobSpec:
    """Resolve a run's configuration (presets + overrides) without building anything.

    ``learner=None`` takes the suite's default learner under ``preset``
    (``presets.default_learner``). Raises ``ValueError`` naming an unknown method, learner
    or preset and the valid ones, and ``KeyError`` for an unknown suite.
    """
    overrides = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    _check_choice("method", method, list(METHODS))
    _check_choice("preset", preset, presets.PRESETS)
    info = find_suite(suite)
    learner = learner or presets.default_learner(info.name, preset)
    _check_choice("learner", learner, LEARNERS)
    hp = presets.resolve(info.name, learner, method, preset)
    job = {k: overrides.pop(k) for k in JOB_OPTIONS if k in overrides}
    overrides = presets.route_overrides(hp, learner, method, overrides)
    suite_kwargs = {**hp["suite_defaults"], **overrides}
    return JobSpec(
        suite=info,
        method=method,
        learner=learner,
        preset=preset,
        hp=hp,
        job=job,
        suite_kwargs=suite_kwargs,
        sequence=info.build(**suite_kwargs),
        num_envs=int(num_envs or hp["num_envs"]),
        multi_head=bool(job.get("multi_head", hp["multi_head"])),
        task_id_input=bool(job.get("task_id_input", hp["task_id_input"])),
    )


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
) -> Path:
    """Train ``learner`` + ``method`` over ``suite`` and write the run directory.

    Args:
        suite: suite name or id (``"Procgen6"``, ``"CLSuite/Diagnostic-v0"``).
        method: ``ft``, ``ewc``, ``online-ewc``, ``l2``, ``mas``, ``pnc`` or ``clear``.
        learner: ``ppo`` or ``vtrace``; ``None``: the suite's default under ``preset``.
        preset: ``paper`` or ``small`` (tiny budgets/networks for a few-minute CPU run).
        seed: run seed (envs, network init, sampling, evaluation).
        run_dir: output directory (metadata.json, eval.csv, episodes.csv, checkpoint/,
            report/).
        resume: continue the run in ``run_dir`` from its last checkpoint.
        num_envs: sub-envs (default: the preset's).
        overrides: suite kwargs (``steps_per_task``, ``cycles``, ``eval_every``, ...), job
            options (``JOB_OPTIONS``) and learner/method hyperparameters.

    Returns:
        ``run_dir``.
    """
    if str(suite).split("/")[-1].startswith("MEAL") or str(suite).startswith("MEAL"):
        from baselines_sb3.meal_job import run_meal_job

        return run_meal_job(
            suite=suite,
            method=method,
            learner=learner or "ppo",
            preset=preset,
            seed=seed,
            run_dir=run_dir,
            resume=resume,
            num_envs=num_envs,
            overrides={k: v for k, v in dict(overrides or {}).items() if v is not None},
        )
    spec = resolve_job(
        suite=suite,
        method=method,
        learner=learner,
        preset=preset,
        num_envs=num_envs,
        overrides=overrides,
    )
    run_dir = Path(run_dir)
    sequence, job, hp, n_envs = spec.sequence, spec.job, spec.hp, spec.num_envs
    schedule = sequence.schedule(n_envs)
    total_steps = schedule[-1].end_step
    description = sequence.describe()
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
        "num_envs": n_envs,
        "metric_settings": description["metric_settings"],
        "hyperparameters": spec.hyperparameters(),
        "step_unit": "agent steps (env.step calls summed over sub-envs)",
    }
    ckpt = checkpoint_path(run_dir)
    state = None
    if resume and (run_dir / METADATA_FILE).exists():
        _check_resumable(run_dir, metadata)
        state = load_checkpoint(ckpt) if ckpt.exists() else None
        truncate_logs(run_dir, state["num_timesteps"] if state is not None else -1)
    if state is not None and state.get("finished"):
        print(f"run {run_dir} is already complete; writing the report only")
        _write_report(run_dir, job)
        return run_dir

    th.manual_seed(seed)
    run_log = RunLog(run_dir, metadata, resume=resume)
    venv = SequenceVectorEnv(sequence, n_envs, job.get("vectorization_mode", "sync"))
    sb3_env = SB3VecEnv(venv)
    sb3_env.seed(int(seed))
    env, task_wrapper = wrap_env(
        sb3_env, sequence, hp, multi_head=spec.multi_head, task_id_input=spec.task_id_input
    )

    method_kwargs = dict(hp["method"])
    if spec.method in ("clear", "ewc", "online-ewc", "pnc") and job.get("replay_on_disk"):
        method_kwargs["disk_dir"] = run_dir / "replay"
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
    cl_callback = attach_method(model, cl, env)
    evaluator = Evaluator(
        sequence,
        seed=int(seed),
        run_log=run_log,
        vectorization_mode=job.get("vectorization_mode", "sync"),
    )
    if state is not None:
        apply_checkpoint(state, model, cl, venv, evaluator, task_wrapper)
    ckpt_cb = CheckpointCallback(
        ckpt, int(job.get("checkpoint_every", sequence.eval_every)), cl, venv, evaluator
    )
    callbacks = CallbackList(
        [
            cl_callback,
            ContinualEvalCallback(evaluator, run_log, schedule, cl),
            ckpt_cb,
            ProgressBarCallback(total_steps, schedule, disable=not job.get("progress", True)),
        ]
    )
    try:
        model.learn(
            total_timesteps=total_steps - model.num_timesteps,
            callback=callbacks,
            reset_num_timesteps=state is None,
        )
        ckpt_cb.save(finished=True)
    finally:
        evaluator.close()
        run_log.close()
        env.close()
        if hasattr(cl, "buffer") and cl.buffer is not None:
            cl.buffer.close()
    _write_report(run_dir, job)
    return run_dir


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
