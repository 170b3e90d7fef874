"""On Diagnostic-v0 (2 conflicting tasks), fine-tuning forgets task 0 and every CL method
keeps measurably more of it (fixed seed, small preset)."""

import pandas as pd
import pytest

from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_eval, read_metadata

MARGIN = 5.0  # return units; returns lie in [-10, 10]


def _run(tmp_path_factory, method, overrides, learner="ppo"):
    run_dir = tmp_path_factory.mktemp(f"{method}-{learner}")
    run_main_job(
        suite="Diagnostic",
        method=method,
        learner=learner,
        preset="small",
        seed=0,
        run_dir=run_dir,
        resume=False,
        num_envs=None,
        overrides=dict(overrides),
    )
    return run_dir


def _task0(run_dir, step):
    e = read_eval(run_dir)
    return float(e[(e.task_id == 0) & (e.total_step == step)].mean_return.iloc[0])


@pytest.fixture(scope="module")
def ft_run(tmp_path_factory, diag_overrides):
    return _run(tmp_path_factory, "ft", diag_overrides)


def test_finetuning_forgets_task0(ft_run):
    assert _task0(ft_run, 4000) == 10.0  # learned task 0
    assert _task0(ft_run, 8000) <= 0.0  # ...and lost it after task 1
    meta = read_metadata(ft_run)
    for key in (
        "suite_id",
        "suite",
        "method",
        "learner",
        "preset",
        "seed",
        "env_kwargs",
        "tasks",
        "schedule",
        "steps_per_task",
        "cycles",
        "eval_every",
        "eval_episodes",
        "num_envs",
        "metric_settings",
    ):
        assert key in meta
    assert meta["suite_id"] == "CLSuite/Diagnostic-v0"
    assert [s["end_step"] for s in meta["schedule"]] == [4000, 8000]
    assert sorted(pd.unique(read_eval(ft_run).total_step)) == list(range(0, 8001, 1000))


@pytest.mark.parametrize("method", ["ewc", "online-ewc", "l2", "mas", "pnc", "clear"])
def test_method_keeps_more_than_finetuning(method, ft_run, tmp_path_factory, diag_overrides):
    run_dir = _run(tmp_path_factory, method, diag_overrides)
    assert _task0(run_dir, 4000) >= 9.0 or method == "pnc"  # P&C evaluates its KB
    assert _task0(run_dir, 8000) >= _task0(ft_run, 8000) + MARGIN


def test_vtrace_learner_learns_task0(tmp_path_factory, diag_overrides):
    run_dir = _run(tmp_path_factory, "ft", {**diag_overrides, "steps_per_task": 2000}, "vtrace")
    assert _task0(run_dir, 2000) >= 8.0
