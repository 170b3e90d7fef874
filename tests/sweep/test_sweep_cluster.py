"""``cl-suites sweep --address`` on a cluster started with ``ray start --head`` (loopback,
2 CPUs), and ``--resume`` after the driver was killed.

The driver is a ``cl-suites sweep`` subprocess with ``--cpus-per-run 2``, so the two runs
go one after the other. The second run is paused at a known point (the cluster's pause
hook, ``pause_hook/sitecustomize.py``): inside its first checkpoint write, its ``.pt``
written and not its ``.sha256``. Once the first run has finished and the second is paused
there, the driver and the orphaned run are killed (SIGKILL), and ``cl-suites sweep
--resume`` finishes the sweep on the same cluster without touching the finished run; the
second run, which has no checkpoint yet, starts again from its first step (issue 29
item 3: this moment used to be a race with Ray's stop, and the resume refused the run).
"""

from __future__ import annotations

import contextlib
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
    pause = Path(env["CL_SUITES_TEST_PAUSE_DIR"])
    (pause / "paused").unlink(missing_ok=True)
    (pause / "request").write_text(second)
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(
        _cli(*grid, *TINY_FLAGS, "--cpus-per-run", "2", "--address", address,
             "--sweep-dir", str(sweep_dir)),
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(
            lambda: (
                _status(sweep_dir, first).get("state") == "finished" and (pause / "paused").exists()
            ),
            timeout=180,
            what="the first run to finish and the second to pause in its first checkpoint",
            alive=driver,
        )
        (pause / "request").unlink()
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        (pause / "request").unlink(missing_ok=True)
        if driver.poll() is None:
            driver.kill()
        log.close()
    worker = _status(sweep_dir, second)["attempts"][0]["pid"]
    paused_pid, paused_at = (pause / "paused").read_text().split()
    assert int(paused_pid) == worker
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker, signal.SIGKILL)  # the orphan dies where it paused, not where Ray stops it
    wait_for(lambda: not pid_alive(worker), timeout=60, what="the orphaned run to exit")
    assert "outcome" not in _status(sweep_dir, second)["attempts"][0]
    checkpoints = sweep_dir / "runs" / second / "checkpoint"
    assert sorted(p.name for p in checkpoints.iterdir()) == [Path(paused_at).stem + ".pt"]
    assert 0 < last_eval_step(sweep_dir / "runs" / second) < TOTAL_STEPS  # mid-run
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
    # the interrupted one had no finished checkpoint: it started again from its first
    # step, the unfinished file set aside, one warning line; the full grid, no duplicate
    status = _status(sweep_dir, second)
    assert [a.get("outcome") for a in status["attempts"]] == [None, "finished"]
    assert eval_grid(sweep_dir / "runs" / second) == eval_grid(sweep_dir / "runs" / first)
    run_log = (sweep_dir / "logs" / f"{second}.log").read_text()
    assert "(resuming)" in run_log
    warnings = [line for line in run_log.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "an unfinished write" in warnings[0], run_log
    assert "starts again from its first step" in warnings[0]
    assert (checkpoints / (Path(paused_at).stem + ".pt.unfinished")).exists()
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
