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
H, W, C)``, actions ``(num_envs, num_agents)``; the policy sees one row per agent).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.evaluation import Evaluator, Policy
from cl_suites.core.progress import RunProgress, plan_text
from cl_suites.core.runlog import RunLog
from cl_suites.core.vector import VectorizationMode
from cl_suites.metrics.plasticity_tracker import (
    PROBE_FILE,
    NetworkProbe,
    PlasticitySettings,
    PlasticityTracker,
)
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
        plasticity: the networks to diagnose at every evaluation point
            (``RUN_DIR/plasticity.csv``, ``docs/metrics.md``): a
            ``baselines_sb3.plasticity.TorchProbe`` of a torch module or a
            ``baselines_jax.plasticity.JaxProbe`` of JAX parameters (a callable giving the
            current ones) and an apply function. Pass the observations to :meth:`step`
            (``obs=``) to fill its probe batch. ``None``: no diagnostics.
        plasticity_settings: their ``PlasticitySettings`` (default: the job's defaults).
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
        plasticity: NetworkProbe | None = None,
        plasticity_settings: PlasticitySettings | None = None,
        **env_kwargs: Any,
    ):
        self.run_dir = Path(run_dir)
        info = find_suite(suite)
        env_kwargs = info.runtime.seeded_kwargs(env_kwargs, seed)
        instance = info.instance(**env_kwargs)
        self.envs: Any
        self.envs, source = info.runtime.vector_env(
            instance, num_envs, vectorization_mode, rollout_steps=rollout_steps
        )
        extra = instance.run_metadata()
        unit = info.step_unit.name
        sequence = instance.sequence
        self.sequence = sequence
        evaluation = {"at_start": eval_at_start, "max_episode_steps": eval_max_episode_steps}
        metadata = run_metadata(
            suite,
            sequence,
            seed=seed,
            method=method,
            num_envs=num_envs,
            env_kwargs=env_kwargs,
            hyperparameters=dict(hyperparameters or {}),
            evaluation=evaluation,
            **extra,
        )
        schedule = sequence.schedule(num_envs)
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
        except BaseException:
            self.log.close()
            raise
        if progress:
            print(plan_text(schedule, unit, self.evaluator), flush=True)
        self.progress = RunProgress(
            schedule, run_dir=self.run_dir, show=progress, unit=unit, evaluator=self.evaluator
        )
        self.total_step = 0
        self.done = False
        self._closed = False
        self.plasticity_probe = plasticity
        self.plasticity: PlasticityTracker | None = None
        if plasticity is not None:
            self.plasticity = PlasticityTracker(
                plasticity_settings, self.log.log_plasticity, self.run_dir / PROBE_FILE
            )
            self._ends = [seg.end_step for seg in schedule]
            self._tasks = [seg.task_id for seg in schedule]

    def step(self, infos: dict[str, Any], policy: Policy, obs: Any = None) -> list[dict[str, Any]]:
        """Record one vector step (or the reset): log the training episodes that ended,
        update the progress, and evaluate with ``policy`` when an evaluation point is
        reached (always at the end of the sequence). Returns the new evaluation records.

        ``policy(obs_batch, task_ids) -> actions`` (greedy, as the papers evaluate):
        ``obs_batch (B, *obs_shape)``, ``task_ids (B,)``, one row per env (MEAL: per agent).
        ``obs``: the observations the step returned (the probe batch of the plasticity
        diagnostics takes from them; ignored without ``plasticity``). At each evaluation
        point the diagnostics measure the networks as they are; the gradient norm is the
        mean over the minibatches since the previous point unless the loop calls
        ``probe.finish_update()`` after each update.
        """
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

    def close(self) -> Path:
        """Close the envs, evaluator, progress (``"finished"`` when the sequence is done,
        else ``"failed"``) and run log; returns the run directory."""
        if not self._closed:
            self._closed = True
            try:
                self.progress.close("finished" if self.done else "failed")
                self.evaluator.close()
                self.envs.close()
            finally:
                self.log.close()
        return self.run_dir

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
