"""Own agents on every suite (issue 41 item 2): ``Recorder`` records a PettingZoo parallel
loop (per-agent infos), ``Evaluator`` evaluates MEAL sequences as built by
``make_sequence`` / ``make_parallel``, a recorder that fails before its first step leaves
nothing in the way of a rerun, and ``VTrace`` takes SB3's policy names."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

import cl_suites
from baselines_sb3 import ContinualPPO, VTrace
from cl_suites.rundir.progress import read_progress

th.set_num_threads(1)
MEAL = dict(steps_per_task=800, eval_every=400, eval_episodes=1, layout_seed=0)


def _stay(obs, task_ids):
    return np.full(len(obs), 4, dtype=np.int64)  # "stay"


def test_a_pettingzoo_parallel_loop_is_recorded(tmp_path):
    rec = cl_suites.Recorder(tmp_path / "run", "MEAL-2", parallel=True, seed=0, method="mine",
                             eval_at_start=False, **MEAL)  # fmt: skip
    env = rec.envs
    rng = np.random.default_rng(0)
    with rec:
        _, infos = env.reset(seed=0)
        rec.step(infos, _stay)
        while not rec.done:
            actions = {a: int(rng.integers(6)) for a in env.agents}
            *_, infos = env.step(actions)
            rec.step(infos, _stay)
            if not env.agents and not rec.done:
                _, infos = env.reset()
    assert rec.total_step == 1600
    evals = cl_suites.read_eval(rec.run_dir)
    assert sorted(set(evals.total_step)) == [400, 800, 1200, 1600]  # per task, MEAL's cadence
    assert set(evals.task_id) == {0, 1} and (evals.split == "train").all()
    episodes = cl_suites.read_episodes(rec.run_dir)  # 400-step episodes, agent 0's return
    assert episodes.episode_length.tolist() == [400] * 4
    assert episodes.task_id.tolist() == [0, 0, 1, 1]
    assert read_progress(rec.run_dir)["state"] == "finished"


def test_bad_infos_get_one_clear_error_and_leave_no_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    with (
        pytest.raises(ValueError, match="per-agent infos"),
        cl_suites.Recorder(
            run_dir, "Diagnostic", method="mine", steps_per_task=40, n_tasks=2
        ) as rec,
    ):
        rec.envs.reset(seed=0)
        rec.step({"agent_0": {"reward": 1.0}}, _stay)
    assert not run_dir.exists()
    with cl_suites.Recorder(run_dir, "Diagnostic", method="mine", steps_per_task=40, n_tasks=2):
        pass  # the same directory again
    assert (run_dir / "metadata.json").exists()


def test_a_recorder_failing_while_it_is_built_leaves_nothing(tmp_path, monkeypatch):
    from cl_suites import recorder

    def broken(*args, **kwargs):
        raise RuntimeError("no evaluation envs")

    monkeypatch.setattr(recorder, "Evaluator", broken)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(RuntimeError, match="no evaluation envs"):
        cl_suites.Recorder(run_dir, "Diagnostic", method="mine", steps_per_task=40)
    assert list(run_dir.iterdir()) == []  # the empty directory given stays, empty


@pytest.mark.parametrize("source", ["make_sequence", "make_parallel"])
def test_evaluator_evaluates_meal_sequences(source):
    if source == "make_sequence":
        sequence = cl_suites.make_sequence("MEAL-2", **MEAL)
    else:
        sequence = cl_suites.make_parallel("MEAL-2", **MEAL).sequence
    evaluator = cl_suites.Evaluator(sequence, seed=0)
    try:
        records = evaluator.evaluate(0, _stay)
    finally:
        evaluator.close()
    assert [(r["task_id"], r["split"], r["episodes"]) for r in records] == [
        (0, "train", 1),
        (1, "train", 1),
    ]
    assert all(r["mean_return"] == 0.0 for r in records)  # standing still makes no soup


@pytest.mark.parametrize("name", ["MlpPolicy", "CnnPolicy", "MultiInputPolicy"])
def test_vtrace_takes_the_policy_names_of_continual_ppo(name):
    assert VTrace.policy_aliases[name] is ContinualPPO.policy_aliases[name]


def test_vtrace_trains_with_a_policy_name():
    venv = cl_suites.SB3VecEnv(cl_suites.make_vec("Diagnostic", num_envs=2, steps_per_task=100))
    model = VTrace("MlpPolicy", venv, n_steps=5, seed=0)
    model.learn(20)
    assert model.num_timesteps == 20
