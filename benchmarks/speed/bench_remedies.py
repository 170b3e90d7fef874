"""Cost of the plasticity remedies at their default cadences (issue 54 item 6: <= 5% of a
run's time at Plasticine's cadence).

Torch learners: one ``run_main_job`` per remedy in a fresh process, every call into the
remedy timed in-process (ReDo's recycle, the post-step hook of shrink-and-perturb and
continual backprop, the hooks at the update's end and the task switch, the feature
capture of continual backprop's forward hooks), as a share of the run's wall time; a
share is robust to a busy machine (numerator and denominator slow down together).

``ppo-jax``: the remedies run inside the compiled update, so each remedy's run is
compared with fine-tuning's by the training rate ``progress.json`` reports
(``steps_per_s``: compile time excluded), sides interleaved ``--repeats`` times, best of::

    python -m benchmarks.speed.bench_remedies --suite Diagnostic --learner ppo
    python -m benchmarks.speed.bench_remedies --suite MEAL-2 --learner ppo
    python -m benchmarks.speed.bench_remedies --suite MEAL-2 --learner ppo-jax --repeats 2

Prints one JSON line per run and a Markdown summary. The runs use the small preset's
budgets and each remedy's defaults (no option changed).
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
REMEDIES = ("redo", "shrink-perturb", "cbp", "reset", "plasticity-injection")


def child(args: argparse.Namespace) -> None:
    import torch as th

    from baselines_sb3.cl import remedy as rm
    from cl_suites.job.main_job import run_main_job
    from cl_suites.rundir.progress import read_progress

    th.set_num_threads(1)
    spent = {"s": 0.0}

    def timed(owner, name):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent["s"] += time.perf_counter() - t

        setattr(owner, name, wrapper)

    if args.learner != "ppo-jax":
        for name in ("_recycle", "_after_step", "on_task_switch", "on_update_end"):
            timed(rm.RemedyMethod, name)
        original_capture = rm.lib.capture_features

        def capture(link_list):  # the forward hooks' own cost, per forward pass
            def keep_time(hook):
                def inner(*a, **k):
                    t = time.perf_counter()
                    try:
                        return hook(*a, **k)
                    finally:
                        spent["s"] += time.perf_counter() - t

                return inner

            for link in link_list:
                module = link.source if link.hook == "source" else link.activation
                module.register_forward_hook = _wrap_register(
                    module.register_forward_hook, keep_time
                )
            return original_capture(link_list)

        rm.lib.capture_features = capture  # where RemedyMethod looks it up
    overrides = {"report": False, "progress": False, "plasticity": False}
    run_dir = Path(tempfile.mkdtemp(prefix="bench-remedy-"))
    start = time.perf_counter()
    run_main_job(
        suite=args.suite,
        method=args.child,
        learner=args.learner,
        preset="small",
        seed=0,
        num_envs=None,
        run_dir=run_dir,
        resume=False,
        overrides=overrides,
    )
    wall = time.perf_counter() - start
    progress = read_progress(run_dir) or {}
    print(
        json.dumps(
            {
                "method": args.child,
                "wall_s": round(wall, 2),
                "remedy_s": round(spent["s"], 3),
                "share": round(spent["s"] / wall, 4),
                "steps_per_s": progress.get("steps_per_s"),
                "load": os.getloadavg()[0],
            }
        ),
        flush=True,
    )


def _wrap_register(register, keep_time):
    def wrapped(hook, *a, **k):
        return register(keep_time(hook), *a, **k)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="Diagnostic")
    parser.add_argument("--learner", default="ppo")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--remedies", nargs="+", default=list(REMEDIES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sides = (["ft"] if args.learner == "ppo-jax" else []) + list(args.remedies)
    results: dict[str, list[dict]] = {s: [] for s in sides}
    for _ in range(args.repeats):
        for side in sides:
            cmd = [sys.executable, "-m", "benchmarks.speed.bench_remedies", "--suite", args.suite,
                   "--learner", args.learner, "--child", side]  # fmt: skip
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
            print(line, flush=True)
            results[side].append(json.loads(line))
    print(f"\n| {args.suite} {args.learner} | wall s (best) | remedy share | rate vs ft |")
    print("|---|---|---|---|")
    base = max((r["steps_per_s"] or 0 for r in results.get("ft", [])), default=0)
    for side, rows in results.items():
        best = min(rows, key=lambda r: r["wall_s"])
        share = "-" if args.learner == "ppo-jax" else f"{100 * max(r['share'] for r in rows):.1f}%"
        rate = max(r["steps_per_s"] or 0 for r in rows)
        ratio = f"{rate / base:.3f}" if base else "-"
        print(f"| {side} | {best['wall_s']:.1f} | {share} | {ratio} |")


if __name__ == "__main__":
    main()
