"""The ``cl-suites`` command: list suites, show schedules, run sequences, write reports."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cl_suites.api import make_sequence
from cl_suites.suites import COMMON_KWARGS, SUITES, find_suite

METHODS = ("random", "ft", "ewc", "online-ewc", "l2", "mas", "pnc", "clear")
LEARNERS = ("ppo", "vtrace")
PRESETS = ("paper", "small")

console = Console(width=max(Console().width, 140))


def _suite_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in COMMON_KWARGS if getattr(args, k, None) is not None}


def cmd_list(args: argparse.Namespace) -> int:
    table = Table(title="cl-suites benchmarks (budgets in agent steps)")
    for column in ("id", "tasks", "steps/task", "cycles", "eval every", "extra", "installed"):
        table.add_column(column)
    for suite in SUITES.values():
        try:
            sequence = suite.build()
        except (ImportError, ModuleNotFoundError) as e:  # a suite module not shipped
            table.add_row(suite.id, f"[red]{e}[/red]", "", "", "", suite.extra, "no")
            continue
        names = ", ".join(f"{i}-{t.name}" for i, t in enumerate(sequence.tasks))
        table.add_row(
            suite.id,
            names,
            f"{sequence.tasks[0].budget:,}",
            str(sequence.cycles),
            f"{sequence.eval_every:,}",
            suite.extra,
            "[green]yes[/green]" if suite.installed else "[red]no[/red]",
        )
    if importlib.util.find_spec("cl_suites.meal") is not None:
        table.add_row(
            "CLSuite/MEAL-<N>-v0",
            "N Overcooked layouts (PettingZoo; cl_suites.make_parallel)",
            "",
            "",
            "",
            "meal",
            "[green]yes[/green]" if importlib.util.find_spec("jax") else "[red]no[/red]",
        )
    console.print(table)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    suite = find_suite(args.suite)
    sequence = make_sequence(args.suite, **_suite_overrides(args))
    console.print(f"[bold]{suite.id}[/bold]: {suite.description}")
    console.print(f"defined in: {suite.paper}; extra: {suite.extra}")
    console.print(
        f"{len(sequence.tasks)} tasks x {sequence.cycles} cycles, eval every "
        f"{sequence.eval_every:,} agent steps with {sequence.eval_episodes} episodes per "
        f"task and split; metric settings: {dict(sequence.metric_settings)}"
    )
    table = Table(title=f"schedule with {args.num_envs} sub-env(s)")
    for column in ("#", "cycle", "task", "splits", "start step", "end step"):
        table.add_column(column, justify="right")
    for seg in sequence.schedule(args.num_envs):
        splits = "/".join(sequence.tasks[seg.task_id].splits)
        table.add_row(
            str(seg.index),
            str(seg.cycle),
            f"{seg.task_id}-{seg.task_name}",
            splits,
            f"{seg.start_step:,}",
            f"{seg.end_step:,}",
        )
    console.print(table)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    overrides = _suite_overrides(args)
    suite_name = args.suite.split(":")[-1].split("/")[-1].removesuffix("-v0")
    run_dir = Path(args.run_dir or f"runs/{suite_name}-{args.method}-s{args.seed}")
    if args.resume and args.run_dir is None:
        raise SystemExit("--resume needs --run-dir RUN_DIR")
    if args.method == "random":
        if args.resume:
            raise SystemExit("random-agent runs are not resumable; start a new --run-dir")
        from cl_suites.training import run_random_agent

        run_random_agent(
            args.suite,
            seed=args.seed,
            run_dir=run_dir,
            num_envs=args.num_envs or 8,
            vectorization_mode=args.vectorization_mode,
            progress=True,
            **overrides,
        )
    else:
        from baselines_sb3.main_job import run_main_job

        run_main_job(
            suite=args.suite,
            method=args.method,
            learner=args.learner,
            preset=args.preset,
            seed=args.seed,
            run_dir=run_dir,
            resume=args.resume,
            num_envs=args.num_envs,
            overrides={**overrides, "progress": True, "capture_video": args.capture_video},
        )
    console.print(f"run written to [bold]{run_dir}[/bold]")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from cl_suites.metrics.report import build_report, format_summary_markdown

    result = build_report([Path(p) for p in args.run_dirs], Path(args.out))
    console.print(format_summary_markdown(result))
    console.print(f"report written to [bold]{result.html}[/bold]")
    return 0


def _add_suite_kwargs(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suite overrides (default: the paper's values)")
    group.add_argument("--steps-per-task", type=int, help="training budget per task, agent steps")
    group.add_argument("--cycles", type=int, help="passes over the task list")
    group.add_argument("--eval-every", type=int, help="evaluation cadence, agent steps")
    group.add_argument("--eval-episodes", type=int, help="episodes per task and split")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cl-suites", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="every suite, its tasks, budgets and install status")

    info = sub.add_parser("info", help="a suite's schedule")
    info.add_argument("suite", help="e.g. CLSuite/Procgen6-v0 or Procgen6")
    info.add_argument("--num-envs", type=int, default=1)
    _add_suite_kwargs(info)

    run = sub.add_parser("run", help="train (or play randomly) over a whole sequence")
    run.add_argument("--suite", required=True, help="e.g. Procgen6 or CLSuite/Procgen6-v0")
    run.add_argument("--method", choices=METHODS, default="ft")
    run.add_argument(
        "--learner",
        choices=LEARNERS,
        default=None,
        help="learner (default: the suite's, see baselines_sb3.presets.default_learner)",
    )
    run.add_argument("--preset", choices=PRESETS, default="paper")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--run-dir", help="run directory (default runs/<suite>-<method>-s<seed>)")
    run.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    run.add_argument("--num-envs", type=int, help="parallel sub-envs")
    run.add_argument(
        "--vectorization-mode",
        choices=("sync", "async"),
        default="sync",
        help="batching of simulators without a native batched backend",
    )
    run.add_argument(
        "--capture-video",
        action="store_true",
        help="record one evaluation episode per task and split into RUN_DIR/videos/",
    )
    _add_suite_kwargs(run)

    report = sub.add_parser("report", help="metrics, plots and tables from run directories")
    report.add_argument("run_dirs", nargs="+", help="run directories")
    report.add_argument("--out", default="report", help="output directory")
    return parser


COMMANDS = {"list": cmd_list, "info": cmd_info, "run": cmd_run, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (KeyError, ValueError, ImportError, FileExistsError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        console.print(f"[red]error:[/red] {message}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
