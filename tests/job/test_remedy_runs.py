"""The remedies in real runs of the torch learners (issue 54): each changes the network
when it should and only then, the end of a task is evaluated before a reset, and a killed
run resumes to the uninterrupted one, bit for bit."""

from __future__ import annotations

import pytest
import torch as th

from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_eval, read_remedy
from tests.helpers.kill_drills import kill_run_at

th.set_num_threads(1)

JOB = dict(suite="Diagnostic", learner="ppo", preset="small", seed=3, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 250,
    "eval_episodes": 2,
    "checkpoint_every": 300,
    "report": False,
    "plasticity": False,
}
# cadences that act within these 2 x 1,000 steps (1,000 steps = 8 updates of 128 steps)
REMEDY_SETTINGS = {
    "redo": {"redo_every": 1, "redo_tau": 0.6},
    "cbp": {"cbp_maturity": 4, "cbp_replacement_rate": 0.2},
    "shrink-perturb": {"snp_shrink": 0.9},
    "reset": {},
    "plasticity-injection": {"injection_at": "end"},
}


def _run(run_dir, method, **overrides):
    run_main_job(
        run_dir=run_dir, resume=False, method=method, overrides={**OVERRIDES, **overrides}, **JOB
    )
    return run_dir


def _evals(run_dir):
    return read_eval(run_dir).drop(columns="wall_time")


def _last_state(run_dir):
    return th.load(sorted((run_dir / "checkpoint").glob("step-*.pt"))[-1], weights_only=True)


@pytest.fixture(scope="module")
def ft(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("ft") / "run", "ft")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("remedies")
    return {r: _run(root / r, r, **s) for r, s in REMEDY_SETTINGS.items()}


def test_remedies_that_act_within_a_task_change_its_training(ft, runs):
    """The first checkpoint inside task 0 (step 300) already holds other weights."""
    first = sorted((ft / "checkpoint").glob("step-*.pt"))[0].name

    def weights(run):
        return th.load(run / "checkpoint" / first, weights_only=True)["policy"]

    for remedy in ("redo", "cbp", "shrink-perturb"):
        a, b = weights(ft), weights(runs[remedy])
        assert any(not th.equal(a[k], b[k]) for k in a), remedy


def test_remedies_at_the_switch_leave_the_first_task_and_its_end_alone(ft, runs):
    """Reset and injection at the task's end act after its end is evaluated: every row up
    to and including the end of task 0 equals fine-tuning's, and so do the weights."""
    base = _evals(ft)
    upto = base.total_step <= 1000
    for remedy in ("reset", "plasticity-injection"):
        evals = _evals(runs[remedy])
        assert evals[upto].equals(base[upto]), remedy
        acts = read_remedy(runs[remedy])
        assert list(acts.total_step) == [1000] and list(acts.layer) == ["all"], remedy
    assert not _last_state(runs["reset"])["policy"]["value_net.weight"].equal(
        _last_state(ft)["policy"]["value_net.weight"]
    )


def test_remedy_csv_says_what_each_remedy_did(runs):
    redo = read_remedy(runs["redo"])
    # redo_every=1: every update of both tasks (8 per task), each trunk layer a row
    assert sorted(set(redo["update"])) == list(range(1, 9))
    assert set(redo.event) == {"recycled"} and redo.units.sum() > 0
    assert set(redo.layer) == {"mlp_extractor.policy_net.0", "mlp_extractor.value_net.0"}
    cbp = read_remedy(runs["cbp"])
    assert set(cbp.event) == {"replaced"} and (cbp.units > 0).all()
    assert cbp.total_step.min() > 4 * 16  # nothing is replaced before it is mature
    assert read_remedy(runs["shrink-perturb"]).empty  # every minibatch: nothing to list


@pytest.mark.parametrize("remedy", ["redo", "cbp", "shrink-perturb"])
def test_a_killed_run_with_a_remedy_resumes_bit_identical(remedy, runs, tmp_path):
    overrides = {**OVERRIDES, **REMEDY_SETTINGS[remedy]}
    job = {**JOB, "method": remedy}
    kill_run_at(tmp_path / "cut", job, overrides, kill_at=1400)
    run_main_job(run_dir=tmp_path / "cut", resume=True, overrides=dict(overrides), **job)
    assert _evals(runs[remedy]).equals(_evals(tmp_path / "cut"))
    assert read_remedy(runs[remedy]).equals(read_remedy(tmp_path / "cut"))
    a, b = _last_state(runs[remedy])["policy"], _last_state(tmp_path / "cut")["policy"]
    assert a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)


def test_a_remedy_composes_with_a_regulariser(tmp_path):
    run = _run(tmp_path / "l2redo", "l2+redo", redo_every=2, redo_tau=0.6)
    state = _last_state(run)["method"]
    assert "remedy" in state and state["remedy"]["task_id"] == 1


@pytest.mark.parametrize(
    ("suite", "overrides"),
    [
        ("Diagnostic", {**OVERRIDES, "redo_every": 4}),
        ("MEAL-2", {"report": False, "plasticity": False, "steps_per_task": 1024}),
    ],
)
def test_redo_scores_the_units_on_the_rollout_s_rows(suite, overrides, tmp_path, monkeypatch):
    """ReDo's batch is the rollout the update trained on, one row per (step, env), taken
    before the update flattens SB3's buffer in place (a dict observation of MEAL's torch
    learner once came out 7 times too many rows and broke its sparse first layer)."""
    from baselines_sb3.cl import remedy

    seen = []
    original = remedy.lib.recycle_dormant

    def spy(policy, obs, *a, **k):
        rows = obs["obs"] if isinstance(obs, dict) else obs
        ids = obs.get("task_id") if isinstance(obs, dict) else None
        seen.append((len(rows), None if ids is None else len(ids)))
        return original(policy, obs, *a, **k)

    monkeypatch.setattr(remedy.lib, "recycle_dormant", spy)
    job = {**JOB, "suite": suite, "method": "redo", "seed": 0}
    run_main_job(run_dir=tmp_path / "run", resume=False, overrides=overrides, **job)
    meta_learner = read_remedy(tmp_path / "run")
    assert seen and not meta_learner.empty
    per_rollout = {"Diagnostic": 16 * 8, "MEAL-2": 16 * 32}[suite]  # n_steps x (envs x agents)
    assert all(rows == per_rollout and ids in (None, per_rollout) for rows, ids in seen), seen


def test_injection_in_the_middle_of_a_multi_agent_task(tmp_path):
    """MEAL's torch learner trains a row per agent, its schedule counts env steps: the
    mid-task injection comes after half of the task's updates (4 of 8), not after a
    quarter (the agents once counted as steps)."""
    job = {**JOB, "suite": "MEAL-2", "method": "plasticity-injection", "seed": 0}
    run_main_job(
        run_dir=tmp_path / "run", resume=False, overrides={"report": False, "plasticity": False},
        **job,
    )  # fmt: skip
    acts = read_remedy(tmp_path / "run")
    task0 = acts[acts.task_id == 0]
    assert list(task0["update"]) == [4, 8]  # the middle update, then the task's end
