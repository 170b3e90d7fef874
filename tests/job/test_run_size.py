"""Issue 23 item 6: a run says how big it is. The pre-run summary (total steps, the
evaluation work), evaluation as a timed phase of the progress with the estimate after a
warm-up, and the evaluation-only episode cap."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.core.evaluation import Evaluator
from cl_suites.core.task import Segment
from cl_suites.job import main_job
from cl_suites.rundir import progress as progress_module
from cl_suites.rundir.progress import RunProgress, read_progress
from tests.helpers.toy_envs import paint_sequence


def test_the_pre_run_summary_prints_total_steps_and_evaluation_work(tmp_path, capsys):
    main_job.run_main_job(
        suite="Diagnostic", method="ft", learner="ppo", preset="small", seed=0, num_envs=2,
        run_dir=tmp_path, resume=False,
        overrides={"n_tasks": 2, "steps_per_task": 64, "eval_every": 64, "eval_episodes": 1,
                   "report": False, "progress": True},
    )  # fmt: skip
    out = capsys.readouterr()
    lines = out.out.splitlines()
    # points: 0 (before training), 64 (the cadence), 128 (the end); 1 episode x 2 tasks each
    assert lines[:4] == [
        "device: cpu (device=auto)",
        "envs: vectorization_mode=sync (auto: no per-step cost figures for Diagnostic to weigh "
        "env workers by; --vectorization-mode workers to try them)",
        "run: 128 agent steps to go of 128 (2 tasks x 1 cycle)",
        "evaluation: 3 points x 2 episodes (1 per task and split) = 6 episodes; "
        "whole episodes (no cap)",
    ]
    assert "evaluation" in out.err and "%)" in out.err  # the time split at the end
    done = read_progress(tmp_path)
    assert done["state"] == "finished" and 0 < done["eval_share"] < 1 and done["eval_seconds"] > 0


def test_evaluation_is_a_timed_phase_and_the_estimate_follows_the_warm_up(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])

    class Points:  # an evaluator due at 0, 50 and 100
        progress = None

        def points(self, start, end):
            return [0, 50, 100]

    schedule = (Segment(0, 0, 0, "a", 0, 100),)
    bar = RunProgress(schedule, run_dir=tmp_path, evaluator=(ev := Points()))
    assert ev.progress is bar
    bar.begin_evaluation(0, episodes=4)
    assert read_progress(tmp_path)["phase"] == "evaluation"
    clock[0] = 10.0
    bar.end_evaluation()  # 10 s of evaluation
    clock[0] = 15.0
    bar.update(5)
    assert bar.estimate() is None  # 5 s of training: the warm-up is 10 s
    clock[0] = 30.0
    bar.update(20, force=True)  # 20 steps in 20 s of training
    assert bar.estimate() == pytest.approx((80.0, 20.0))  # 80 steps at 1/s; 2 points x 10 s
    state = read_progress(tmp_path)
    assert state["phase"] == "training" and state["eta_s"] == pytest.approx(100.0)
    assert (state["eval_seconds"], state["eval_share"]) == (10.0, pytest.approx(1 / 3, abs=1e-4))


@pytest.mark.parametrize(("cap", "expected"), [(None, [5.0, 6.0]), (3, [3.0, 3.0])])
def test_the_evaluation_only_cap_counts_cut_episodes_with_their_return_so_far(cap, expected):
    """Paint episodes give 1 per step and last 5 steps (train) and 6 (test). Each sub-env
    plays two episodes: with a cap of 3 the first is cut at 3, played out unrecorded, and
    the second is cut at 3 again."""
    evaluator = Evaluator(paint_sequence(), seed=0, episodes=2, num_envs=1, max_episode_steps=cap)
    records = evaluator.evaluate(0, lambda obs, ids: np.zeros(len(obs), dtype=np.int64))
    by_split = {r["split"]: (r["mean_return"], r["episodes"]) for r in records if r["task_id"] == 0}
    assert by_split == {"train": (expected[0], 2), "test": (expected[1], 2)}
    assert evaluator.points(0, 30) == [10, 20, 30]  # 0 is done; the end is always one
    assert evaluator.episodes_per_point() == 2 * 2 * 2  # 2 episodes x 2 tasks x 2 splits


def test_the_episode_cap_is_a_job_option_recorded_in_the_metadata():
    spec = main_job.resolve_job(
        suite="Atari6", method="ft", learner=None, preset="small", num_envs=None,
        overrides={"eval_max_episode_steps": 2_000},
    )  # fmt: skip
    assert spec.job == {"eval_max_episode_steps": 2_000}
    from cl_suites.job.torch.train import torch_metadata

    metadata = torch_metadata(spec, 0)
    assert metadata["evaluation"]["max_episode_steps"] == 2_000
    with pytest.raises(
        ValueError, match="eval_max_episode_steps must be an integer >= 1 or none, got 0"
    ):
        main_job.resolve_job(
            suite="Atari6", method="ft", learner=None, preset="small", num_envs=None,
            overrides={"eval_max_episode_steps": 0},
        )  # fmt: skip
