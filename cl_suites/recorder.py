"""One object between an own training loop and a complete run directory.

:class:`Recorder` builds the suite's training vector env and, around it, the pieces every
run of the package uses: the ``RunLog`` (``metadata.json`` from ``run_metadata``,
``eval.csv``, ``episodes.csv``), the ``Evaluator`` on the suite's schedule and the
``RunProgress`` bar and file. The loop calls :meth:`Recorder.step` once after the reset
and once after every vector step; the run directory is then ready for
``cl-suites report``::

    rec = Recorder("runs/mine", "Procgen6", num_envs=8, seed=0, method="my-ppo")
    obs, infos = rec.envs.reset(seed=0)
    rec.step(infos, policy)  # policy(obs_batch, task_ids) -> actions, greedy
    while not rec.done:
        obs, rewards, terminated, truncated, infos = rec.envs.step(my_actions(obs))
        rec.step(infos, policy)
    rec.close()

Single-agent suites give a ``SequenceVectorEnv`` (agent steps, summed over sub-envs);
``MEAL-<N>`` gives a ``MealBatchedEnv`` (env steps; observations ``(num_envs, num_agents,
H, W, C)``, actions ``(num_envs, num_agents)``; the policy sees one row per agent), or,
with ``parallel=True``, the PettingZoo ``MealParallelEnv`` of ``cl_suites.make_parallel``
(one env; :meth:`Recorder.step` takes its per-agent infos)::

    rec = Recorder("runs/mine", "MEAL-2", parallel=True, method="my-ippo")
    obs, infos = rec.envs.reset(seed=0)
    rec.step(infos, policy)
    while not rec.done:
        obs, rewards, terms, truncs, infos = rec.envs.step(my_actions(obs))
        rec.step(infos, policy)
        if not rec.envs.agents and not rec.done:  # an episode ended
            obs, infos = rec.envs.reset()

An own env works too: ``Recorder(..., env=env)`` takes the training env the loop built
and wrapped itself (``gym.make("CLSuite/<suite>-v0", ...)`` under single-env wrappers such
as ``FrameStackObservation``, or ``gymnasium.make_vec`` / ``cl_suites.make_vec`` under
vector wrappers), and the evaluator plays through the same wrappers
(``cl_suites.core.evaluation.WrappedEnvSource``): an agent that stacks frames gets
stacked frames at evaluation too::

    env = FrameStackObservation(gym.make("CLSuite/Diagnostic-v0", steps_per_task=2000), 4)
    rec = Recorder("runs/mine", "Diagnostic", env=env, method="my-dqn", steps_per_task=2000)

A recorder that fails before its first step (while it is built, or in a ``with`` block)
removes what it wrote, so the same run directory can be used again.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.evaluation import Evaluator, Policy, WrappedEnvSource
from cl_suites.core.interrupts import outcome_of
from cl_suites.core.task import TASK_EPISODE_KEY
from cl_suites.core.vector import VectorizationMode
from cl_suites.metrics.plasticity_tracker import (
    PROBE_FILE,
    NetworkProbe,
    PlasticitySettings,
    PlasticityTracker,
)
from cl_suites.rundir.fsutil import directory_entries, remove_unstarted
from cl_suites.rundir.progress import RunProgress, plan_text
from cl_suites.rundir.runlog import RunLog
from cl_suites.suites import find_suite
from cl_suites.training import episode_records, run_metadata


class Recorder:
    """The training env, run log, evaluator and progress of one run of an own loop.

    Args:
        run_dir: the run directory (created; a second writer is refused).
        suite: suite name or id (``"Procgen6"``, ``"CLSuite/Diagnostic-v0"``, ``"MEAL-2"``).
        num_envs: sub-envs of the training env.
        seed: run seed (evaluation episodes; MEAL's kitchens unless ``layout_seed`` is
            given, as ``cl-suites run``). Reset the env with it: ``envs.reset(seed=seed)``.
        method: the method's name in ``metadata.json`` and the report.
        hyperparameters: recorded in ``metadata.json`` (e.g. ``vars(args)``).
        progress: draw the progress bar and print the pre-run summary.
        vectorization_mode: ``"sync"`` or ``"async"`` for simulators without native batching.
        rollout_steps: steps per env of one update of your learner; MEAL holds its reward
            shaping weight for each such block, as MEAL's trainer (``None``: per step).
        eval_at_start: evaluate at step 0 (the default; MEAL's protocol does not).
        eval_max_episode_steps: evaluation-only episode cap (``None``: whole episodes).
        tensorboard: also write the returns as TensorBoard scalars.
        parallel: ``envs`` is the suite's PettingZoo ``ParallelEnv`` (``MEAL-<N>``, one
            env: ``num_envs`` must be 1) instead of its vector env.
        plasticity: the networks to diagnose at every evaluation point
            (``RUN_DIR/plasticity.csv``, ``docs/metrics.md``): a
            ``baselines_sb3.plasticity.TorchProbe`` of a torch module or a
            ``baselines_jax.plasticity.JaxProbe`` of JAX parameters (a callable giving the
            current ones) and an apply function. Pass the observations to :meth:`step`
            (``obs=``) to fill its probe batch. ``None``: no diagnostics.
        plasticity_settings: their ``PlasticitySettings`` (default: the job's defaults).
        env: the loop's own training env (``None``: the recorder builds the suite's):
            a wrapped ``gym.make("CLSuite/<suite>-v0", ...)`` or a wrapped vector env of
            the suite, made with the same suite options as ``env_kwargs`` (a different
            schedule is refused). ``envs`` is then this env, and evaluation plays through
            its wrappers (``WrappedEnvSource``; a wrapper gymnasium cannot rebuild is
            refused). ``num_envs`` is taken from it.
        **env_kwargs: suite options (``steps_per_task``, ``cycles``, ``eval_every``, ...).

    Attributes:
        envs: the training vector env. ``sequence``: its task sequence. ``log``,
        ``evaluator``, ``progress``: the run's ``RunLog``, ``Evaluator``, ``RunProgress``.
        total_step: the last step seen by :meth:`step`. ``done``: the sequence is over.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        suite: str,
        *,
        num_envs: int = 1,
        seed: int = 0,
        method: str,
        hyperparameters: dict[str, Any] | None = None,
        progress: bool = False,
        vectorization_mode: VectorizationMode = "sync",
        rollout_steps: int | None = None,
        eval_at_start: bool = True,
        eval_max_episode_steps: int | None = None,
        tensorboard: bool = False,
        parallel: bool = False,
        plasticity: NetworkProbe | None = None,
        plasticity_settings: PlasticitySettings | None = None,
        env: Any = None,
        **env_kwargs: Any,
    ):
        self.run_dir = Path(run_dir)
        info = find_suite(suite)
        if env is not None:
            if parallel:
                raise ValueError("Recorder takes env= or parallel=True, not both")
            num_envs = int(getattr(env, "num_envs", 1))
        if parallel and (info.api != "pettingzoo" or num_envs != 1):
            raise ValueError(
                f"parallel=True gives one PettingZoo env of a multi-agent suite (MEAL-<N>, "
                f"num_envs=1); got suite {info.name} ({info.api}) with num_envs={num_envs}"
            )
        env_kwargs = info.runtime.seeded_kwargs(env_kwargs, seed)
        instance = info.instance(**env_kwargs)
        sequence = instance.sequence
        schedule = sequence.schedule(num_envs)
        self.envs: Any
        if env is not None:
            self.envs, source = env, _own_env_source(env, sequence, schedule, vectorization_mode)
        elif parallel:
            from cl_suites.meal import make_parallel

            self.envs, source = make_parallel(instance), sequence.eval_source()
        else:
            self.envs, source = info.runtime.vector_env(
                instance, schedule, vectorization_mode, rollout_steps=rollout_steps
            )
        extra = instance.run_metadata()
        unit = info.step_unit.name
        self.sequence = sequence
        evaluation = {"at_start": eval_at_start, "max_episode_steps": eval_max_episode_steps}
        metadata = run_metadata(
            suite,
            sequence,
            seed=seed,
            method=method,
            num_envs=num_envs,
            schedule=schedule,
            env_kwargs=env_kwargs,
            hyperparameters=dict(hyperparameters or {}),
            evaluation=evaluation,
            **extra,
        )
        self._before = directory_entries(self.run_dir)
        self.log = RunLog(self.run_dir, metadata, tensorboard=tensorboard)
        try:
            self.evaluator = Evaluator(
                sequence,
                seed=seed,
                run_log=self.log,
                vectorization_mode=vectorization_mode,
                first_eval_step=0 if eval_at_start else None,
                env_source=source,
                max_episode_steps=eval_max_episode_steps,
            )
            self.plasticity: PlasticityTracker | None = None
            if plasticity is not None:
                self.plasticity = PlasticityTracker(
                    plasticity_settings, self.log.log_plasticity, self.run_dir / PROBE_FILE
                )
        except BaseException:
            if hasattr(self, "evaluator"):  # the diagnostics' settings failed after it
                self.evaluator.close()
            self.log.close()
            remove_unstarted(self.run_dir, self._before)
            raise
        if progress:
            print(plan_text(schedule, unit, self.evaluator), flush=True)
        self.progress = RunProgress(
            schedule,
            run_dir=self.run_dir,
            show=progress,
            unit=unit,
            evaluator=self.evaluator,
            on_memory=self.log.log_resources,
        )
        self.total_step = 0
        self.done = False
        self._closed = False
        self.plasticity_probe = plasticity
        self._ends = [seg.end_step for seg in schedule]
        self._tasks = [seg.task_id for seg in schedule]

    def step(self, infos: dict[str, Any], policy: Policy, obs: Any = None) -> list[dict[str, Any]]:
        """Record one vector step (or the reset): log the training episodes that ended,
        update the progress, and evaluate with ``policy`` when an evaluation point is
        reached (always at the end of the sequence). Returns the new evaluation records.

        ``policy(obs_batch, task_ids) -> actions`` (greedy, as the papers evaluate):
        ``obs_batch (B, *obs_shape)``, ``task_ids (B,)``, one row per env (MEAL: per agent).
        ``infos``: those of ``envs`` (``reset`` or ``step``), or a PettingZoo parallel
        env's per-agent infos (``{agent: info}``; agent 0's return is logged, as the main
        job logs MEAL episodes).
        ``obs``: the observations the step returned (the probe batch of the plasticity
        diagnostics takes from them; ignored without ``plasticity``). At each evaluation
        point the diagnostics measure the networks as they are; the gradient norm is the
        mean over the minibatches since the previous point unless the loop calls
        ``probe.finish_update()`` after each update.
        """
        infos = _vector_infos(infos)
        self.total_step = int(np.asarray(infos["total_step"]).reshape(-1)[0])
        self.done = bool(np.asarray(infos["sequence_done"]).reshape(-1)[0])
        self.log.log_episodes(episode_records(infos, self.total_step))
        self.progress.update(self.total_step)
        if self.plasticity is not None and obs is not None:
            self.plasticity.observe(self._task_at(self.total_step), obs, self.total_step)
        if self.done:
            if self.evaluator.last_eval_step == self.total_step:
                return []
            records = self.evaluator.evaluate(self.total_step, policy)
        else:
            records = self.evaluator.maybe_evaluate(self.total_step, policy)
        if self.plasticity is not None:
            self._diagnose(bool(records))
        return records

    def _task_at(self, step: int) -> int:
        i = min(bisect.bisect_right(self._ends, step), len(self._tasks) - 1)
        return int(self._tasks[i])

    def _diagnose(self, evaluated: bool) -> None:
        tracker, probe = self.plasticity, self.plasticity_probe
        if evaluated:
            finish = getattr(probe, "finish_update", None)
            if finish is not None:  # minibatches not closed by the loop: those since the last
                finish()
            tracker.measure(self.total_step, self._task_at(max(self.total_step - 1, 0)), probe)
        task = self._task_at(self.total_step)
        if tracker.task != task:
            tracker.task_started(task, probe)

    def close(self, error: BaseException | None = None) -> Path:
        """Close the envs, evaluator, progress (``"finished"`` when the sequence is done;
        ``"interrupted"`` when ``error`` is Ctrl-C or SIGTERM, else ``"failed"``, with the
        reason) and run log; returns the run directory."""
        if not self._closed:
            self._closed = True
            state, reason = outcome_of(error)
            if state == "finished" and not self.done:
                state, reason = "failed", "closed before the end of the sequence"
            try:
                self.progress.close(state, reason)
                self.evaluator.close()
                self.envs.close()
            finally:
                self.log.close()
                if error is not None and self.total_step == 0:
                    remove_unstarted(self.run_dir, self._before)  # nothing recorded yet
        return self.run_dir

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(exc)


