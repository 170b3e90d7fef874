"""``cl-suites reproduce TABLE``: the grid behind a published table, run as ``cl-suites sweep``
runs a grid, with our rows beside the published ones.

The tables are data (``cl_suites.sweep.reproduce.TABLES``); ``--dry-run`` prints the runs,
their steps and the estimated hours (``cl_suites.sweep.costs``) and starts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from rich.markup import escape

from cl_suites.cli import output
from cl_suites.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from cl_suites.config import parse_set
from cl_suites.errors import CLIError

HELP = "run the grid behind a published table (CORA, MEAL) and compare with it"
DESCRIPTION = """Run the grid (suite, methods, learner, seeds, preset) behind one of the papers'
published tables as `cl-suites sweep` runs a grid (local Ray, or a cluster with --address),
then report our rows beside the published ones, both protocols named.

examples:
  cl-suites reproduce --list
  cl-suites reproduce meal-table2 --dry-run --cores 16
  cl-suites reproduce cora-procgen6 --address auto --gpus-per-run 0.25"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cl-suites reproduce``."""
    p.add_argument("table", nargs="?", metavar="TABLE", help="a table name (see --list)")
    p.add_argument("--list", action="store_true", help="the tables, one line each")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs, their steps and the estimated hours; start nothing",
    )
    p.add_argument(
        "--cores", type=int, default=16, metavar="N", help="cores of the estimate's machine"
    )
    p.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the estimate's machine has a GPU (default: yes)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="a run option that leaves the protocol (device, env_workers, checkpoint_every, ...)",
    )
    p.add_argument(
        "--sweep-dir", metavar="DIR", help="default: runs/reproduce-<TABLE> (one sweep per part)"
    )
    ray_group = p.add_argument_group("Ray (as cl-suites sweep)")
    ray_group.add_argument("--address", metavar="ADDR", help="auto, HOST:PORT or ray://HOST:10001")
    ray_group.add_argument("--cpus-per-run", type=float, metavar="X", help="default 1")
    ray_group.add_argument("--gpus-per-run", type=float, metavar="X", help="default 0")
    ray_group.add_argument("--num-cpus", type=int, metavar="N", help="CPUs of a local instance")
    ray_group.add_argument("--max-retries", type=int, metavar="N", help="default 3")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``cl-suites reproduce``."""
    from cl_suites.sweep import reproduce as rep

    if args.list:
        return _list(rep.TABLES)
    if not args.table:
        raise CLIError(
            f"give a TABLE ({', '.join(rep.TABLES)}) or --list; e.g. cl-suites reproduce "
            "meal-table2 --dry-run"
        )
    if args.cores < 1:
        raise CLIError(f"--cores must be >= 1, got {args.cores}")
    table = rep.find_table(args.table)
    rep.check_installed(table)
    overrides = dict(parse_set(text) for text in args.overrides)
    changes = rep.protocol_changes(table, overrides)
    if changes:
        raise CLIError(" | ".join(changes))
    parts = rep.with_overrides(table, overrides)
    if args.dry_run:
        return _dry_run(rep, table, parts, args)
    return _run(rep, table, parts, args)


def _list(tables: dict[str, Any]) -> int:
    width = max(len(name) for name in tables)
    print("published tables (cl-suites reproduce TABLE [--dry-run]):")
    for name, table in tables.items():
        print(f"  {name:<{width}}  {table.description}")
    return EXIT_OK


def _dry_run(rep: Any, table: Any, parts: Any, args: argparse.Namespace) -> int:
    runs = rep.plan(parts)
    unit = runs[0].unit
    print(f"{table.name}: {table.description}")
    for planned in runs:
        print(
            f"  {planned.part}: {planned.run.name}  {planned.tasks} tasks x {planned.cycles} "
            f"cycle(s) x {planned.steps_per_task:,} = {planned.steps:,} {planned.unit}"
        )
    total = sum(p.steps for p in runs)
    print(f"total: {len(runs)} runs, {total:,} {unit}")
    here = os.cpu_count() or 1
    for label, cores, gpu in (
        (f"this machine ({here} cores, CPU)", here, False),
        (f"{args.cores} cores{' + GPU' if args.gpu else ', CPU'}", args.cores, args.gpu),
    ):
        hours, basis = rep.hours(runs, cores, gpu)
        text = "unknown (no measured rate)" if math.isnan(hours) else f"{hours:,.1f} h"
        print(f"estimated time on {label}: {text}, runs one after another")
        for line in basis:
            print(f"    {line}")
    print("rates: ft's (CL methods cost more); where measured: cl_suites/data/costs.json")
    _protocols(rep, table, parts)
    return EXIT_OK


def _protocols(rep: Any, table: Any, parts: Any) -> None:
    print("reproduces:")
    for part in parts:
        for method in part.spec.methods:
            for suite in part.spec.suites:
                rows = rep.published_rows(part, method, suite)
                print(f"  {suite} {method}: {', '.join(rows) or 'no published row'}")
    presets = ", ".join(sorted({p.spec.preset for p in parts}))
    print(f"our protocol: preset {presets}; {table.protocol}")
    for line in rep.paper_protocols(table):
        print(f"published protocol, {line}")
    for note in table.notes:
        print(f"note: {note}")


def _run(rep: Any, table: Any, parts: Any, args: argparse.Namespace) -> int:
    from rich.console import Console

    from cl_suites.core.interrupts import sigterm_as_interrupt
    from cl_suites.sweep.driver import run_sweep
    from cl_suites.sweep.sweep_dir import SweepDir

    root = Path(args.sweep_dir or Path("runs") / f"reproduce-{table.name}")
    options = {
        key: getattr(args, key)
        for key in ("address", "cpus_per_run", "gpus_per_run", "num_cpus", "max_retries")
    }
    console = Console(width=max(Console().width, 140))
    outcomes = []
    with sigterm_as_interrupt():
        for part in parts:
            sweep_dir = root / part.name
            resume = SweepDir(sweep_dir.absolute()).stored() is not None
            if resume:
                console.print(f"continuing the sweep in {escape(str(sweep_dir))}")
            result = run_sweep(
                part.spec, sweep_dir, resume=resume, console=console, report=False, **options
            )
            outcomes.extend(result.outcomes)
            if any(o.state == "interrupted" for o in result.outcomes):
                break
    bad = [o for o in outcomes if o.state not in ("finished", "skipped")]
    for outcome in bad:
        console.print(f"[red]{outcome.state}[/red] {outcome.name}: {escape(outcome.error or '')}")
    if any(o.state == "interrupted" for o in bad):
        return EXIT_INTERRUPTED
    done = [o.run_dir for o in outcomes if o.state in ("finished", "skipped")]
    if done:
        _report(rep, table, parts, done, root / "report")
    return EXIT_FAILED if bad else EXIT_OK


def _report(rep: Any, table: Any, parts: Any, run_dirs: list[Path], out: Path) -> None:
    """The report of the finished runs, and our rows beside the table's published ones."""
    from cl_suites.metrics.report import build_report
    from cl_suites.metrics.tables import rich_table

    result = build_report(run_dirs, out, progress=False)
    frame = result.tables.get("Published")
    if frame is not None and not frame.empty:
        flat = frame.reset_index()
        sources = {f"{table.paper} {s}" for s in table.sources}
        flat = flat[flat["source"].isin(sources) & flat["suite"].isin(table.suites)]
        title = f"{table.name}: ours beside {table.paper} {', '.join(table.sources)}"
        shown = flat.drop(
            columns=["protocol differences", "paper protocol", "task"], errors="ignore"
        ).set_index(["suite", "method", "metric"])
        output.print_frame(rich_table(shown, title), shown, title)
        for (suite, method), grp in flat.groupby(["suite", "method"], sort=False):
            text = grp["protocol differences"].iloc[0]
            print(f"protocol differences {suite}/{method}: {text}")
    _protocols(rep, table, parts)
    print(f"report written to {out / 'report.html'}")
