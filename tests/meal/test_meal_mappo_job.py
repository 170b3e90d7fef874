"""MEAL 057f862's MAPPO (``mappo-jax``) through the one main job: its settings per preset,
a run with its run directory, report and plasticity diagnostics, exact resume after a
kill, and a suite that is not MEAL's refused (bad input: ``test_meal_jax_job``'s table).

The runs share ``test_meal_jax_job``'s tiny configuration (MEAL-2, 4 envs x 2 agents,
updates of 4 envs x 16 steps, 512 env steps per task, 100-step episodes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("meal")

from cl_suites.job.jax.checkpoint import jax_checkpoint_path, load_jax_checkpoint
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata
from tests.helpers.kill_drills import jax_run

pytestmark = pytest.mark.usefixtures("compile_cache")

JOB = dict(suite="MEAL-2", method="ewc", learner="mappo-jax", preset="small", num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
    "layout_seed": 0,
    "importance_episodes": 1,
    "importance_steps": 20,
}


def _run(tmp_path_factory, name, seed=3, kill_at=None, run_dir=None, **extra):
    run_dir = run_dir or tmp_path_factory.mktemp(name)
    return jax_run(run_dir, JOB, {**OVERRIDES, **extra}, seed, kill_at)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """Seed 3, uninterrupted, with the report and plasticity diagnostics."""
    return _run(tmp_path_factory, "whole", report=True)


def test_presets_give_mappos_own_values():
    """``paper`` and ``meal-authors``: MEAL 057f862's MAPPO values over the suite's
    protocol (2048 envs x 400 steps); ``small``: the smoke test's PPO values, MAPPO's
    network and settings otherwise."""
    paper = resolve_job(**{**JOB, "preset": "paper", "num_envs": None}, overrides={}, seed=0)
    values = paper.hp["learner"]
    assert paper.learner == "mappo-jax" and paper.num_envs == 2048
    assert (values["learning_rate"], values["anneal_lr"], values["num_steps"]) == (1e-3, False, 400)
    assert (values["num_minibatches"], values["gae_lambda"], values["max_grad_norm"]) == (
        16,
        0.95,
        1.0,
    )
    assert values["reg_coef"] == 1e11 and values["agent_id_input"] is True
    assert values["regularize_heads"] is True and values["hidden_sizes"] == [128, 128]
    authors = resolve_job(
        **{**JOB, "preset": "meal-authors", "num_envs": None}, overrides={}, seed=0
    )
    assert authors.num_envs == 2048  # 1e8 env steps per task: 122 whole updates, as MEAL
    assert authors.suite_kwargs["steps_per_task"] == 122 * 2048 * 400
    small = resolve_job(**JOB, overrides={"lr_end": 0.5, "importance_stride": 2}, seed=0)
    assert small.num_envs == 4 and small.hp["learner"]["num_steps"] == 16
    assert small.hp["learner"]["lr_end"] == 0.5 and small.hp["learner"]["importance_stride"] == 2
    assert type(small.learner_config).__name__ == "MAPPOConfig"


def test_a_run_writes_the_usual_run_dir_and_report(whole):
    meta = read_metadata(whole)
    assert meta["learner"] == "mappo-jax" and meta["method"] == "ewc"
    frame = read_eval(whole)
    assert sorted(frame.total_step.unique()) == [256, 512, 768, 1024]
    assert set(frame.task_id) == {0, 1} and frame.mean_return.notna().all()
    assert (whole / "report" / "report.html").exists()
    plasticity = pd.read_csv(whole / "plasticity.csv")
    dormant = plasticity[(plasticity.metric == "dormant_ratio") & (plasticity.layer == "all")]
    assert set(dormant.network) == {"actor", "critic"} and dormant.value.notna().all()
    assert set(dormant.task_id) == {0, 1}


def test_resume_after_a_kill_reproduces_the_uninterrupted_run(whole, tmp_path_factory):
    cut = _run(tmp_path_factory, "cut", kill_at=640, report=True)
    assert read_eval(cut).total_step.max() == 512
    run_main_job(**JOB, seed=3, run_dir=cut, resume=True, overrides={**OVERRIDES, "report": True})
    a, b = (read_eval(d).drop(columns="wall_time") for d in (whole, cut))
    assert not b.duplicated(["total_step", "task_id"]).any()
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(read_episodes(whole), read_episodes(cut))
    full = load_jax_checkpoint(jax_checkpoint_path(whole))[0]
    again = load_jax_checkpoint(jax_checkpoint_path(cut))[0]
    assert full.keys() == again.keys()
    for key in full:
        np.testing.assert_array_equal(full[key], again[key], err_msg=key)


def test_mappo_is_refused_on_a_suite_that_is_not_meals():
    with pytest.raises(ValueError, match=r"learner 'mappo-jax' is not available for Diagnostic"):
        resolve_job(
            suite="Diagnostic", method="ft", learner="mappo-jax", preset="small", num_envs=None,
            overrides={},
        )  # fmt: skip


def test_task_policies_load_and_the_coordination_matrix_is_refused(whole):
    """A kept task policy acts again through the run's network (every agent of each env);
    MEAL's coordination matrix, which pairs one agent of one run with another run's, is
    refused in one line."""
    from cl_suites.errors import RunFileError
    from cl_suites.job.task_policies import check_coordination_inputs, load_task_policy
    from cl_suites.rundir.task_policies import task_policy_path

    spec = resolve_job(**JOB, overrides=dict(OVERRIDES), seed=3)
    policy = load_task_policy(task_policy_path(whole, 1, "npz"), spec)
    obs = np.zeros((4, *spec.meal.obs_shape), np.uint8)  # 2 envs x 2 agents, env-major
    assert policy(obs, np.ones(4, np.int64)).shape == (4,)
    with pytest.raises(RunFileError, match="mappo-jax run's agents act on their own agent ids"):
        check_coordination_inputs(whole)
