"""MEAL's JAX IPPO (``ppo-jax``) through the one main job: the default learner, the run
directory, exact resume after a kill, several seeds in one program, and bad input refused
before anything compiles.

Every run shares one tiny configuration (MEAL-2, two generated easy kitchens, 4 envs x
2 agents, updates of 4 envs x 16 steps, 512 env steps per task, 100-step episodes).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("meal")

from baselines_sb3 import jax_job, jax_options
from baselines_sb3.jax_checkpoint import (
    common_checkpoint,
    jax_checkpoint_path,
    load_jax_checkpoint,
    read_meta,
    save_jax_checkpoint,
)
from baselines_sb3.main_job import resolve_job, run_main_job, run_seed_group
from cl_suites.cli import main
from cl_suites.core.progress import read_progress
from cl_suites.core.runlog import read_episodes, read_eval, read_metadata

JOB = dict(suite="MEAL-2", method="ft", learner=None, preset="small", num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
}


@pytest.fixture(scope="module", autouse=True)
def learner_api():
    """The real ``baselines_jax`` when it is installed, else the test fake."""
    try:
        import baselines_jax  # noqa: F401
    except ImportError:
        import fake_jax_learner

        previous = jax_options.set_jax_api(fake_jax_learner)
        yield fake_jax_learner
        jax_options.set_jax_api(previous)
        return
    yield jax_options.jax_api()


def _run(tmp_path_factory, name, seed=0, kill_at=None, **extra):
    run_dir = tmp_path_factory.mktemp(name)
    kwargs = dict(**JOB, seed=seed, run_dir=run_dir, overrides={**OVERRIDES, **extra})
    if kill_at is None:
        run_main_job(resume=False, **kwargs)
        return run_dir
    original = jax_job._Loop.train_segment

    def killer(self, seg):  # a kill -9 after the chunk that passes kill_at
        save = self.save

        def save_then_maybe_die(finished=False):
            save(finished)
            if self.step >= kill_at:
                raise KeyboardInterrupt("simulated kill")

        self.save = save_then_maybe_die
        original(self, seg)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax_job._Loop, "train_segment", killer)
        with pytest.raises(KeyboardInterrupt):
            run_main_job(resume=False, **kwargs)
    return run_dir


@pytest.fixture(scope="module")
def run0(tmp_path_factory):
    return _run(tmp_path_factory, "seed0")


def test_ppo_jax_is_meals_default_learner_and_ppo_the_torch_one(learner_api):
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
    assert values["cl_method"] == "ft"
    jax_options.make_config(values)  # every value is a field of the learner's config
    paper = resolve_job(**{**JOB, "preset": "paper", "num_envs": None}, overrides={}, seed=0)
    assert (paper.hp["learner"]["num_steps"], paper.num_envs) == (128, 16)
    assert paper.hp["learner"]["anneal_lr"] is True  # Table 4
    set_jax = resolve_job(**JOB, overrides={"clip_eps": 0.1, "steps_per_task": 640}, seed=0)
    assert set_jax.hp["learner"]["clip_eps"] == 0.1
    assert set_jax.suite_kwargs["steps_per_task"] == 640


def test_tiny_run_writes_the_usual_run_dir_and_report(run0, tmp_path):
    frame = read_eval(run0)
    assert sorted(set(frame.total_step)) == [256, 512, 768, 1024]  # every 256 of each task
    assert (frame.split == "train").all() and (frame.episodes == 2).all()
    assert (frame.mean_return % 20 == 0).all()  # MEAL's evaluator: 20 per soup
    meta = read_metadata(run0)
    assert meta["learner"] == "ppo-jax" and meta["hyperparameters"]["learner"]["num_steps"] == 16
    assert meta["evaluation"] == {"at_start": False, "per_task": True, "deterministic": True}
    episodes = read_episodes(run0)  # 100-step episodes of 4 envs, one row per env
    assert len(episodes) > 0 and set(episodes.task_id) == {0, 1}
    assert (episodes.total_step % 4 == 0).all() and episodes.total_step.max() <= 1024
    progress = read_progress(run0)
    assert progress["state"] == "finished" and progress["total_step"] == 1024
    assert progress["compile_s"] >= 0 and progress["steps_per_s"] > 0
    arrays, ckpt = load_jax_checkpoint(jax_checkpoint_path(run0))  # no pickle in it
    assert ckpt["finished"] and ckpt["total_step"] == 1024 and arrays
    assert main(["report", str(run0), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "index.html").exists() or any((tmp_path / "report").iterdir())


def test_resume_after_a_kill_reproduces_the_uninterrupted_run(run0, tmp_path_factory):
    cut = _run(tmp_path_factory, "cut", kill_at=640)  # killed after the checkpoint at 640
    assert read_eval(cut).total_step.max() == 512
    run_main_job(**JOB, seed=0, run_dir=cut, resume=True, overrides=dict(OVERRIDES))
    a, b = (read_eval(d).drop(columns="wall_time") for d in (run0, cut))
    assert not b.duplicated(["total_step", "task_id"]).any()
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(a, b)
    pd_testing.assert_frame_equal(read_episodes(run0), read_episodes(cut))
    full, _ = load_jax_checkpoint(jax_checkpoint_path(run0))
    again, _ = load_jax_checkpoint(jax_checkpoint_path(cut))
    assert full.keys() == again.keys()
    for key in full:
        np.testing.assert_array_equal(full[key], again[key], err_msg=key)


def test_seeds_in_one_program_equal_single_seed_runs(run0, tmp_path_factory):
    """Seed s of ``--seeds`` equals ``--seed s`` on the same kitchens (layout_seed)."""
    group = tmp_path_factory.mktemp("group")
    run_main_job(
        **JOB, seed=0, run_dir=group, resume=False, overrides=dict(OVERRIDES), seeds=[0, 3]
    )
    seed3 = _run(tmp_path_factory, "seed3", seed=3, layout_seed=0)
    for seed, single in ((0, run0), (3, seed3)):
        mine = group / f"seed-{seed}"
        assert read_metadata(mine)["seed"] == seed
        assert read_metadata(mine)["env_kwargs"]["layout_seed"] == 0
        a, b = (read_eval(d).drop(columns="wall_time") for d in (single, mine))
        assert len(a) == len(b) == 8
        np.testing.assert_allclose(a.mean_return, b.mean_return, atol=1e-6)
        x, _ = load_jax_checkpoint(jax_checkpoint_path(single))
        y, _ = load_jax_checkpoint(jax_checkpoint_path(mine))
        for key in x:
            np.testing.assert_allclose(x[key], y[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_several_seeds_resume_from_their_newest_common_checkpoint(tmp_path):
    """A kill between two seeds' checkpoint files leaves seeds one checkpoint apart; the
    resume takes the step every seed has."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    for step in (128, 256):
        for d in dirs:
            save_jax_checkpoint(d, {"w": np.full(3, step)}, {"total_step": step})
    save_jax_checkpoint(dirs[0], {"w": np.full(3, 384)}, {"total_step": 384})  # killed here
    files = common_checkpoint(dirs)
    assert [read_meta(f)["total_step"] for f in files] == [256, 256]
    assert [load_jax_checkpoint(f)[0]["w"][0] for f in files] == [256, 256]
    assert common_checkpoint([tmp_path / "a", tmp_path / "none"]) is None


