"""MEAL's JAX IPPO (``ppo-jax``) through the one main job: the default learner, the run
directory, exact resume after a kill, several seeds in one program, and bad input refused
before anything compiles.

Every run shares one tiny configuration (MEAL-2, two generated easy kitchens, 4 envs x
2 agents, updates of 4 envs x 16 steps, 512 env steps per task, 100-step episodes).
"""

from __future__ import annotations

import json
import pickle
import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("meal")

from cl_suites.cli import main
from cl_suites.job.jax import entry as jax_options
from cl_suites.job.jax import train as jax_job
from cl_suites.job.jax.checkpoint import (
    common_checkpoint,
    jax_checkpoint_path,
    load_jax_checkpoint,
    read_meta,
    save_jax_checkpoint,
)
from cl_suites.job.main_job import resolve_job, run_main_job, run_seed_group
from cl_suites.rundir.progress import read_progress
from cl_suites.rundir.runlog import (
    read_episode_soups,
    read_episodes,
    read_eval,
    read_heterogeneity,
    read_metadata,
    read_remedy,
)
from tests.helpers.kill_drills import (
    jax_run,
    jax_run_dies_after_checkpoint,
    kill_inside_first_checkpoint,
)

pytestmark = pytest.mark.usefixtures("compile_cache")

JOB = dict(suite="MEAL-2", method="ft", learner=None, preset="small", num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
    # shaping held near 1 over these 512-step tasks, as before issue 40's default of half
    # the budget: the seed-vmapping test's tolerances (rounding of vmapped reductions that
    # Adam amplifies on near-zero gradients) were measured with dense rewards
    "shaping_horizon": 2_500_000,
}


