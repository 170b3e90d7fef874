"""The cl-suites command line: list, info, run, report, and its errors."""

from __future__ import annotations

import argparse

import pytest

from cl_suites import read_eval, read_metadata
from cl_suites.cli import main
from tests.helpers import REPO


def test_list_shows_every_suite_and_install_status(capsys):
    from cl_suites.suites import MEAL_ID, SUITES

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for suite_id in (*(info.id for info in SUITES.values()), MEAL_ID):
        assert suite_id in out
    assert "0-climber" in out and "5,000,000" in out


def test_list_fits_the_terminal_width(capsys):
    """Issue 23: the list was forced to at least 140 columns."""
    import shutil

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= shutil.get_terminal_size().columns
    assert any(line.split()[:1] == ["CLSuite/CHORES-VaryObject-v0"] for line in lines)


def test_info_prints_the_schedule(capsys):
    assert main(["info", "Procgen6", "--num-envs", "64", "--steps-per-task", "1000"]) == 0
    out = capsys.readouterr().out
    assert "5-fruitbot" in out and "1,024" in out  # 1000 steps rounded up to 16 x 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["info", "Procgen7"],
            "unknown suite 'Procgen7' (did you mean 'Procgen6'?); available: CLSuite/Atari6-v0",
        ),
        (["info", "Procgen6", "--cycles", "0"], "cycles must be a positive integer, got 0"),
        (
            ["run", "--suite", "MiniHack15", "--method", "random", "--steps-per-task", "-3"],
            "steps_per_task must be a positive integer, got -3",
        ),
        (
            ["run", "--suite", "Atari6", "--method", "ft", "--preset", "meal-authors"],
            "preset 'meal-authors' is for the MEAL suites (MEAL-<N>) only; presets for Atari6: "
            "paper, small",
        ),
    ],
)
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and err.count("\n") == 1  # one line, on stderr


def test_the_declared_names_have_their_classes_and_parse_without_torch():
    """Methods are declared once (``cl_suites.declarations``), learners once (the
    registry, ``cl_suites.job.learners``); the families hold a class for each name
    (MEAL's methods: a ``meal`` variant), and parsing imports no torch."""
    import subprocess
    import sys

    from baselines_sb3.cl import METHODS
    from baselines_sb3.factory import LEARNERS as TORCH
    from cl_suites.declarations import MEAL_PAPER_METHODS, TORCH_METHODS
    from cl_suites.job.learners import REGISTRY, load_learner

    assert tuple(METHODS) == TORCH_METHODS
    meal = {name for name, variants in METHODS.items() if "meal" in variants}
    assert meal == set(MEAL_PAPER_METHODS)
    assert tuple(REGISTRY) == ("ppo-jax", "mappo-jax", "ppo", "vtrace")
    assert {n for n in REGISTRY if load_learner(n).own_methods} == set(TORCH)
    code = (
        "import sys; from cl_suites.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_run_key_has_a_flag_and_a_row_in_the_docs():
    """The run keys are declared once, as ``RunRequest``'s fields: ``cl-suites run`` has a
    flag for each (and ``--run-dir``), ``docs/configuration.md``'s table a row for each,
    and its ``method`` row names every built-in method."""
    from cl_suites.cli import build_parser
    from cl_suites.config import RUN_DEFAULTS
    from cl_suites.declarations import CL_METHODS, RANDOM_METHOD
    from cl_suites.request import RUN_KEYS

    assert set(RUN_KEYS) | {"run_dir"} == set(RUN_DEFAULTS)
    args = vars(build_parser().parse_args(["run"]))
    rows = {
        line.split("|")[1]: line
        for line in (REPO / "docs" / "configuration.md").read_text().splitlines()
        if line.startswith("| `")
    }
    for key in RUN_DEFAULTS:
        assert key in args and any(f"`{key}`" in head for head in rows), key
    method_row = rows[" `method` "]
    assert all(f"`{name}`" in method_row for name in (RANDOM_METHOD, *CL_METHODS))


def test_every_place_that_lists_the_presets_names_each(capsys):
    """``--preset`` of run, options and sweep, and the docs that list the presets, name
    every preset of the registry; an unknown one is refused listing them all."""
    from cl_suites.job.presets import PRESETS
    from cl_suites.sweep import cli as sweep_cli

    parser = argparse.ArgumentParser()
    sweep_cli.add_arguments(parser)
    sweep_help = next(a.help for a in parser._actions if "--preset" in a.option_strings)
    docs = REPO / "docs"
    cli_md = (docs / "cli.md").read_text()
    config_row = next(
        line for line in (docs / "configuration.md").read_text().splitlines()
        if line.startswith("| `preset` |")
    )  # fmt: skip
    assert f"`--preset {{{','.join(PRESETS)}}}`" in cli_md
    for name in PRESETS:
        assert name in sweep_help and f"`{name}`" in config_row
    for command in ("run", "options"):
        with pytest.raises(SystemExit):
            main([command, "--suite", "MEAL-2", "--preset", "authors"])
        choices = ", ".join(f"'{name}'" for name in PRESETS)
        assert f"invalid choice: 'authors' (choose from {choices})" in capsys.readouterr().err


def test_unknown_method_lists_the_valid_ones(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["run", "--suite", "Procgen6", "--method", "bogus", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'bogus'; valid: ft, ewc, online-ewc" in err
    assert "or an own ContinualMethod as package.module:Class" in err
    assert not run_dir.exists()


def test_run_random_then_report(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["run", "--suite", "Procgen6", "--method", "random", "--run-dir", str(run_dir),
            "--num-envs", "2", "--steps-per-task", "100", "--cycles", "1",
            "--eval-every", "300", "--eval-episodes", "1"]  # fmt: skip
    assert main(argv) == 0
    assert read_metadata(run_dir)["method"] == "random"
    assert sorted(read_eval(run_dir).total_step.unique()) == [0, 300, 600]
    assert main(argv) == 2  # the directory already holds a run
    assert "already holds a run" in capsys.readouterr().err
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").exists()
