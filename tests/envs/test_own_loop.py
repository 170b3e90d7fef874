"""Issue 23 item 4: an own training loop gets a complete run directory from one
``cl_suites.Recorder`` called once per step, and the CleanRL-style scripts under
``examples/`` run end to end on a tiny budget into runs that ``cl-suites report`` accepts."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest
import torch as th

import cl_suites
from cl_suites.cli import main
from cl_suites.metrics import build_report
from cl_suites.rundir.progress import read_progress
from tests.helpers import REPO

EXAMPLES = REPO / "examples"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorder_run_is_complete_and_accepted_by_the_report(tmp_path):
    rec = cl_suites.Recorder(
        tmp_path / "run", "Diagnostic", num_envs=2, seed=0, method="mine",
        hyperparameters={"lr": 0.1}, steps_per_task=40, eval_every=40, eval_episodes=1, n_tasks=2,
    )  # fmt: skip
    policy = lambda obs, ids: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    steps = 0
    with rec:
        _, infos = rec.envs.reset(seed=0)
        rec.step(infos, policy)
        while not rec.done:
            _, _, _, _, infos = rec.envs.step(np.ones(2, dtype=np.int64))
            rec.step(infos, policy)
            steps += 1
    assert steps == 40  # 80 agent steps in vector steps of 2
    meta = cl_suites.read_metadata(rec.run_dir)
    assert (meta["method"], meta["num_envs"], meta["hyperparameters"]) == ("mine", 2, {"lr": 0.1})
    evals = cl_suites.read_eval(rec.run_dir)
    assert sorted(set(evals["total_step"])) == [0, 40, 80]  # start, cadence, end
    assert len(evals) == 3 * 2  # every point: both tasks, train split
    assert len(cl_suites.read_episodes(rec.run_dir)) > 0
    assert read_progress(rec.run_dir)["state"] == "finished"
    assert main(["report", str(rec.run_dir), "--out", str(tmp_path / "report")]) == 0
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert summary["method"].tolist() == ["mine"]


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("ppo_diagnostic", ["--steps-per-task", "64", "--eval-every", "64", "--num-envs", "2",
                            "--num-steps", "8", "--eval-episodes", "1"]),
        ("ppo_procgen", ["--steps-per-task", "32", "--eval-every", "1000", "--num-envs", "2",
                         "--num-steps", "8", "--eval-episodes", "1",
                         "--eval-max-episode-steps", "10"]),
        ("ippo_meal", ["--steps-per-task", "64", "--eval-every", "1000", "--num-envs", "2",
                       "--num-steps", "8", "--eval-episodes", "1",
                       "--eval-max-episode-steps", "10"]),
    ],
)  # fmt: skip
def test_example_script_runs_end_to_end_into_a_report(tmp_path, name, argv):
    if name == "ippo_meal":
        pytest.importorskip("jax")
    if name == "ppo_procgen":
        pytest.importorskip("procgen")
    threads = th.get_num_threads()
    run_dir = _example(name).main(["--run-dir", str(tmp_path / name), *argv])
    th.set_num_threads(threads)
    meta = cl_suites.read_metadata(run_dir)
    assert meta["method"] == "cleanrl-ppo"
    evals = cl_suites.read_eval(run_dir)
    end = meta["schedule"][-1]["end_step"]
    assert evals["total_step"].max() == end and evals["total_step"].min() == 0
    assert read_progress(run_dir)["state"] == "finished"
    res = build_report([run_dir], tmp_path / "report", bootstrap_reps=20)
    assert res.html.is_file()


def test_a_meal_recorder_holds_the_shaping_weight_per_update_of_the_own_learner(tmp_path):
    """``Recorder(rollout_steps=T)`` on MEAL: the shaping weight stays fixed for each block
    of T steps (one update of the own learner), as MEAL's trainer holds it; the default
    (``None``) anneals it every step."""
    rec = cl_suites.Recorder(tmp_path / "held", "MEAL-2", num_envs=2, seed=0, method="mine",
                             rollout_steps=4, steps_per_task=64, shaping_horizon=32)  # fmt: skip
    envs = rec.envs
    envs.reset(seed=0)
    actions = np.zeros((2, envs.num_agents), dtype=np.int64)
    weights = []
    for _ in range(8):
        weights.append(envs.shaping_coef())
        envs.step(actions)
    # blocks of 2 envs x 4 steps = 8 env steps of a 32-step horizon: 1, 0.75 per block
    assert weights == [1.0] * 4 + [0.75] * 4
    rec.close()
    per_step = cl_suites.Recorder(tmp_path / "per-step", "MEAL-2", num_envs=2, seed=0,
                                  method="mine", steps_per_task=64, shaping_horizon=32)  # fmt: skip
    per_step.envs.reset(seed=0)
    first = per_step.envs.shaping_coef()
    per_step.envs.step(actions)
    assert (first, per_step.envs.shaping_coef()) == (1.0, 1 - 2 / 32)
    per_step.close()


def test_recorder_diagnoses_an_own_torch_network_at_every_point(tmp_path):
    """Issue 42 item 2: ``Recorder(plasticity=TorchProbe(...))`` gives the same
    ``plasticity.csv`` as the job, from an own loop's module and optimizer."""
    from baselines_sb3.plasticity import TorchNetwork, TorchProbe

    net = th.nn.Sequential(th.nn.Linear(5, 16), th.nn.ReLU(), th.nn.Linear(16, 3))
    opt = th.optim.SGD(net.parameters(), lr=0.05)
    probe = TorchProbe(
        net,
        [TorchNetwork("actor", ("",), "2", "policy")],
        {
            "main": lambda m, obs, ids: (
                m(th.as_tensor(obs, dtype=th.float32).flatten(1)),
                th.zeros(len(obs)),
            )
        },
        optimizer=opt,
    )
    rec = cl_suites.Recorder(
        tmp_path / "run", "Diagnostic", num_envs=2, seed=0, method="mine", plasticity=probe,
        steps_per_task=40, eval_every=40, eval_episodes=1, n_tasks=2,
    )  # fmt: skip
    policy = lambda obs, ids: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    with rec:
        obs, infos = rec.envs.reset(seed=0)
        rec.step(infos, policy, obs=obs)
        while not rec.done:
            obs, _, _, _, infos = rec.envs.step(np.ones(2, dtype=np.int64))
            loss = net(th.as_tensor(obs, dtype=th.float32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.step(infos, policy, obs=obs)
    rows = cl_suites.rundir.runlog.read_plasticity(rec.run_dir)
    whole = rows[rows.layer == "all"].set_index(["metric", "total_step"]).value
    assert sorted(rows.total_step.unique()) == [0, 40, 80]
    assert whole["weight_change_run", 0] == 0 and whole["weight_change_run", 80] > 0
    assert whole["weight_change_task", 80] < whole["weight_change_run", 80]  # task 1's own
    assert whole["grad_norm", 40] > 0 and np.isfinite(whole["stable_rank", 80])
    assert set(rows.task_id[rows.total_step == 40]) == {0}  # the point ends task 0
