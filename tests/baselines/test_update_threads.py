"""A learner's update runs with ``update_threads`` torch threads and gives the process its
thread count back; the job validates the option and MEAL runs update with all cores."""

from __future__ import annotations

import pytest
import torch as th

from baselines_sb3.learners import TaskSwitchLearner
from cl_suites.job.main_job import resolve_job
from tests.helpers.thread_recording import record_threads


class _Recorder(TaskSwitchLearner):
    def __init__(self, fail: bool = False) -> None:
        self.seen: list[int] = []
        self.fail = fail

    def _update(self) -> None:
        self.seen.append(th.get_num_threads())
        if self.fail:
            raise RuntimeError("update failed")


@pytest.fixture
def one_thread():
    before = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(before)


def test_update_runs_with_update_threads_then_restores(one_thread):
    learner = _Recorder()
    learner.train()  # unset: the process's count
    learner.update_threads = 2
    learner.train()
    assert learner.seen == [1, 2]
    assert th.get_num_threads() == 1
    failing = _Recorder(fail=True)
    failing.update_threads = 2
    with pytest.raises(RuntimeError, match="update failed"):
        failing.train()
    assert th.get_num_threads() == 1


@pytest.mark.parametrize("key", ["torch_threads", "update_threads"])
@pytest.mark.parametrize("bad", [0, -2, 1.5, "2"])
def test_thread_options_must_be_positive_integers(key, bad):
    with pytest.raises(ValueError, match=rf"{key} must be an integer >= 1, got {bad!r}"):
        resolve_job(
            suite="Diagnostic",
            method="ft",
            learner=None,
            preset="small",
            num_envs=None,
            overrides={key: bad},
        )


def test_a_run_acts_and_updates_with_one_torch_thread_by_default(tmp_path, one_thread):
    """``TORCH_THREADS`` (1) holds for every suite, whatever the process had (here 2), and
    the process gets its count back (issue 23: thread defaults that hold up next to
    other processes)."""
    from cl_suites.job import main_job

    with pytest.MonkeyPatch.context() as mp:
        seen = record_threads(mp)
        th.set_num_threads(2)
        main_job.run_main_job(
            suite="Diagnostic", method="ft", learner="ppo", preset="small", seed=0,
            num_envs=2, run_dir=tmp_path, resume=False,
            overrides={"n_tasks": 2, "steps_per_task": 64, "eval_every": 64,
                       "eval_episodes": 1, "report": False},
        )  # fmt: skip
        after = th.get_num_threads()
    assert main_job.TORCH_THREADS == 1
    assert {phase for phase, _ in seen} == {"update", "collect"}
    assert {n for _, n in seen} == {1}
    assert after == 2
