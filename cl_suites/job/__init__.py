"""The main job behind ``cl-suites run`` and ``cl-suites sweep``, for every learner family.

The layer between the command line (``cl_suites.cli``, ``cl_suites.sweep``) and the
learner families (``baselines_sb3``: SB3/torch; ``baselines_jax``: MEAL's JAX IPPO): the
run specification and its resolution (``run_spec``, ``hyperparameters``, ``presets``,
``option_specs``), the learner registry (``learners``: one entry per ``--learner``, named
by a ``"module:attr"`` entry point), the kinds of run the command line starts
(``run_kinds``: a trained baseline, the random agent), the job's entry (``main_job``),
the run pieces both wings share (``shared``), tracking (``tracking``), the parameter
converter between the two families (``convert``), and the two wings: ``torch`` (the
entries, options and job of ``ppo`` and ``vtrace``) and ``jax`` (those of ``ppo-jax``).

The names below are imported on first use, so that a module of the layer that needs no
learner family (``run_kinds`` for the random agent, ``presets``) imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "JobOptions": "cl_suites.job.run_spec",
    "JobSpec": "cl_suites.job.run_spec",
    "resolve": "cl_suites.job.run_spec",
    "resolve_job": "cl_suites.job.run_spec",
    "run_main_job": "cl_suites.job.main_job",
    "run_resolved": "cl_suites.job.main_job",
    "run_seed_group": "cl_suites.job.main_job",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cl_suites.job' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
