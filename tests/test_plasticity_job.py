"""Plasticity diagnostics in the main job: rows at every evaluation point, per network,
kept across a kill and ``--resume`` without a lost or duplicated row (the same values: the
probe batch and the references come back from the checkpoint), off by an option."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch as th

from cl_suites.core.runlog import read_eval, read_plasticity
from cl_suites.job.main_job import run_main_job
from cl_suites.metrics.plasticity_tracker import METRICS, PROBE_FILE, load_probe
from tests.kill_drills import kill_run_at

th.set_num_threads(1)

DIAG = dict(suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=3, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 500,
    "checkpoint_every": 300,
    "report": False,
    "plasticity_probe_size": 32,
}


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("plasticity-full")
    run_main_job(run_dir=run_dir, resume=False, overrides=dict(OVERRIDES), **DIAG)
    return run_dir


def test_every_evaluation_point_has_every_diagnostic_of_every_network(full):
    rows = read_plasticity(full)
    eval_steps = sorted(read_eval(full).total_step.unique())
    assert sorted(rows.total_step.unique()) == eval_steps
    whole = rows[rows.layer == "all"]
    for step in eval_steps:
        at = whole[whole.total_step == step]
        for network in ("actor", "critic"):
            assert sorted(at[at.network == network].metric) == sorted(METRICS), (step, network)
    assert not whole.duplicated(["total_step", "network", "metric"]).any()
    later = whole[whole.total_step > 0]
    finite = later[~later.metric.isin(["churn", "grad_norm"])]
    assert np.isfinite(finite.value).all(), finite[~np.isfinite(finite.value)]
    assert (whole[whole.value.isna()].reason != "").all()  # every NaN says why
    # the task trained up to the point: the boundary (1000) ends task 0
    assert set(whole[whole.total_step == 1000].task_id) == {0}
    assert set(whole[whole.total_step == 2000].task_id) == {1}
    actor = whole[whole.network == "actor"].set_index(["metric", "total_step"]).value
    assert actor["weight_change_task", 0] == actor["weight_change_run", 0] == 0.0
    assert actor["weight_change_task", 1000] == actor["weight_change_run", 1000] > 0
    # task 1 measures its change from its own start, the run from the run's
    assert 0 < actor["weight_change_task", 2000] < actor["weight_change_run", 2000]
    _obs, task_ids, _ = load_probe(full / PROBE_FILE)
    assert sorted(set(task_ids.tolist())) == [0, 1] and (np.bincount(task_ids) == 32).all()


def test_resume_keeps_the_probe_batch_and_the_rows(full, tmp_path):
    kill_run_at(tmp_path / "cut", DIAG, OVERRIDES, 1400)  # last checkpoint 1280
    run_main_job(run_dir=tmp_path / "cut", resume=True, overrides=dict(OVERRIDES), **DIAG)
    a, b = read_plasticity(full), read_plasticity(tmp_path / "cut")
    pd.testing.assert_frame_equal(a, b)
    pa, pb = load_probe(full / PROBE_FILE), load_probe(tmp_path / "cut" / PROBE_FILE)
    for x, y in zip(pa, pb, strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_diagnostics_are_off_by_an_option(tmp_path):
    overrides = {**OVERRIDES, "plasticity": False, "n_tasks": 1}
    run_main_job(run_dir=tmp_path / "off", resume=False, overrides=overrides, **DIAG)
    assert not (tmp_path / "off" / "plasticity.csv").exists()
