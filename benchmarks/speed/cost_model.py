"""A cost model of the V-trace learner, so the design can be judged past this machine
(issue 38 item 5).

    .venv/bin/python -m benchmarks.speed.cost_model [--suites minihack procgen atari] \\
        [--updates 12] [--gpu-cost-factor 0.05] [--check results.json] [--fit gpu.json]

**Measured here (one core, ``taskset -c 0``), per agent step, in CPU seconds:** the paper
preset (``cl-suites run --method ft --preset paper``, V-trace, 32 envs x 20 steps) on the
suite's first task, lockstep, with the job's pieces timed where they run:

* ``env``: the sequence env's vector step (``SB3VecEnv.step_wait``), per agent step;
* ``forward``: the acting forward pass (``policy.forward``, 32 rows), per row;
* ``update``: one V-trace update (``VTrace.train``) per agent step it trains on (640);
* ``loop``: everything else of the collection loop (SB3's buffer, callbacks, info dicts);
* ``ipc``: moving one agent step between processes: the vector step with one env worker
  (``vectorization_mode=workers``, ``env_workers=1``) minus the one-process step.

**The model.** With ``policy_lag=1`` three things run at once: the learner thread
(``update``), the acting thread (``forward + loop``, plus ``ipc`` with workers, else
``env``) and, with workers, ``W`` env processes (``env + ipc`` spread over them). On ``N``
cores the rate is the smallest of each one's limit and the cores' limit::

    rate = min(1 / update, 1 / acting, W / (env + ipc), N / total)      (workers)
    rate = min(1 / update, 1 / (acting + env), N / total)              (one process)
    rate = 1 / total                                                    (lockstep, lag 0)

with ``W = N - 2`` (cores left after the two threads, at least 1).

**With a GPU** (measured on a lent H200 with 16 cores, ``device_check.sh``, 2026-11-28) the
learner thread is no longer the limit and the acting thread is: it runs the forward pass,
hands the actions to the workers and waits for all of them, so env stepping does not overlap
acting. Per agent step the time is ``serial + env / W`` (``serial``: the forward pass's
latency on the GPU, the loop and the hand-over; ``env``: one worker's stepping, on the GPU
machine's own cores). ``--fit FILE`` fits the two to ``bench_cores.py --json`` rates at
several worker counts (least squares on seconds per step) and ``--save`` keeps them under
``"gpu"`` in the costs file; the "+GPU" column and the hours to CORA's budget use that fit
where the costs file has it. Without one, ``update`` and ``forward`` are multiplied by
``--gpu-cost-factor`` (an assumption, 0.05), the first model, which over-predicted the
measured GPU rates by 2-3x because it let env stepping overlap acting.

``--check FILE`` compares the predictions with ``bench_cores.py --json``'s measured rates
(``{"minihack": {"0-1": rate, "1-2-w2": rate, "1-16-w14-s2": rate, ...}}``: lag, cores, env
workers and ``env_splits``, whose double-buffered saving the model takes from
``cl_suites.job.cost_model.split_saving``, the GPU forward pass from ``gpu_forward``; ``--gpu``
when they ran on a GPU), and prints the model's error for each. The hours to CORA's full
paper budget (every task of every cycle, the suite's paper defaults) follow from the
16-core + GPU prediction, beside the run times CORA reports (its README: Procgen 54 h,
MiniHack 45 h, Atari 4-10 days on 32 threads and one GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.speed.bench_cora import BENCHES, _Stop, child_result, train_until_stopped

# the model, shared with the package
from cl_suites.job.cost_model import gpu_forward, predict, predict_gpu

CORA_REPORTED_HOURS = {"minihack": "45 h", "procgen": "54 h", "atari": "4-10 days"}
CORES = (1, 2, 4, 8, 16, 32)


def measure_child(suite: str, updates: int, mode: str) -> dict[str, float]:
    """Time the job's pieces over ``updates`` updates (after 3 warm-up updates)."""
    from baselines_sb3.learners import VTrace
    from cl_suites.sb3.adapter import SB3VecEnv

    totals = {"env": 0.0, "forward": 0.0, "update": 0.0}
    counts = {"env": 0, "forward": 0, "update": 0}
    state: dict[str, Any] = {"start": None, "updates": 0}

    def timed(key: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            if state["start"] is not None:
                totals[key] += time.perf_counter() - t
                counts[key] += 1
            return out

        return wrapper

    train, step_wait = VTrace.train, SB3VecEnv.step_wait

    def timed_train(self: VTrace) -> None:
        t = time.perf_counter()
        train(self)
        state["updates"] += 1
        if state["start"] is not None:
            totals["update"] += time.perf_counter() - t
            counts["update"] += 1
        if state["updates"] == 3:
            state["start"] = time.perf_counter()
            state["steps"] = self.n_steps * self.n_envs
            state["num_envs"] = self.n_envs
            forward = self.policy.forward
            self.policy.forward = timed("forward", forward)
        if state["updates"] == 3 + updates:
            state["wall"] = time.perf_counter() - state["start"]
            raise _Stop

    VTrace.train = timed_train
    SB3VecEnv.step_wait = timed("env", step_wait)
    bench = BENCHES[suite]
    train_until_stopped(bench, {"vectorization_mode": mode, "env_workers": 1})
    n = state["num_envs"]
    steps = updates * state["steps"]
    env = totals["env"] / steps
    forward = totals["forward"] / (counts["forward"] * n)
    update = totals["update"] / steps
    loop = state["wall"] / steps - env - forward - update
    return {"env": env, "forward": forward, "update": update, "loop": max(loop, 0.0)}


def _child(suite: str, updates: int, mode: str, cpus: str) -> dict[str, float]:
    command = ["taskset", "-c", cpus, sys.executable, __file__, "--child", suite, mode]
    command += ["--updates", str(updates)]
    return child_result(command, f"measuring {suite} ({mode})")


def costs(suite: str, updates: int) -> dict[str, float]:
    """The per-agent-step CPU costs of ``suite`` (seconds; see the module docstring)."""
    one = _child(suite, updates, "sync", "0")
    worker = _child(suite, updates, "workers", "0,1")
    return {**one, "ipc": max(worker["env"] - one["env"], 0.0)}


def fit_gpu(rates: dict[str, float]) -> dict[str, float]:
    """Least-squares ``serial`` and ``env`` (seconds per agent step) of ``1 / rate = serial +
    env / W`` from ``bench_cores.py --json`` rates of one suite at several worker counts."""
    keys = {k: parse_key(k) for k in rates}  # one-block runs with workers: the fit's points
    points = [
        (1.0 / keys[k][2], 1.0 / r) for k, r in rates.items() if keys[k][2] and keys[k][3] == 1
    ]
    if len(points) < 2:
        raise ValueError(f"a fit needs rates at two or more worker counts, got {sorted(rates)}")
    inverse_workers, seconds = zip(*points, strict=True)
    env, serial = np.polyfit(inverse_workers, seconds, 1)
    return {"serial": float(serial), "env": float(env)}


def parse_key(key: str) -> tuple[int, int, int, int]:
    """``bench_cores.py --json``'s ``LAG-CORES[-wW][-sS]`` as ``(lag, cores, workers,
    splits)``."""
    lag, cores, *rest = key.split("-")
    tagged = {part[0]: int(part[1:]) for part in rest}
    return int(lag), int(cores), tagged.get("w", 0), tagged.get("s", 1)


def paper_budget(suite: str) -> int:
    """Agent steps of the suite's whole paper sequence (every task, every cycle)."""
    from cl_suites.api import make_sequence

    sequence = make_sequence(BENCHES[suite].suite)
    return int(sum(t.budget for t in sequence.tasks) * sequence.cycles)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", choices=("minihack", "procgen", "atari"),
                        default=["minihack", "procgen", "atari"])  # fmt: skip
    parser.add_argument("--updates", type=int, default=12, help="updates timed per suite")
    parser.add_argument("--gpu-cost-factor", type=float, default=0.05)
    parser.add_argument("--costs", type=Path, help="read measured costs from this JSON")
    parser.add_argument("--save", type=Path, help="write the measured costs to this JSON")
    parser.add_argument("--check", type=Path, help="bench_cores.py rates to compare with")
    parser.add_argument("--gpu", action="store_true", help="the --check rates ran on a GPU")
    parser.add_argument("--fit", type=Path, help="GPU rates (bench_cores.py --json) to fit")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(
            "BENCH_RESULT " + json.dumps(measure_child(args.child[0], args.updates, args.child[1]))
        )
        return 0
    if args.costs:  # costs measured earlier: only the suites they hold
        table = json.loads(args.costs.read_text())
        missing = [s for s in args.suites if s not in table]
        if missing:
            print(f"no measured costs for {', '.join(missing)} in {args.costs}; left out")
        args.suites = [s for s in args.suites if s in table]
    else:
        table = {suite: costs(suite, args.updates) for suite in args.suites}
    if args.fit:
        fitted = json.loads(args.fit.read_text())
        table["gpu"] = {**table.get("gpu", {}), **{s: fit_gpu(r) for s, r in fitted.items()}}
    gpu_fits = table.get("gpu", {})
    if args.save:
        args.save.write_text(json.dumps(table, indent=1))
    measured = json.loads(args.check.read_text()) if args.check else {}
    if gpu_fits:
        print("GPU fit, microseconds per agent step (serial + env / W):")
        for suite in args.suites:
            if suite in gpu_fits:
                f = gpu_fits[suite]
                print(f"{suite:9s} serial {f['serial'] * 1e6:6.0f}  env {f['env'] * 1e6:6.0f}")
    print("CPU microseconds per agent step (one core):")
    print(f"{'suite':9s} {'env':>7s} {'forward':>8s} {'update':>7s} {'loop':>6s} {'ipc':>6s}")
    for suite in args.suites:
        c = table[suite]
        cells = " ".join(f"{c[k] * 1e6:7.0f}" for k in ("env", "forward", "update", "loop", "ipc"))
        print(f"{suite:9s} {cells}")
    print(
        "\npredicted agent steps/s (lag1+W: W = N - 2 env workers; +GPU: the same on a GPU; "
        "s2: env_splits=2, double-buffered acting):"
    )
    print(
        f"{'suite':9s} {'cores':>5s} {'lag0':>7s} {'lag0+W':>7s} {'s2':>7s} {'lag1':>7s} "
        f"{'lag1+W':>7s} {'+GPU':>7s} {'s2':>7s}"
    )
    for suite in args.suites:
        c = table[suite]
        for n in CORES:
            lag0 = predict(c, n, 0, 0, None)
            lag0_w = [predict(c, n, 0, None, None, splits) for splits in (1, 2)]
            lag1 = predict(c, n, 1, 0, None)
            workers = predict(c, n, 1, None, None)
            if suite in gpu_fits:
                forward = gpu_forward({"cpu": c, "gpu": gpu_fits[suite]})
                gpu = [predict_gpu(gpu_fits[suite], n, None, s, forward) for s in (1, 2)]
            else:
                gpu = [predict(c, n, 1, None, args.gpu_cost_factor)] * 2
            print(
                f"{suite:9s} {n:5d} {lag0:7.0f} {lag0_w[0]:7.0f} {lag0_w[1]:7.0f} {lag1:7.0f} "
                f"{workers:7.0f} {gpu[0]:7.0f} {gpu[1]:7.0f}"
            )
    if measured:
        gpu = args.gpu_cost_factor if args.gpu else None
        print(f"\nmeasured beside the model ({'GPU' if args.gpu else 'CPU'}):")
        for suite in args.suites:
            for key, got in sorted(measured.get(suite, {}).items()):
                lag, n, workers, splits = parse_key(key)
                if args.gpu and suite in gpu_fits and workers:
                    forward = gpu_forward({"cpu": table[suite], "gpu": gpu_fits[suite]})
                    model = predict_gpu(gpu_fits[suite], n, workers, splits, forward)
                else:
                    model = predict(table[suite], n, lag, workers, gpu, splits)
                print(
                    f"{suite:9s} lag {lag} {n:2d} cores {workers:2d} workers {splits} split(s): "
                    "measured "
                    f"{got:7.0f}, model {model:7.0f} ({model / got - 1:+.0%})"
                )
    print("\nhours to CORA's full paper budget, 16 cores + 1 GPU (model):")
    for suite in args.suites:
        steps = paper_budget(suite)
        rate = (
            predict_gpu(gpu_fits[suite], 16)
            if suite in gpu_fits
            else predict(table[suite], 16, 1, None, args.gpu_cost_factor)
        )
        print(
            f"{suite:9s} {steps:,} agent steps: {steps / rate / 3600:6.1f} h "
            f"(CORA reports {CORA_REPORTED_HOURS[suite]})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
