"""The main job behind ``cl-suites run``: train a baseline over a whole suite.

One job serves every suite and every learner. ``run_main_job`` resolves the run
(``cl_suites.job.run_spec.resolve``) and hands it to its learner's entry
(``cl_suites.job.learners``), which owns the training: the torch wing
(``cl_suites.job.torch``: ``ppo``, ``vtrace``) or the JAX wing (``cl_suites.job.jax``:
``ppo-jax``, several seeds vmapped in one program, ``run_seed_group``). Both wings build
the run directory, its log and metadata, the evaluator, progress, resume checks and the
report with the same pieces (``cl_suites.job.shared``). What differs between suites comes
from the suite's catalog entry (``cl_suites.suites.SuiteInfo``), never from "is this
MEAL?" tests here: budgets and cadences are **env steps** (one joint action of all agents)
for MEAL, **agent steps** (``env.step`` calls summed over sub-envs) for every other suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cl_suites.errors import BadValueError
from cl_suites.job import shared
from cl_suites.job.run_spec import (
    JOB_OPTIONS,  # noqa: F401  (the job options' names; README names them here)
    TORCH_THREADS,  # noqa: F401  (the thread default, named in docs/fidelity.md)
    JobSpec,
    resolve,
    resolve_job,  # noqa: F401  (the library's keyword form of resolve)
)
from cl_suites.request import RunRequest
from cl_suites.rundir import layout


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
    """Train resolved runs (``resolve``), building nothing twice: the learner's entry
    trains one run (``specs[0]`` with ``seeds[0]`` into ``run_dirs[0]``), or the seeds of
    one configuration in one program (``LearnerEntry.seed_groups``). ``cl-suites run``
    calls this with the specs it resolved and checked; ``run_main_job`` resolves, then
    calls this."""
    shared.use_jax_cache(specs[0].options.jax_cache_dir)
    if resume:
        specs = [
            shared.keep_recorded_vectorization(s, d) for s, d in zip(specs, run_dirs, strict=True)
        ]
    if len(specs) == 1:
        shared.print_size_warnings(specs[0])
    shared.print_cadence_note(specs[0])
    specs[0].learner_entry.train(specs, seeds, [Path(d) for d in run_dirs], resume)


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
