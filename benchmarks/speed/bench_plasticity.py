"""Cost of the plasticity diagnostics (issue 42 item 6): the same run with them on and
off, side by side, and the time spent inside them.

Each side is a fresh ``run_main_job`` process (``cl-suites run``), the sides interleaved
``--repeats`` times; the ``on`` side also times every call into the diagnostics
(``PlasticityTracker.measure`` / ``observe`` / ``task_started``, the gradient norms of
every minibatch, the per-update close), so the share is measured
in-process as well as by the wall-clock difference, which on a shared machine is noisier
than 3%::

    python -m benchmarks.speed.bench_plasticity --suite Diagnostic --preset small --repeats 3
    python -m benchmarks.speed.bench_plasticity --suite MEAL-2 --learner ppo --preset small

Prints one JSON line per side and repeat and a summary: best-of wall time per side, the
ratio on/off, and the diagnostics' in-process share of the ``on`` runs' wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(args: argparse.Namespace) -> None:
    import torch as th

    from baselines_sb3 import plasticity as bp
    from cl_suites.job.main_job import run_main_job
    from cl_suites.metrics import plasticity_tracker as pt

    th.set_num_threads(1)
    spent = {"s": 0.0, "measures": 0}

    def timed(cls, name):
        original = getattr(cls, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent["s"] += time.perf_counter() - t
                if name == "measure":
                    spent["measures"] += 1

        setattr(cls, name, wrapper)

    for name in ("measure", "observe", "task_started"):
        timed(pt.PlasticityTracker, name)
    timed(bp.TorchProbe, "finish_update")
    timed(bp.GradientNorms, "observe")  # per minibatch (the learners' clip_grad_norm)
    overrides = {"report": False, "plasticity": args.child == "on", "progress": False}
    if args.steps_per_task:
        overrides["steps_per_task"] = args.steps_per_task
    if args.eval_every:
        overrides["eval_every"] = args.eval_every
    if args.cycles:
        overrides["cycles"] = args.cycles
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_main_job(
            suite=args.suite, method="ft", learner=args.learner, preset=args.preset, seed=0,
            num_envs=None, run_dir=Path(tmp) / "run", resume=False, overrides=overrides,
        )  # fmt: skip
        wall = time.perf_counter() - t0
    print(json.dumps({"side": args.child, "wall_s": wall, "diag_s": spent["s"],
                      "measures": spent["measures"]}))  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="Diagnostic")
    p.add_argument("--preset", default="small")
    p.add_argument("--learner", default=None)
    p.add_argument("--steps-per-task", type=int, default=None)
    p.add_argument("--eval-every", type=int, default=None, help="default: the suite's")
    p.add_argument("--cycles", type=int, default=None, help="default: the suite's")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    results: dict[str, list[dict]] = {"on": [], "off": []}
    for r in range(args.repeats):
        for side in ("off", "on") if r % 2 else ("on", "off"):
            cmd = [sys.executable, __file__, "--child", side, "--suite", args.suite,
                   "--preset", args.preset, "--repeats", "1"]  # fmt: skip
            for flag, value in (("--learner", args.learner),
                                ("--steps-per-task", args.steps_per_task),
                                ("--eval-every", args.eval_every),
                                ("--cycles", args.cycles)):  # fmt: skip
                if value is not None:
                    cmd += [flag, str(value)]
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            env = {**os.environ, "PYTHONPATH": path}  # the child runs by path: this checkout
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
            line = json.loads(out.strip().splitlines()[-1])
            results[side].append(line)
            print(json.dumps(line), flush=True)
    best = {k: min(x["wall_s"] for x in v) for k, v in results.items()}
    share = max(x["diag_s"] / x["wall_s"] for x in results["on"])
    summary = {
        "suite": args.suite,
        "preset": args.preset,
        "best_wall_s": best,
        "ratio_on_off": best["on"] / best["off"],
        "diag_share_in_process_max": share,
        "measures_per_run": results["on"][0]["measures"],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
