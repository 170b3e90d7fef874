"""A sweep on Ray vs the same runs one after another (wall time), measured in one run.

    PYTHONPATH=. .venv/bin/python -m benchmarks.speed.bench_sweep [--runs 4] [--num-cpus 2]
        [--sequential-threads 1]

Both sides run the same 4 Diagnostic runs (``--preset small``: 3 tasks x 4,000 agent
steps, an eval every 1,000; methods ft and ewc x seeds 0, 1), each in a fresh Python
process, with the options a sweep gives its runs (no progress bar, no per-run report):

* **one after another**: ``run_main_job`` in one subprocess per run, started when the
  previous one ended (what running them by hand does), with the sweep's per-run settings
  (one torch thread: "1 CPU each"; ``--sequential-threads 0`` keeps torch's default);
* **sweep**: ``run_sweep`` with 1 CPU per run on a local Ray instance with ``--num-cpus``
  CPUs, timed from the call (preflight check, submission) to the last run's end (no
  sweep report). Ray's own start-up (``ray.init`` of the local instance) is timed and
  printed separately.

Prints both wall times and the ratio sweep / one-after-another (target <= 0.65 on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from cl_suites.sweep import SweepSpec, run_sweep
from cl_suites.sweep.cluster import import_ray

JOB_OPTIONS = {"progress": False, "report": False, "device": "cpu"}


def one_after_another(spec: SweepSpec, out: Path, threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None
    start = time.perf_counter()
    for run in spec.runs():
        kwargs = dataclasses.asdict(run.request)
        kwargs["overrides"] = {**JOB_OPTIONS, **kwargs["overrides"]}
        code = (
            "import json, sys, torch; from cl_suites.job.main_job import run_main_job; "
            f"{f'torch.set_num_threads({threads}); ' if threads else ''}"
            "run_main_job(**json.loads(sys.argv[1]), run_dir=sys.argv[2], resume=False)"
        )
        subprocess.run(
            [sys.executable, "-c", code, json.dumps(kwargs), str(out / run.name)],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4, choices=(2, 4, 6, 8))
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument(
        "--sequential-threads", type=int, default=1, help="torch threads of the sequential runs"
    )
    args = parser.parse_args()
    seeds = tuple(range(args.runs // 2))
    spec = SweepSpec(suites=("Diagnostic",), methods=("ft", "ewc"), seeds=seeds, preset="small")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        tmp_path = Path(tmp)
        sequential = one_after_another(spec, tmp_path / "sequential", args.sequential_threads)
        print(f"one after another: {len(spec.runs())} runs in {sequential:.1f} s", flush=True)

        ray = import_ray()
        start = time.perf_counter()
        ray.init(
            address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False
        )
        startup = time.perf_counter() - start
        try:
            start = time.perf_counter()
            result = run_sweep(
                spec,
                tmp_path / "sweep",
                cpus_per_run=1,
                live=False,
                report=False,
                console=Console(file=io.StringIO()),
            )
            sweep = time.perf_counter() - start
        finally:
            ray.shutdown()
    assert result.ok, [(o.name, o.state, o.error) for o in result.outcomes]
    print(f"Ray start-up (local instance, {args.num_cpus} CPUs): {startup:.1f} s")
    print(f"sweep, 1 CPU per run: {len(result.outcomes)} runs in {sweep:.1f} s")
    print(f"ratio sweep / one after another: {sweep / sequential:.3f}x (target <= 0.65x)")
    print(f"ratio with Ray start-up: {(sweep + startup) / sequential:.3f}x")


if __name__ == "__main__":
    main()
