"""Small things a newcomer hit (issue 41 item 6): a did-you-mean for misspelt suite ids,
the plots' test-split legend only where a suite has a test split, no third-party banner
on library use (the local sweep's Ray token warning: ``tests/reliability/test_interrupts.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cl_suites.cli import main
from cl_suites.errors import UnknownSuiteError
from cl_suites.suites import parse_suite_id
from tests.helpers import REPO

ROOT = REPO


@pytest.mark.parametrize(
    ("given", "meant"),
    [("Procgen", "Procgen6"), ("procgen6", "Procgen6"), ("Diagnostc", "Diagnostic"),
     ("CHORES-VaryRom", "CHORES-VaryRoom"), ("minihack", "MiniHack15")],
)  # fmt: skip
def test_a_misspelt_suite_id_gets_a_did_you_mean(given, meant, capsys):
    with pytest.raises(UnknownSuiteError, match=f"did you mean '{meant}'"):
        parse_suite_id(given)
    assert main(["run", "--suite", given, "--print-config"]) == 2
    assert f"unknown suite '{given}' (did you mean '{meant}'?)" in capsys.readouterr().err


def test_no_did_you_mean_without_a_close_id():
    with pytest.raises(UnknownSuiteError) as e:
        parse_suite_id("xyz")
    assert "did you mean" not in str(e.value)


def _legend(tmp_path, splits):
    from cl_suites.metrics import cora
    from cl_suites.metrics.plots import plot_continual_eval
    from cl_suites.metrics.runs import combined_eval, load_run, task_names
    from tests.metrics.conftest import write_run

    run = load_run(write_run(tmp_path / "-".join(splits), splits=splits, returns=lambda *a: 1.0))
    curves = cora.continual_eval_curves(combined_eval([run]), 1, 50)
    fig = plot_continual_eval(curves, run.schedule, task_names([run]))
    lines = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    styles = {line.get_linestyle() for ax in fig.axes for line in ax.get_lines()}
    return lines, styles


def test_the_test_split_legend_only_where_a_suite_has_one(tmp_path):
    lines, styles = _legend(tmp_path, ("train",))
    assert "test split" not in lines and "train split" not in lines
    assert "--" not in styles  # train curves solid: nothing to tell apart
    lines, styles = _legend(tmp_path, ("train", "test"))
    assert {"test split", "train split"} <= lines and "--" in styles


def test_library_use_prints_no_banner():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import cl_suites, baselines_sb3; cl_suites.make_vec('Procgen6', num_envs=1).close()"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "" and "Gym has been unmaintained" not in out.stderr
    assert out.stderr.strip() == "", out.stderr
