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
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import get_linear_fn

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
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.networks import FEATURE_EXTRACTORS
from baselines_sb3.policies import ContinualPolicy, ProgressCompressPolicy
from baselines_sb3.wrappers import TaskIdObservation, VecClipReward
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.runlog import METADATA_FILE, RunLog, read_metadata
from cl_suites.core.sb3_adapter import SB3VecEnv
from cl_suites.core.vector import SequenceVectorEnv
from cl_suites.suites import find_suite

LEARNERS: tuple[str, ...] = ("ppo", "vtrace")
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


def run_main_job(
    *,
    suite: str,
    method: str,
    learner: str,
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
        learner: ``ppo`` or ``vtrace``.
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
    overrides = {k: v for k, v in dict(overrides or {}).items() if v is not None}
    if str(suite).split("/")[-1].startswith("MEAL") or str(suite).startswith("MEAL"):
        from baselines_sb3.meal_job import run_meal_job

        return run_meal_job(
            suite=suite,
            method=method,
            learner=learner,
            preset=preset,
            seed=seed,
            run_dir=run_dir,
            resume=resume,
            num_envs=num_envs,
            overrides=overrides,
        )
    _check_choice("method", method, list(METHODS))
    _check_choice("learner", learner, LEARNERS)
    _check_choice("preset", preset, presets.PRESETS)
    info = find_suite(suite)
    run_dir = Path(run_dir)
    hp = presets.resolve(info.name, learner, method, preset)
    job = {k: overrides.pop(k) for k in JOB_OPTIONS if k in overrides}
    for key in list(overrides):
        for section in ("learner", "method"):
            if key in hp[section]:
                hp[section][key] = overrides.pop(key)
    multi_head = bool(job.get("multi_head", hp["multi_head"]))
    task_id_input = bool(job.get("task_id_input", hp["task_id_input"]))
    suite_kwargs = {**hp["suite_defaults"], **overrides}
    sequence = info.build(**suite_kwargs)
    n_envs = int(num_envs or hp["num_envs"])
    schedule = sequence.schedule(n_envs)
    total_steps = schedule[-1].end_step
    description = sequence.describe()
    metadata = {
        "suite_id": info.id,
        "suite": info.name,
        "method": method,
        "learner": learner,
        "preset": preset,
        "seed": int(seed),
        "env_kwargs": suite_kwargs,
        "tasks": description["tasks"],
        "schedule": [s.as_dict() for s in schedule],
        "steps_per_task": [t.budget for t in sequence.tasks],
        "cycles": sequence.cycles,
        "eval_every": sequence.eval_every,
        "eval_episodes": sequence.eval_episodes,
        "num_envs": n_envs,
        "metric_settings": description["metric_settings"],
        "hyperparameters": {
            "learner": hp["learner"],
            "method": hp["method"],
            "multi_head": multi_head,
            "task_id_input": task_id_input,
            "network": hp["network"],
            "net_arch": hp["net_arch"],
            "reward_clip": hp["reward_clip"],
        },
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
    env: Any = SB3VecEnv(venv)
    env.seed(int(seed))
    task_wrapper = None
    if multi_head or task_id_input:
        env = task_wrapper = TaskIdObservation(env, len(sequence.tasks))
    if hp["reward_clip"] is not None:
        env = VecClipReward(env, *hp["reward_clip"])

    method_kwargs = dict(hp["method"])
    if method == "clear" and job.get("replay_on_disk"):
        method_kwargs["disk_dir"] = run_dir / "replay"
    cl = make_method(method, seed=int(seed), **method_kwargs)
    model = _make_model(
        learner,
        env,
        sequence,
        hp,
        cl,
        int(seed),
        multi_head,
        task_id_input,
        method,
        job.get("device", "auto"),
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


def _make_model(
    learner: str,
    env: Any,
    sequence: Any,
    hp: dict[str, Any],
    cl: Any,
    seed: int,
    multi_head: bool,
    task_id_input: bool,
    method: str,
    device: str,
) -> Any:
    policy_cls = ProgressCompressPolicy if method == "pnc" else ContinualPolicy
    policy_kwargs: dict[str, Any] = {
        "num_tasks": len(sequence.tasks),
        "multi_head": multi_head,
        "task_id_input": task_id_input,
        "net_arch": list(hp["net_arch"]),
    }
    if is_image_space(sequence.observation_space, check_channels=False):
        extractor = FEATURE_EXTRACTORS[hp["network"]]
        policy_kwargs["features_extractor_class"] = extractor
        if hp.get("cnn_features_dim"):
            policy_kwargs["features_extractor_kwargs"] = {"features_dim": hp["cnn_features_dim"]}
    kw = dict(hp["learner"])
    if learner == "ppo" and kw.pop("lr_anneal", False):
        kw["learning_rate"] = get_linear_fn(kw["learning_rate"], 0.0, 1.0)
    algorithm = ContinualPPO if learner == "ppo" else VTrace
    return algorithm(
        policy_cls,
        env,
        cl_method=cl,
        policy_kwargs=policy_kwargs,
        seed=seed,
        device=device,
        verbose=0,
        **kw,
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