def _own_env_source(
    env: Any, sequence: Any, schedule: Any, vectorization_mode: VectorizationMode
) -> WrappedEnvSource:
    """The evaluation source of an own training env: its wrappers around the eval envs.
    ``ValueError`` when the env is not one of the suite's or keeps another schedule."""
    base = getattr(env, "unwrapped", env)
    theirs = getattr(base, "schedule", None)
    if not callable(theirs):
        raise ValueError(
            f"Recorder(env=...) takes a (wrapped) env of a cl-suites suite "
            f"(gym.make('CLSuite/<suite>-v0') or make_vec); got {type(base).__name__}"
        )
    if tuple(theirs()) != tuple(schedule):
        raise ValueError(
            "Recorder(env=...): the env keeps another schedule than the recorder's suite "
            "options; pass the options the env was made with (steps_per_task, cycles, ...)"
        )
    return WrappedEnvSource(sequence, sequence.eval_episodes, env, vectorization_mode)


def _vector_infos(infos: Mapping[str, Any]) -> Mapping[str, Any]:
    """``infos`` as a vector env gives them: a PettingZoo parallel env's per-agent infos
    (``{agent: info}``) become agent 0's, its finished episode as a one-env batch; a
    single env's infos (``gym.make``) a one-env batch; ``ValueError`` naming the forms
    for anything else."""
    if "total_step" in infos:
        episode = infos.get(TASK_EPISODE_KEY)
        if episode is None or "_" + TASK_EPISODE_KEY in infos:
            return infos
        return _with_one_episode(dict(infos), episode)  # one env's: a one-env batch
    per_agent = [v for v in infos.values() if isinstance(v, Mapping) and "total_step" in v]
    if not per_agent or len(per_agent) != len(infos):
        raise ValueError(
            "Recorder.step takes the infos of rec.envs (with total_step, sequence_done, ...) "
            "or a PettingZoo parallel env's per-agent infos ({agent: info}); got keys "
            f"{sorted(map(str, infos))[:8]}"
        )
    first = per_agent[0]
    flat = {k: v for k, v in first.items() if k != TASK_EPISODE_KEY}
    episode = first.get(TASK_EPISODE_KEY)
    return flat if episode is None else _with_one_episode(flat, episode)


def _with_one_episode(flat: dict[str, Any], episode: Mapping[str, Any]) -> dict[str, Any]:
    """``flat`` with one finished ``episode`` (a single env's ``r``, ``l``, ``task_id``) as
    a one-env batch under ``TASK_EPISODE_KEY``, as a vector env reports it."""
    flat[TASK_EPISODE_KEY] = {
        "r": np.array([episode["r"]]),
        "l": np.array([episode["l"]]),
        "task_id": episode["task_id"],
    }
    flat["_" + TASK_EPISODE_KEY] = np.array([True])
    return flat
