"""``policy_lag=1`` (issue 38): the V-trace update of one rollout runs while the next is
collected, acting with the parameters from before that update; the run stays the same run
for the same seed, resumes bit for bit after a kill, and every hook (task switches,
rollout ends, evaluations, checkpoints) sees the learner as in lockstep."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from baselines_sb3.cl import attach_method
from baselines_sb3.cl.base import ContinualMethod
from baselines_sb3.learners import VTrace
from baselines_sb3.policies import ContinualPolicy
from cl_suites import make_vec
from cl_suites.errors import BadValueError
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval
from tests.helpers.kill_drills import kill_run_at

th.set_num_threads(1)

JOB = dict(
    suite="Diagnostic", method="ewc", learner="vtrace", preset="small", seed=5, num_envs=None
)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 500,
    "checkpoint_every": 300,
    "report": False,
    "policy_lag": 1,
}


def _rows(run_dir):
    return read_eval(run_dir).drop(columns="wall_time"), read_episodes(run_dir)


@pytest.fixture(scope="module")
def lagged_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lagged")
    run_main_job(run_dir=run_dir, resume=False, overrides=dict(OVERRIDES), **JOB)
    return run_dir


def test_same_seed_same_lagged_run(lagged_run, tmp_path):
    run_main_job(run_dir=tmp_path, resume=False, overrides=dict(OVERRIDES), **JOB)
    (eval_a, episodes_a), (eval_b, episodes_b) = _rows(lagged_run), _rows(tmp_path)
    assert eval_a.equals(eval_b)
    assert episodes_a.equals(episodes_b)


def test_lagged_run_differs_from_lockstep(lagged_run, tmp_path):
    """The lag is real: the same seed in lockstep plays other actions (the behaviour
    network lags one update, and actions come from the learner's own generator)."""
    run_main_job(run_dir=tmp_path, resume=False, overrides={**OVERRIDES, "policy_lag": 0}, **JOB)
    assert not read_episodes(lagged_run).equals(read_episodes(tmp_path))


def test_lagged_run_resumes_bit_identically_after_a_kill(lagged_run, tmp_path):
    kill_run_at(tmp_path, JOB, OVERRIDES, kill_at=1400)  # an update in flight at the kill
    run_main_job(run_dir=tmp_path, resume=True, overrides=dict(OVERRIDES), **JOB)
    (eval_a, episodes_a), (eval_b, episodes_b) = _rows(lagged_run), _rows(tmp_path)
    assert eval_a.equals(eval_b)
    assert episodes_a.equals(episodes_b)


def _vtrace(policy_lag: int, n_envs: int = 4, n_steps: int = 8) -> VTrace:
    venv = make_vec("CLSuite/Diagnostic-v0", num_envs=n_envs, n_tasks=2, steps_per_task=96)
    return VTrace(
        ContinualPolicy,
        venv.to_sb3(),
        n_steps=n_steps,
        seed=0,
        policy_lag=policy_lag,
        policy_kwargs={"net_arch": [16]},
    )


def _log_probs(policy, buffer) -> np.ndarray:
    obs = th.as_tensor(buffer.observations.reshape(-1, *buffer.observations.shape[2:]))
    actions = th.as_tensor(buffer.actions.reshape(-1)).long()
    with th.no_grad():
        _, log_prob, _ = policy.evaluate_actions(obs, actions)
    return log_prob.numpy().reshape(buffer.log_probs.shape)


def test_the_second_rollout_is_played_by_the_parameters_before_the_first_update():
    model = _vtrace(1)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(2 * 4 * 8)  # two rollouts: the second is collected during the first update
    behaviour = _vtrace(1)
    behaviour.policy.load_state_dict(before)
    buffer = model.rollout_buffer
    np.testing.assert_allclose(buffer.log_probs, _log_probs(behaviour.policy, buffer), atol=1e-6)
    learner_now = _log_probs(model.policy, buffer)
    assert not np.allclose(buffer.log_probs, learner_now, atol=1e-4)  # the learner has moved on
    assert model._n_updates == 2


class _Probe(ContinualMethod):
    """Records whether an update was in flight when each hook ran."""

    name = "probe"
    needs_task_boundaries = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool]] = []

    def on_rollout_end(self, rollout) -> None:
        self.seen.append(("rollout_end", self.model._update_thread.busy))

    def on_task_switch(self, event) -> None:
        self.seen.append(("task_switch", self.model._update_thread.busy))


