"""The torch wing's job: one run of a stable-baselines3/torch learner (``ppo``,
``vtrace``) over a whole suite.

:func:`run_torch` builds the suite's training env and its SB3 view, the learner with the
CL method (``baselines_sb3.factory``), evaluates on the suite's schedule with the core
``Evaluator`` (greedy policy), logs training episodes, checkpoints periodically
(``cl_suites.job.torch.checkpoint``), keeps the policy of every task's end
(``keep_task_policies``: ``cl_suites.job.torch.task_policies``), resumes after a kill, and
writes the metrics report at the end, with the run pieces both wings share
(``cl_suites.job.shared``). What differs between suites comes from the suite's catalog
entry (its runtime builds the training env and the evaluator's env source), never from
"is this MEAL?" tests here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import CallbackList

from baselines_sb3.callbacks import (
    ContinualEvalCallback,
    ProgressBarCallback,
    make_episode_source,
)
from baselines_sb3.cl import (
    ContinualMethod,
    RemedyMethod,
    attach_method,
    make_method,
    method_class,
)
from baselines_sb3.cl.plugins import guard_hooks
from baselines_sb3.cl.storage import replay_storage
from baselines_sb3.factory import build_model, wrap_env
from baselines_sb3.plasticity import PlasticityCallback, policy_probe
from cl_suites.core.interrupts import outcome_of
from cl_suites.declarations import is_builtin_method
from cl_suites.errors import PluginHookError
from cl_suites.job import shared
from cl_suites.job.run_spec import JobSpec
from cl_suites.job.torch.checkpoint import (
    CheckpointCallback,
    apply_checkpoint,
    checkpoint_dir,
    checkpoint_step,
    load_resume_state,
    truncate_logs,
)
from cl_suites.job.torch.sb3_env import observation_location, sb3_env
from cl_suites.job.torch.task_policies import TaskPolicyCallback
from cl_suites.job.torch.tracking import configure_logger
from cl_suites.metrics.plasticity_tracker import PROBE_FILE, PlasticityTracker
from cl_suites.rundir.progress import RunProgress, plan_text
from cl_suites.rundir.runlog import RunLog
from cl_suites.rundir.task_policies import remove_task_policies_after


def run_torch(spec: JobSpec, seed: int, run_dir: Path, resume: bool) -> None:
    """One run of a torch learner into ``run_dir`` (``resume``: from its last
    checkpoint)."""
    job = spec.options
    metadata = torch_metadata(spec, seed)
    state, ckpt_file = None, None
    if resume and shared.resume_checked(run_dir, metadata):
        state, ckpt_file = load_resume_state(run_dir) or (None, None)
        resumed_at = checkpoint_step(state) if state is not None else -1
        truncate_logs(run_dir, resumed_at)
        remove_task_policies_after(run_dir, spec.schedule, resumed_at)
    if state is not None and state.get("finished"):
        print(f"run {run_dir} is already complete; writing the report only")
        shared.write_report(run_dir, spec.options)
        return

    th.manual_seed(seed)
    cl = build_method(spec, seed, run_dir)  # a replay buffer that fits nowhere: refused here
    print(f"device: {spec.device} (device={job.device})", flush=True)
    envs = shared.vectorization_line(spec)
    if envs is not None:
        print(envs, flush=True)

    def train() -> None:
        run_log = RunLog(run_dir, metadata, resume=resume)
        try:
            _train(spec, seed, cl, run_dir, run_log, state, ckpt_file)
        finally:
            run_log.close()

    try:
        shared.clean_unstarted([run_dir], resume, train)
    except PluginHookError as e:  # the plug-in, its hook, and how to go on once fixed
        raise e.with_run_dir(run_dir) from e.__cause__
    shared.write_report(run_dir, job)


def torch_metadata(spec: JobSpec, seed: int) -> dict[str, Any]:
    """The run's ``metadata.json``, with where its observations live between the env and
    the learner (``observations``: ``host`` or ``device``)."""
    where = observation_location(
        spec.suite, spec.instance, spec.device, spec.options.device_observations
    )
    return shared.metadata(spec, seed, str(spec.device), observations=where)


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
    if not is_builtin_method(spec.method):  # an own plug-in: its failing hooks named
        guard_hooks(method, spec.method)
    if method.keeps_replay:
        method.plan_storage(
            int(spec.hp["learner"].get("n_steps", 20)),
            spec.sequence.observation_space,
            int(spec.sequence.action_space.n),
            quiet=True,
        )
    return method


def _train(
    spec: JobSpec,
    seed: int,
    cl: ContinualMethod,
    run_dir: Path,
    run_log: RunLog,
    state: dict[str, Any] | None,
    ckpt_file: Path | None,
) -> None:
    """Build the training env and the learner of ``spec`` and train them with the method
    ``cl``, logging into ``run_log``."""
    sequence, job, hp = spec.sequence, spec.options, spec.hp
    agents = spec.num_agents
    schedule = spec.schedule
    train_env, sb3_env, eval_source = training_env(spec)
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
    tracking = {"tensorboard": job.tensorboard, "wandb": job.wandb}
    configure_logger(model, run_dir, tracking, run_log=run_log)  # --tensorboard / --wandb
    cl_callback = attach_method(model, cl, env)
    evaluator = shared.evaluator(spec, seed, run_log, run_dir, eval_source)
    if cl.needs_fresh_episodes:  # e.g. MEAL's Fisher: 5 fresh episodes x 500 steps
        cl.set_episode_source(
            make_episode_source(
                evaluator, model, lambda: train_env.cursor.total_step, spec.num_agents
            )
        )
    if isinstance(cl, RemedyMethod):  # remedy.csv, in eval.csv's steps
        cl.set_event_sink(run_log.log_remedy, lambda: train_env.cursor.total_step, agents)
    if state is not None:
        cut = apply_checkpoint(state, model, cl, train_env, evaluator, task_wrapper, ckpt_file)
        run_log.log_episodes(cut)
    ckpt_cb = CheckpointCallback(
        checkpoint_dir(run_dir),
        job.checkpoint_every,
        cl,
        train_env,
        evaluator,
        task_ends=[seg.end_step for seg in schedule],
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
        on_memory=run_log.log_resources,
        memory_growth_warn=job.memory_growth_warn,
    )
    plasticity_cb = _plasticity_callback(spec, model, run_log, run_dir, evaluator, state)
    if plasticity_cb is not None:
        ckpt_cb.extra_state = lambda: {"plasticity": plasticity_cb.tracker.state_dict()}
    task_policies = (  # the policy of every task's end, before that step's checkpoint
        [TaskPolicyCallback(run_dir, schedule, agents, learner=spec.learner, method=spec.method)]
        if job.keep_task_policies
        else []
    )
    callbacks = CallbackList(
        [  # the task's end evaluated, kept and diagnosed, then the method's switch
            ContinualEvalCallback(
                evaluator,
                run_log,
                schedule,
                cl,
                agents_per_env=agents,
                deterministic=job.eval_deterministic,
                beside_training=job.eval_beside_training,
            ),
            *task_policies,
            *([plasticity_cb] if plasticity_cb is not None else []),
            cl_callback,
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


def training_env(spec: JobSpec) -> tuple[Any, Any, Any]:
    """(the env that keeps the schedule, its SB3 view, the evaluator's env source): the
    env and source from the suite's runtime (``SequenceVectorEnv``; MEAL: its batched
    engine), the view from this wing (``cl_suites.job.torch.sb3_env``). ``env_splits``
    is set on the ``SequenceVectorEnv`` before its first reset (the runtimes' common
    ``vector_env`` does not take it)."""
    runtime = spec.suite.runtime
    env, eval_source = runtime.vector_env(
        spec.instance,
        spec.schedule,
        spec.options.vectorization_mode,
        rollout_steps=spec.rollout_steps,
        env_workers=spec.options.env_workers,
    )
    if spec.options.env_splits > 1:  # resolve refused it for suites without env workers
        env.env_splits = spec.options.env_splits
    wanted = spec.options.device_observations
    return env, sb3_env(spec.suite, env, spec.device, wanted), eval_source
