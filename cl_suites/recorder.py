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

import os
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.evaluation import Evaluator, Policy
from cl_suites.core.interrupts import outcome_of
from cl_suites.core.progress import RunProgress, plan_text
from cl_suites.core.runlog import RunLog
from cl_suites.core.vector import VectorizationMode
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

    def step(self, infos: dict[str, Any], policy: Policy) -> list[dict[str, Any]]:
        """Record one vector step (or the reset): log the training episodes that ended,
        update the progress, and evaluate with ``policy`` when an evaluation point is
        reached (always at the end of the sequence). Returns the new evaluation records.

        ``policy(obs_batch, task_ids) -> actions`` (greedy, as the papers evaluate):
        ``obs_batch (B, *obs_shape)``, ``task_ids (B,)``, one row per env (MEAL: per agent).
        """
        self.total_step = int(np.asarray(infos["total_step"]).reshape(-1)[0])
        self.done = bool(np.asarray(infos["sequence_done"]).reshape(-1)[0])
        self.log.log_episodes(episode_records(infos, self.total_step))
        self.progress.update(self.total_step)
        if self.done:
            if self.evaluator.last_eval_step == self.total_step:
                return []
            return self.evaluator.evaluate(self.total_step, policy)
        return self.evaluator.maybe_evaluate(self.total_step, policy)

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
        return self.run_dir

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(exc)
