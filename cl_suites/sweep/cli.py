"""``cl-suites sweep``: the command-line face of :func:`cl_suites.sweep.run_sweep`.

Imports neither Ray nor torch until the command runs, so ``cl-suites --help`` stays fast
and works without the ``sweep`` extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cl_suites.config import parse_set
from cl_suites.core.interrupts import sigterm_as_interrupt
from cl_suites.suites import COMMON_KWARGS, short_name
from cl_suites.sweep.grid import (
    SweepError,
    SweepSpec,
    load_sweep_file,
)
from cl_suites.sweep.sweep_dir import SweepDir

HELP = "a grid of runs (suites x methods x learners x seeds) on Ray, local or a cluster"
DESCRIPTION = """Run a grid of main-job runs as Ray tasks, as many at once as the resources allow;
a run whose worker dies is retried from its last checkpoint. Without --address a new
local Ray instance is started.

examples:
  cl-suites sweep --suite Procgen6 --methods ft,ewc,clear --seeds 0-4 --preset paper
  cl-suites sweep --config sweep.toml --address auto --gpus-per-run 0.25
  cl-suites sweep --resume runs/sweep-Procgen6-paper"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cl-suites sweep`` (the grid, the sweep directory, Ray)."""
    grid = p.add_argument_group("grid (or --config FILE; flags replace the file's values)")
    grid.add_argument("--config", metavar="FILE", help="TOML or YAML sweep file (read as data)")
    grid.add_argument(
        "--suite", "--suites", dest="suites", metavar="LIST", help="suite(s), comma-separated"
    )
    grid.add_argument(
        "--methods", "--method", dest="methods", metavar="LIST", help="e.g. ft,ewc,clear"
    )
    grid.add_argument(
        "--learners",
        "--learner",
        dest="learners",
        metavar="LIST",
        help="ppo,vtrace (default: the preset's)",
    )
    grid.add_argument("--seeds", "--seed", dest="seeds", metavar="SEEDS", help="e.g. 0-4 or 0,3,7")
    grid.add_argument(
        "--preset", metavar="NAME", help="paper (default), small or meal-authors (MEAL only)"
    )
    grid.add_argument(
        "--num-envs", type=int, metavar="N", help="sub-envs per run (default: the preset's)"
    )
    for key in COMMON_KWARGS:
        grid.add_argument(
            f"--{key.replace('_', '-')}", type=int, dest=key, metavar="N", help="suite override"
        )
    grid.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="any run option, read as by cl-suites run --set (e.g. --set lam=100 --set n_tasks=2)",
    )
    where = p.add_argument_group("sweep directory")
    where.add_argument("--sweep-dir", metavar="DIR", help="default: runs/sweep-<suites>-<preset>")
    where.add_argument(
        "--resume", metavar="SWEEP_DIR", help="continue a sweep: skip finished runs, resume others"
    )
    ray_group = p.add_argument_group("Ray")
    ray_group.add_argument(
        "--address",
        metavar="ADDR",
        help="auto, HOST:PORT or ray://HOST:10001 (default: a new local instance)",
    )
    ray_group.add_argument(
        "--cpus-per-run", type=float, metavar="X", help="CPUs per run (default 1)"
    )
    ray_group.add_argument(
        "--gpus-per-run",
        type=float,
        metavar="X",
        help="GPUs per run, fractions allowed (default 0)",
    )
    ray_group.add_argument(
        "--num-cpus", type=int, metavar="N", help="CPUs of the local instance (default all)"
    )
    ray_group.add_argument(
        "--max-retries",
        type=int,
        metavar="N",
        help="re-runs of a run whose worker dies (default 3)",
    )


def spec_from_args(args: argparse.Namespace, base: dict[str, Any]) -> SweepSpec | None:
    """The grid of ``base`` (a sweep file's data) with the command-line flags applied;
    ``None`` when neither gives anything (``--resume`` alone)."""
    data = dict(base)
    for key in ("suites", "methods", "learners", "seeds", "preset", "num_envs"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    overrides = dict(data.get("overrides") or {})
    overrides.update({k: getattr(args, k) for k in COMMON_KWARGS if getattr(args, k) is not None})
    overrides.update(parse_set(text) for text in args.overrides)
    if overrides:
        data["overrides"] = overrides
    return SweepSpec.from_dict(data) if data else None


def run(args: argparse.Namespace) -> int:
    """Entry point of ``cl-suites sweep``. Returns 0 when every run finished, 1 when a run
    failed or was lost, 130 when interrupted."""
    from rich.console import Console
    from rich.markup import escape

    from cl_suites.sweep.driver import run_sweep

    base, execution = load_sweep_file(args.config) if args.config else ({}, {})
    if args.resume and not args.config:
        base = dict((SweepDir(Path(args.resume)).stored() or {}).get("spec") or {})
    spec = spec_from_args(args, base) if args.config or _grid_flags(args) else None
    if args.resume:
        if args.sweep_dir and Path(args.sweep_dir) != Path(args.resume):
            raise SweepError("give the sweep directory once: --resume SWEEP_DIR")
        sweep_dir = Path(args.resume)
    else:
        if spec is None:
            raise SweepError(
                "no grid: give --suite, --methods and --seeds (or --config FILE), or "
                "--resume SWEEP_DIR"
            )
        sweep_dir = Path(args.sweep_dir or default_sweep_dir(spec))
    options = {
        key: getattr(args, key) if getattr(args, key) is not None else execution.get(key)
        for key in ("address", "cpus_per_run", "gpus_per_run", "num_cpus", "max_retries")
    }
    console = Console(width=max(Console().width, 140))
    with sigterm_as_interrupt():  # SIGTERM stops the sweep as Ctrl-C does
        result = run_sweep(spec, sweep_dir, resume=bool(args.resume), console=console, **options)
    bad = [o for o in result.outcomes if o.state not in ("finished", "skipped")]
    for outcome in bad:
        console.print(f"[red]{outcome.state}[/red] {outcome.name}: {escape(outcome.error or '')}")
    if any(o.state == "interrupted" for o in bad):
        return 130
    return 1 if bad else 0


def _grid_flags(args: argparse.Namespace) -> bool:
    keys = ("suites", "methods", "learners", "seeds", "preset", "num_envs", *COMMON_KWARGS)
    return bool(args.overrides) or any(getattr(args, key) is not None for key in keys)


def default_sweep_dir(spec: SweepSpec) -> Path:
    """``runs/sweep-<suite>[+<suite>...]-<preset>``."""
    suites = "+".join(short_name(s) for s in spec.suites)
    return Path("runs") / f"sweep-{suites}-{spec.preset}"