def _run(tmp_path_factory, name, seed=0, kill_at=None, run_dir=None, **extra):
    """A MEAL-2 run of ``seed`` (kitchens of seed 0); ``kill_at``: killed (as by kill -9)
    right after the first checkpoint at or after that step."""
    run_dir = run_dir or tmp_path_factory.mktemp(name)
    return jax_run(run_dir, JOB, {**OVERRIDES, "layout_seed": 0, **extra}, seed, kill_at)


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Seeds 0 and 3 in one program (``--seeds 0 3``), with evaluation videos and reports."""
    run_dir = tmp_path_factory.mktemp("group")
    overrides = {**OVERRIDES, "capture_video": True, "video_length": 3, "report": True}
    run_main_job(**JOB, seed=0, run_dir=run_dir, resume=False, overrides=overrides,
                 seeds=[0, 3])  # fmt: skip
    return run_dir


@pytest.fixture(scope="module")
def seed3(tmp_path_factory):
    """Seed 3 alone, uninterrupted."""
    return _run(tmp_path_factory, "seed3", seed=3)


def _checkpoint(run_dir):
    return load_jax_checkpoint(jax_checkpoint_path(run_dir))[0]


def test_ppo_jax_is_meals_default_learner_and_ppo_the_torch_one():
    spec = resolve_job(**JOB, overrides={}, seed=0)
    assert spec.learner == "ppo-jax"
    torch = resolve_job(**{**JOB, "learner": "ppo"}, overrides={}, seed=0)
    assert torch.learner == "ppo" and torch.hp["learner"]["n_steps"] == 16
    # one preset table: the JAX config carries the torch learner's resolved values
    values = spec.hp["learner"]
    assert values["num_steps"] == 16 and values["num_envs"] == 4
    assert values["update_epochs"] == torch.hp["learner"]["n_epochs"]
    assert values["clip_eps"] == torch.hp["learner"]["clip_range"]
    assert values["learning_rate"] == torch.hp["learner"]["learning_rate"]
    assert values["advantage_normalization"] == "none"  # small; carried from the torch preset
    assert torch.hp["learner"]["advantage_normalization"] == "none"
    assert values["hidden_sizes"] == torch.hp["net_arch"] == [64]
    assert values["cl_method"] == "ft"
    jax_options.make_config(values)  # every value is a field of the learner's config
    paper = resolve_job(**{**JOB, "preset": "paper", "num_envs": None}, overrides={}, seed=0)
    assert (paper.hp["learner"]["num_steps"], paper.num_envs) == (128, 16)
    assert paper.hp["learner"]["anneal_lr"] is True  # Table 4
    assert paper.hp["learner"]["advantage_normalization"] == "minibatch-biased"  # IPPO_CL.py
    assert paper.hp["learner"]["hidden_sizes"] == [128, 128]
    ewc = resolve_job(**{**JOB, "method": "ewc", "preset": "paper"}, overrides={}, seed=0)
    assert ewc.hp["learner"]["reg_coef"] == 1e11 and ewc.hp["learner"]["cl_method"] == "ewc"
    set_jax = resolve_job(**JOB, overrides={"clip_eps": 0.1, "steps_per_task": 640}, seed=0)
    assert set_jax.hp["learner"]["clip_eps"] == 0.1
    assert set_jax.suite_kwargs["steps_per_task"] == 640


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_tiny_run_writes_the_usual_run_dir_and_report(group, tmp_path):
    run = group / "seed-0"
    frame = read_eval(run)
    assert sorted(set(frame.total_step)) == [256, 512, 768, 1024]  # every 256 of each task
    assert (frame.split == "train").all() and (frame.episodes == 2).all()
    assert (frame.mean_return * frame.episodes % 20 == 0).all()  # 20 per soup
    meta = read_metadata(run)
    assert meta["learner"] == "ppo-jax" and meta["hyperparameters"]["learner"]["num_steps"] == 16
    assert meta["evaluation"] == {
        "at_start": False,
        "per_task": True,
        "deterministic": True,
        "max_episode_steps": None,
        "task_ends": True,  # every task's end is an evaluation point (issue 55)
        "cadence_note": None,  # MEAL's cadence already falls on every task's end
    }
    assert meta["seed"] == 0 and meta["env_kwargs"]["layout_seed"] == 0
    # 100-step episodes of 4 envs, one row per env; a task's envs start at its first step;
    # the episodes running at a task's end (28 of 128 steps per env) are logged at the
    # switch under the old task, as the torch job logs them
    episodes = read_episodes(run)
    assert sorted(set(episodes.total_step)) == [400, 512, 512 + 400, 1024]
    by_step = episodes.groupby("total_step")
    assert by_step.task_id.first().tolist() == [0, 0, 1, 1]
    assert by_step.episode_length.unique().tolist() == [[100], [28], [100], [28]]
    assert (by_step.size() == 4).all() and (episodes.episode_return >= 0).all()
    # MEAL's training signal: the soups of the same episodes (episode_soups.csv)
    soups = read_episode_soups(run)
    assert soups[["total_step", "task_id", "episode_length"]].equals(
        episodes[["total_step", "task_id", "episode_length"]]
    )
    assert (soups.soups >= 0).all() and (soups.soups == soups.soups.round()).all()
    # the role-heterogeneity index of every evaluation (heterogeneity.csv), eval.csv as is
    het = read_heterogeneity(run)
    assert het[["total_step", "task_id"]].equals(frame[["total_step", "task_id"]])
    assert het.heterogeneity.between(0, 1).all() and (het.envs == 2).all()
    progress = read_progress(run)
    assert progress["state"] == "finished" and progress["total_step"] == 1024
    assert progress["compile_s"] > 0 and progress["steps_per_s"] > 0
    arrays, ckpt = load_jax_checkpoint(jax_checkpoint_path(run))  # no pickle in it
    assert ckpt["finished"] and ckpt["total_step"] == 1024 and arrays
    videos = sorted(p.name for p in (run / "videos").glob("*.mp4"))  # the recorder's cadence
    assert videos == [f"eval-step{s:09d}-task{t:02d}-train.mp4" for s in (256, 512, 1024)
                      for t in (0, 1)]  # fmt: skip
    assert all((run / "videos" / v).with_suffix(".png").is_file() for v in videos)  # posters
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert any((tmp_path / "report").iterdir())


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_a_seeds_run_leaves_one_report_of_all_seeds_and_report_takes_its_parent(group, tmp_path):
    """Issue 29 item 2: ``run --seeds`` writes ``RUN_DIR/report`` over both seeds (as a
    sweep does), and ``cl-suites report RUN_DIR`` takes the parent of the seed runs."""
    assert sorted(p.name for p in group.iterdir()) == ["report", "seed-0", "seed-3"]
    assert (group / "seed-0" / "report" / "summary.csv").is_file()  # each seed's own too
    summary = pd.read_csv(group / "report" / "summary.csv")
    assert summary[["suite", "method", "seeds"]].values.tolist() == [["MEAL-2", "ft", 2]]
    assert main(["report", str(group), "--out", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "summary.csv")
    pd.testing.assert_frame_equal(again, summary)
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert main(["report", str(empty), "--out", str(tmp_path / "none")]) == 2


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_seeds_in_one_program_equal_single_seed_runs(group, seed3):
    """Seed 3 of ``--seeds 0 3`` equals ``--seed 3`` on the same kitchens (layout_seed 0)."""
    mine = group / "seed-3"
    assert read_metadata(mine)["seed"] == 3
    assert read_metadata(mine)["env_kwargs"]["layout_seed"] == 0
    a, b = (read_eval(d).drop(columns="wall_time") for d in (seed3, mine))
    assert len(a) == len(b) == 8
    np.testing.assert_allclose(a.mean_return, b.mean_return, atol=1e-6)
    np.testing.assert_allclose(read_episodes(seed3).episode_return,
                               read_episodes(mine).episode_return, rtol=1e-5)  # fmt: skip
    # A vmapped program rounds its reductions differently, and Adam turns the last bits of
    # a near-zero gradient into a step of +-lr: after 16 updates all but a few weights agree
    # to 1e-4, none by more than 2 lr per update (measured: 0.04% of the weights differ,
    # by at most 0.0045). Counters and PRNG keys are equal.
    x, y = _checkpoint(seed3), _checkpoint(mine)
    assert x.keys() == y.keys()
    lr, updates = 3e-3, 16
    diff = np.concatenate([np.abs(x[k] - y[k]).ravel() for k in x if k.startswith(".params")])
    assert np.mean(diff > 1e-4) < 1e-3 and diff.max() <= 2 * lr * updates
    for key in (".rng", ".seed", ".task", ".update", ".t"):
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    z = _checkpoint(group / "seed-0")  # the two seeds did train differently
    assert any(not np.array_equal(x[k], z[k]) for k in x if "params" in k)


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_wandb_offline_gets_each_seeds_eval_and_episode_returns(tmp_path, monkeypatch):
    """``--wandb`` with ppo-jax: the run log's scalars (as TensorBoard gets them) go to one
    W&B run per seed's run dir, two runs in one process (``--seeds 0 3``), offline."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    overrides = {**OVERRIDES, "layout_seed": 0, "wandb": "cl-suites-test"}
    run_main_job(**JOB, seed=0, run_dir=tmp_path, resume=False, overrides=overrides,
                 seeds=[0, 3])  # fmt: skip
    # W&B's service process writes the offline files; at process exit it is torn down and
    # flushes them: do that here (otherwise the file may still hold only its header)
    wandb.teardown()
    ids = set()
    for seed in (0, 3):
        run = tmp_path / f"seed-{seed}"
        run_id = (run / "wandb" / "run-id").read_text().strip()
        ids.add(run_id)
        (offline,) = (run / "wandb").glob(f"offline-run-*-{run_id}")
        records = (offline / f"run-{run_id}.wandb").read_bytes()  # protobuf records
        for key in (b"eval/0-", b"eval/1-", b"train/episode_return/0", b"global_step"):
            assert key in records, (seed, key)
    assert len(ids) == 2


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_resume_after_a_kill_reproduces_the_uninterrupted_run(seed3, tmp_path_factory):
    cut = _run(tmp_path_factory, "cut", seed=3, kill_at=640)  # after the checkpoint at 640
    assert read_eval(cut).total_step.max() == 512
    overrides = {**OVERRIDES, "layout_seed": 0}
    run_main_job(**JOB, seed=3, run_dir=cut, resume=True, overrides=overrides)
    a, b = (read_eval(d).drop(columns="wall_time") for d in (seed3, cut))
    assert not b.duplicated(["total_step", "task_id"]).any()
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(a, b)
    pd_testing.assert_frame_equal(read_episodes(seed3), read_episodes(cut))
    full, again = _checkpoint(seed3), _checkpoint(cut)
    assert full.keys() == again.keys()
    for key in full:
        np.testing.assert_array_equal(full[key], again[key], err_msg=key)


