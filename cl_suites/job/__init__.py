"""The main job behind ``cl-suites run`` and ``cl-suites sweep``, for every learner family.

The layer between the command line (``cl_suites.cli``, ``cl_suites.sweep``) and the
learner families (``baselines_sb3``: SB3/torch; ``baselines_jax``: MEAL's JAX IPPO): the
run specification and its resolution (``run_spec``, ``learners``: one entry per learner,
``hyperparameters``, ``presets``, ``option_specs``), the job of each family (``main_job``,
``jax_job``), their checkpoints (``checkpoint``, ``jax_checkpoint``), tracking
(``tracking``) and the parameter converter between the two families (``convert``).
"""

from cl_suites.job.main_job import run_main_job, run_resolved, run_seed_group
from cl_suites.job.run_spec import JobOptions, JobSpec, resolve, resolve_seed_group

__all__ = [
    "JobOptions",
    "JobSpec",
    "resolve",
    "resolve_seed_group",
    "run_main_job",
    "run_resolved",
    "run_seed_group",
]
