"""Sweeps: a grid of main-job runs on Ray, local by default, a cluster by address.

``cl-suites sweep`` (``cl_suites.sweep.cli``) and :func:`run_sweep` run every
(suite, method, learner, seed) of a :class:`SweepSpec` as one Ray task that calls the
unchanged ``cl_suites.job.main_job.run_main_job`` in a fresh worker process, write one
run directory per run under ``SWEEP_DIR/runs/``, retry runs whose worker dies from their
last checkpoint, and end with the metrics report of all runs in ``SWEEP_DIR/report/``.
Ray is the optional extra ``cl-suites[sweep]``; nothing here imports it until a sweep
starts.
"""

from cl_suites.sweep.grid import RunSpec, SweepError, SweepSpec, load_sweep_file, parse_seeds

__all__ = [
    "RunSpec",
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "load_sweep_file",
    "parse_seeds",
    "run_sweep",
]


def __getattr__(name: str):  # the driver imports rich.live and the worker; keep them lazy
    if name in ("run_sweep", "SweepResult", "RunOutcome"):
        from cl_suites.sweep import driver

        return getattr(driver, name)
    raise AttributeError(name)
