"""A run's policy of every task's end, loaded back; MEAL's coordination matrix from them.

A run with the job option ``keep_task_policies`` (default on MEAL suites) keeps
``RUN_DIR/checkpoint/task-NNN.pt`` (torch learners) or ``.npz`` (``ppo-jax``), one per
segment of its schedule (``cl_suites.rundir.task_policies``). :func:`load_task_policy`
rebuilds the run's network from its ``metadata.json`` (the run's request resolved again,
as ``--resume`` does: the same settings, the same kitchens) and gives the greedy
``policy(obs, task_ids) -> actions`` the evaluator acted with at that task's end; the
learner's entry does the rebuilding (``LearnerEntry.load_task_policy``).
:func:`coordination_matrix_of_run` computes MEAL's coordination matrix from them
(``cl_suites.metrics.meal.run_coordination_matrix``) and stores it as
``RUN_DIR/coordination_matrix.csv``, which the report draws; ``cl-suites report
--coordination`` calls it for every MEAL run it reports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.errors import RunFileError
from cl_suites.request import RunRequest
from cl_suites.rundir.runlog import METADATA_FILE, read_metadata
from cl_suites.suites import find_suite


def run_spec(run_dir: str | os.PathLike[str]) -> Any:
    """The resolved settings (``JobSpec``) of the run in ``run_dir``, from its
    ``metadata.json``: its request with its seed, resolved again without building an env.
    ``RunFileError`` (one line) for a directory without a run, a run of an older version
    (no ``request``), or settings that no longer give the run's schedule."""
    from cl_suites.job.run_spec import resolve

    run_dir = Path(run_dir)
    if not (run_dir / METADATA_FILE).is_file():
        raise RunFileError(f"{run_dir} holds no cl-suites run (no {METADATA_FILE})")
    meta = read_metadata(run_dir)
    request = meta.get("request")
    if not isinstance(request, dict) or "learner" not in meta:
        raise RunFileError(
            f"{run_dir}: {METADATA_FILE} has no run request (a run of an older cl-suites or an "
            "own loop's): its network cannot be rebuilt"
        )
    spec = resolve(
        RunRequest(
            suite=meta["suite_id"],
            method=meta["method"],
            preset=meta["preset"],
            learner=meta["learner"],
            seed=int(meta["seed"]),
            num_envs=meta.get("num_envs"),
            overrides=dict(request.get("overrides") or {}),
        ),
        probe_device=False,
    )[0]
    schedule = [seg.as_dict() for seg in spec.schedule]
    if json.dumps(schedule) != json.dumps(meta.get("schedule")):
        raise RunFileError(
            f"{run_dir}: its settings resolve to another schedule than the run's (a run of "
            "another cl-suites version?): its policies cannot be rebuilt"
        )
    return spec


def load_task_policy(
    path: str | os.PathLike[str], spec_or_run_dir: Any
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids) -> greedy actions`` of the task policy in ``path``
    (``RUN_DIR/checkpoint/task-NNN.*``), for the run of ``spec_or_run_dir`` (its
    ``JobSpec``, or its directory: :func:`run_spec`). The actions are the evaluator's at
    that task's end for the same observations (rows of one agent each; MEAL: ``(B, H, W,
    C)``). ``RunFileError`` (one line) for a file that does not fit the run."""
    spec = (
        run_spec(spec_or_run_dir)
        if isinstance(spec_or_run_dir, (str, os.PathLike))
        else spec_or_run_dir
    )
    loader = getattr(spec.learner_entry, "load_task_policy", None)
    if loader is None:
        raise RunFileError(f"learner {spec.learner!r} cannot load the policies its runs keep")
    return loader(spec, Path(path))


def coordination_matrix_of_run(
    run_dir: str | os.PathLike[str], *, episodes: int = 64, seed: int = 0
) -> np.ndarray:
    """MEAL's coordination matrix of the run in ``run_dir`` from its task policies
    (``cl_suites.metrics.meal.run_coordination_matrix``: ``episodes`` envs of one episode
    each per cell, seeded with ``seed``), stored as ``RUN_DIR/coordination_matrix.csv``.
    Refused in one line for a run that is not MEAL's or kept no task policy
    (:func:`check_coordination_inputs`)."""
    from cl_suites.metrics import meal

    check_coordination_inputs(run_dir)
    spec = run_spec(run_dir)
    return meal.run_coordination_matrix(
        run_dir,
        spec.meal,
        lambda path: load_task_policy(path, spec),
        episodes=episodes,
        seed=seed,
    )


def check_coordination_inputs(run_dir: str | os.PathLike[str]) -> None:
    """One-line ``InputError`` when the coordination matrix of ``run_dir`` cannot be
    computed: no run there, not a MEAL run, no task policy kept (nothing is loaded)."""
    from cl_suites.job.learners import REGISTRY, load_learner
    from cl_suites.metrics import meal

    run_dir = Path(run_dir)
    if not (run_dir / METADATA_FILE).is_file():
        raise RunFileError(f"{run_dir} holds no cl-suites run (no {METADATA_FILE})")
    suite = str(read_metadata(run_dir).get("suite_id", ""))
    try:
        meal_run = find_suite(suite).family == "meal"
    except KeyError:
        meal_run = False
    if not meal_run:
        raise RunFileError(
            f"{run_dir}: the coordination matrix is MEAL's (two agents' policies), and this "
            f"is a {suite or 'unknown'} run"
        )
    learner = str(read_metadata(run_dir).get("learner", ""))
    if learner in REGISTRY and not getattr(load_learner(learner), "pairs_agents", True):
        raise RunFileError(
            f"{run_dir}: a {learner} run's agents act on their own agent ids and on every "
            "agent's observation of the env, so one agent's policy cannot be paired with "
            "another run's agent (MEAL's coordination matrix plays IPPO policies)"
        )
    meal.task_checkpoints(run_dir)
