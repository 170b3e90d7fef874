"""The ``cl-suites`` command: list suites, show schedules, run sequences, write reports.

Every subcommand is one entry of ``COMMANDS`` (a :class:`Command`: help line, a function
adding its arguments, a function running it). ``main`` turns every error into one line on
stderr and an exit code chosen by the error's class (``EXIT_CODES``, over the
``cl_suites.errors`` hierarchy): 0 success, 1 the command failed (disk full, locked run
directory, an unexpected error), 2 bad input, 130 interrupted (Ctrl-C or SIGTERM; an
interrupted ``run`` prints the command that resumes it). ``--debug`` (or
``CL_SUITES_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shlex
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cl_suites.config import (
    PRECEDENCE,
    RUN_DEFAULTS,
    ConfigError,
    RunConfig,
    argument_docs,
    check_names,
    check_num_envs,
    check_seed,
    keyword_defaults,
    load_config_file,
    merge,
)
from cl_suites.core.interrupts import sigterm_as_interrupt
from cl_suites.errors import (
    CLIError,
    CLSuitesError,
    InputError,
    MissingSimulatorError,
    RunDirConflictError,
    RunInterrupted,
    SimulatorSetupError,
)
from cl_suites.suites import COMMON_KWARGS, SUITE_TEMPLATES, SUITES, find_suite, parse_suite_id
from cl_suites.sweep import cli as sweep_cli

METHODS = ("random", "ft", "ewc", "online-ewc", "l2", "mas", "pnc", "clear")
"""The built-in ``--method`` names: the random agent and ``baselines_sb3.cl.METHODS``,
named here so that parsing and ``--help`` do not import torch (``tests/job/test_cli.py`` pins
them equal). ``--method`` also takes an own method: ``package.module:Class`` or an entry
point of the ``cl_suites.methods`` group (checked when the run is resolved)."""
METHOD_HELP = (
    "random, ft, ewc, online-ewc, l2, mas, pnc, clear, or an own ContinualMethod as "
    "package.module:Class or an installed cl_suites.methods entry point"
)
LEARNERS = ("ppo", "vtrace", "ppo-jax")
"""``--learner`` choices: ``cl_suites.job.learners.LEARNER_ENTRIES``, named here as above."""
PRESETS = ("paper", "small", "meal-authors")
"""``--preset`` choices: ``cl_suites.job.presets.PRESETS``, named here as above."""
VECTORIZATION_MODES = ("sync", "async", "workers")
"""``--vectorization-mode`` choices: ``cl_suites.core.vector.VECTORIZATION_MODES``, as above."""
DEBUG_ENV = "CL_SUITES_DEBUG"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

console = Console()  # the terminal's width (COLUMNS when piped; rich wraps table cells)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


@dataclass(frozen=True)
class Command:
    """One subcommand: ``cl-suites <name> ...``."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


