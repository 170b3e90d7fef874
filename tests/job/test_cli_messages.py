"""Messages of the command line that name what is allowed (issue 55): an option of several
methods names them all, a method in the wrong case gets its did-you-mean, ``options``
lists the suite's own keywords."""

from __future__ import annotations

import pytest

from cl_suites.cli import main


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.split("\n") if line.strip()]
    assert len(lines) == 1, err
    return " ".join(lines[0].split())


def test_an_option_of_several_methods_names_every_one(capsys, tmp_path):
    argv = ["run", "--suite", "Procgen6", "--method", "ft", "--set", "lam=1.0"]
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    line = one_line_error(capsys)
    assert "option 'lam' belongs to methods 'ewc', 'online-ewc', 'l2', 'mas', 'pnc'" in line
    assert not (tmp_path / "run").exists()


def test_an_option_of_one_method_names_it(capsys):
    argv = ["run", "--suite", "Procgen6", "--method", "ft", "--set", "kl_cost=1.0"]
    assert main([*argv, "--print-config"]) == 2
    assert "option 'kl_cost' belongs to method 'pnc', not to" in one_line_error(capsys)


@pytest.mark.parametrize(("given", "meant"), [("EWC", "ewc"), ("Online-EWC", "online-ewc")])
def test_a_method_in_the_wrong_case_gets_a_did_you_mean(given, meant, capsys):
    assert main(["run", "--suite", "Procgen6", "--method", given, "--print-config"]) == 2
    line = one_line_error(capsys)
    assert f"unknown method {given!r} (did you mean {meant!r}?); valid: ft, ewc" in line


def suite_rows(capsys) -> list[str]:
    """The option names of ``cl-suites options``' suite section (plain output)."""
    out = capsys.readouterr().out
    section = out.split("\nsuite options\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in section.splitlines()[1:] if line.strip()]


@pytest.mark.parametrize(
    ("suite", "method", "names"),
    [
        ("MiniHack15", "ft", {"pairs", "crop", "steps_per_task", "cycles"}),
        ("MiniHack15", "random", {"pairs", "crop", "eval_episodes"}),
        ("Atari6", "ft", {"games", "noop_max"}),
        ("Procgen6", "ft", {"games", "distribution_mode", "num_train_levels"}),
        ("CHORES-MultiTraj", "ft", {"max_steps", "render_size", "alfred_data_dir"}),
    ],
)
def test_options_lists_the_suites_keywords(suite, method, names, capsys):
    """A builder that forwards any keyword to its simulator (MiniHack15, CHORES) still
    has its named keywords listed."""
    assert main(["options", "--suite", suite, "--method", method]) == 0
    assert names <= set(suite_rows(capsys))


def test_a_suite_option_is_not_documented_by_a_method_option_of_its_name(capsys):
    """CHORES' ``max_steps`` (its episode cap) is not MEAL's importance ``max_steps``."""
    assert main(["options", "--suite", "CHORES-MultiTraj", "--method", "ft"]) == 0
    out = capsys.readouterr().out.split("\nsuite options\n", 1)[1]
    row = next(line for line in out.splitlines() if line.startswith("max_steps "))
    assert "importance" not in row
