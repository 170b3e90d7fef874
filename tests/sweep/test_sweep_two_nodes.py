"""A sweep that survives losing a machine (issue 50 item 5): two Ray nodes on this machine
(a head and a worker node, ``ray start``; 1 CPU each, so the two runs of the sweep train
one on each), the worker node killed (SIGKILL to every one of its processes) once its run
has a finished checkpoint and is still training. Ray marks the node dead and retries the
run's task on the head once its CPU is free; the retry resumes from the run's last
checkpoint (the sweep directory is on a filesystem both nodes see). Nothing of the run's
log is lost or written twice, and the sweep says which node was lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import eval_grid, kill_node, last_eval_step, wait_for

pytest.importorskip("ray")

STEPS_PER_TASK = 6000
"""Long enough for the run on the worker node to checkpoint and still be training."""


def _status(sweep_dir: Path, name: str) -> dict:
    try:
        return json.loads((sweep_dir / "status" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def _on_node(sweep_dir: Path, names: list[str], node_id: str) -> str | None:
    """The run whose current attempt runs on ``node_id``."""
    for name in names:
        attempts = _status(sweep_dir, name).get("attempts") or []
        if attempts and attempts[-1].get("node_id") == node_id:
            return name
    return None


def _checkpointed(run_dir: Path) -> bool:
    return any((run_dir / "checkpoint").glob("step-*.sha256"))


@pytest.mark.slow  # two Ray nodes and two runs, one of them retried: about 40 s
def test_a_sweep_survives_losing_a_node(two_nodes, tmp_path):
    address, env, worker = two_nodes
    sweep_dir = tmp_path / "sweep"
    names = ["Diagnostic-ft-ppo-s0", "Diagnostic-ft-ppo-s1"]
    total = 2 * STEPS_PER_TASK
    cmd = [sys.executable, "-m", "cl_suites.cli", "sweep", "--suite", "Diagnostic",
           "--methods", "ft", "--seeds", "0-1", "--preset", "small", "--set", "n_tasks=2",
           "--steps-per-task", str(STEPS_PER_TASK), "--eval-every", "500",
           "--eval-episodes", "2", "--cpus-per-run", "1", "--address", address,
           "--sweep-dir", str(sweep_dir)]  # fmt: skip
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        lost = wait_for(
            lambda: _on_node(sweep_dir, names, worker["node_id"]),
            timeout=180,
            what="a run to start on the worker node",
            alive=driver,
        )
        run_dir = sweep_dir / "runs" / lost
        wait_for(
            lambda: _checkpointed(run_dir),
            timeout=180,
            what=f"{lost} to write a checkpoint on the worker node",
            alive=driver,
        )
        seen = last_eval_step(run_dir)
        assert seen < total, "the run finished before the node was lost"
        kill_node(worker["pgid"])
        driver.wait(timeout=420)
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    out = (tmp_path / "driver.log").read_text()
    assert driver.returncode == 0, out
    kept = next(n for n in names if n != lost)
    attempts = _status(sweep_dir, lost)["attempts"]
    assert [a.get("outcome") for a in attempts] == [None, "finished"], attempts
    assert attempts[0]["node_id"] == worker["node_id"]
    assert attempts[1]["node_id"] != worker["node_id"]  # resumed on the head
    run_log = (sweep_dir / "logs" / f"{lost}.log").read_text()
    assert "(resuming)" in run_log and "starts again from its first step" not in run_log
    assert seen > 0  # the node was lost mid-run, with evaluations and a checkpoint written
    grid = eval_grid(run_dir)
    assert grid == eval_grid(sweep_dir / "runs" / kept)  # every evaluation, once
    assert len(grid) == len(set(grid)) and grid[-1][0] == total
    assert f"retrying {lost}: its node {worker['node_id'][:12]} was lost" in out, out
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert {r["name"]: r["state"] for r in summary["runs"]} == dict.fromkeys(names, "finished")