def test_several_seeds_resume_from_their_newest_common_checkpoint(tmp_path):
    """A kill between two seeds' checkpoint files leaves seeds one checkpoint apart; the
    resume takes the step every seed has. The files hold plain arrays and JSON."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    for step in (128, 256):
        for d in dirs:
            save_jax_checkpoint(d, {"w": np.full(3, step)}, {"total_step": step})
    save_jax_checkpoint(dirs[0], {"w": np.full(3, 384)}, {"total_step": 384})  # killed here
    files = common_checkpoint(dirs)
    assert [read_meta(f)["total_step"] for f in files] == [256, 256]
    assert [load_jax_checkpoint(f)[0]["w"][0] for f in files] == [256, 256]
    with np.load(jax_checkpoint_path(dirs[0]), allow_pickle=False) as data:
        assert sorted(data.files) == ["learner/w", "meta"]
    # a run without any checkpoint shares none: the runs start over, the others' files
    # set aside (a first checkpoint write killed between two seeds' files)
    assert common_checkpoint([tmp_path / "a", tmp_path / "none"]) is None
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoint").iterdir()) == [
        "jax_state.npz.unfinished",
        "jax_state.prev.npz.unfinished",
    ]


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_a_kill_inside_the_first_checkpoint_write_resumes_from_the_start(seed3, tmp_path, capsys):
    """Issue 29 item 3, ppo-jax: killed (-9) inside the first checkpoint write, the run has
    no checkpoint; ``--resume`` sets the half-written file aside with one warning line,
    starts again from the first step and ends with the uninterrupted run's rows."""
    job = {**JOB, "seed": 3}
    overrides = {**OVERRIDES, "layout_seed": 0}
    cut = tmp_path / "cut"
    unfinished = kill_inside_first_checkpoint(cut, job, overrides)
    assert unfinished.parent == jax_checkpoint_path(cut).parent
    assert not jax_checkpoint_path(cut).exists()
    capsys.readouterr()
    run_main_job(run_dir=cut, resume=True, overrides=overrides, **job)
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("warning:")]
    assert len(warnings) == 1 and unfinished.name in warnings[0]
    assert "start again from their first step" in warnings[0]
    assert unfinished.with_name(unfinished.name + ".unfinished").exists()
    a, b = (read_eval(d).drop(columns="wall_time") for d in (seed3, cut))
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(read_episodes(seed3), read_episodes(cut))


