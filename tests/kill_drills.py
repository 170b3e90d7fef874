"""Kill a main-job run at a chosen step, as Ctrl-C would (resume drills)."""

from __future__ import annotations

import pytest

from baselines_sb3 import callbacks
from cl_suites.job.main_job import run_main_job


def kill_run_at(run_dir, job, overrides, kill_at):
    """Run ``run_main_job`` into ``run_dir`` and kill it (``KeyboardInterrupt``, as Ctrl-C)
    at the first evaluation-callback step at or after ``kill_at``."""
    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if self.total_step >= kill_at:
            raise KeyboardInterrupt("simulated kill")
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(callbacks.ContinualEvalCallback, "_on_step", killer)
        with pytest.raises(KeyboardInterrupt):
            run_main_job(run_dir=run_dir, resume=False, overrides=dict(overrides), **job)
