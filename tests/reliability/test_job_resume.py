"""Resume of the main job after a mid-task kill: exact where the env restores exactly, and
every training step in exactly one logged episode either way (issue 13 item 4, job side);
after a kill inside the first checkpoint write, every suite family starts again from its
first step and ends with the uninterrupted run's rows (issue 29 item 3)."""

from __future__ import annotations

import pytest
import torch as th

from cl_suites.job.main_job import run_main_job
from cl_suites.job.torch import checkpoint
from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata
from tests.helpers.kill_drills import kill_inside_first_checkpoint, kill_run_at

th.set_num_threads(1)

DIAG = dict(suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=3, num_envs=None)
DIAG_OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 500,
    "checkpoint_every": 300,  # checkpoints mid-task (at rollout starts 384, 640, 1280, ...)
    "report": False,
}


def _killed_run(run_dir, job, overrides, kill_at):
    kill_run_at(run_dir, job, overrides, kill_at)
    run_main_job(run_dir=run_dir, resume=True, overrides=dict(overrides), **job)


def _steps_in_episodes(run_dir) -> int:
    """Agent steps covered by the logged training episodes."""
    return int(read_episodes(run_dir).episode_length.sum())


def _total_steps(run_dir) -> int:
    return read_metadata(run_dir)["schedule"][-1]["end_step"]


