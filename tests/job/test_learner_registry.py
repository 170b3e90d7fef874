"""The learner registry (issue 49): a learner is one folder and one registry line; a JAX
run loads no torch; bad entries and bad requests are one line at resolve time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cl_suites.cli import main
from cl_suites.errors import ConfigError
from cl_suites.job import learners
from cl_suites.job.run_spec import resolve_job
from cl_suites.rundir.runlog import read_eval, read_metadata
from tests.helpers import REPO

TOY = "tests.helpers.toy_learner:TOY"


@pytest.fixture
def toy():
    learners.register("toy", TOY)  # the one registry line
    yield
    learners.unregister("toy")


def test_a_toy_learner_in_one_folder_runs_end_to_end(toy, tmp_path):
    run_dir = tmp_path / "toy"
    argv = ["run", "--suite", "Diagnostic", "--learner", "toy", "--method", "ft",
            "--preset", "small", "--steps-per-task", "64", "--set", "action_seed=3",
            "--run-dir", str(run_dir)]  # fmt: skip
    assert main(argv) == 0
    meta = read_metadata(run_dir)
    assert (meta["learner"], meta["hyperparameters"]["learner"]) == ("toy", {
        "action_seed": 3, "n_steps": 1})  # fmt: skip
    points = set(read_eval(run_dir)["total_step"])
    assert {0, 3 * 64} <= points  # the start and the end (Diagnostic: 3 tasks of 64 steps)
    assert (run_dir / "report" / "report.html").exists()
    # the toy's files: its folder alone (the registry line is in this test)
    folder = REPO / "tests" / "helpers" / "toy_learner"
    named = [p for p in REPO.rglob("*.py") if ".venv" not in p.parts and "toy_learner" in
             p.read_text(errors="ignore") and folder not in p.parents]  # fmt: skip
    assert named == [Path(__file__)]


def test_a_toy_learner_is_refused_where_it_does_not_declare_it(toy):
    with pytest.raises(ValueError, match="learner 'toy' is not available for Procgen6; valid: "):
        resolve_job(suite="Procgen6", method="ft", learner="toy", preset="small")
    refused = "learner 'toy' does not run method 'ewc'; valid: ft; 'ewc' runs on --learner ppo"
    with pytest.raises(ValueError, match=refused):
        resolve_job(suite="Diagnostic", method="ewc", learner="toy", preset="small")
    with pytest.raises(ValueError, match="action_seed must be an integer >= 0, got -1"):
        resolve_job(suite="Diagnostic", method="ft", learner="toy", preset="small",
                    overrides={"action_seed": -1})  # fmt: skip


def test_a_learner_declaring_a_job_option_is_one_line_at_resolve_time(toy, monkeypatch):
    from cl_suites.job.option_specs import BOOL, Option
    from tests.helpers import toy_learner

    taken = {"tensorboard": Option("learner", BOOL, "clashes with the job's option")}
    monkeypatch.setattr(toy_learner.ToyLearner, "options", lambda self: taken)
    with pytest.raises(ConfigError, match="learner 'toy' declares option\\(s\\) 'tensorboard'"):
        resolve_job(suite="Diagnostic", method="ft", learner="toy", preset="small")


def test_a_learner_whose_package_is_missing_leaves_the_others_running():
    learners.register("broken", "no_such_package.learner:ENTRY")
    try:
        with pytest.warns(UserWarning, match="learner 'broken' left out: No module named"):
            spec = resolve_job(suite="Diagnostic", method="ft", preset="small")
        assert spec.learner == "ppo"
        with pytest.raises(ModuleNotFoundError, match="no_such_package"):
            learners.load_learner("broken")
    finally:
        learners.unregister("broken")


def test_an_entry_point_that_names_another_learner_is_one_line():
    learners.register("toy2", TOY)
    try:
        with pytest.raises(ConfigError, match="registered with entry point .*named 'toy'"):
            learners.load_learner("toy2")
        with pytest.raises(ConfigError, match="already registered with entry point"):
            learners.register("toy2", "somewhere.else:TOY")
        with pytest.raises(ConfigError, match="must read 'package.module:attr'"):
            learners.register("toy3", "no_colon")
    finally:
        learners.unregister("toy2")


def test_resolving_and_running_ppo_jax_imports_neither_torch_nor_sb3(tmp_path):
    """A MEAL run with the JAX learner, resolved and trained in a fresh interpreter, then
    its report: neither torch nor stable-baselines3 (nor the torch family) is imported."""
    run_dir, out_dir = str(tmp_path / "run"), str(tmp_path / "report")
    code = f"""
import sys
from cl_suites.cli import main
code = main(["run", "--suite", "MEAL-2", "--method", "ewc", "--preset", "small",
             "--steps-per-task", "256", "--set", "report=false", "--run-dir", {run_dir!r}])
code += main(["report", {run_dir!r}, "--out", {out_dir!r}])
loaded = sorted(m for m in ("torch", "stable_baselines3", "baselines_sb3") if m in sys.modules)
print(code, loaded)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0 []"
    assert read_metadata(tmp_path / "run")["learner"] == "ppo-jax"
    assert (tmp_path / "report" / "report.html").exists()


@pytest.mark.parametrize("command", [["list"], ["options", "--suite", "MEAL-2"]])
def test_list_and_jax_options_load_neither_torch_nor_sb3(command):
    code = (
        "import sys; from cl_suites.cli import main; "
        f"code = main({command!r}); "
        "print(code, sorted(m for m in ('torch', 'stable_baselines3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0 []"
