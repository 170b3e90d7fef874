"""The subcommands of ``cl-suites``: ``list``, ``info``, ``run``, ``options``, ``report``,
``sweep`` and ``reproduce``, one :class:`Command` each in :data:`COMMANDS`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from cl_suites.cli import output
from cl_suites.cli import reproduce as reproduce_cli
from cl_suites.cli.arguments import (
    info_arguments,
    options_arguments,
    report_arguments,
    run_arguments,
    suite_overrides,
)
from cl_suites.cli.errors import EXIT_OK
from cl_suites.cli.run import cmd_run
from cl_suites.request import RunRequest
from cl_suites.suites import SUITE_TEMPLATES, SUITES, find_suite, suite_template
from cl_suites.sweep import cli as sweep_cli


@dataclass(frozen=True)
class Command:
    """One subcommand: ``cl-suites <name> ...``."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


def cmd_list(args: argparse.Namespace) -> int:
    """Every suite in two columns that fit any terminal width: id, extra and install
    status; budget and tasks (the only text that wraps). Ids with a parameter
    (``CLSuite/MEAL-<N>-v0``) get one row with their entry's unit and description."""
    table = Table(title="cl-suites benchmarks", box=box.SIMPLE_HEAD)
    table.add_column("suite (extra: installed)", no_wrap=True)
    table.add_column("steps per task; tasks", ratio=1)

    def status(extra: str, installed: bool) -> str:
        return f"{extra}: " + ("[green]yes[/green]" if installed else "[red]no[/red]")

    for suite in SUITES.values():
        try:
            sequence = suite.build()
        except (ImportError, ModuleNotFoundError) as e:  # a suite module not shipped
            table.add_row(f"{suite.id}\n{status(suite.extra, False)}", escape(str(e)))
            continue
        names = ", ".join(f"{i}-{t.name}" for i, t in enumerate(sequence.tasks))
        table.add_row(
            f"[bold]{suite.id}[/bold]\n{status(suite.extra, suite.installed)}",
            f"{sequence.tasks[0].budget:,} {suite.step_unit.name} x {sequence.cycles} "
            f"cycle{'s' if sequence.cycles != 1 else ''}, eval every "
            f"{sequence.eval_every:,}\n{names}",
        )
    for suite_id in SUITE_TEMPLATES:
        suite = suite_template(suite_id)(1)
        table.add_row(
            f"[bold]{escape(suite_id)}[/bold]\n{status(suite.extra, suite.installed)}",
            f"{suite.step_unit.text}\n{escape(suite.description)}",
        )
    output.console.print(table)
    return EXIT_OK


def _describe_suite(suite: str, overrides: dict[str, Any]) -> tuple[str, list[str], Any, str]:
    """``(id, description lines, TaskSequence, step unit)`` of any catalog id."""
    info = find_suite(suite)
    instance = info.instance(**overrides)
    lines = [
        info.description,
        f"defined in: {info.paper}; extra: {info.extra}",
        f"{instance.num_agents} agent(s) per env; steps are {info.step_unit.text}",
    ]
    return info.id, lines, instance.sequence, info.step_unit.name


def cmd_info(args: argparse.Namespace) -> int:
    suite_id, lines, sequence, unit = _describe_suite(args.suite, suite_overrides(args))
    output.console.print(f"[bold]{suite_id}[/bold]: {escape(lines[0])}")
    for line in lines[1:]:
        output.console.print(escape(line))
    output.console.print(
        f"{len(sequence.tasks)} tasks x {sequence.cycles} cycles, eval every "
        f"{sequence.eval_every:,} {unit} with {sequence.eval_episodes} episodes per "
        f"task and split; metric settings: {escape(str(dict(sequence.metric_settings)))}"
    )
    table = Table(title=f"schedule with {args.num_envs} sub-env(s), in {unit}")
    for column in ("#", "cycle", "task", "splits", "start step", "end step"):
        table.add_column(column, justify="right")
    for seg in sequence.schedule(args.num_envs):
        splits = "/".join(sequence.tasks[seg.task_id].splits)
        table.add_row(
            str(seg.index),
            str(seg.cycle),
            f"{seg.task_id}-{escape(seg.task_name)}",
            splits,
            f"{seg.start_step:,}",
            f"{seg.end_step:,}",
        )
    output.console.print(table)
    return EXIT_OK


def cmd_options(args: argparse.Namespace) -> int:
    """Every option of a run (``--suite``, ``--method``, ``--learner``, ``--preset``) with
    its default for that run and its one-line doc, by section."""
    from cl_suites.job.run_kinds import run_kind

    request = RunRequest(
        suite=args.suite, method=args.method, learner=args.learner, preset=args.preset
    )
    output.print_sections(*run_kind(args.method).options(request))
    return EXIT_OK


