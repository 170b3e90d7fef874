"""Honest state after an interruption (issue 41 item 5): Ctrl-C (SIGINT) or SIGTERM leaves
``interrupted`` with its reason in every status file of a run (``progress.json``) and of a
sweep (``status/<run>.json``, the run's ``progress.json``, the console line), and
``cl-suites run --resume --run-dir DIR`` takes the rest of the command from the run
directory. The signals are real: the commands run as subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cl_suites.cli import main
from cl_suites.rundir.runlog import read_eval
from tests.helpers import REPO
from tests.helpers.kill_drills import takes_ctrl_c

ROOT = REPO
LONG = [
    "--suite", "Diagnostic", "--method", "ft", "--preset", "small", "--set", "n_tasks=2",
    "--steps-per-task", "20000", "--eval-every", "5000", "--eval-episodes", "2",
]  # fmt: skip


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _start(cmd: list[str]) -> subprocess.Popen:
    """``cmd`` in a child that takes Ctrl-C, its output (stdout and stderr) in a pipe."""
    return subprocess.Popen(
        cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=takes_ctrl_c,
    )  # fmt: skip


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}: {proc.stdout.read()}")
        if predicate():
            return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(
    ("sig", "reason", "line"),
    [
        (signal.SIGINT, "interrupted by Ctrl-C (SIGINT)", "interrupted; the run in"),
        (signal.SIGTERM, "terminated by SIGTERM", "interrupted; the run in"),
    ],
)
def test_a_signalled_run_says_interrupted_and_resumes_from_its_directory(
    sig, reason, line, tmp_path
):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "cl_suites.cli", "run", *LONG, "--run-dir", str(run_dir)]
    cmd += ["--set", "checkpoint_every=1000", "--set", "report=false"]
    proc = _start(cmd)
    progress = run_dir / "progress.json"
    _wait(
        lambda: (
            _read(progress).get("total_step", 0) > 3000
            and list((run_dir / "checkpoint").glob("step-*.sha256"))
        ),
        120,
        "the run's first checkpoint",
        proc,
    )
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert line in out
    state = _read(progress)
    assert state["state"] == "interrupted" and state["reason"] == reason
    # the rest of the command from the run directory; a flag that differs is refused
    assert main(["run", "--run-dir", str(run_dir), "--resume", "--preset", "paper"]) == 2
    shortened = ["--run-dir", str(run_dir), "--resume", "--steps-per-task", "2000"]
    assert main(["run", *shortened]) == 2  # another schedule: refused, as before
    assert main(["run", "--run-dir", str(run_dir), "--resume", "--set", "progress=false"]) == 0
    assert _read(progress)["state"] == "finished" and _read(progress)["reason"] is None
    assert read_eval(run_dir).total_step.max() == 40_000


def test_an_interrupted_sweep_marks_its_running_runs_interrupted(tmp_path):
    pytest.importorskip("ray")
    sweep_dir = tmp_path / "sweep"
    grid = [a.replace("--suite", "--suites") if a == "--suite" else a for a in LONG]
    grid = [a if a != "--method" else "--methods" for a in grid]
    cmd = [sys.executable, "-m", "cl_suites.cli", "sweep", *grid, "--seeds", "0"]
    cmd += ["--sweep-dir", str(sweep_dir), "--num-cpus", "1"]
    proc = _start(cmd)
    name = "Diagnostic-ft-ppo-s0"
    progress = sweep_dir / "runs" / name / "progress.json"
    _wait(lambda: _read(progress).get("total_step", 0) > 1000, 180, "the run's first steps", proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    status = _read(sweep_dir / "status" / f"{name}.json")
    assert status["state"] == "interrupted"
    assert status["error"].startswith("the sweep was stopped (interrupted by Ctrl-C (SIGINT))")
    assert status["attempts"][-1]["outcome"] == "interrupted"
    run_state = _read(progress)
    assert run_state["state"] == "interrupted" and "the sweep was stopped" in run_state["reason"]
    assert f"interrupted {name}: the sweep was stopped" in " ".join(out.split())
    assert "Token authentication" not in out  # Ray's default on a local instance: silenced


def test_resume_with_only_a_run_dir_that_holds_no_run_says_why(tmp_path, capsys):
    assert main(["run", "--run-dir", str(tmp_path / "none"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"cannot resume {tmp_path / 'none'}: the directory does not exist" in err