def test_hooks_see_no_update_in_flight():
    model = _vtrace(1)
    probe = _Probe()
    callback = attach_method(model, probe)
    model.learn(96 * 2, callback=callback)
    kinds = {kind for kind, _ in probe.seen}
    assert kinds == {"rollout_end", "task_switch"}
    assert not any(busy for _, busy in probe.seen)


def test_bad_policy_lag_values_are_one_clear_error():
    with pytest.raises(BadValueError, match=r"policy_lag must be one of 0, 1, got 2"):
        resolve_job(**{**JOB, "seed": 0}, overrides={"policy_lag": 2})
    with pytest.raises(ValueError, match=r"option 'policy_lag' belongs to learner 'vtrace'"):
        resolve_job(**{**JOB, "learner": "ppo"}, overrides={"policy_lag": 1})
    with pytest.raises(BadValueError, match=r"update_threads=2 needs policy_lag 0"):
        resolve_job(**JOB, overrides={"policy_lag": 1, "update_threads": 2})
    with pytest.raises(ValueError, match=r"policy_lag True is not allowed"):
        _vtrace(True)


@pytest.mark.parametrize("method", ["online-ewc", "l2", "mas", "pnc", "clear"])
def test_every_method_trains_with_the_lag_and_gives_the_same_run_twice(method, tmp_path):
    job = {**JOB, "method": method}
    overrides = {**OVERRIDES, "steps_per_task": 640, "eval_every": 640}
    for name in ("a", "b"):
        run_main_job(run_dir=tmp_path / name, resume=False, overrides=dict(overrides), **job)
    assert _rows(tmp_path / "a")[0].equals(_rows(tmp_path / "b")[0])
    assert _rows(tmp_path / "a")[1].equals(_rows(tmp_path / "b")[1])


def test_evaluations_beside_training_give_the_rows_of_evaluations_in_place(lagged_run, tmp_path):
    overrides = {**OVERRIDES, "eval_beside_training": True}
    run_main_job(run_dir=tmp_path / "full", resume=False, overrides=dict(overrides), **JOB)
    assert _rows(lagged_run)[0].equals(_rows(tmp_path / "full")[0])
    assert _rows(lagged_run)[1].equals(_rows(tmp_path / "full")[1])
    kill_run_at(tmp_path / "cut", JOB, overrides, kill_at=1400)
    run_main_job(run_dir=tmp_path / "cut", resume=True, overrides=dict(overrides), **JOB)
    assert _rows(lagged_run)[0].equals(_rows(tmp_path / "cut")[0])


def test_an_evaluation_submitted_runs_beside_the_caller():
    import time

    from cl_suites.api import make_sequence
    from cl_suites.core.evaluation import Evaluator

    sequence = make_sequence("Diagnostic", n_tasks=2, steps_per_task=100)
    slow_calls = []

    def slow_greedy(obs, task_ids):
        slow_calls.append(time.monotonic())
        time.sleep(0.01)
        return np.zeros(len(obs), dtype=np.int64)

    in_place = Evaluator(sequence, seed=1, episodes=2).evaluate(0, slow_greedy)
    evaluator = Evaluator(sequence, seed=1, episodes=2)
    start = time.monotonic()
    evaluator.submit(0, slow_greedy)
    assert time.monotonic() - start < 0.05 and evaluator.evaluating
    assert evaluator.next_eval_step == evaluator.point_after(0)  # the caller moves on
    evaluator.wait()
    assert not evaluator.evaluating and evaluator.last_eval_step == 0
    assert evaluator.state_dict()["last_eval_step"] == 0
    assert len(in_place) == 2  # one per task (the job test compares the logged rows)


def test_evaluating_beside_training_needs_the_greedy_policy():
    with pytest.raises(BadValueError, match=r"eval_beside_training needs eval_deterministic=true"):
        resolve_job(**JOB, overrides={"eval_beside_training": True, "eval_deterministic": False})


def test_a_lagged_learner_saves_and_loads_with_sb3(tmp_path):
    model = _vtrace(1)
    model.learn(2 * 4 * 8)
    model.save(tmp_path / "model.zip")
    loaded = VTrace.load(tmp_path / "model.zip", env=model.get_env())
    assert loaded.policy_lag == 1 and loaded.behaviour_policy is not None
    for a, b in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True):
        assert th.equal(a, b)
    loaded.learn(4 * 8, reset_num_timesteps=False)
