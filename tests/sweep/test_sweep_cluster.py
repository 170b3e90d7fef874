"""``cl-suites sweep --address`` on a cluster started with ``ray start --head`` (loopback,
2 CPUs), and ``--resume`` after the driver was killed.

The driver is a ``cl-suites sweep`` subprocess with ``--cpus-per-run 2``, so the two runs
go one after the other; it is killed (SIGKILL) once the first run has finished and the
second is mid-run. ``cl-suites sweep --resume`` then finishes the sweep on the same
cluster without touching the finished run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TINY_FLAGS, TOTAL_STEPS, eval_grid, last_eval_step, pid_alive, wait_for

pytest.importorskip("ray")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cl_suites.cli", "sweep", *args]


def _status(sweep_dir: Path, name: str) -> dict:
    try:
        return json.loads((sweep_dir / "status" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def test_driver_killed_on_cluster_then_resume_skips_finished_runs(ray_head, tmp_path):
    address, env = ray_head
    sweep_dir = tmp_path / "sweep"
    grid = ["--suite", "Diagnostic", "--methods", "ft", "--seeds", "0-1", "--preset", "small"]
    first, second = "Diagnostic-ft-ppo-s0", "Diagnostic-ft-ppo-s1"
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(
        _cli(*grid, *TINY_FLAGS, "--cpus-per-run", "2", "--address", address,
             "--sweep-dir", str(sweep_dir)),
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(
            lambda: (
                _status(sweep_dir, first).get("state") == "finished"
                and 0 < last_eval_step(sweep_dir / "runs" / second) < TOTAL_STEPS
            ),
            timeout=180,
            what="the first run to finish and the second to be mid-run",
            alive=driver,
        )
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    worker = _status(sweep_dir, second)["attempts"][0]["pid"]
    wait_for(lambda: not pid_alive(worker), timeout=60, what="Ray to stop the orphaned run")
    assert "outcome" not in _status(sweep_dir, second)["attempts"][0]
    finished_log = (sweep_dir / "runs" / first / "eval.csv").read_bytes()
    finished_status = _status(sweep_dir, first)

    resumed = subprocess.run(
        _cli("--resume", str(sweep_dir), "--address", address),
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # the finished run was not run again
    assert _status(sweep_dir, first) == finished_status
    assert (sweep_dir / "runs" / first / "eval.csv").read_bytes() == finished_log
    # the interrupted one continued from its checkpoint: the full grid, no duplicate
    status = _status(sweep_dir, second)
    assert [a.get("outcome") for a in status["attempts"]] == [None, "finished"]
    assert eval_grid(sweep_dir / "runs" / second) == eval_grid(sweep_dir / "runs" / first)
    assert "(resuming)" in (sweep_dir / "logs" / f"{second}.log").read_text()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert [(r["name"], r["state"]) for r in summary["runs"]] == [
        (first, "skipped"),
        (second, "finished"),
    ]
    assert (sweep_dir / "report" / "report.html").exists()
    # every attempt ran on the cluster started above (Ray reports its GCS under the
    # node's IP; the port, a free one picked by the fixture, identifies the cluster)
    for name in (first, second):
        ports = {a["gcs_address"].rsplit(":", 1)[1] for a in _status(sweep_dir, name)["attempts"]}
        assert ports == {address.rsplit(":", 1)[1]}
