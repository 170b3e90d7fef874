"""Benchmark of cl_suites.metrics: 20 seeds x 5 methods x a 15-task, 2-cycle log.

Every task curve has ``--points`` evaluation points (default 1,000) on the train and test
split. Times (wall clock):

1. the CORA core (smoothing, curves with mean/SEM over seeds, F/Z per run, diagnostic
   tables) vectorised with numpy/pandas, and the same computation row by row in plain
   Python (the naive reference implemented below), with the ratio;
2. all metrics and the full report (CORA, MEAL, L2M, IQM bootstrap, plots, tables, HTML).

Usage: ``python -m benchmarks.speed.bench_metrics [--seeds 20] [--methods 5] [--points 1000]``
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import pandas as pd

from cl_suites.metrics import cora
from cl_suites.metrics.report import report_from_runs
from cl_suites.metrics.runs import RunData, combined_eval, schedule_frame

N_TASKS, CYCLES, WINDOW = 15, 2, 20


def make_runs(seeds: int, methods: int, points: int, episodes_per_segment: int = 40):
    """In-memory runs (no CSV I/O) with noisy learning / forgetting curves."""
    segments = N_TASKS * CYCLES
    eval_every = 1000
    steps_per_task = math.ceil((points - 1) * eval_every / segments)
    steps = np.arange(points) * eval_every
    schedule = [
        {
            "index": k,
            "cycle": k // N_TASKS,
            "task_id": k % N_TASKS,
            "task_name": f"task{k % N_TASKS}",
            "start_step": k * steps_per_task,
            "end_step": (k + 1) * steps_per_task,
        }
        for k in range(segments)
    ]
    sched = schedule_frame({"schedule": schedule})
    runs = []
    for m in range(methods):
        keep = 0.3 + 0.15 * m
        for s in range(seeds):
            rng = np.random.default_rng(1000 * m + s)
            seg = np.minimum(steps // steps_per_task, segments - 1)
            trained = seg[None, :] % N_TASKS == np.arange(N_TASKS)[:, None]
            level = np.zeros((N_TASKS, points))
            for k in range(1, points):
                level[:, k] = np.where(
                    trained[:, k], level[:, k - 1] + 0.02, level[:, k - 1] * (1 - (1 - keep) / 200)
                )
            frames = []
            for split, off in (("train", 0.0), ("test", -0.3)):
                vals = level + off + rng.normal(0, 0.1, level.shape)
                frames.append(
                    pd.DataFrame(
                        {
                            "total_step": np.tile(steps, N_TASKS),
                            "task_id": np.repeat(np.arange(N_TASKS), points),
                            "task_name": np.repeat([f"task{t}" for t in range(N_TASKS)], points),
                            "split": split,
                            "mean_return": vals.ravel(),
                            "std_return": 0.0,
                            "episodes": 10,
                            "wall_time": np.tile(steps, N_TASKS) / 1e3,
                        }
                    )
                )
            ev = pd.concat(frames, ignore_index=True).sort_values(
                ["task_id", "split", "total_step"]
            )
            ep_steps = sched["start_step"].to_numpy()[:, None] + (
                np.arange(episodes_per_segment) + 1
            ) * steps_per_task // (episodes_per_segment + 1)
            episodes = pd.DataFrame(
                {
                    "total_step": ep_steps.ravel(),
                    "task_id": np.repeat(sched["task_id"].to_numpy(), episodes_per_segment),
                    "episode_return": rng.normal(1, 0.3, ep_steps.size)
                    + np.tile(np.arange(episodes_per_segment) / 20, segments),
                    "episode_length": 100,
                }
            )
            meta = {
                "suite": "Bench15",
                "suite_id": "CLSuite/Bench15-v0",
                "method": f"m{m}",
                "seed": s,
                "schedule": schedule,
                "metric_settings": {"smoothing_window": WINDOW},
                "tasks": [
                    {"task_id": t, "task_name": f"task{t}", "splits": ["train", "test"]}
                    for t in range(N_TASKS)
                ],
            }
            run = RunData(
                Path(f"/bench/m{m}-s{s}"), meta, ev.reset_index(drop=True), episodes, sched
            )
            run.eval.insert(0, "run", run.run_id)
            run.eval["method"], run.eval["suite"], run.eval["seed"] = run.method, run.suite, s
            runs.append(run)
    return runs, sched


def vectorised_core(frame: pd.DataFrame, sched: pd.DataFrame) -> float:
    t0 = time.perf_counter()
    cora.continual_eval_curves(frame, WINDOW)
    m = cora.cora_matrices(frame, sched, WINDOW)
    for _method, grp in m.values.groupby("method", observed=True):
        for metric in ("F", "Z"):
            cora.cora_table(grp, metric, m.order)
    return time.perf_counter() - t0


def naive_core(frame: pd.DataFrame, sched: pd.DataFrame) -> float:
    """The same CORA computation, row by row in plain Python (the reference)."""
    t0 = time.perf_counter()
    records = frame[["run", "method", "task_id", "split", "total_step", "mean_return"]].to_dict(
        "records"
    )
    series = defaultdict(list)
    for r in records:
        series[(r["run"], r["method"], r["task_id"], r["split"])].append(
            (r["total_step"], r["mean_return"])
        )
    smoothed = {}
    for key, pts in series.items():
        pts.sort()
        acc, out = deque(maxlen=WINDOW), []
        for step, v in pts:
            acc.append(v)
            out.append((step, sum(acc) / len(acc)))
        smoothed[key] = out
    # curves: mean and SEM over runs at each step (steps are shared -> no interpolation)
    by_step = defaultdict(list)
    for (_run, method, task, split), pts in smoothed.items():
        for step, v in pts:
            by_step[(method, task, split, step)].append(v)
    curves = {}
    for key, vals in by_step.items():
        n = len(vals)
        mu = sum(vals) / n
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (n - 1)) if n > 1 else float("nan")
        curves[key] = (mu, sd / math.sqrt(n))
    # F / Z per run on the test split
    first = [row for _, row in sched.iterrows() if row["cycle"] == 0]
    ends = [row["end_step"] for row in first]
    order = [row["task_id"] for row in first]
    norm = defaultdict(float)
    for (_run, method, task, split), pts in smoothed.items():
        if split == "test":
            for _, v in pts:
                norm[(method, task)] = max(norm[(method, task)], abs(v))
    per_cell = defaultdict(list)
    per_run_rows = defaultdict(lambda: defaultdict(list))
    for (run, method, task, split), pts in smoothed.items():
        if split != "test":
            continue

        def value_at(b, pts=pts):
            best = None
            for step, v in pts:
                if step <= b:
                    best = v
            return best

        r = [pts[0][1]] + [value_at(b) for b in ends]
        i = order.index(task)
        for j in range(len(order)):
            if j > i:
                f = (r[j] - r[j + 1]) / norm[(method, task)]
                per_cell[(method, "F", i, j)].append(f)
                per_run_rows[(method, "F", i)][run].append(f)
            elif j < i:
                z = (r[j + 1] - r[j]) / norm[(method, task)]
                per_cell[(method, "Z", i, j)].append(z)
                per_run_rows[(method, "Z", i)][run].append(z)
    table = {}
    for key, vals in per_cell.items():
        n = len(vals)
        mu = sum(vals) / n
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (n - 1))
        table[key] = (10 * mu, 10 * sd / math.sqrt(n))
    for key, runs in per_run_rows.items():
        means = [sum(v) / len(v) for v in runs.values()]
        mu = sum(means) / len(means)
        table[(*key, "avg")] = 10 * mu
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--methods", type=int, default=5)
    ap.add_argument("--points", type=int, default=1000, help="eval points per task curve")
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap replicates")
    args = ap.parse_args()
    t0 = time.perf_counter()
    runs, sched = make_runs(args.seeds, args.methods, args.points)
    frame = combined_eval(runs)
    print(f"built {len(runs)} runs, {len(frame):,} eval rows in {time.perf_counter() - t0:.1f} s")
    vec = vectorised_core(frame, sched)
    naive = naive_core(frame, sched)
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.perf_counter()
        report_from_runs(runs, tmp, bootstrap_reps=args.reps, progress=False)
        full = time.perf_counter() - t1
    print(f"CORA core, vectorised (numpy/pandas):            {vec:8.2f} s")
    print(f"CORA core, naive row-by-row Python (reference):  {naive:8.2f} s")
    print(f"  ratio naive / vectorised CORA core:            {naive / vec:8.1f}x")
    print(
        f"all metrics + full report (CORA, MEAL, L2M, IQM {args.reps}-rep bootstrap, plots, "
        f"tables, HTML): {full:.2f} s"
    )
    print(f"  ratio naive CORA core alone / all metrics + report: {naive / full:8.2f}x")


if __name__ == "__main__":
    main()
