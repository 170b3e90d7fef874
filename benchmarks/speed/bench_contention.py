"""Speed of a run on a busy machine: alone, and next to ``--busy`` CPU-bound processes.

Issue 23 item 1: clusters and laptops are busy machines, and thread defaults that take
every core (torch's intra-op pool, OpenMP workers that spin-wait) collapse when other
processes want the same cores. This script runs the same ``cl-suites run`` for a fixed
budget alone and then next to ``--busy`` processes that each spin one core
(``while True: pass``), and prints the wall times and the slowdown (busy / alone). The
target on a 2-core machine next to 2 busy processes is a slowdown <= 2.5x (a fair share of
the cores gives 1.5-3x).

Workloads (``--runs``; budgets fixed, report off, agent steps; MEAL: env steps):

* ``demo``: ``make demo`` (``--suite Procgen6 --method ft --preset small``: 6 x 2,000).
* ``diagnostic``: ``--suite Diagnostic --method ft --preset small``.
* ``meal``: ``--suite MEAL-2 --method ewc --preset paper`` for ``--meal-steps`` env steps
  per task (whole PPO updates of 16 envs x 128 steps), with ``--learner``.

Each run is a fresh process (imports and JIT compiles included, as a user sees them).
``--set KEY=VALUE`` is passed to every run (e.g. ``--set torch_threads=2`` to compare
with the default) and ``--env KEY=VALUE`` sets an environment variable for it
(``OMP_WAIT_POLICY=ACTIVE``, ``XLA_FLAGS=...``)::

    python -m benchmarks.speed.bench_contention [--runs demo diagnostic meal] [--busy 2]
        [--learner ppo] [--set torch_threads=2] [--env OMP_WAIT_POLICY=ACTIVE]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.speed.busy import busy_processes

ROOT = Path(__file__).resolve().parents[2]
TARGET = 2.5
WORKLOADS: dict[str, list[str]] = {
    "demo": ["--suite", "Procgen6", "--method", "ft", "--preset", "small"],
    "diagnostic": ["--suite", "Diagnostic", "--method", "ft", "--preset", "small"],
    "meal": ["--suite", "MEAL-2", "--method", "ewc", "--preset", "paper"],
}


def _command(name: str, args: argparse.Namespace, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "cl_suites", "run", *WORKLOADS[name], "--seed", "0"]
    cmd += ["--run-dir", str(run_dir), "--set", "report=false"]
    if name == "meal":
        cmd += ["--steps-per-task", str(args.meal_steps)]
        if args.learner:
            cmd += ["--learner", args.learner]
    for item in args.set:
        cmd += ["--set", item]
    return cmd


def _timed_run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the run's process: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"run failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", choices=list(WORKLOADS), default=["demo", "meal"])
    parser.add_argument(
        "--busy", type=int, default=2, help="CPU-bound processes beside the run (0: alone only)"
    )
    parser.add_argument("--learner", default=None, help="MEAL's learner (default: the job's)")
    parser.add_argument("--meal-steps", type=int, default=3 * 2048, help="MEAL env steps/task")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    print(
        f"{os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable; --set {args.set} "
        f"--env {args.env}; load average before: {os.getloadavg()[0]:.2f}"
    )
    print("wall and CPU (user + system) seconds of each run; the busy processes' CPU is apart")
    print(f"{'run':<12} {'alone':>15} {'busy':>15} {'slowdown':>9}  target <= {TARGET}x")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.runs:
            load = os.getloadavg()[0]
            alone, alone_cpu = _timed_run(_command(name, args, Path(tmp) / f"{name}-a"), env)
            print(f"  {name} alone: {alone:.1f} s wall, {alone_cpu:.1f} s CPU (load {load:.1f})")
            if args.busy == 0:
                continue
            with busy_processes(args.busy):
                load = os.getloadavg()[0]
                busy, busy_cpu = _timed_run(_command(name, args, Path(tmp) / f"{name}-b"), env)
            ratio = busy / alone
            met = "yes" if ratio <= TARGET else "NO"
            print(
                f"{name:<12} {alone:>6.1f}s {alone_cpu:>5.1f}cpu {busy:>6.1f}s {busy_cpu:>5.1f}cpu "
                f"{ratio:>8.2f}x  {met} (load before busy run {load:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
