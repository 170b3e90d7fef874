"""Plasticity diagnostics in the main job: rows at every evaluation point, per network,
kept across a kill and ``--resume`` without a lost or duplicated row (the same values: the
probe batch and the references come back from the checkpoint), off by an option."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch as th

from cl_suites.job.main_job import run_main_job
from cl_suites.metrics.plasticity_tracker import METRICS, PROBE_FILE, load_probe
from cl_suites.rundir.runlog import read_eval, read_plasticity
from tests.helpers.kill_drills import jax_run_dies_after_checkpoint, kill_run_at

th.set_num_threads(1)

DIAG = dict(suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=3, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 500,
    "checkpoint_every": 300,
    "report": False,
    "plasticity_probe_size": 200,  # not full at the checkpoints: the resume must continue it
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
    # the update before every point was watched (only those are: the cost stays low)
    assert (later[later.metric == "grad_norm"].value > 0).all()
    # the task trained up to the point: the boundary (1000) ends task 0
    assert set(whole[whole.total_step == 1000].task_id) == {0}
    assert set(whole[whole.total_step == 2000].task_id) == {1}
    actor = whole[whole.network == "actor"].set_index(["metric", "total_step"]).value
    assert actor["weight_change_task", 0] == actor["weight_change_run", 0] == 0.0
    assert actor["weight_change_task", 1000] == actor["weight_change_run", 1000] > 0
    # task 1 measures its change from its own start, the run from the run's
    assert 0 < actor["weight_change_task", 2000] < actor["weight_change_run", 2000]
    _obs, task_ids, _ = load_probe(full / PROBE_FILE)
    assert sorted(set(task_ids.tolist())) == [0, 1] and (np.bincount(task_ids) == 200).all()


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


# -- the JAX MEAL learner (ppo-jax) ---------------------------------------------------------
MEAL = dict(suite="MEAL-2", method="ft", learner=None, preset="small", num_envs=4)
MEAL_OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
    "layout_seed": 0,
    "plasticity_probe_size": 24,
}


def _meal(run_dir, kill_at=None, **kw):
    kwargs = dict(**MEAL, run_dir=run_dir, overrides=dict(MEAL_OVERRIDES), **kw)
    if kill_at is None:
        run_main_job(resume=False, **kwargs)
        return run_dir
    with jax_run_dies_after_checkpoint(kill_at):
        run_main_job(resume=False, **kwargs)
    run_main_job(resume=True, **kwargs)
    return run_dir


@pytest.fixture(scope="module")
def meal_full(tmp_path_factory):
    return _meal(tmp_path_factory.mktemp("meal-full"), seed=0)


def test_ppo_jax_logs_every_diagnostic_at_every_point(meal_full):
    rows = read_plasticity(meal_full)
    whole = rows[rows.layer == "all"]
    assert sorted(whole.total_step.unique()) == sorted(read_eval(meal_full).total_step.unique())
    for step in whole.total_step.unique():
        for network in ("actor", "critic"):
            at = whole[(whole.total_step == step) & (whole.network == network)]
            assert sorted(at.metric) == sorted(METRICS)
    later = whole[whole.total_step > whole.total_step.min()]
    assert np.isfinite(later.value).all(), later[~np.isfinite(later.value)]
    grads = later[later.metric == "grad_norm"].value
    assert (grads > 0).all()
    _obs, task_ids, _ = load_probe(meal_full / PROBE_FILE)
    assert (np.bincount(task_ids) == 24).all() and len(np.bincount(task_ids)) == 2


def test_ppo_jax_resume_keeps_the_probe_batch_and_the_rows(meal_full, tmp_path):
    cut = _meal(tmp_path / "cut", kill_at=300, seed=0)
    pd.testing.assert_frame_equal(read_plasticity(meal_full), read_plasticity(cut))


def test_ppo_jax_seeds_each_get_their_diagnostics(meal_full, tmp_path):
    run_main_job(**MEAL, seed=0, run_dir=tmp_path / "g", resume=False,
                 overrides=dict(MEAL_OVERRIDES), seeds=[0, 3])  # fmt: skip
    alone = read_plasticity(meal_full)
    for seed in (0, 3):
        rows = read_plasticity(tmp_path / "g" / f"seed-{seed}")
        assert len(rows) == len(alone)
    # seed 0 vmapped beside seed 3 is seed 0 alone, to the rounding of vmapped reductions
    a = read_plasticity(tmp_path / "g" / "seed-0")
    ok = np.isfinite(alone.value)
    np.testing.assert_allclose(a.value[ok], alone.value[ok], rtol=2e-3, atol=2e-4)


def test_the_report_draws_the_diagnostics_and_tabulates_them_at_each_tasks_end(full, tmp_path):
    from cl_suites.metrics.report import build_report

    result = build_report([full], tmp_path / "report", progress=False)
    folder = tmp_path / "report" / "Diagnostic"
    assert (folder / "plasticity.png").stat().st_size > 10_000
    table = pd.read_csv(folder / "plasticity_task_end.csv")
    rows = read_plasticity(full)
    # task 0 ends at 1000, task 1 at 2000: the cells are those points' values (one seed)
    for column, step in ((table.columns[3], 1000), (table.columns[4], 2000)):
        cell = table[(table.network == "actor") & (table.diagnostic == "weight_change_run")][column]
        want = rows[
            (rows.network == "actor")
            & (rows.layer == "all")
            & (rows.metric == "weight_change_run")
            & (rows.total_step == step)
        ].value
        value = str(cell.iloc[0]).split(" ± ")[0]  # one seed: the value alone
        assert float(value) == pytest.approx(float(want.iloc[0]), rel=1e-3)
    assert "Plasticity diagnostics" in result.html.read_text()


def test_pnc_gets_its_knowledge_base_column_diagnosed_too(tmp_path):
    overrides = {**OVERRIDES, "n_tasks": 2, "steps_per_task": 500, "eval_every": 250}
    job = {**DIAG, "method": "pnc"}
    run_main_job(run_dir=tmp_path / "pnc", resume=False, overrides=overrides, **job)
    rows = read_plasticity(tmp_path / "pnc")
    whole = rows[rows.layer == "all"]
    assert set(whole.network) == {"actor", "critic", "kb/actor", "kb/critic"}
    last = whole[whole.total_step == whole.total_step.max()]
    for network in ("kb/actor", "kb/critic"):
        values = last[last.network == network].set_index("metric").value
        assert np.isfinite(values.drop(["grad_norm", "churn"], errors="ignore")).all(), values
    # the knowledge base is trained by distillation in the compress phase: it moved
    kb = whole[(whole.network == "kb/actor") & (whole.metric == "weight_change_run")]
    assert kb.value.max() > 0


def test_plasticity_rows_go_to_the_tracking_sinks(tmp_path):
    from cl_suites.rundir.runlog import RunLog

    got = []
    with RunLog(tmp_path / "run", {"suite": "x"}) as log:
        log.add_scalar_sink(lambda values, step: got.append((step, dict(values))))
        log.log_plasticity([
            {"total_step": 5, "task_id": 0, "network": "actor", "layer": "all",
             "metric": "dormant_ratio", "value": 0.25, "reason": ""},
            {"total_step": 5, "task_id": 0, "network": "actor", "layer": "mlp.0",
             "metric": "dormant_ratio", "value": 0.5, "reason": ""},
        ])  # fmt: skip
    assert got == [(5, {"plasticity/actor/dormant_ratio": 0.25})]
    assert len(read_plasticity(tmp_path / "run")) == 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("plasticity_tau", 0.0, "plasticity_tau must be a number in (0, 1), got 0.0"),
        ("plasticity_tau", 1.0, "plasticity_tau must be a number in (0, 1), got 1.0"),
        ("plasticity_probe_size", 0, "plasticity_probe_size must be an integer >= 1, got 0"),
        ("plasticity_pooling", "mean", "plasticity_pooling must be one of 'redo', 'plasticine'"),
    ],
)
def test_bad_plasticity_options_are_refused_in_one_line_before_the_run(key, value, message):
    from cl_suites.job.main_job import resolve_job

    with pytest.raises(ValueError) as e:
        resolve_job(**{**DIAG, "seed": 0}, overrides={**OVERRIDES, key: value})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_lagged_vtrace_run_gives_the_same_diagnostics_twice(tmp_path):
    """With ``policy_lag=1`` the update runs beside the next rollout; the diagnostics wait
    for it (task-start weights, gradient norms closed at the measurement), so the same seed
    gives the same rows, gradient norms included."""
    tables = []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        run_main_job(
            run_dir=run_dir,
            resume=False,
            overrides={**OVERRIDES, "policy_lag": 1, "checkpoint_every": None},
            **{**DIAG, "learner": "vtrace", "method": "ft"},
        )
        tables.append((run_dir / "plasticity.csv").read_text())
    assert tables[0] == tables[1]
    rows = tables[0].splitlines()
    grads = [r.split(",") for r in rows if ",grad_norm," in r and ",all," in r]
    later = [r for r in grads if r[0] != "0"]  # step 0: no update yet
    assert later and all(r[5] != "nan" for r in later)  # every later point measured one