# -- argument types ------------------------------------------------------------------------
def _argtype(check: Callable[[Any], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return check(text)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


_seed = _argtype(check_seed)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


_num_envs = _argtype(check_num_envs)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` for every option that has a default (not for ``None``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


# -- list / info ---------------------------------------------------------------------------
def _suite_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in COMMON_KWARGS if getattr(args, k, None) is not None}


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
    for suite_id, entry in SUITE_TEMPLATES.items():
        suite = entry(1)
        table.add_row(
            f"[bold]{escape(suite_id)}[/bold]\n{status(suite.extra, suite.installed)}",
            f"{suite.step_unit.text}\n{escape(suite.description)}",
        )
    console.print(table)
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
    suite_id, lines, sequence, unit = _describe_suite(args.suite, _suite_overrides(args))
    console.print(f"[bold]{suite_id}[/bold]: {escape(lines[0])}")
    for line in lines[1:]:
        console.print(escape(line))
    console.print(
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
    console.print(table)
    return EXIT_OK


# -- run -----------------------------------------------------------------------------------
JOB_FLAGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "--tensorboard",
        "tensorboard",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "training scalars (losses, entropy, lr, CL penalty, steps/s) and eval "
            "returns to TensorBoard in RUN_DIR/tb (default: off)",
        },
    ),
    (
        "--wandb",
        "wandb",
        {
            "nargs": "?",
            "const": True,
            "metavar": "PROJECT",
            "help": "the same scalars to Weights & Biases, project PROJECT (default project: "
            "cl-suites); WANDB_MODE=offline logs without a network",
        },
    ),
    (
        "--capture-video",
        "capture_video",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "record evaluation episodes per task and split into RUN_DIR/videos/ "
            "(default: off; cadence: --set video_every=N, length: --set video_length=N)",
        },
    ),
)
"""Job options with their own flag: ``(flag, option key, argparse kwargs)``. Any other job
option is set with ``--set KEY=VALUE``."""

LIB_LOGGERS = ("cl_suites", "baselines_sb3")
RANDOM_JOB_OPTIONS = ("vectorization_mode", "progress")
"""Job options of a random-agent run (``--method random``); every other option is the
suite's."""


def _run_config(args: argparse.Namespace) -> RunConfig:
    """The run's configuration: defaults < preset < --config < --set < explicit flags."""
    file_config = load_config_file(args.config) if args.config else None
    flags: dict[str, Any] = {
        "suite": args.suite,
        "method": args.method,
        "learner": args.learner,
        "preset": args.preset,
        "seed": args.seed,
        "seeds": args.seeds,
        "run_dir": args.run_dir,
        "num_envs": args.num_envs,
        "vectorization_mode": args.vectorization_mode,
        **_suite_overrides(args),
        **{key: getattr(args, key) for _, key, _ in JOB_FLAGS},
    }
    stored = _stored_run(args, file_config) if args.resume else None
    config = merge(file_config, args.set, flags, stored)
    for key, valid in (("learner", LEARNERS), ("preset", PRESETS)):
        value = getattr(config, key)
        if value is not None and value not in valid:
            raise ConfigError(f"unknown {key} {value!r}; valid: {', '.join(valid)}")
    info = find_suite(config.suite)
    if config.method == "random":  # the random agent takes no learner or method
        suite = keyword_defaults(info.builder_function())
        known = {"job": RANDOM_JOB_OPTIONS, "suite": tuple(suite or ())}
        if suite is not None:
            check_names(config.options, known, f"--suite {info.name} --method random")
    if config.seeds is not None:
        _check_seeds_run(config)
    return config


def _stored_run(args: argparse.Namespace, file_config: dict[str, Any] | None) -> dict[str, Any]:
    """The run keys and options of the run ``--resume`` continues, from its
    ``metadata.json`` (``{}`` when ``--run-dir`` holds no run yet): what the command does
    not give is taken from there; what it gives and differs is refused when the run is
    checked, as before."""
    from cl_suites.rundir.runlog import METADATA_FILE, read_metadata

    run_dir = args.run_dir or (file_config or {}).get("run_dir")
    if not run_dir:
        return {}
    if not (Path(run_dir) / METADATA_FILE).is_file():
        if args.suite is None and "suite" not in (file_config or {}):
            _check_run_dir(Path(run_dir), resume=True)  # says why there is nothing to resume
        return {}
    try:
        metadata = read_metadata(Path(run_dir))
    except Exception:  # an unreadable file is refused with its own message later
        return {}
    if not isinstance(metadata, dict) or "suite_id" not in metadata:
        return {}
    keys = ("method", "learner", "preset", "seed", "num_envs")
    stored = {"suite": metadata["suite_id"], **{k: metadata[k] for k in keys if k in metadata}}
    request = metadata.get("request") or {}
    return {**dict(request.get("overrides") or {}), **stored}


def _check_seeds_run(config: RunConfig) -> None:
    """``--seeds`` trains in one program: refuse what cannot (before anything is built)."""
    if config.sources.get("seed", "default") != "default":
        raise ConfigError(
            f"give --seed ({config.seed}) or --seeds ({' '.join(map(str, config.seeds))}), not both"
        )
    if config.method == "random" or "ppo-jax" not in find_suite(config.suite).learners:
        raise ConfigError(
            f"--seeds trains several seeds in one program with learner ppo-jax on MEAL suites; "
            f"for --suite {config.suite} --method {config.method} run the seeds one by one "
            "(cl-suites sweep --seeds 0-4 runs them in parallel)"
        )


def method_label(method: str) -> str:
    """``method`` as a file name: an own method's ``package.module:Class`` as
    ``package.module.Class``."""
    return method.replace(":", ".")


def _default_run_dir(config: RunConfig) -> Path:
    suite_name = parse_suite_id(config.suite)
    method = method_label(config.method)
    if config.seeds is not None:
        return Path(f"runs/{suite_name}-{method}-seeds")
    return Path(f"runs/{suite_name}-{method}-s{config.seed}")


def _run_dirs(config: RunConfig, run_dir: Path) -> list[Path]:
    """The run directories a ``run`` writes: ``run_dir``, or ``run_dir/seed-<s>`` per seed
    of ``--seeds``."""
    if config.seeds is None:
        return [run_dir]
    from cl_suites.job.main_job import seed_run_dirs

    return seed_run_dirs(run_dir, config.seeds)


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    """Refuse, before anything is written, a run directory the run cannot use."""
    from cl_suites.rundir.runlock import LOCK_FILE
    from cl_suites.rundir.runlog import METADATA_FILE, read_metadata

    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirConflictError(f"--run-dir {run_dir} is a file, not a directory")
    entries = []
    if run_dir.is_dir():
        entries = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
    has_run = (run_dir / METADATA_FILE).exists()
    if resume:
        if not run_dir.exists():
            raise RunDirConflictError(f"cannot resume {run_dir}: the directory does not exist")
        if not entries:
            raise RunDirConflictError(
                f"cannot resume {run_dir}: the directory is empty (no run to continue); "
                "drop --resume to start a new run there"
            )
        if not has_run:
            shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
            raise RunDirConflictError(
                f"cannot resume {run_dir}: it is not a cl-suites run directory (no "
                f"{METADATA_FILE}; it holds {shown})"
            )
        metadata = read_metadata(run_dir)
        if not isinstance(metadata, dict) or "suite_id" not in metadata:
            raise RunDirConflictError(
                f"cannot resume {run_dir}: its {METADATA_FILE} is not a cl-suites run's "
                "(no suite_id)"
            )
        return
    if has_run:
        raise RunDirConflictError(
            f"run directory {run_dir} already holds a run; add --resume to continue it or "
            "choose another --run-dir"
        )
    if entries:
        raise RunDirConflictError(
            f"refusing to start a run in {run_dir}: the directory is not empty and holds no "
            "cl-suites run; choose another --run-dir"
        )


def _check_run_dirs(run_dirs: list[Path], resume: bool) -> None:
    """``_check_run_dir`` for every directory of a run; resuming several seeds needs one of
    them to hold a run (a kill while the first files were written may leave the others
    unstarted: they start over with the rest)."""
    from cl_suites.rundir.runlog import METADATA_FILE

    started = [d for d in run_dirs if (d / METADATA_FILE).exists()]
    if not resume or not started:
        for run_dir in run_dirs:
            _check_run_dir(run_dir, resume)
        return
    for run_dir in run_dirs:
        _check_run_dir(run_dir, run_dir in started)


def _resolve(config: RunConfig) -> list[Any]:
    """The run's ``cl_suites.job.run_spec.JobSpec``s (one, or one per seed of ``--seeds``):
    everything checked, nothing built or written. The CLI draws the progress bar unless
    the run says otherwise."""
    from cl_suites.job.run_spec import resolve, resolve_seed_group

    kwargs = dict(
        suite=config.suite,
        method=config.method,
        learner=config.learner,
        preset=config.preset,
        num_envs=config.num_envs,
        overrides={"progress": True, **config.options},
    )
    if config.seeds is not None:
        return resolve_seed_group(**kwargs, seeds=config.seeds)
    return [resolve(**kwargs, seed=config.seed)]


def _resolved_config(config: RunConfig, run_dir: Path) -> dict[str, Any]:
    """What ``--print-config`` prints."""
    head: dict[str, Any] = {"seed": config.seed, "run_dir": str(run_dir)}
    if config.seeds is not None:
        head = {"seeds": config.seeds, "run_dirs": [str(d) for d in _run_dirs(config, run_dir)]}
    if config.method == "random":
        info = find_suite(config.suite)
        options = dict(config.options)
        job = {k: options.pop(k) for k in RANDOM_JOB_OPTIONS if k in options}
        return {
            "suite": info.id,
            "method": "random",
            **head,
            "num_envs": config.num_envs or 8,
            "suite_kwargs": options,
            "job": job,
        }
    resolved = _resolve(config)[0].describe()
    return {
        **{k: resolved.pop(k) for k in ("suite", "method") if k in resolved},
        **head,
        **resolved,
    }


def _check_replay_memory(spec: Any, run_dir: Path) -> None:
    """The replay memory guard as a dry run (CLEAR; CORA's EWC, online EWC and P&C), so a
    buffer that fits nowhere is refused before the run directory is created."""
    from baselines_sb3.cl import make_method, method_class
    from baselines_sb3.cl.storage import replay_storage

    if (
        spec.method == "random"
        or not method_class(spec.method, spec.hp["method"].get("variant")).keeps_replay
    ):
        return
    method = make_method(
        spec.method,
        **spec.hp["method"],
        disk_dir=run_dir / "replay",
        storage=replay_storage(spec.options.replay_on_disk),
    )
    method.plan_storage(
        int(spec.hp["learner"].get("n_steps", 20)),
        spec.sequence.observation_space,
        int(spec.sequence.action_space.n),
        quiet=True,
    )


def _resume_command(argv: list[str], run_dir: Path) -> str:
    words = [a for a in argv if a != "--print-config"]
    if "--resume" not in words:
        words.append("--resume")
    if not any(a == "--run-dir" or a.startswith("--run-dir=") for a in words):
        words += ["--run-dir", str(run_dir)]
    return shlex.join(["cl-suites", *words])


def cmd_run(args: argparse.Namespace) -> int:
    config = _run_config(args)
    run_dir = Path(config.run_dir) if config.run_dir else _default_run_dir(config)
    if args.print_config:
        print(json.dumps(_resolved_config(config, run_dir), indent=2, default=str))
        return EXIT_OK
    if config.method == "random" and args.resume:
        raise CLIError("random-agent runs are not resumable; start a new --run-dir")
    _check_run_dirs(_run_dirs(config, run_dir), args.resume)
    specs = None
    if config.method != "random":
        specs = _resolve(config)  # every bad value fails here, before the run dir exists
        _check_replay_memory(specs[0], run_dir)
        if len(specs) > 1 and "layout_seed" not in config.options:
            err_console.print(_shared_kitchens_note(config.seeds or [], specs[0]))
    try:
        with sigterm_as_interrupt():
            _start(config, specs, run_dir, args.resume)
    except KeyboardInterrupt:
        from cl_suites.rundir.runlog import METADATA_FILE

        if config.method == "random":
            message = "random-agent runs cannot be resumed; delete it and run again"
        elif any((d / METADATA_FILE).exists() for d in _run_dirs(config, run_dir)):
            command = _resume_command(args.argv, run_dir)
            message = f"continue it with: {command}"
        else:
            message = "it had not started; run the same command again"
        raise RunInterrupted(f"interrupted; the run in {run_dir} is safe: {message}") from None
    console.print(f"run written to [bold]{escape(str(run_dir))}[/bold]")
    return EXIT_OK


def _shared_kitchens_note(seeds: list[int], spec: Any) -> str:
    """The line a ``--seeds`` run prints when it chose the kitchens itself."""
    return (
        f"note: seeds {' '.join(map(str, seeds))} train in one program on one set of kitchens "
        f"(layout_seed={spec.suite_kwargs['layout_seed']}, the first seed's); MEAL's protocol "
        "gives each seed its own kitchens: for that, run them one by one (cl-suites sweep "
        "--seeds)"
    )


def _start(config: RunConfig, specs: list[Any] | None, run_dir: Path, resume: bool) -> None:
    """Train the resolved ``specs`` (``None``: the random agent) into ``run_dir``."""
    if specs is None:
        from cl_suites.random_agent import run_random_agent

        options = dict(config.options)
        run_random_agent(
            config.suite,
            seed=config.seed,
            run_dir=run_dir,
            num_envs=config.num_envs or 8,
            vectorization_mode=options.pop("vectorization_mode", "sync"),
            progress=options.pop("progress", True),
            **options,
        )
        return
    from cl_suites.job.main_job import run_resolved

    seeds = config.seeds if config.seeds is not None else [config.seed]
    run_resolved(specs, seeds, _run_dirs(config, run_dir), resume)


def _run_arguments(run: argparse.ArgumentParser) -> None:
    d = RUN_DEFAULTS
    what = run.add_argument_group("what to run (also settable in --config / --set)")
    what.add_argument("--suite", help="e.g. Procgen6, CLSuite/Procgen6-v0 or MEAL-20")
    what.add_argument("--method", help=f"CL method (default: {d['method']}): {METHOD_HELP}")
    what.add_argument(
        "--learner",
        choices=LEARNERS,
        help="learner (default: the suite's: vtrace on CORA's suites, ppo-jax, the JAX IPPO, "
        "on MEAL, ppo on Diagnostic; ppo on MEAL is the SB3/torch IPPO)",
    )
    what.add_argument(
        "--preset", choices=PRESETS, help=f"hyperparameter preset (default: {d['preset']})"
    )
    what.add_argument(
        "--seed", type=_seed, help=f"run seed, an integer in [0, 2**32 - 1] (default: {d['seed']})"
    )
    what.add_argument(
        "--seeds",
        nargs="+",
        metavar="SEED",
        help="train these seeds vmapped in one program (MEAL, learner ppo-jax) on one set "
        "of kitchens (layout_seed, default: the first seed's); seed s writes the run "
        "directory RUN_DIR/seed-<s> (default RUN_DIR: runs/<suite>-<method>-seeds)",
    )
    what.add_argument("--run-dir", help="run directory (default: runs/<suite>-<method>-s<seed>)")
    what.add_argument(
        "--num-envs", type=_num_envs, help="parallel sub-envs (default: the preset's)"
    )
    what.add_argument(
        "--vectorization-mode",
        choices=VECTORIZATION_MODES,
        help="batching of simulators without a native batched backend: one process, a "
        "process per env, or --set env_workers=N processes (default: sync)",
    )
    what.add_argument("--resume", action="store_true", help="continue the run in --run-dir")

    cfg = run.add_argument_group("configuration")
    cfg.add_argument("--config", metavar="FILE", help="a .toml or .yaml file of key = value")
    cfg.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any suite, job, learner or method option (repeatable), e.g. "
        "--set device=cpu --set checkpoint_every=100000 --set learning_rate=3e-4",
    )
    cfg.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration as JSON and exit (nothing is run or written)",
    )

    tracking = run.add_argument_group("tracking")
    for flag, key, kwargs in JOB_FLAGS:
        tracking.add_argument(flag, dest=key, **kwargs)
    _add_suite_kwargs(run)


RUN_EPILOG = f"""\
precedence (lowest first): {PRECEDENCE}.

examples:
  cl-suites run --suite Diagnostic --method ewc --preset small
  cl-suites run --config my-run.toml --set learning_rate=3e-4 --tensorboard
  cl-suites run --suite Procgen6 --method clear --learner vtrace --print-config
  cl-suites run --suite Diagnostic --method my_methods:MyMethod --set my_option=2
  cl-suites options --suite Procgen6 --method clear   # every option, its default and doc
  cl-suites run --suite MEAL-2 --method ewc --seeds 0 1 2 3 4   # 5 seeds in one program
  cl-suites run --run-dir runs/Procgen6-clear-s0 --suite Procgen6 --method clear --resume
"""


# -- options -------------------------------------------------------------------------------
def cmd_options(args: argparse.Namespace) -> int:
    """Every option of a run (``--suite``, ``--method``, ``--learner``, ``--preset``) with
    its default for that run and its one-line doc, by section."""
    if args.method == "random":
        info = find_suite(args.suite)
        suite = keyword_defaults(info.builder_function()) or {}
        docs = argument_docs(info.builder_function())
        sections = {
            "job": [("vectorization_mode", "sync", "batching of the simulators"),
                    ("progress", True, "draw the progress bar")],
            "suite": [(name, value, docs.get(name, "")) for name, value in suite.items()],
        }  # fmt: skip
        title = f"--suite {info.name} --method random"
    else:
        from cl_suites.job.run_spec import option_table, resolve

        spec = resolve(
            suite=args.suite,
            method=args.method,
            learner=args.learner,
            preset=args.preset,
            num_envs=None,
            overrides={},
        )
        sections = option_table(spec)
        title = (
            f"--suite {spec.suite.name} --method {spec.method} --learner {spec.learner} "
            f"--preset {spec.preset} (steps: {spec.step_unit})"
        )
    if not console.is_terminal:  # piped or redirected: plain columns, one line per option
        print(f"options of {title}; set any with --set KEY=VALUE")
        for section, rows in sections.items():
            if rows:
                print("\n".join(["", f"{section} options", *_plain_rows(rows)]))
        return EXIT_OK
    console.print(f"[bold]options of {escape(title)}[/bold]; set any with --set KEY=VALUE")
    for section, rows in sections.items():
        if not rows:
            continue
        table = Table(title=f"{section} options", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("option", no_wrap=True)
        table.add_column("default", overflow="fold")
        table.add_column("doc", ratio=1)
        for name, value, doc in rows:
            table.add_row(name, escape(json.dumps(value, default=str)), escape(doc))
        console.print(table)
    return EXIT_OK


def _plain_rows(rows: list[tuple[str, Any, str]]) -> list[str]:
    """``option  default  doc`` lines with aligned columns and no wrapping."""
    cells = [("option", "default", "doc")]
    cells += [(name, json.dumps(value, default=str), doc) for name, value, doc in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(2)]
    return [
        f"{name:<{widths[0]}}  {value:<{widths[1]}}  {doc}".rstrip() for name, value, doc in cells
    ]


def _options_arguments(options: argparse.ArgumentParser) -> None:
    options.add_argument("--suite", required=True, help="e.g. Procgen6 or MEAL-2")
    options.add_argument("--method", default="ft", help=f"CL method: {METHOD_HELP}")
    options.add_argument("--learner", choices=LEARNERS, help="default: the suite's")
    options.add_argument("--preset", default="paper", choices=PRESETS, help="preset")


# -- report --------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from cl_suites.metrics.published import protocol_notes
    from cl_suites.metrics.report import SUMMARY_TITLES, build_report
    from cl_suites.metrics.tables import rich_table

    result = build_report(
        [Path(p) for p in args.run_dirs], Path(args.out), progress=True, window=args.window
    )
    for key, frame in result.tables.items():
        shown = frame.drop(
            columns=["protocol differences", "paper protocol", "task"], errors="ignore"
        )
        print_frame(rich_table(shown, SUMMARY_TITLES[key]), shown, SUMMARY_TITLES[key])
    if "Published" in result.tables:
        diffs = result.tables["Published"].reset_index().drop_duplicates(["suite", "method"])
        for suite, method, text in zip(
            diffs["suite"], diffs["method"], diffs["protocol differences"], strict=True
        ):
            console.print(escape(f"protocol differences {suite}/{method}: {text}"))
        for source, note in protocol_notes(result.tables["Published"]):
            console.print(escape(f"paper protocol, {source}: {note}"))
    for note in result.notes[:MAX_NOTES]:  # repairs and every n/a, as in notes.md
        err_console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if len(result.notes) > MAX_NOTES:
        err_console.print(
            f"[yellow]note:[/yellow] {len(result.notes) - MAX_NOTES} more in notes.md"
        )
    console.print(f"report written to [bold]{escape(str(result.html))}[/bold]")
    return EXIT_OK


MAX_NOTES = 30
"""Notes of a report printed on the console (all of them are in ``notes.md``)."""


def print_frame(table: Any, frame: Any, title: str) -> None:
    """``table`` (a rich table of ``frame``) when it fits the terminal; else, and when the
    output is piped, ``frame`` as plain text, one block per row (``index: column value``
    lines), which no width cuts."""
    from rich.measure import Measurement

    if (
        console.is_terminal
        and Measurement.get(console, console.options, table).maximum <= console.width
    ):
        console.print(table)
        return
    flat = frame.reset_index()
    keys = list(flat.columns[: frame.index.nlevels])
    columns = [c for c in flat.columns if c not in keys]
    width = max((len(str(c)) for c in columns), default=0)
    lines = [title]
    for _, row in flat.iterrows():
        lines.append("  " + " / ".join(str(row[k]) for k in keys))
        lines += [f"    {c!s:<{width}}  {row[c]}" for c in columns]
    print("\n".join(lines), flush=True)


def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "run_dirs",
        nargs="+",
        help="run directories, or directories holding them (a --seeds run, a sweep's runs/)",
    )
    report.add_argument("--out", default="report", help="output directory")
    report.add_argument(
        "--window",
        type=_positive_int,
        metavar="N",
        help="CORA's smoothing window in evaluations: final performance averages the last N "
        "(default: the suite's, 20 on CORA's suites, 1 on MEAL; 1: the last evaluation)",
    )


# -- the parser ----------------------------------------------------------------------------
def _add_suite_kwargs(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suite overrides (default: the paper's values)")
    group.add_argument("--steps-per-task", type=int, help="training budget per task, agent steps")
    group.add_argument("--cycles", type=int, help="passes over the task list")
    group.add_argument("--eval-every", type=int, help="evaluation cadence, agent steps")
    group.add_argument("--eval-episodes", type=int, help="episodes per task and split")


def _info_arguments(info: argparse.ArgumentParser) -> None:
    info.add_argument("suite", help="e.g. CLSuite/Procgen6-v0, Procgen6 or MEAL-20")
    info.add_argument("--num-envs", type=_num_envs, default=1, help="sub-envs of the schedule")
    _add_suite_kwargs(info)


COMMANDS: dict[str, Command] = {
    "list": Command("every suite, its tasks, budgets and install status", lambda p: None, cmd_list),
    "info": Command("a suite's schedule", _info_arguments, cmd_info),
    "run": Command(
        "train (or play randomly) over a whole sequence",
        _run_arguments,
        cmd_run,
        description="Train a baseline (or a random agent) over a whole suite and write a run\n"
        "directory (metadata.json, eval.csv, episodes.csv, checkpoint/, report/).",
    ),
    "options": Command(
        "every option of a run with its default and doc, by section",
        _options_arguments,
        cmd_options,
        description="Every option a run takes (job, learner, method, policy, suite) with its\n"
        "default for that suite, method, learner and preset, and a one-line doc.",
    ),
    "report": Command(
        "metrics, plots and tables from run directories", _report_arguments, cmd_report
    ),
    "sweep": Command(
        sweep_cli.HELP, sweep_cli.add_arguments, sweep_cli.run, description=sweep_cli.DESCRIPTION
    ),
}
"""The subcommands, in ``--help`` order. A new one is one entry here."""


def version() -> str:
    try:
        return importlib.metadata.version("cl-suites")
    except importlib.metadata.PackageNotFoundError:  # a source checkout
        from cl_suites import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cl-suites",
        description="cl-suites: list suites, show schedules, run sequences, write reports.",
        formatter_class=_HelpFormatter,
        epilog=f"errors end in one line; --debug or {DEBUG_ENV}=1 shows the traceback",
    )
    parser.add_argument("--version", action="version", version=f"cl-suites {version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub_parser = sub.add_parser(
            name,
            help=command.help,
            description=command.description or command.help,
            parents=[common],
            formatter_class=_HelpFormatter,
            epilog=RUN_EPILOG if name == "run" else None,
        )
        command.add_arguments(sub_parser)
    return parser


# -- warnings, log messages and errors -----------------------------------------------------
THIRD_PARTY_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    (DeprecationWarning, "", r"gym(3)?(\.|$)"),  # legacy gym / gym3 under procgen2
    (UserWarning, "", r"gym(3)?(\.|$)"),
    (FutureWarning, r"random_state is deprecated", r"arch(\.|$)"),  # arch under rliable
    (RuntimeWarning, r"os\.fork\(\) was called", ""),  # JAX, when a worker process forks
    (UserWarning, r"The given NumPy array is not writable", ""),  # torch on JAX arrays
    (DeprecationWarning, "", r"pkg_resources(\.|$)"),
)
"""``(category, message regex, module regex)`` of warnings users cannot act on; each is
matched by its emitting module or its exact message, so warnings of cl-suites' own code
still show."""


def quiet_third_party_warnings() -> None:
    for category, message, module in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class _NoteHandler(logging.Handler):
    """Library log messages as ``note: ...`` lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(f"[yellow]note:[/yellow] {escape(record.getMessage())}")


def _setup_log_messages() -> None:
    """Show the library's warnings (stale lock taken over, replay buffer moved to disk,
    torn log lines dropped) as ``note: ...`` lines on stderr."""
    for name in LIB_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(h, _NoteHandler) for h in log.handlers):
            log.addHandler(_NoteHandler())


EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (RunInterrupted, EXIT_INTERRUPTED),
    (InputError, EXIT_BAD_INPUT),
    (MissingSimulatorError, EXIT_BAD_INPUT),
    (SimulatorSetupError, EXIT_BAD_INPUT),
    (CLSuitesError, EXIT_FAILED),
    *((legacy, EXIT_BAD_INPUT) for legacy in (ValueError, KeyError, ImportError, FileExistsError)),
    (MemoryError, EXIT_FAILED),
    (OSError, EXIT_FAILED),
)
"""The exit code of an error, by class (the first row it is an instance of; never by its
message): the ``cl_suites.errors`` classes first, then the built-in types that library
code still raises for bad values (``ValueError`` and kin: bad input, as before the
hierarchy), then ``MemoryError`` and ``OSError`` (the command failed). Any other error
(``TypeError``, ``AttributeError``, ...: a bug, not bad input) exits ``EXIT_FAILED`` as
*unexpected*, with a hint to rerun with ``--debug``."""


def exit_code(e: BaseException) -> int | None:
    """``e``'s row of ``EXIT_CODES``, or ``None`` for an unexpected error."""
    return next((code for cls, code in EXIT_CODES if isinstance(e, cls)), None)


def _one_line(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args:
        text = str(e.args[0])
    elif isinstance(e, OSError) and e.strerror and e.filename:
        text = f"{e.strerror}: {e.filename}"
    else:
        text = str(e)
    return " ".join(text.split()) or type(e).__name__


def _close_progress_bars() -> None:
    """End progress bars an error left open, so the error starts on its own line."""
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is not None:
        for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
            with contextlib.suppress(Exception):
                bar.close()


def report_error(e: BaseException) -> int:
    """Print ``e`` as one line on stderr; the exit code (``EXIT_CODES``, by class)."""
    _close_progress_bars()
    code = exit_code(e)
    if code == EXIT_INTERRUPTED:
        text = _one_line(e) if isinstance(e, RunInterrupted) else "interrupted"
        err_console.print(f"[yellow]{escape(text)}[/yellow]")
        return code
    text = _one_line(e)
    if code is None:
        code = EXIT_FAILED
        text = (
            f"unexpected {type(e).__name__}: {text} (rerun with --debug or "
            f"{DEBUG_ENV}=1 for the traceback)"
        )
    elif isinstance(e, MemoryError) and not str(e):
        text = "out of memory (MemoryError); use a smaller preset, budget or buffer"
    err_console.print(f"[red]error:[/red] {escape(text)}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party_warnings()
    _setup_log_messages()
    args = build_parser().parse_args(argv)
    args.argv = argv
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return COMMANDS[args.command].run(args)
    except (Exception, KeyboardInterrupt) as e:
        if debug:
            raise
        return report_error(e)


if __name__ == "__main__":
    sys.exit(main())
