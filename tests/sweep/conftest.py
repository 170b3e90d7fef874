"""Shared pieces of the sweep tests: tiny Diagnostic runs and the Ray instances.

Runs are kept tiny (2 tasks x 1,000 agent steps, an eval every 250) so that a run takes
a few seconds, most of it the import of torch/SB3 in its fresh worker process.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

TINY = {"n_tasks": 2, "steps_per_task": 1000, "eval_every": 250, "eval_episodes": 2}
TINY_FLAGS = ["--set", "n_tasks=2", "--steps-per-task", "1000", "--eval-every", "250"]
TINY_FLAGS += ["--eval-episodes", "2"]
TOTAL_STEPS = 2000


def eval_grid(run_dir: Path) -> list[tuple[int, int, str]]:
    """(total_step, task_id, split) of every eval.csv row, in file order."""
    with (run_dir / "eval.csv").open() as f:
        return [(int(r["total_step"]), int(r["task_id"]), r["split"]) for r in csv.DictReader(f)]


def last_eval_step(run_dir: Path) -> int:
    try:
        grid = eval_grid(run_dir)
    except (OSError, ValueError, KeyError):
        return -1
    return grid[-1][0] if grid else -1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05, alive=None):
    """Poll ``predicate`` until it is true; fail after ``timeout`` s or, with ``alive``
    (a ``Popen``), as soon as that process has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"process exited ({alive.returncode}) before {what}")
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="session")
def ray_head():
    """A Ray cluster started with ``ray start --head`` on the loopback interface (2 CPUs,
    no GPU, its own temp dir so no other Ray user on this machine sees it) with token
    authentication (a fresh token in the environment: Ray's clients need
    ``RAY_AUTH_MODE=token`` to join) and the pause hook of ``pause_hook/``. Yields
    ``(address, env)``, ``env`` being what a driver needs; every process the cluster
    started is killed at the end."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths
    # the cluster's processes load pause_hook/sitecustomize.py: a test pauses a run at a
    # known point by writing CL_SUITES_TEST_PAUSE_DIR/request (see that module)
    pause_dir = Path(temp_dir) / "pause"
    pause_dir.mkdir()
    hook = str(Path(__file__).resolve().parent / "pause_hook")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, env.get("PYTHONPATH")) if p)
    env["CL_SUITES_TEST_PAUSE_DIR"] = str(pause_dir)
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
        "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
        f"--temp-dir={temp_dir}", f"--ray-client-server-port={free_port()}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, start_new_session=True, timeout=120
    )
    pgid = None
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        pgid = _group_of(temp_dir)
        yield f"127.0.0.1:{port}", env
    finally:
        _kill_ray_processes(pgid)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def two_nodes():
    """Two Ray nodes on this machine, as a two-machine cluster would have them: a head and
    a worker node started with ``ray start --address`` (loopback, 1 CPU each, token
    authentication, node deaths noticed within about 3 s). Yields ``(address, env,
    worker)``: ``worker`` is ``{"node_id", "pgid"}`` of the worker node, whose processes
    :func:`kill_node` kills as a lost machine would lose them. Every process of both
    nodes is killed at the end."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    env["RAY_health_check_period_ms"] = "500"  # GCS marks a silent node dead ~3 s later
    env["RAY_health_check_failure_threshold"] = "5"
    temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")
    port, manager_port = free_port(), free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
              "--disable-usage-stats"]  # fmt: skip
    head = [ray_bin, "start", "--head", f"--port={port}", *common, f"--temp-dir={temp_dir}",
            "--include-dashboard=false", f"--ray-client-server-port={free_port()}"]  # fmt: skip
    worker = [ray_bin, "start", f"--address=127.0.0.1:{port}", *common,
              f"--node-manager-port={manager_port}"]  # fmt: skip
    groups: list[int] = []
    try:
        for cmd in (head, worker):
            proc = subprocess.run(
                cmd, env=env, capture_output=True, text=True, start_new_session=True, timeout=120
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
        worker_pgid = _group_of(f"--node_manager_port={manager_port}")
        groups += [worker_pgid, _group_of(temp_dir, exclude=worker_pgid)]
        ids = subprocess.run(
            [sys.executable, "-c",
             "import ray; ray.init(address='auto', logging_level='ERROR');"
             f"print(next(n['NodeID'] for n in ray.nodes() if n['NodeManagerPort'] == "
             f"{manager_port}))"],
            env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}, capture_output=True, text=True,
            timeout=120, check=True,
        )  # fmt: skip
        node_id = ids.stdout.strip().splitlines()[-1]
        yield f"127.0.0.1:{port}", env, {"node_id": node_id, "pgid": worker_pgid}
    finally:
        for pgid in groups:
            _kill_ray_processes(pgid)
        shutil.rmtree(temp_dir, ignore_errors=True)


def kill_node(pgid: int) -> None:
    """SIGKILL every process of a Ray node (its process group and the workers its raylet
    spawned), as a machine that loses power would lose them."""
    for pid in _cluster_pids(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _stat(pid: str) -> tuple[int, int] | None:
    """(ppid, pgid) of a process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[2])


def _group_of(temp_dir: str, exclude: int | None = None) -> int:
    """The process group of the processes whose command line holds ``temp_dir`` (a head's
    temp dir, a worker node's ``--node_manager_port=N``; ``ray start`` ran in a new
    session), other than ``exclude``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if temp_dir.encode() in (proc / "cmdline").read_bytes():
                pgid = os.getpgid(int(proc.name))
                if pgid != exclude:
                    return pgid
        except OSError:
            continue
    raise AssertionError(f"no Ray process of {temp_dir} found")


def _cluster_pids(pgid: int) -> set[int]:
    """The cluster's processes: its process group, and the workers the raylet spawned
    (each in a session of its own), found as descendants of the group."""
    stats = {int(p.name): _stat(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    members = {pid for pid, st in stats.items() if st and st[1] == pgid}
    grown = True
    while grown:
        children = {pid for pid, st in stats.items() if st and st[0] in members} - members
        members |= children
        grown = bool(children)
    return members


def _kill_ray_processes(pgid: int | None) -> None:
    if pgid is None:
        return
    pids = _cluster_pids(pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(1.5)
