"""A sweep whose grid mixes a built-in method and an own method's plug-in (issue 41 item
1): both run through the same job in Ray workers, each in its run directory, and the one
report of the sweep puts them side by side; a plug-in that cannot be used fails the
sweep's pre-check before any run starts."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from cl_suites.sweep import SweepError, SweepSpec, run_sweep

from .conftest import TINY, TOTAL_STEPS, eval_grid

ray = pytest.importorskip("ray")

PLUGIN = "examples.l2_init:L2Init"


def test_a_grid_mixes_a_builtin_and_an_own_method(tmp_path):
    spec = SweepSpec(
        suites=("Diagnostic",), methods=("ft", PLUGIN), seeds=(0,), preset="small", overrides=TINY
    )
    out = io.StringIO()
    result = run_sweep(
        spec, tmp_path / "sweep", num_cpus=2, live=False, console=Console(file=out, width=160)
    )
    names = ["Diagnostic-ft-ppo-s0", "Diagnostic-examples.l2_init.L2Init-ppo-s0"]
    assert [o.name for o in result.outcomes] == names
    assert [o.state for o in result.outcomes] == ["finished"] * 2, out.getvalue()
    for outcome in result.outcomes:
        assert eval_grid(outcome.run_dir)[-1][0] == TOTAL_STEPS
    summary = pd.read_csv(result.report_dir / "summary.csv")
    assert sorted(summary["method"]) == sorted(["ft", PLUGIN])


def test_a_bad_plugin_fails_the_precheck_before_any_run(tmp_path):
    spec = SweepSpec(
        suites=("Diagnostic",),
        methods=("ft", "examples.l2_init:NoSuchClass"),
        seeds=(0,),
        preset="small",
        overrides=TINY,
    )
    with pytest.raises(SweepError, match="nothing was started:\n.*has no .NoSuchClass."):
        run_sweep(
            spec, tmp_path / "sweep", num_cpus=2, live=False, console=Console(file=io.StringIO())
        )
    assert not (tmp_path / "sweep" / "runs").exists()
