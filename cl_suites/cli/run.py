"""``cl-suites run``: the flags and config file into one run request, handed to the run's
entry in the job layer (``cl_suites.job.run_kinds``) to resolve, check and start."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from rich.markup import escape

from cl_suites.cli import output
from cl_suites.cli.arguments import JOB_FLAGS, suite_overrides
from cl_suites.cli.errors import EXIT_OK
from cl_suites.config import RUN_DEFAULTS, ConfigError, RunConfig, load_config_file, merge
from cl_suites.core.interrupts import sigterm_as_interrupt
from cl_suites.errors import CLIError, RunInterrupted
from cl_suites.job.learners import REGISTRY
from cl_suites.job.presets import PRESETS
from cl_suites.job.run_kinds import run_kind
from cl_suites.request import METADATA_RUN_KEYS
from cl_suites.rundir import layout
from cl_suites.suites import parse_suite_id


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's configuration: defaults < preset < --config < --set < explicit flags."""
    file_config = load_config_file(args.config) if args.config else None
    flags: dict[str, Any] = {
        **{key: getattr(args, key) for key in RUN_DEFAULTS},  # the run keys and run_dir
        "vectorization_mode": args.vectorization_mode,
        **suite_overrides(args),
        **{key: getattr(args, key) for _, key, _ in JOB_FLAGS},
    }
    stored = None
    if args.resume:
        run_dir = args.run_dir or (file_config or {}).get("run_dir")
        suite_given = args.suite is not None or "suite" in (file_config or {})
        stored = {}
        if run_dir:
            stored = layout.stored_request(Path(run_dir), suite_given, METADATA_RUN_KEYS)
    config = merge(file_config, args.set, flags, stored)
    request = config.request
    for key, valid in (("learner", tuple(REGISTRY)), ("preset", PRESETS)):
        value = getattr(request, key)
        if value is not None and value not in valid:
            raise ConfigError(f"unknown {key} {value!r}; valid: {', '.join(valid)}")
    if request.seeds is not None and config.sources.get("seed", "default") != "default":
        raise ConfigError(
            f"give --seed ({request.seed}) or --seeds ({' '.join(map(str, request.seeds))}), "
            "not both"
        )
    run_kind(request.method).check(request)
    return config


def run_dir_of(config: RunConfig) -> Path:
    """``--run-dir``, or the run's default directory."""
    if config.run_dir:
        return Path(config.run_dir)
    request = config.request
    return layout.default_run_dir(
        parse_suite_id(request.suite),
        request.method,
        request.seed,
        several_seeds=request.seeds is not None,
    )


def resume_command(argv: list[str], run_dir: Path) -> str:
    """The command that continues an interrupted run."""
    words = [a for a in argv if a != "--print-config"]
    if "--resume" not in words:
        words.append("--resume")
    if not any(a == "--run-dir" or a.startswith("--run-dir=") for a in words):
        words += ["--run-dir", str(run_dir)]
    return shlex.join(["cl-suites", *words])


def cmd_run(args: argparse.Namespace) -> int:
    config = run_config(args)
    request = config.request
    kind = run_kind(request.method)
    run_dir = run_dir_of(config)
    run_dirs = layout.run_dirs(run_dir, request.seeds)
    if args.print_config:
        head: dict[str, Any] = {"seed": request.seed, "run_dir": str(run_dir)}
        if request.seeds is not None:
            head = {"seeds": list(request.seeds), "run_dirs": [str(d) for d in run_dirs]}
        described = kind.describe(kind.resolve(request, progress=True), head)
        print(json.dumps(described, indent=2, default=str))
        return EXIT_OK
    if args.resume and not kind.resumable:
        raise CLIError(f"{kind.name} runs are not resumable; start a new --run-dir")
    layout.check_run_dirs(run_dirs, args.resume)
    resolved = kind.resolve(request, progress=True)  # every bad value fails here
    for note in kind.notes(resolved):
        output.err_console.print(note)
    try:
        with sigterm_as_interrupt():
            start(kind, resolved, run_dirs, args.resume)
    except KeyboardInterrupt:
        if not kind.resumable:
            message = f"{kind.name} runs cannot be resumed; delete it and run again"
        elif any(layout.holds_run(d) for d in run_dirs):
            message = f"continue it with: {resume_command(args.argv, run_dir)}"
        else:
            message = "it had not started; run the same command again"
        raise RunInterrupted(f"interrupted; the run in {run_dir} is safe: {message}") from None
    output.console.print(f"run written to [bold]{escape(str(run_dir))}[/bold]")
    return EXIT_OK


def start(kind: Any, resolved: Any, run_dirs: list[Path], resume: bool) -> None:
    """Train (or play) the resolved run into ``run_dirs``."""
    kind.start(resolved, run_dirs, resume)
