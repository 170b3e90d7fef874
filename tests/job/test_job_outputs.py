"""What a run leaves besides its logs: progress.json and the progress bar, evaluation
videos, and the fresh-episode source CL methods can ask for."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch as th
from PIL import Image

from baselines_sb3.cl.base import ContinualMethod
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.video import VideoRecorder, poster_path, video_path
from cl_suites.job import main_job
from cl_suites.job.torch import train as torch_train
from cl_suites.random_agent import run_random_agent
from cl_suites.rundir.progress import RunProgress, read_progress
from cl_suites.rundir.runlog import read_eval, read_resources
from tests.helpers.toy_envs import paint_sequence

th.set_num_threads(1)


def test_random_agent_writes_progress_json_and_stays_quiet(tmp_path, capsys):
    run_random_agent(
        "Diagnostic", seed=0, run_dir=tmp_path, num_envs=2, steps_per_task=40, eval_every=40,
        eval_episodes=1, n_tasks=2,
    )  # fmt: skip
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # library calls show no progress unless asked
    progress = read_progress(tmp_path)
    assert progress["state"] == "finished"
    assert progress["total_step"] == progress["total_steps"] == 80
    assert (progress["task_id"], progress["task_name"], progress["cycle"]) == (1, "cue-shift-1", 0)
    assert progress["steps_per_s"] > 0 and progress["pid"] > 0 and progress["host"]
    assert progress["updated"].endswith("+00:00")
    assert progress["rss_mb"] > 0 and progress["gpu_mb"] is None  # issue 50 item 4
    resources = read_resources(tmp_path)  # each task's end, the rate beside the memory
    assert list(resources["total_step"]) == [40, 80] and (resources["rss_mb"] > 0).all()


def test_progress_bar_shows_task_and_one_rate_when_asked(tmp_path, capsys):
    from cl_suites.api import make_sequence

    schedule = make_sequence("Diagnostic", steps_per_task=100, n_tasks=2).schedule(1)
    bar = RunProgress(schedule, run_dir=tmp_path, show=True, unit="agent steps")
    bar.update(150, force=True)
    assert read_progress(tmp_path)["state"] == "running"
    bar.close("failed")
    err = capsys.readouterr().err
    assert "task 1:cue-shift-1 cycle 0" in err and err.count("agent steps/s") == 1
    assert json.loads((tmp_path / "progress.json").read_text())["state"] == "failed"


# -- videos ---------------------------------------------------------------------------
def test_evaluator_records_one_episode_per_task_and_split(tmp_path):
    from moviepy import VideoFileClip

    recorder = VideoRecorder(tmp_path, boundaries=[0, 20], fps=10)
    evaluator = Evaluator(paint_sequence(), seed=0, episodes=3, num_envs=2, video=recorder)
    policy = lambda obs, ids: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    for step in (0, 10, 20, 30):
        evaluator.evaluate(step, policy)
    names = sorted(p.name for p in (tmp_path / "videos").glob("*.mp4"))
    assert names == [
        f"eval-step{s:09d}-task{t:02d}-{split}.mp4"
        for s in (0, 20)
        for t in (0, 1)
        for split in ("test", "train")
    ]
    clip = VideoFileClip(str(video_path(tmp_path, 20, 1, "test")))
    assert clip.size == [24, 16]
    # the poster: the middle frame, not the black first one (issue 23 item 9)
    poster = np.asarray(Image.open(poster_path(video_path(tmp_path, 20, 1, "test"))))
    assert poster.shape == (16, 24, 3) and (poster == 40 * 3).all()
    assert round(clip.duration * clip.fps) == 6  # the first frame + 6 steps, last one lost
    clip.close()
    assert recorder.state_dict() == {"next": 2}


def test_capture_video_needs_envs_that_render(tmp_path):
    """Diagnostic's envs render once the core passes render_mode (interface 3); until then
    the job refuses before training, naming the problem."""
    from cl_suites.suites.diagnostic import CueEnv

    kw = dict(
        suite="Diagnostic", method="ft", learner="ppo", preset="small", seed=0, num_envs=2,
        run_dir=tmp_path, resume=False,
    )  # fmt: skip
    overrides = {"n_tasks": 2, "steps_per_task": 64, "eval_every": 64, "eval_episodes": 1,
                 "report": False, "capture_video": True, "video_length": 3}  # fmt: skip
    try:
        CueEnv(0, render_mode="rgb_array")
    except TypeError:
        with pytest.raises(ValueError, match="cannot render"):
            main_job.run_main_job(overrides=overrides, **kw)
        return
    main_job.run_main_job(overrides=overrides, **kw)
    names = {p.name for p in (tmp_path / "videos").iterdir()}
    assert "eval-step000000000-task00-train.mp4" in names
    assert "eval-step000000064-task01-train.mp4" in names


# -- fresh episodes for importances (interface 11) --------------------------------------
class SourceUser(ContinualMethod):
    """Asks for 2 fresh episodes x 7 steps of each finished task."""

    name = "source-user"
    needs_task_boundaries = True
    needs_fresh_episodes = True

    def __init__(self):
        super().__init__()
        self.source = None
        self.batches: list[tuple[int, tuple[int, ...]]] = []

    def set_episode_source(self, fn):
        self.source = fn

    def on_task_switch(self, event):
        episodes = self.source(event.previous.task_id, 2, 7)
        assert episodes.num_agents == 1 and episodes.num_steps == 14
        assert episodes.step_in_episode.tolist() == [t for t in range(7) for _ in range(2)]
        self.batches.append((event.previous.task_id, tuple(episodes.observations.shape)))


def test_job_gives_methods_a_fresh_episode_source(tmp_path, monkeypatch):
    method = SourceUser()
    monkeypatch.setattr(torch_train, "make_method", lambda *a, **k: method)
    main_job.run_main_job(
        suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=0, num_envs=2,
        run_dir=tmp_path, resume=False,
        overrides={"n_tasks": 2, "steps_per_task": 64, "eval_every": 64, "eval_episodes": 1,
                   "report": False, "show_task": False},
    )  # fmt: skip
    assert method.batches == [(0, (14, 5)), (1, (14, 5))]  # every step of 2 envs x 7 steps
    assert len(read_eval(tmp_path)) == 3 * 2


def test_rollout_observations_replay_with_the_seed():
    from cl_suites.api import make_sequence

    seq = make_sequence("Diagnostic", n_tasks=2)
    evaluator = Evaluator(seq, seed=5)
    policy = lambda obs, ids: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    a, ids, ended = evaluator.rollout_observations(1, 3, 4, policy, total_step=100)
    b, _, _ = evaluator.rollout_observations(1, 3, 4, policy, total_step=100)
    c, _, _ = evaluator.rollout_observations(1, 3, 4, policy, total_step=200)
    assert a.shape == (12, 5) and (ids == 1).all() and ended.shape == (4, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
