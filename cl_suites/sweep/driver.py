"""The sweep driver: check everything, start the runs as Ray tasks, watch, report.

Each run is one Ray **task** (``execute_group``; the seeds of one MEAL configuration that
train in one program, ``seed_groups``, share one) with ``num_cpus=cpus_per_run``,
``num_gpus=gpus_per_run``, ``max_retries`` (re-run when its worker process or node
dies; the retry resumes from the run's last checkpoint) and ``retry_exceptions=False``
(an exception is a deterministic failure: reported once, the other runs go on). Ray
starts as many tasks at once as the cluster's free resources allow.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from cl_suites.core.interrupts import interruption_reason
from cl_suites.errors import CLSuitesError
from cl_suites.sweep.cluster import (
    Connection,
    check_cluster,
    check_cuda_runs,
    check_local_gpus,
    check_run_resources,
    connect,
    import_ray,
    lost_nodes,
    parallel_runs,
)
from cl_suites.sweep.grid import RunSpec, SweepError, SweepSpec, group_request, seed_groups
from cl_suites.sweep.live import ProgressReader, render_table
from cl_suites.sweep.sweep_dir import SweepDir, now_iso, write_json
from cl_suites.sweep.worker import execute_group, runs_a_sweep_task

DEFAULT_EXECUTION: dict[str, Any] = {
    "address": None,
    "cpus_per_run": 1.0,
    "gpus_per_run": 0.0,
    "num_cpus": None,
    "max_retries": 3,
}
"""Execution settings when neither the caller nor the sweep directory gives them.
``max_retries``: re-runs of a run whose worker or node died (Ray's task retries)."""
REFRESH_S = 1.0
DONE_STATES = ("finished", "skipped")


@dataclass
class RunOutcome:
    """The end state of one run: ``finished``, ``skipped`` (finished before a
    ``--resume``), ``failed`` (its job raised), ``lost`` (its worker died more often
    than ``max_retries``) or ``interrupted`` (the driver was stopped)."""

    name: str
    state: str
    attempts: int
    error: str | None
    run_dir: Path


@dataclass
class SweepResult:
    sweep_dir: Path
    outcomes: list[RunOutcome] = field(default_factory=list)
    report_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return all(o.state in DONE_STATES for o in self.outcomes)

    def by_name(self) -> dict[str, RunOutcome]:
        return {o.name: o for o in self.outcomes}


def preflight(runs: list[RunSpec], probe_device: bool = False) -> set[Any]:
    """Resolve every run's configuration as its worker will (no simulator is started);
    raise one ``SweepError`` listing every bad value before anything runs. Returns the
    runs' devices (``JobSpec.device``).

    ``probe_device``: the runs train on this machine (the sweep's own local Ray
    instance), so a device it does not have is refused here (starting no CUDA context);
    otherwise only the value is checked (a cluster's nodes may have other devices)."""
    problems: dict[str, list[str]] = {}
    seen: set[tuple[Any, ...]] = set()
    devices: set[Any] = set()
    for run in runs:
        key = (run.request.suite, run.request.method, run.request.learner)
        if key in seen:
            continue
        seen.add(key)
        try:
            devices.update(spec.device for spec in _check_run(run, probe_device))
        except (CLSuitesError, KeyError, ValueError, ImportError) as e:  # bad input, by class
            message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            problems.setdefault(str(message), []).append(run.name)
    if problems:
        lines = [
            f"  ({i}) {msg} ({_some_runs(names)})"
            for i, (msg, names) in enumerate(problems.items(), 1)
        ]
        raise SweepError("bad sweep grid, nothing was started:\n" + "\n".join(lines))
    return devices


def _some_runs(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"run{'s' if len(names) > 1 else ''} {', '.join(names[:shown])}{more}"


def _check_run(run: RunSpec, probe_device: bool) -> list[Any]:
    """Resolve ``run`` as the main job would (every suite, MEAL included), building nothing;
    its ``JobSpec``s."""
    from cl_suites.job.run_spec import resolve

    return resolve(run.request, probe_device=probe_device)


def run_sweep(
    spec: SweepSpec | None,
    sweep_dir: str | Path,
    *,
    resume: bool = False,
    address: str | None = None,
    cpus_per_run: float | None = None,
    gpus_per_run: float | None = None,
    num_cpus: int | None = None,
    max_retries: int | None = None,
    check: bool = True,
    live: bool = True,
    report: bool = True,
    console: Console | None = None,
) -> SweepResult:
    """Run every run of ``spec`` as a Ray task and write ``sweep_dir``.

    Args:
        spec: the grid; with ``resume=True`` it may be ``None`` (the stored grid is used),
            otherwise it must equal the stored one.
        sweep_dir: the sweep directory (on a filesystem every Ray node sees).
        resume: continue the sweep in ``sweep_dir``: finished runs are skipped, the others
            continue from their last checkpoint.
        address: ``None``/``"local"`` starts a new local Ray instance (``num_cpus`` CPUs,
            default all); ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:10001"`` joins a
            cluster. If this process already called ``ray.init``, that instance is used.
        cpus_per_run / gpus_per_run: Ray resources of one run (fractional GPUs allowed).
        max_retries: re-runs of a run whose worker or node dies.
        check: resolve every run before starting (``False`` lets bad runs fail in their
            worker; for tests of failure handling).
        live: show the live table (else only one line per event).
        report: write the metrics report of the finished runs to ``SWEEP_DIR/report``.

    Unset execution settings come from the sweep directory (``resume``), else
    ``DEFAULT_EXECUTION``. Raises ``SweepError`` (bad grid, directory or cluster) and
    ``ImportError`` (Ray missing) before any run starts.
    """
    console = console or Console()
    import_ray()
    sdir = SweepDir(Path(sweep_dir).absolute())
    if resume:
        spec = sdir.check_resume(spec)
        stored = sdir.stored_execution()
    else:
        if spec is None:
            raise SweepError("no grid given (suites, methods, seeds)")
        sdir.check_new(spec)
        stored = {}
    given = {
        "address": address,
        "cpus_per_run": cpus_per_run,
        "gpus_per_run": gpus_per_run,
        "num_cpus": num_cpus,
        "max_retries": max_retries,
    }
    execution = {
        key: given[key] if given[key] is not None else stored.get(key, default)
        for key, default in DEFAULT_EXECUTION.items()
    }
    if execution["address"] == "local":
        execution["address"] = None
    if address is not None and address != stored.get("address"):
        execution["num_cpus"] = num_cpus  # a stored local size means nothing on a cluster
    if int(execution["max_retries"]) < 0:
        raise SweepError(f"--max-retries must be >= 0, got {execution['max_retries']}")
    cpus, gpus = float(execution["cpus_per_run"]), float(execution["gpus_per_run"])
    check_run_resources(cpus, gpus)
    # the sweep's own local instance: its runs train on this machine, checked here first
    local = not execution["address"] and not import_ray().is_initialized()
    if local:
        check_local_gpus(gpus)
    runs = spec.runs()
    devices = preflight(runs, probe_device=local) if check else set()

    connection = connect(execution["address"], execution["num_cpus"])
    try:
        total = check_cluster(connection.ray, execution["address"] or "", cpus, gpus)
        where = (
            "a new local Ray instance"
            if connection.owned and not execution["address"]
            else f"the Ray cluster at {connection.address}"
        )
        check_cuda_runs(total, devices, where)  # a cluster's nodes: known once joined
        sdir.write_identity(spec, execution)
        console.print(
            f"sweep of {len(runs)} runs in [bold]{sdir.path}[/bold] on {where} "
            f"({total['nodes']} node(s), {total['CPU']:g} CPUs, {total['GPU']:g} GPUs): up to "
            f"{parallel_runs(total, cpus, gpus)} runs at once with {cpus:g} CPU(s) and "
            f"{gpus:g} GPU(s) each"
        )
        result = _execute(connection, sdir, runs, resume, cpus, gpus, execution, live, console)
    finally:
        connection.close()
    _write_summary(sdir, result)
    if report:
        result.report_dir = _write_report(sdir, result, console)
    return result


def _execute(
    connection: Connection,
    sdir: SweepDir,
    runs: list[RunSpec],
    resume: bool,
    cpus: float,
    gpus: float,
    execution: dict[str, Any],
    live: bool,
    console: Console,
) -> SweepResult:
    ray = connection.ray
    invocation = uuid.uuid4().hex[:12]
    task = ray.remote(
        num_cpus=cpus,
        num_gpus=gpus,
        max_calls=1 if gpus > 0 else 0,  # a GPU run's process exits to free the GPU
        max_retries=int(execution["max_retries"]),
        retry_exceptions=False,
    )(execute_group)
    result = SweepResult(sdir.path)
    rows: dict[str, dict[str, Any]] = {}
    pending: dict[Any, tuple[RunSpec, ...]] = {}
    for group in seed_groups(runs):
        for run in group:
            status = sdir.read_status(run.name)
            attempts = len(status.get("attempts", []))
            if resume and status.get("state") == "finished":
                note = "finished before"
                rows[run.name] = {"state": "skipped", "attempt": attempts, "note": note}
            else:
                note = f"one program with {group[0].name}" if run is not group[0] else ""
                rows[run.name] = {"state": "queued", "attempt": attempts, "note": note}
        if all(rows[run.name]["state"] == "skipped" for run in group):
            continue
        names = [run.name for run in group]
        ref = task.options(name=f"cl-suites-sweep:{names[0]}").remote(
            group_request(group), str(sdir.path), names, invocation, cpus, gpus
        )
        pending[ref] = group

    reader = ProgressReader()
    title = f"cl-suites sweep {sdir.path}"
    try:
        with _live(
            live, console, render_table(title, _table_rows(runs, rows, sdir, reader))
        ) as view:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=REFRESH_S)
                for ref in ready:
                    group = pending.pop(ref)
                    # a retry that began and ended between two polls is still announced
                    for run in group:
                        _update_running(ray, run, rows[run.name], sdir, invocation, console)
                    _collect(ray, ref, group, rows, console)
                for group in pending.values():
                    for run in group:
                        _update_running(ray, run, rows[run.name], sdir, invocation, console)
                if view is not None:
                    view.update(render_table(title, _table_rows(runs, rows, sdir, reader)))
    except KeyboardInterrupt as e:
        reason = (
            f"the sweep was stopped ({interruption_reason(e)}); `cl-suites sweep --resume "
            f"{sdir.path}` continues it"
        )
        for ref in pending:
            ray.cancel(ref, force=True)  # stop its worker; --resume continues the run
        stopped = [run for group in pending.values() for run in group]
        _wait_for_workers(sdir, stopped)
        for run in stopped:
            sdir.mark_interrupted(run.name, reason)
            rows[run.name].update(state="interrupted", error=reason, note="driver stopped")
        console.print(
            f"[yellow]sweep interrupted[/yellow]; continue it with "
            f"`cl-suites sweep --resume {sdir.path}`"
        )
    if not live:
        console.print(render_table(title, _table_rows(runs, rows, sdir, reader)))
    for run in runs:
        row = rows[run.name]
        attempts = len(sdir.read_status(run.name).get("attempts", [])) or row["attempt"]
        result.outcomes.append(
            RunOutcome(run.name, row["state"], attempts, row.get("error"), sdir.run_dir(run.name))
        )
    return result


WORKER_EXIT_WAIT_S = 10.0
"""How long a stopped sweep waits for its cancelled workers on this host to exit before it
marks their runs interrupted (so that no late write of theirs says ``running`` again)."""


def _wait_for_workers(sdir: SweepDir, runs: list[RunSpec]) -> None:
    """Wait (bounded) until the workers of ``runs``' last attempts on this host exited."""
    host = socket.gethostname()
    pids = []
    for run in runs:
        attempts = sdir.read_status(run.name).get("attempts") or []
        if attempts and attempts[-1].get("host") == host and attempts[-1].get("pid"):
            pids.append(int(attempts[-1]["pid"]))
    deadline = time.monotonic() + WORKER_EXIT_WAIT_S
    while any(runs_a_sweep_task(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


@contextlib.contextmanager
def _live(enabled: bool, console: Console, table: Any) -> Iterator[Live | None]:
    if not enabled:
        yield None
        return
    with Live(table, console=console, refresh_per_second=2, transient=False) as view:
        yield view


def _collect(
    ray: Any,
    ref: Any,
    group: tuple[RunSpec, ...],
    rows: dict[str, dict[str, Any]],
    console: Console,
) -> None:
    """Record a returned task (one run, or the seeds trained in one program): finished,
    failed (its job raised) or lost (worker died)."""
    try:
        outs = ray.get(ref)
    except ray.exceptions.RayError as e:  # worker/node died more often than max_retries
        lines = str(e).strip().splitlines()
        lost = {"state": "lost", "error": f"{type(e).__name__}: {lines[0] if lines else ''}"}
        outs = [lost] * len(group)
    for run, out in zip(group, outs, strict=True):
        row = rows[run.name]
        row.update(state=out["state"], error=out.get("error"), note=out.get("error") or "")
        row["attempt"] = out.get("attempt", row["attempt"])
        if out["state"] == "finished":
            console.print(f"[green]finished[/green] {run.name}")
        else:
            error = escape(str(out.get("error")))
            console.print(f"[red]{out['state']}[/red] {run.name}: {error}")


def _update_running(
    ray: Any,
    run: RunSpec,
    row: dict[str, Any],
    sdir: SweepDir,
    invocation: str,
    console: Console,
) -> None:
    """running / retrying, from the attempts the run's workers recorded; a new attempt of
    this invocation beyond the first is announced once as a retry, saying whether the
    earlier attempt's node was lost (Ray marks it dead) or only its worker died."""
    attempts = sdir.read_status(run.name).get("attempts", [])
    mine = [a for a in attempts if a.get("invocation") == invocation]
    if not mine:
        return
    if len(mine) > 1 and len(attempts) > row["attempt"]:
        node = attempts[-2].get("node_id")
        lost = node is not None and node in lost_nodes(ray)
        row["cause"] = f"node {node[:12]} was lost" if lost else "worker died"
        console.print(
            f"[yellow]retrying[/yellow] {run.name}: its {row['cause']}; attempt "
            f"{len(attempts)} resumes from the last checkpoint on node "
            f"{str(attempts[-1].get('node_id'))[:12]}"
        )
    if len(mine) > 1:
        row["note"] = f"{row.get('cause', 'worker died')}; resumed from checkpoint"
    elif len(attempts) > 1:
        row["note"] = "resumed from checkpoint"
    row.update(state="running" if len(mine) == 1 else "retrying", attempt=len(attempts))


def _table_rows(
    runs: list[RunSpec], rows: dict[str, dict[str, Any]], sdir: SweepDir, reader: ProgressReader
) -> list[dict[str, Any]]:
    return [
        {"name": run.name, **rows[run.name], "progress": reader.read(sdir.run_dir(run.name))}
        for run in runs
    ]


def _write_summary(sdir: SweepDir, result: SweepResult) -> None:
    write_json(
        sdir.summary_file,
        {
            "written": now_iso(),
            "runs": [
                {
                    "name": o.name,
                    "state": o.state,
                    "attempts": o.attempts,
                    "error": o.error,
                    "run_dir": str(o.run_dir),
                }
                for o in result.outcomes
            ],
        },
    )


def _write_report(sdir: SweepDir, result: SweepResult, console: Console) -> Path | None:
    """``build_report`` over every finished run; a failure is a note, never lost runs."""
    done = [o.run_dir for o in result.outcomes if o.state in DONE_STATES]
    if not done:
        console.print("no finished runs: no report written")
        return None
    from cl_suites.metrics.report import build_report

    try:
        build_report(done, sdir.report_dir, progress=False)
    except Exception as e:
        console.print(
            f"[yellow]note:[/yellow] the sweep report failed ({type(e).__name__}: {e}); "
            f"write it later with `cl-suites report {sdir.path}/runs --out {sdir.report_dir}`"
        )
        return None
    console.print(f"report of {len(done)} runs written to [bold]{sdir.report_dir}[/bold]")
    return sdir.report_dir