@pytest.fixture(scope="module")
def diag_full(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("diag-full")
    run_main_job(run_dir=run_dir, resume=False, overrides=dict(DIAG_OVERRIDES), **DIAG)
    return run_dir


def test_diagnostic_resume_is_bit_identical_after_a_mid_task_kill(diag_full, tmp_path):
    _killed_run(tmp_path / "cut", DIAG, DIAG_OVERRIDES, kill_at=1400)  # last checkpoint 1280
    a = read_eval(diag_full).drop(columns="wall_time")
    b = read_eval(tmp_path / "cut").drop(columns="wall_time")
    assert a.equals(b)
    assert read_episodes(diag_full).equals(read_episodes(tmp_path / "cut"))
    assert _steps_in_episodes(diag_full) == _total_steps(diag_full) == 2000


def test_ewc_buffers_on_disk_resume_to_the_same_run_as_in_ram(diag_full, tmp_path):
    """``replay_on_disk=true``: CORA's per-task Fisher buffers as files, whose names the
    checkpoints hold; a kill and resume gives the run that kept them in RAM."""
    overrides = {**DIAG_OVERRIDES, "replay_on_disk": True}
    _killed_run(tmp_path / "cut", DIAG, overrides, kill_at=1400)
    assert list((tmp_path / "cut" / "replay").glob("task*/unrolls*.npy"))
    a = read_eval(diag_full).drop(columns="wall_time")
    assert a.equals(read_eval(tmp_path / "cut").drop(columns="wall_time"))


def test_inexact_resume_logs_the_cut_episodes_once(diag_full, tmp_path, monkeypatch):
    """When the task env cannot be restored (as NetHack), it restarts from its seed; the
    episodes running at the checkpoint are logged once, as cut, and no step is lost."""
    save_env_state = checkpoint.env_state

    def unrestorable(env):
        state = save_env_state(env)
        state["state"]["task_env"] = None  # as for NetHack: no simulator state to restore
        return state

    monkeypatch.setattr(checkpoint, "env_state", unrestorable)
    run_dir = tmp_path / "cut"
    _killed_run(run_dir, DIAG, DIAG_OVERRIDES, kill_at=1400)  # resumes from 1280, mid-episode
    episodes = read_episodes(run_dir)
    assert _steps_in_episodes(run_dir) == 2000
    cut = episodes[episodes.total_step == 1281]
    assert len(cut) == 8 and (cut.episode_length < 10).all() and (cut.task_id == 1).all()
    assert not read_eval(run_dir).duplicated(["total_step", "task_id", "split"]).any()
    steps = read_eval(diag_full).total_step.unique().tolist()
    assert read_eval(run_dir).total_step.unique().tolist() == steps  # the grid held


def test_procgen_resume_is_bit_identical_after_a_mid_task_kill(tmp_path):
    pytest.importorskip("procgen")
    job = dict(suite="Procgen6", method="ft", learner="ppo", preset="small", seed=1, num_envs=4)
    overrides = {
        "games": ("bigfish", "fruitbot"),
        "steps_per_task": 512,
        "eval_every": 512,
        "eval_episodes": 1,
        "checkpoint_every": 192,  # rollout 4 x 16 = 64: checkpoints at 192, 384, 576, ...
        "report": False,
    }
    full = tmp_path / "full"
    run_main_job(run_dir=full, resume=False, overrides=dict(overrides), **job)
    cut = tmp_path / "cut"
    _killed_run(cut, job, overrides, kill_at=700)  # last checkpoint 576, mid fruitbot
    a, b = read_eval(full).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert a.equals(b)
    assert read_episodes(full).equals(read_episodes(cut))
    assert _steps_in_episodes(full) == _steps_in_episodes(cut) == _total_steps(full)


TORCH_FAMILIES = {
    "Diagnostic": (DIAG, DIAG_OVERRIDES),
    "Procgen6": (
        dict(suite="Procgen6", method="ft", learner="ppo", preset="small", seed=1, num_envs=4),
        {"games": ("bigfish", "fruitbot"), "steps_per_task": 256, "eval_every": 256,
         "eval_episodes": 1, "eval_max_episode_steps": 40, "checkpoint_every": 128,
         "report": False},
    ),
    "Atari6": (
        dict(suite="Atari6", method="ft", learner="ppo", preset="small", seed=2, num_envs=2),
        {"games": ("SpaceInvaders", "BeamRider"), "steps_per_task": 128, "cycles": 1,
         "eval_every": 128, "eval_episodes": 1, "eval_max_episode_steps": 30,
         "checkpoint_every": 64, "report": False},
    ),
    "MiniHack15": (
        dict(suite="MiniHack15", method="ft", learner="ppo", preset="small", seed=4, num_envs=2),
        {"pairs": [7, 14], "steps_per_task": 128, "cycles": 1, "eval_every": 128,
         "eval_episodes": 1, "eval_max_episode_steps": 30, "checkpoint_every": 64,
         "report": False},
    ),
}  # fmt: skip
SIMULATORS = {"Procgen6": "procgen", "Atari6": "ale_py", "MiniHack15": "minihack"}


@pytest.mark.parametrize("family", list(TORCH_FAMILIES))
def test_a_kill_inside_the_first_checkpoint_write_resumes_from_the_start(family, tmp_path, capsys):
    """Killed between the first checkpoint's ``.pt`` and its ``.sha256``: ``--resume``
    sets the unfinished file aside with one warning line, cuts the logs back to the
    start and ends with the eval rows and episodes of the uninterrupted run."""
    if family in SIMULATORS:
        pytest.importorskip(SIMULATORS[family])
    job, overrides = TORCH_FAMILIES[family]
    full, cut = tmp_path / "full", tmp_path / "cut"
    run_main_job(run_dir=full, resume=False, overrides=dict(overrides), **job)
    unfinished = kill_inside_first_checkpoint(cut, job, overrides)
    assert unfinished.parent == checkpoint.checkpoint_dir(cut)
    assert len(read_eval(cut)) > 0  # rows the resumed run must cut and write again
    capsys.readouterr()
    run_main_job(run_dir=cut, resume=True, overrides=dict(overrides), **job)
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("warning:")]
    assert len(warnings) == 1 and str(unfinished) in warnings[0]
    assert (
        "an unfinished write" in warnings[0] and "starts again from its first step" in warnings[0]
    )
    assert unfinished.with_name(unfinished.name + ".unfinished").exists()
    a, b = read_eval(full).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert a.equals(b)
    assert read_episodes(full).equals(read_episodes(cut))