def coordination_matrices(run_dirs: list[str], episodes: int) -> None:
    """``report --coordination``: MEAL's coordination matrix of every MEAL run among
    ``run_dirs`` (directories holding runs stand for them), each stored as
    ``RUN_DIR/coordination_matrix.csv``. Every run is checked before any is computed: a
    MEAL run without its task policies, or no MEAL run at all, is one line."""
    from cl_suites.errors import InputError
    from cl_suites.job.task_policies import check_coordination_inputs, coordination_matrix_of_run
    from cl_suites.metrics.runs import expand_run_dirs
    from cl_suites.rundir.runlog import METADATA_FILE, read_metadata
    from cl_suites.suites import find_suite

    def is_meal(run: Path) -> bool:
        try:
            return find_suite(str(read_metadata(run).get("suite_id"))).family == "meal"
        except Exception:  # not a run: the report names what is wrong with it
            return False

    given = expand_run_dirs(run_dirs)
    runs = [run for run in given if is_meal(run)]
    if not runs:
        if any(not (run / METADATA_FILE).is_file() for run in given):
            return  # not a run: the report names what is wrong with it
        raise InputError(
            "--coordination: none of the runs is a MEAL run (the coordination matrix is MEAL's)"
        )
    for run in runs:
        check_coordination_inputs(run)
    for run in runs:
        output.err_console.print(
            f"coordination matrix of {escape(str(run))} ({episodes} episodes a cell) ..."
        )
        coordination_matrix_of_run(run, episodes=episodes)


def cmd_report(args: argparse.Namespace) -> int:
    from cl_suites.metrics.published import protocol_notes
    from cl_suites.metrics.report import SUMMARY_TITLES, build_report
    from cl_suites.metrics.tables import rich_table

    if args.coordination:
        coordination_matrices(args.run_dirs, args.coordination_episodes)
    result = build_report(
        [Path(p) for p in args.run_dirs],
        Path(args.out),
        progress=True,
        window=args.window,
        meal_forgetting=args.meal_forgetting,
        meal_ci=args.meal_ci,
        reference_runs=[Path(p) for p in args.reference_runs],
    )
    for key, frame in result.tables.items():
        shown = frame.drop(
            columns=["protocol differences", "paper protocol", "task"], errors="ignore"
        )
        output.print_frame(rich_table(shown, SUMMARY_TITLES[key]), shown, SUMMARY_TITLES[key])
    if "Published" in result.tables:
        diffs = result.tables["Published"].reset_index().drop_duplicates(["suite", "method"])
        for suite, method, text in zip(
            diffs["suite"], diffs["method"], diffs["protocol differences"], strict=True
        ):
            output.console.print(escape(f"protocol differences {suite}/{method}: {text}"))
        for source, note in protocol_notes(result.tables["Published"]):
            output.console.print(escape(f"paper protocol, {source}: {note}"))
    for note in result.notes[:MAX_NOTES]:  # repairs and every n/a, as in notes.md
        output.err_console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if len(result.notes) > MAX_NOTES:
        output.err_console.print(
            f"[yellow]note:[/yellow] {len(result.notes) - MAX_NOTES} more in notes.md"
        )
    output.console.print(f"report written to [bold]{escape(str(result.html))}[/bold]")
    return EXIT_OK


MAX_NOTES = 30
"""Notes of a report printed on the console (all of them are in ``notes.md``)."""


COMMANDS: dict[str, Command] = {
    "list": Command("every suite, its tasks, budgets and install status", lambda p: None, cmd_list),
    "info": Command("a suite's schedule", info_arguments, cmd_info),
    "run": Command(
        "train (or play randomly) over a whole sequence",
        run_arguments,
        cmd_run,
        description="Train a baseline (or a random agent) over a whole suite and write a run\n"
        "directory (metadata.json, eval.csv, episodes.csv, checkpoint/, report/).",
    ),
    "options": Command(
        "every option of a run with its default and doc, by section",
        options_arguments,
        cmd_options,
        description="Every option a run takes (job, learner, method, policy, suite) with its\n"
        "default for that suite, method, learner and preset, and a one-line doc.",
    ),
    "report": Command(
        "metrics, plots and tables from run directories", report_arguments, cmd_report
    ),
    "sweep": Command(
        sweep_cli.HELP, sweep_cli.add_arguments, sweep_cli.run, description=sweep_cli.DESCRIPTION
    ),
    "reproduce": Command(
        reproduce_cli.HELP,
        reproduce_cli.add_arguments,
        reproduce_cli.run,
        description=reproduce_cli.DESCRIPTION,
    ),
}
"""The subcommands, in ``--help`` order. A new one is one entry here."""
