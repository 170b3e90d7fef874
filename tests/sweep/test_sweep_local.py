"""Sweeps on a local Ray instance (2 CPUs) on this machine.

One 2 methods x 2 seeds Diagnostic sweep runs once, the default way: ``run_sweep`` starts
its own local Ray instance (``num_cpus=2``) and stops it. While it runs, one worker
process is killed by its pid (SIGKILL) mid-run, so the same sweep shows the 4 complete run
directories, the single report and the retried run that resumed from its checkpoint.
The other tests share one local instance that this module starts in-process.
"""

from __future__ import annotations

import io
import os
import signal
import threading
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from cl_suites.cli import main as cli_main
from cl_suites.sweep import SweepError, SweepSpec, run_sweep

from .conftest import TINY, TOTAL_STEPS, eval_grid, last_eval_step

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    from cl_suites.sweep.cluster import import_ray

    import_ray()  # the guard that keeps Ray's serializers working with this venv's pyarrow
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class WorkerKiller(threading.Thread):
    """Kills the worker of the first run whose eval log passed ``at_step`` (but not the
    end), by the pid its attempt recorded, once."""

    def __init__(self, sweep_dir: Path, at_step: int):
        super().__init__(daemon=True)
        self.sweep_dir, self.at_step = sweep_dir, at_step
        self.killed: tuple[str, int, int] | None = None  # (run, pid, eval step seen)
        self.stop = threading.Event()

    def run(self) -> None:
        from cl_suites.sweep.sweep_dir import SweepDir

        sdir = SweepDir(self.sweep_dir)
        while not self.stop.wait(0.05):
            for status_file in sorted((self.sweep_dir / "status").glob("*.json")):
                name = status_file.stem
                attempts = sdir.read_status(name).get("attempts", [])
                step = last_eval_step(sdir.run_dir(name))
                if len(attempts) == 1 and self.at_step <= step < TOTAL_STEPS:
                    pid = attempts[0]["pid"]
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"):
                        os.kill(pid, signal.SIGKILL)
                        self.killed = (name, pid, step)
                        return


@pytest.fixture(scope="module")
def sweep_2x2(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep") / "diag"
    spec = SweepSpec(
        suites=("Diagnostic",), methods=("ft", "ewc"), seeds=(0, 1), preset="small", overrides=TINY
    )
    killer = WorkerKiller(sweep_dir, at_step=500)
    killer.start()
    out = io.StringIO()
    try:
        result = run_sweep(
            spec, sweep_dir, num_cpus=2, live=True, console=Console(file=out, width=160)
        )
    finally:
        killer.stop.set()
        killer.join()
    return result, killer.killed, out.getvalue()


def test_2x2_sweep_gives_four_complete_runs_and_one_report(sweep_2x2):
    result, _, out = sweep_2x2
    names = [
        "Diagnostic-ft-ppo-s0",
        "Diagnostic-ft-ppo-s1",
        "Diagnostic-ewc-ppo-s0",
        "Diagnostic-ewc-ppo-s1",
    ]
    assert [o.name for o in result.outcomes] == names
    assert [o.state for o in result.outcomes] == ["finished"] * 4, out
    assert sorted(p.name for p in (result.sweep_dir / "runs").iterdir()) == sorted(names)
    grids = [eval_grid(o.run_dir) for o in result.outcomes]
    # the whole schedule: step 0, every ~250 agent steps (at rollout ends), the last step
    steps = sorted({step for step, _, _ in grids[0]})
    assert steps[0] == 0 and steps[-1] == TOTAL_STEPS and len(steps) == 9
    assert grids[0] == [(step, task, "train") for step in steps for task in (0, 1)]
    assert all(grid == grids[0] for grid in grids)
    for outcome in result.outcomes:
        assert list((outcome.run_dir / "checkpoint").glob("step-*.pt"))
        assert not (outcome.run_dir / "report").exists()  # one report, for the sweep
    summary = pd.read_csv(result.report_dir / "summary.csv")
    assert result.report_dir == result.sweep_dir / "report"
    assert (result.report_dir / "report.html").exists()
    assert sorted(summary["method"]) == ["ewc", "ft"]
    assert "finished Diagnostic-ewc-ppo-s1" in out
    assert "on a new local Ray instance (1 node(s), 2 CPUs, 0 GPUs): up to 2 runs" in out
    assert not ray.is_initialized()  # the sweep stopped the instance it started


def test_report_takes_a_sweeps_runs_directory(sweep_2x2, tmp_path):
    """Issue 29 item 2: ``cl-suites report SWEEP/runs`` (and the sweep directory itself)
    reports the four runs, as the sweep's own report does."""
    result, _, _ = sweep_2x2
    own = pd.read_csv(result.report_dir / "summary.csv")
    for given in (result.sweep_dir / "runs", result.sweep_dir):
        out = tmp_path / given.name
        assert cli_main(["report", str(given), "--out", str(out)]) == 0
        pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), own)


def test_killed_worker_is_retried_and_resumes_without_losing_or_repeating_evals(sweep_2x2):
    result, killed, out = sweep_2x2
    assert killed is not None, "no worker was killed mid-run"
    name, pid, _step_seen = killed
    outcome = result.by_name()[name]
    assert outcome.state == "finished" and outcome.attempts == 2
    status = (result.sweep_dir / "status" / f"{name}.json").read_text()
    import json

    first, second = json.loads(status)["attempts"]
    assert first["pid"] == pid and "outcome" not in first  # died without a word
    assert second["pid"] != pid and second["outcome"] == "finished"
    log = (result.sweep_dir / "logs" / f"{name}.log").read_text()
    assert "attempt 2" in log and "(resuming)" in log
    grid = eval_grid(outcome.run_dir)
    other = next(o for o in result.outcomes if o.name != name)
    assert grid == eval_grid(other.run_dir)  # the uninterrupted run's step grid
    assert len(grid) == len(set(grid))  # no duplicated eval record
    assert f"retrying[/yellow] {name}" not in out and f"retrying {name}" in out


def test_failing_run_is_reported_once_and_the_others_finish(local_ray, tmp_path):
    spec = SweepSpec(
        suites=("Diagnostic",),
        methods=("sgd", "ft"),
        seeds=(0,),
        preset="small",
        overrides=TINY,
    )
    out = io.StringIO()
    result = run_sweep(spec, tmp_path / "s", check=False, live=False, console=Console(file=out))
    by_name = result.by_name()
    bad, good = by_name["Diagnostic-sgd-ppo-s0"], by_name["Diagnostic-ft-ppo-s0"]
    assert bad.state == "failed" and bad.attempts == 1  # not retried
    assert "unknown method 'sgd'" in bad.error and "valid: ft" in bad.error
    assert good.state == "finished"
    assert not result.ok
    assert (result.report_dir / "report.html").exists()
    assert "unknown method 'sgd'" in out.getvalue()


def test_gpus_on_a_cluster_without_gpu_are_refused_before_any_run(local_ray, tmp_path):
    spec = SweepSpec(suites=("Diagnostic",), methods=("ft",), seeds=(0,), preset="small")
    with pytest.raises(SweepError, match=r"--gpus-per-run 0.5 asks for GPUs, but .* has none"):
        run_sweep(spec, tmp_path / "s", gpus_per_run=0.5, live=False)
    with pytest.raises(SweepError, match=r"--cpus-per-run 4: no node .* \(largest: 2\)"):
        run_sweep(spec, tmp_path / "s", cpus_per_run=4, live=False)
    assert not (tmp_path / "s").exists()