BAD_CLI = [
    (["--seeds", "1", "2", "1"], r"seeds \[1, 2, 1\] repeat 1; give each seed once"),
    (["--seeds", "0", "-1"], r"seeds must be integers in \[0, 4294967295\], got '-1'"),
    (["--seeds", "0", "1", "--seed", "2"], r"give --seed \(2\) or --seeds \(0 1\), not both"),
    (["--learner", "vtrace"], r"unknown learner for MEAL-2 'vtrace'; valid: ppo-jax, ppo"),
    (["--set", "n_steps=8"], r"option 'n_steps' belongs to the torch learner 'ppo'.*num_steps"),
    (["--set", "torch_threads=2"], r"'torch_threads' belong to the torch learner 'ppo'"),
    (["--learner", "ppo", "--set", "clip_eps=0.1"], r"'clip_eps' belong to learner 'ppo-jax'"),
    (["--learner", "ppo", "--seeds", "0", "1"], r"several seeds in one program need .*'ppo'"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_CLI)
def test_bad_input_is_one_line_before_any_compile(argv, message, tmp_path, capsys, monkeypatch):
    from cl_suites.meal import engine

    def no_compile(*args, **kwargs):
        raise AssertionError("something was built")

    monkeypatch.setattr(engine.MealEngine, "__init__", no_compile)
    monkeypatch.setattr(jax_job, "run_jax_job", no_compile)
    run_dir = tmp_path / "run"
    code = main(["run", "--suite", "MEAL-2", "--preset", "small", "--run-dir", str(run_dir), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, " ".join(err.split())), err
    assert not run_dir.exists()


def test_learners_not_available_for_the_suite_are_named():
    with pytest.raises(ValueError, match=r"unknown learner for Diagnostic 'ppo-jax'; valid: ppo"):
        resolve_job(
            suite="Diagnostic", method="ft", learner="ppo-jax", preset="small", num_envs=None,
            overrides={},
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"several seeds in one program need a MEAL suite"):
        run_seed_group(
            suite="Diagnostic", method="ft", preset="small", seeds=[0, 1], run_dirs=[],
            resume=False, num_envs=None, overrides={},
        )  # fmt: skip


def test_print_config_of_several_seeds(capsys, learner_api):
    argv = ["run", "--suite", "MEAL-2", "--preset", "small", "--seeds", "2", "5", "--print-config"]
    assert main(argv) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["seeds"] == [2, 5] and config["learner"] == "ppo-jax"
    assert config["run_dirs"] == ["runs/MEAL-2-ft-seeds/seed-2", "runs/MEAL-2-ft-seeds/seed-5"]
    assert config["suite_kwargs"]["layout_seed"] == 2  # the first seed's kitchens


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


def test_a_killed_group_keeps_each_seeds_run_dir(tmp_path):
    """Checkpoints of a group are per run directory (plain arrays + JSON, no pickle)."""
    save_jax_checkpoint(tmp_path, {"w": np.arange(3.0)}, {"total_step": 7})
    path = jax_checkpoint_path(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == ["learner/w", "meta"]
    shutil.copy(path, tmp_path / "x.npz")
    assert read_meta(tmp_path / "x.npz")["format"] == "ppo-jax-1"
