"""What a Ray worker does for one run of a sweep (or for several seeds of one MEAL
configuration trained in one program): the unchanged main job, with resume.

``execute_group`` runs in a Ray worker process: CPU runs may reuse a worker that ran an
earlier run (the job seeds every RNG it uses and sets its torch threads, so results do
not depend on the process), GPU runs get a fresh one (``max_calls=1``: the process exits
and frees the GPU). It sends the process's output to the run's log while it runs and
records each attempt in
``SWEEP_DIR/status/<run>.json``. The driver hands it the run's ``RunRequest`` (Ray pickles
it), which it resolves and runs as ``run_main_job`` does. An attempt whose run directory
already holds a run (a retry after the worker or node died, or ``cl-suites sweep
--resume``) continues it (``resume=True``): the log rows written after the last checkpoint
are cut and re-run, so no eval record is lost or duplicated. An exception is a
deterministic failure: it is recorded with its message and returned, never raised, so Ray
does not retry it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cl_suites.request import RunRequest
from cl_suites.sweep.sweep_dir import SweepDir, now_iso, read_json, write_json

PREVIOUS_ATTEMPT_WAIT_S = 60.0
"""How long an attempt waits for a still-running earlier attempt of the same run on the
same host (a worker of a killed driver that Ray has not reaped yet)."""


def execute_run(
    request: RunRequest,
    sweep_dir: str,
    name: str,
    invocation: str,
    cpus: float,
    gpus: float,
) -> dict[str, Any]:
    """Run (or continue) one run of a sweep; the body of the sweep's Ray task.

    Args:
        request: the run's request (``RunSpec.request``).
        sweep_dir: the sweep directory (on a filesystem every node sees).
        name: the run's name (its directory is ``SWEEP_DIR/runs/<name>``).
        invocation: id of the driver invocation that submitted it (``--resume`` starts a
            new one), recorded with the attempt.
        cpus / gpus: the run's Ray resources (torch threads, device choice).

    Returns:
        ``{"name", "state": "finished" | "failed", "error", "attempt"}``.
    """
    return execute_group(request, sweep_dir, [name], invocation, cpus, gpus)[0]


def execute_group(
    request: RunRequest,
    sweep_dir: str,
    names: list[str],
    invocation: str,
    cpus: float,
    gpus: float,
) -> list[dict[str, Any]]:
    """Run (or continue) the several seeds of one MEAL configuration in one program
    (``request.seeds``: one name per seed, in order), each in its own run directory
    ``SWEEP_DIR/runs/<name>``; a request without ``seeds``: the one run ``names[0]``.
    ``request`` is a group's (``cl_suites.sweep.grid.group_request``). The group's output
    goes to the first run's log; the others' logs say so. Returns one
    :func:`execute_run` result per name."""
    sdir = SweepDir(Path(sweep_dir))
    log_path = sdir.log_file(names[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for other in names[1:]:
        with sdir.log_file(other).open("a") as f:
            f.write(f"=== {now_iso()} {other}: trains in one program with {names[0]}; "
                    f"its output is in {log_path}\n")  # fmt: skip
    with _output_to(log_path):
        return _attempt(request, sdir, names, invocation, cpus, gpus)


def _attempt(
    request: RunRequest,
    sdir: SweepDir,
    names: list[str],
    invocation: str,
    cpus: float,
    gpus: float,
) -> list[dict[str, Any]]:
    statuses = []
    for name in names:
        status_path = sdir.status_file(name)
        _wait_for_previous_attempt(read_json(status_path) or {})
        status = read_json(status_path) or {"name": name, "attempts": []}
        attempt = {
            "invocation": invocation,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            **_ray_context(),
            "started": now_iso(),
        }
        status["attempts"].append(attempt)
        status.update(state="running", error=None)
        write_json(status_path, status)
        statuses.append((status_path, status, attempt))

    run_dirs = [sdir.run_dir(name) for name in names]
    resume = any((d / "metadata.json").exists() for d in run_dirs)
    print(
        f"=== {now_iso()} {', '.join(names)}: attempt {len(statuses[0][1]['attempts'])} on "
        f"{statuses[0][2]['host']} pid {os.getpid()} ({'resuming' if resume else 'starting'})",
        flush=True,
    )
    error = None
    try:
        from cl_suites.job.learners import load_learner
        from cl_suites.job.main_job import run_resolved
        from cl_suites.job.run_spec import resolve

        _configure_resources(cpus, gpus)
        overrides = {"progress": False, "report": False, **request.overrides}
        refused = load_learner(request.learner).refused_job_options  # JAX: JAX_PLATFORMS
        if "torch_threads" not in refused:
            overrides.setdefault("torch_threads", max(1, int(cpus)))  # the run's whole CPUs
        if gpus <= 0 and "device" not in refused:
            overrides.setdefault("device", "cpu")
        specs = resolve(dataclasses.replace(request, overrides=overrides))
        run_resolved(specs, request.run_seeds, run_dirs, resume)
    except (Exception, SystemExit) as e:  # the job's own error: deterministic, not retried
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        error = f"{type(e).__name__}: {message}"
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    state = "failed" if error else "finished"
    results = []
    for (status_path, status, attempt), name in zip(statuses, names, strict=True):
        attempt.update(ended=now_iso(), outcome=state)
        status.update(state=state, error=error)
        write_json(status_path, status)
        results.append(
            {"name": name, "state": state, "error": error, "attempt": len(status["attempts"])}
        )
    return results


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so C libraries'
    output too) to ``log_path``, and give the worker its own back afterwards."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, source in zip((1, 2), saved, strict=True):
            os.dup2(source, target)
            os.close(source)


def _ray_context() -> dict[str, Any]:
    try:
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "gcs_address": ctx.gcs_address}
    except Exception:  # not inside Ray (direct calls in tests or debugging)
        return {"node_id": None, "gcs_address": None}


def _wait_for_previous_attempt(status: dict[str, Any]) -> None:
    """Wait until an unfinished earlier attempt on this host has exited (bounded)."""
    attempts = status.get("attempts") or []
    if (
        not attempts
        or attempts[-1].get("outcome")
        or attempts[-1].get("host") != (socket.gethostname())
    ):
        return
    pid = int(attempts[-1].get("pid") or 0)
    deadline = time.monotonic() + PREVIOUS_ATTEMPT_WAIT_S
    while pid and pid != os.getpid() and runs_a_sweep_task(pid):
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)


def runs_a_sweep_task(pid: int) -> bool:
    """Whether process ``pid`` is a Ray worker executing a sweep run right now (Ray sets
    a busy worker's title to ``ray::<function>``, an idle one's to ``ray::IDLE``)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmdline.startswith(f"ray::{execute_group.__name__}".encode())


def _configure_resources(cpus: float, gpus: float) -> None:
    """torch threads = the run's whole CPUs; JAX (MEAL) shares fractional GPUs politely."""
    import torch

    torch.set_num_threads(max(1, int(cpus)))
    if gpus <= 0:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    elif gpus < 1:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
