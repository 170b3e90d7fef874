"""MEAL's later CL methods (AGEM, ER-ACE, PackNet; issue 52 item 5) in the JAX job as the
other methods are: several seeds in one program, plasticity diagnostics and the report
for each, and a kill -9 resume that reproduces the uninterrupted run (AGEM: its memory in
the checkpoint). The methods' own values are checked against MEAL's code in
``tests/baselines/test_jax_cl_replay.py`` and ``tests/baselines/test_jax_packnet.py``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("meal")

from cl_suites.job.jax.checkpoint import jax_checkpoint_path, load_jax_checkpoint
from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_eval, read_metadata, read_plasticity
from tests.helpers.kill_drills import jax_run_dies_after_checkpoint

pytestmark = pytest.mark.usefixtures("compile_cache")

JOB = dict(suite="MEAL-2", learner="ppo-jax", preset="small", num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "layout_seed": 0,
    "plasticity_probe_size": 24,
    "report": True,
}
METHOD_OVERRIDES = {  # small memories, two updates of fine-tuning (4 envs x 16 steps)
    "agem": {"agem_memory_size": 2048, "agem_sample_size": 64},
    "er-ace": {"agem_memory_size": 2048, "agem_sample_size": 64},
    "packnet": {"packnet_finetune_steps": 128},
}


def _kwargs(method: str, run_dir, **extra) -> dict:
    overrides = {**OVERRIDES, **METHOD_OVERRIDES[method], **extra}
    return dict(**JOB, method=method, run_dir=run_dir, overrides=overrides)


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
@pytest.mark.parametrize("method", ["agem", "er-ace", "packnet"])
def test_seeds_in_one_program_with_diagnostics_and_the_report(method, tmp_path):
    run_main_job(**_kwargs(method, tmp_path), seed=0, resume=False, seeds=[0, 3])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "seed-0", "seed-3"]
    finetune = 128 if method == "packnet" else 0  # PackNet's extra steps count in its task
    ends = [512 + finetune, 2 * (512 + finetune)]
    for seed in (0, 3):
        run = tmp_path / f"seed-{seed}"
        meta = read_metadata(run)
        assert meta["method"] == method and meta["seed"] == seed
        assert meta["hyperparameters"]["learner"]["cl_method"] == method
        frame = read_eval(run)
        assert set(ends) <= set(frame.total_step) and frame.mean_return.notna().all()
        rows = read_plasticity(run)
        assert set(ends) <= set(rows.total_step) and rows.value.notna().any()
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert summary[["suite", "method", "seeds"]].values.tolist() == [["MEAL-2", method, 2]]
    if method == "packnet":  # the capacity left after each task, in the run log
        capacity = pd.read_csv(tmp_path / "seed-0" / "packnet.csv")
        whole = capacity[capacity.layer == "all"]
        assert whole.total_step.tolist() == ends and whole.task_id.tolist() == [0, 1]
        assert whole.capacity_left.iloc[0] > 0 and whole.capacity_left.iloc[1] == 0.0
    a, b = (read_eval(tmp_path / f"seed-{s}") for s in (0, 3))
    assert not np.array_equal(a.mean_return, b.mean_return) or method == "packnet"


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_agem_resumes_after_a_kill_to_the_uninterrupted_run(tmp_path):
    """Killed after the checkpoint at 640 (task 1: the memory holds task 0's slot and part
    of task 1's), resumed: the same evaluations and the same final state, memory included."""
    full = tmp_path / "full"
    run_main_job(**_kwargs("agem", full), seed=3, resume=False)
    cut = tmp_path / "cut"
    with jax_run_dies_after_checkpoint(640):
        run_main_job(**_kwargs("agem", cut), seed=3, resume=False)
    run_main_job(**_kwargs("agem", cut), seed=3, resume=True)
    a, b = (read_eval(d).drop(columns="wall_time") for d in (full, cut))
    pd.testing.assert_frame_equal(a, b)
    x = load_jax_checkpoint(jax_checkpoint_path(full))[0]
    y = load_jax_checkpoint(jax_checkpoint_path(cut))[0]
    assert x.keys() == y.keys() and any(k.startswith(".cl") for k in x)
    for key in x:
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