BAD_CLI = [
    (["--seeds", "1", "2", "1"], r"seeds \[1, 2, 1\] repeat 1; give each seed once"),
    (["--seeds", "0", "-1"], r"seeds must be integers in \[0, 4294967295\], got '-1'"),
    (["--seeds", "0", "1", "--seed", "2"], r"give --seed \(2\) or --seeds \(0 1\), not both"),
    (
        ["--learner", "vtrace"],
        r"learner 'vtrace' is not available for MEAL-2; valid: ppo-jax, mappo-jax, ppo",
    ),
    (["--set", "n_steps=8"], r"option 'n_steps' belongs to the torch learner 'ppo'.*num_steps"),
    (["--set", "torch_threads=2"], r"'torch_threads' belong to the torch learner 'ppo'"),
    (["--learner", "ppo", "--set", "clip_eps=0.1"], r"'clip_eps' belong to learner 'ppo-jax'"),
    (["--learner", "ppo", "--seeds", "0", "1"], r"several seeds in one program need .*'ppo'"),
    (
        ["--set", "activation=gelu"],
        r"activation must be one of 'relu', 'tanh', 'crelu', got 'gelu'",
    ),
    # mappo-jax: a method it does not take, a torch option, a remedy, a bad own option
    (["--learner", "mappo-jax", "--method", "agem"], r"mappo-jax.*'agem'.*ft, ewc, online-ewc"),
    (
        ["--learner", "mappo-jax", "--set", "n_steps=8"],
        r"option 'n_steps' belongs to the torch learner 'ppo', not to learner 'mappo-jax'",
    ),
    (["--learner", "mappo-jax", "--method", "ewc+redo"], r"mappo-jax takes no plasticity remedy"),
    (["--learner", "mappo-jax", "--set", "importance_stride=0"], r"importance_stride"),
    (["--learner", "mappo-jax", "--set", "buffer_size=8"], r"buffer_size"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_CLI)
def test_bad_input_is_one_line_before_any_compile(argv, message, tmp_path, capsys, monkeypatch):
    from cl_suites.meal import engine

    def no_compile(*args, **kwargs):
        raise AssertionError("something was built")

    monkeypatch.setattr(engine.MealEngine, "__init__", no_compile)
    monkeypatch.setattr(jax_job, "run_jax", no_compile)
    run_dir = tmp_path / "run"
    code = main(["run", "--suite", "MEAL-2", "--preset", "small", "--run-dir", str(run_dir), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.search(message, " ".join(err.split())), err
    assert not run_dir.exists()


def test_learners_not_available_for_the_suite_are_named():
    message = r"learner 'ppo-jax' is not available for Diagnostic; valid: ppo, vtrace"
    with pytest.raises(ValueError, match=message):
        resolve_job(
            suite="Diagnostic", method="ft", learner="ppo-jax", preset="small", num_envs=None,
            overrides={},
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"several seeds in one program need a MEAL suite"):
        run_seed_group(
            suite="Diagnostic", method="ft", preset="small", seeds=[0, 1], run_dirs=[],
            resume=False, num_envs=None, overrides={},
        )  # fmt: skip


def test_print_config_of_several_seeds(capsys):
    argv = ["run", "--suite", "MEAL-2", "--preset", "small", "--seeds", "2", "5", "--print-config"]
    assert main(argv) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["seeds"] == [2, 5] and config["learner"] == "ppo-jax"
    assert config["run_dirs"] == ["runs/MEAL-2-ft-seeds/seed-2", "runs/MEAL-2-ft-seeds/seed-5"]
    assert config["suite_kwargs"]["layout_seed"] == 2  # the first seed's kitchens


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_resume_takes_a_seeds_run_from_its_directory_alone(group, capsys):
    """``--resume --run-dir DIR`` of a ``--seeds`` run: the seeds are its ``seed-<s>``
    directories, the rest of the command their ``metadata.json``."""
    assert main(["run", "--resume", "--run-dir", str(group), "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert (config["learner"], config["seeds"]) == ("ppo-jax", [0, 3])
    assert config["suite"] == "CLSuite/MEAL-2-v0"  # the run's suite_id
    assert config["run_dirs"] == [str(group / "seed-0"), str(group / "seed-3")]
    assert config["suite_kwargs"]["layout_seed"] == 0  # the group's kitchens


def test_seed_runs_that_disagree_are_not_resumed_as_one(tmp_path, capsys):
    for seed, method in ((1, "ft"), (2, "ewc")):
        (tmp_path / f"seed-{seed}").mkdir()
        metadata = {"suite_id": "MEAL-2", "method": method, "learner": "ppo-jax",
                    "preset": "small", "seed": seed, "request": {"overrides": {}}}  # fmt: skip
        (tmp_path / f"seed-{seed}" / "metadata.json").write_text(json.dumps(metadata))
    assert main(["run", "--resume", "--run-dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"cannot resume {tmp_path}: its seed runs disagree on 'method'" in err
    assert "(seed-1: 'ft', seed-2: 'ewc'); resume each seed directory on its own" in err


def test_sweep_trains_the_seeds_of_one_meal_configuration_together():
    from cl_suites.sweep.grid import SweepSpec, seed_groups

    fixed = SweepSpec(
        suites=("MEAL-2", "Diagnostic"), methods=("ft",), seeds=(0, 1, 2),
        overrides={"layout_seed": 0},
    )  # fmt: skip
    groups = [[r.name for r in g] for g in seed_groups(fixed.runs())]
    assert groups[0] == ["MEAL-2-ft-ppo-jax-s0", "MEAL-2-ft-ppo-jax-s1", "MEAL-2-ft-ppo-jax-s2"]
    assert groups[1:] == [[f"Diagnostic-ft-ppo-s{s}"] for s in (0, 1, 2)]
    own = SweepSpec(suites=("MEAL-2",), methods=("ft",), seeds=(0, 1))  # kitchens per seed
    assert [len(g) for g in seed_groups(own.runs())] == [1, 1]


def test_episodes_running_at_a_task_end_are_logged_as_cut():
    """One row per env with the return and length so far, at the switch step, under the
    old task (``episodes.csv`` columns); nothing when the episodes had just ended."""
    state = type("State", (), {})()
    state.t = np.array([28, 0])
    state.ep_return = np.array([[3.0, 0.0, 6.5], [1.0, 1.0, 1.0]], np.float32)
    rows = jax_job.cut_episode_rows(state, 0, 512, 0)
    assert rows == [
        {"total_step": 512, "task_id": 0, "episode_return": r, "episode_length": 28}
        for r in (3.0, 0.0, 6.5)
    ]
    assert jax_job.cut_episode_rows(state, 1, 512, 0) == []


def test_eval_policy_acts_per_task_and_samples_from_its_own_keys():
    """The evaluator's rows mix tasks: each task's rows go to ``act`` with that task id;
    sampled actions use keys from the eval point's seed and the call index."""

    seen = []

    class Learner:
        def act(self, params, obs, task_id, greedy, key=None):
            seen.append((task_id, len(obs), None if key is None else np.asarray(key)))
            return np.full(len(obs), task_id + (0 if greedy else 10))

    rows, tasks = np.zeros((6, 2)), np.array([1, 1, 0, 0, 0, 1])
    greedy = jax_job.eval_policy(Learner(), None, greedy=True)
    assert greedy(rows, tasks).tolist() == [1, 1, 0, 0, 0, 1]
    assert [(t, n, k) for t, n, k in seen] == [(0, 3, None), (1, 3, None)]
    seen.clear()
    sampled = jax_job.eval_policy(Learner(), None, greedy=False, key_seed=5)
    assert sampled(rows, tasks).tolist() == [11, 11, 10, 10, 10, 11]
    sampled(rows, tasks)
    again = jax_job.eval_policy(Learner(), None, greedy=False, key_seed=5)
    again(rows, tasks)
    keys = [np.asarray(k).tolist() for _, _, k in seen]
    assert keys[0] != keys[2]  # a new key per call
    assert keys[4:] == keys[:2]  # the same seed replays the same keys


def test_sweep_worker_runs_a_seed_group_once_and_records_every_run(tmp_path, monkeypatch):
    from cl_suites.job import main_job
    from cl_suites.sweep import worker
    from cl_suites.sweep.grid import SweepSpec, group_request, seed_groups
    from cl_suites.sweep.sweep_dir import SweepDir
    from cl_suites.sweep.worker import execute_group

    calls = []

    def fake_run(specs, seeds, run_dirs, resume):
        calls.append((specs, seeds, run_dirs, resume))
        for d in run_dirs:
            d.mkdir(parents=True)

    monkeypatch.setattr(main_job, "run_resolved", fake_run)
    monkeypatch.setattr(worker, "_ray_context", lambda: {})  # no Ray import here
    spec = SweepSpec(suites=("MEAL-2",), methods=("ft",), seeds=(4, 1), preset="small",
                     overrides={"layout_seed": 0})  # fmt: skip
    (group,) = seed_groups(spec.runs())
    names = [r.name for r in group]
    request = group_request(group)
    assert request.seeds == (4, 1)  # the request, pickled to the worker as it is
    assert pickle.loads(pickle.dumps(request)) == request
    out = execute_group(request, str(tmp_path), names, "inv", 1.0, 0.0)
    assert [o["state"] for o in out] == ["finished", "finished"]
    ((specs, seeds, run_dirs, resume),) = calls  # one program for both seeds
    assert seeds == (4, 1) and len(specs) == 2 and resume is False
    assert run_dirs == [tmp_path / "runs" / n for n in names]
    # a torch option; JAX runs on JAX_PLATFORMS
    assert "device" not in specs[0].request["overrides"]
    sdir = SweepDir(tmp_path)
    assert [sdir.read_status(n)["state"] for n in names] == ["finished", "finished"]
    assert names[0] in sdir.log_file(names[1]).read_text()  # points at the group's log


def test_resuming_several_seeds_needs_one_started_run_dir(tmp_path):
    from cl_suites.errors import CLIError
    from cl_suites.rundir.layout import check_run_dirs as _check_run_dirs

    dirs = [tmp_path / "seed-0", tmp_path / "seed-1"]
    with pytest.raises(CLIError, match="cannot resume .*seed-0: the directory does not exist"):
        _check_run_dirs(dirs, resume=True)
    dirs[0].mkdir()
    (dirs[0] / "metadata.json").write_text(json.dumps({"suite_id": "CLSuite/MEAL-2-v0"}))
    _check_run_dirs(dirs, resume=True)  # seed-1 had not started: it starts with the rest
    with pytest.raises(CLIError, match="seed-0 already holds a run"):
        _check_run_dirs(dirs, resume=False)


def test_seeds_without_layout_seed_say_they_share_one_set_of_kitchens(
    monkeypatch, tmp_path, capsys
):
    """``--seeds`` trains every seed on the first seed's kitchens unless ``layout_seed`` is
    given; the run says so before training (MEAL's protocol gives each seed its own)."""
    from cl_suites.cli import run as run_command

    monkeypatch.setattr(run_command, "start", lambda *args: None)  # resolve and check only
    run = ["run", "--suite", "MEAL-2", "--method", "ft", "--preset", "small", "--seeds", "4", "7"]
    assert main([*run, "--run-dir", str(tmp_path / "a")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "seeds 4 7 train in one program on one set of kitchens (layout_seed=4" in err
    assert main([*run, "--set", "layout_seed=9", "--run-dir", str(tmp_path / "b")]) == 0
    assert "one set of kitchens" not in capsys.readouterr().err


# -- plasticity remedies (issue 54) -----------------------------------------------------
REMEDY_RUNS = {
    "redo": {"redo_every": 1, "redo_tau": 0.3},  # recycles after every update
    "cbp": {"cbp_maturity": 20, "cbp_replacement_rate": 0.01},  # mature after 20 steps
    "shrink-perturb": {"snp_noise": "fresh", "snp_shrink": 0.99},  # a fresh draw per step
}


def _remedy_run(tmp_path_factory, method, seed=3, kill_at=None, seeds=None, run_dir=None):
    """A MEAL-2 run (kitchens of seed 0) with a remedy; ``kill_at`` as :func:`_run`."""
    run_dir = run_dir or tmp_path_factory.mktemp(f"{method}{seed}")
    overrides = {**OVERRIDES, "layout_seed": 0, **REMEDY_RUNS[method]}
    kwargs = dict(**{**JOB, "method": method}, seed=seed, run_dir=run_dir, overrides=overrides)
    if seeds is not None:
        kwargs["seeds"] = seeds
    if kill_at is None:
        run_main_job(resume=False, **kwargs)
        return run_dir
    with jax_run_dies_after_checkpoint(kill_at):
        run_main_job(resume=False, **kwargs)
    run_main_job(resume=True, **kwargs)
    return run_dir


@pytest.fixture(scope="module")
def cbp3(tmp_path_factory):
    """Seed 3 alone with continual backprop, uninterrupted."""
    return _remedy_run(tmp_path_factory, "cbp")


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
@pytest.mark.parametrize("method", ["redo", "cbp"])
def test_a_remedy_run_resumes_after_a_kill_to_the_uninterrupted_run(method, cbp3, tmp_path_factory):
    """Issue 54: the remedy's state (CBP's utilities, ages and carried fraction) is in the
    checkpoint; a run killed after the checkpoint at 640 and resumed is the uninterrupted
    one, bit for bit; the remedy did act (its checkpointed state and parameters)."""
    full = cbp3 if method == "cbp" else _remedy_run(tmp_path_factory, method)
    cut = _remedy_run(tmp_path_factory, method, kill_at=640)
    a, b = (read_eval(d).drop(columns="wall_time") for d in (full, cut))
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(read_episodes(full), read_episodes(cut))
    pd.testing.assert_frame_equal(read_remedy(full), read_remedy(cut))  # nothing twice
    x, y = _checkpoint(full), _checkpoint(cut)
    assert x.keys() == y.keys()
    for key in x:
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    meta = read_metadata(full)["hyperparameters"]["learner"]["remedy"]
    assert meta["remedy"] == method and meta == {**meta, **REMEDY_RUNS[method]}
    acts = read_remedy(full)
    event = {"redo": "recycled", "cbp": "replaced"}[method]
    assert set(acts.event) == {event} and acts.units.sum() > 0
    assert set(acts.layer) == {"actor_dense1", "critic_dense1"}  # the small preset: [64]
    if method == "redo":  # redo_every=1: after every update (8 per task), each layer a row
        assert sorted(set(acts["update"])) == list(range(1, 9)) and len(acts) == 2 * 16
    else:
        ages = np.concatenate([x[k].ravel() for k in x if k.startswith(".remedy.cbp.age")])
        assert ages.max() > 20 and (ages < ages.max()).any()  # units matured; some replaced
        assert (acts.groupby(["total_step", "update"]).units.sum() > 0).all()


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_seeds_in_one_program_with_a_remedy_equal_single_seed_runs(tmp_path_factory):
    """``--seeds 0 3 --method shrink-perturb`` (a fresh draw after every optimizer step,
    from each seed's own keys): seed 3 equals ``--seed 3`` to the tolerance of
    :func:`test_seeds_in_one_program_equal_single_seed_runs`. Not continual backprop: its
    choice of units amplifies the vmapped program's rounding (measured on this run: the
    same number of units replaced at every step, other units from the first task on)."""
    alone = _remedy_run(tmp_path_factory, "shrink-perturb")
    group = _remedy_run(tmp_path_factory, "shrink-perturb", seed=0, seeds=[0, 3])
    mine = group / "seed-3"
    a, b = (read_eval(d).drop(columns="wall_time") for d in (alone, mine))
    np.testing.assert_allclose(a.mean_return, b.mean_return, atol=1e-6)
    x, y = _checkpoint(alone), _checkpoint(mine)
    assert x.keys() == y.keys()
    lr, updates = 3e-3, 16
    diff = np.concatenate([np.abs(x[k] - y[k]).ravel() for k in x if k.startswith(".params")])
    assert np.mean(diff > 1e-4) < 1e-3 and diff.max() <= 2 * lr * updates
    for key in (".rng", ".seed", ".task", ".update", ".t"):
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    z = _checkpoint(group / "seed-0")
    assert any(not np.array_equal(x[k], z[k]) for k in x if "params" in k)
