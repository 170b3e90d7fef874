"""A run killed under the code before the job layer moved (commit f56fd38, issue 30)
resumes with today's code and ends exactly as that code's uninterrupted run.

``tests/fixtures/run-f56fd38`` (written by ``tests/fixtures/make_run_f56fd38.py`` at that
commit): ``killed/`` holds the run directory at its checkpoint of step 1280 (the checkpoint
names the task env's classes, ``cl_suites.suites.diagnostic.CueEnv``, in its pickled env
state); ``full/`` the logs of the same run uninterrupted; ``config.json`` the arguments of
both.
"""

from __future__ import annotations

import json
import shutil

import torch as th

from cl_suites.job import run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata
from tests.helpers import TESTS

FIXTURE = TESTS / "fixtures" / "run-f56fd38"


def test_a_checkpoint_written_before_the_move_resumes_to_the_same_run(tmp_path):
    config = json.loads((FIXTURE / "config.json").read_text())
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE / "killed", run_dir)
    assert read_eval(run_dir).total_step.max() < 2000  # killed mid-run
    previous = th.get_num_threads()
    th.set_num_threads(1)
    try:
        run_main_job(run_dir=run_dir, resume=True, overrides=config["overrides"], **config["job"])
    finally:
        th.set_num_threads(previous)
    full = FIXTURE / "full"
    for read in (read_eval, read_episodes):
        a, b = read(full), read(run_dir)
        a, b = (x.drop(columns="wall_time", errors="ignore") for x in (a, b))
        assert a.equals(b), read.__name__
    resumed, uninterrupted = (
        read_metadata(run_dir),
        json.loads((full / "metadata.json").read_text()),
    )
    for metadata in (resumed, uninterrupted):
        del metadata["start_time"]  # of two runs
    assert resumed == uninterrupted
