"""The second core: the same paper-preset run pinned to 1 core and to 2 cores (``taskset``),
in lockstep (``policy_lag=0``) and with the update overlapping the next rollout
(``policy_lag=1``), with the envs in this process or in worker processes, side by side in
one run (issue 38 item 4a).

    .venv/bin/python -m benchmarks.speed.bench_cores [--suites minihack procgen atari] \\
        [--lags 0 1] [--cores 1 2] [--workers 0 2] [--splits 1 2] [--repeats 2] \\
        [--warmup 15] [--seconds 30] [--busy 0] [--set device=cuda] [--json rates.json]

``--workers 0``: the envs step in the learner's process (``vectorization_mode=sync``); ``W``
> 0: ``vectorization_mode=workers`` with ``env_workers=W``. ``--splits S`` > 1: double-
buffered acting (``env_splits=S``). ``--set KEY=VALUE`` adds run options (JSON values).
``--json`` writes the best rates as ``{suite: {"LAG-CORES[-wW][-sS]": rate}}``
(``cost_model.py --check`` reads it).

Each configuration is ``cl-suites run --method ft --preset paper`` (``run_main_job``; the
V-trace learner, its paper network, 32 envs x 20 steps) on the suite's first task, with
evaluation, checkpoints and the report off, in its own process under ``taskset -c 0`` or
``taskset -c 0,1`` (one torch thread, the default). Steps trained are counted after every
update (``updates * n_steps * num_envs``: agent steps); the rate is taken over
``--seconds`` after ``--warmup`` seconds of training (``bench_cora.Marks``). Rounds
alternate the order of the configurations; each configuration's best round counts. The
script prints every run, then per suite and lag the 2-core / 1-core ratio and per suite
and core count the lag-1 / lag-0 ratio. ``--busy N`` runs everything next to N processes
that each spin a core (pinned to the same cores as the run).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.speed.bench_cora import BENCHES, Marks, _Stop, child_result, train_until_stopped
from benchmarks.speed.busy import busy_processes


def run_child(
    suite: str,
    lag: int,
    workers: int,
    warmup: float,
    seconds: float,
    extra: dict[str, Any],
    preset: str = "paper",
) -> dict[str, Any]:
    """One run in this process until its measurement window is full."""
    from baselines_sb3.learners import VTrace

    bench = BENCHES[suite]
    marks = Marks(warmup, seconds)
    train = VTrace.train

    def timed_train(self: VTrace) -> None:
        train(self)
        marks.add(self._n_updates * self.n_steps * self.n_envs)
        if marks.done():
            raise _Stop

    VTrace.train = timed_train
    workers_options = {"vectorization_mode": "workers", "env_workers": workers} if workers else {}
    train_until_stopped(bench, {"policy_lag": lag, **workers_options}, extra, preset)
    return marks.result()


def _run(
    args: argparse.Namespace, suite: str, lag: int, cores: int, workers: int, splits: int
) -> dict[str, Any]:
    cpus = ",".join(str(c) for c in range(cores))
    command = [
        "taskset",
        "-c",
        cpus,
        sys.executable,
        __file__,
        "--child",
        suite,
        "--lags",
        str(lag),
        "--workers",
        str(workers),
        "--preset",
        args.preset,
        *[x for kv in args.set for x in ("--set", kv)],
        *(["--set", f"env_splits={splits}"] if splits > 1 else []),
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
    ]
    label = f"{suite} lag {lag} workers {workers} splits {splits} on {cores} core(s)"
    return child_result(command, label)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", choices=tuple(BENCHES), default=["minihack"])
    parser.add_argument("--lags", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; best of N")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds trained before timing")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds timed per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[0], help="0: sync; W: workers")
    parser.add_argument("--splits", type=int, nargs="+", default=[1], help="S > 1: env_splits")
    parser.add_argument("--busy", type=int, default=0, help="next to N processes spinning a core")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--preset", default="paper", help="small: a smoke run, not a measurement")
    parser.add_argument("--json", type=Path, help="write the best rates here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        extra = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.set)}
        result = run_child(
            args.child, args.lags[0], args.workers[0], args.warmup, args.seconds, extra, args.preset
        )
        print("BENCH_RESULT " + json.dumps(result), flush=True)
        return 0
    best: dict[tuple[str, int, int, int, int], dict[str, Any]] = {}
    configs = list(itertools.product(args.lags, args.cores, args.workers, args.splits))
    with busy_processes(args.busy):
        for suite in args.suites:
            for round_ in range(args.repeats):
                order = configs if round_ % 2 == 0 else configs[::-1]
                for lag, cores, workers, splits in order:
                    result = _run(args, suite, lag, cores, workers, splits)
                    print(
                        f"{suite} lag {lag} {cores} core(s) {_w(workers, splits)} round {round_}: "
                        f"{result['rate']:,.0f} steps/s, {result['cpu_per_1k']:.2f} CPU-s/1k",
                        flush=True,
                    )
                    key = (suite, lag, cores, workers, splits)
                    if key not in best or result["rate"] > best[key]["rate"]:
                        best[key] = result
    print(
        f"\nbest of {args.repeats} (agent steps/s; busy processes: {args.busy}); "
        f"load {os.getloadavg()}"
    )
    rates: dict[str, dict[str, float]] = {}
    for suite in args.suites:
        for lag, cores, workers, splits in configs:
            r = best[(suite, lag, cores, workers, splits)]
            key = f"{lag}-{cores}" + (f"-w{workers}" if workers else "")
            key += f"-s{splits}" if splits > 1 else ""
            rates.setdefault(suite, {})[key] = r["rate"]
            print(
                f"{suite:9s} lag {lag} {cores:2d} core(s) {_w(workers, splits)}: "
                f"{r['rate']:8,.0f}  ({r['cpu_per_1k']:.2f} CPU-s/1k)"
            )
        for lag, workers, splits in itertools.product(args.lags, args.workers, args.splits):
            if {1, 2} <= set(args.cores):
                ratio = (
                    best[(suite, lag, 2, workers, splits)]["rate"]
                    / best[(suite, lag, 1, workers, splits)]["rate"]
                )
                print(
                    f"{suite:9s} lag {lag} {_w(workers, splits)}: 2 cores / 1 core = {ratio:.2f}x"
                )
        for cores, workers, splits in itertools.product(args.cores, args.workers, args.splits):
            if {0, 1} <= set(args.lags):
                ratio = (
                    best[(suite, 1, cores, workers, splits)]["rate"]
                    / best[(suite, 0, cores, workers, splits)]["rate"]
                )
                print(
                    f"{suite:9s} {cores} core(s) {_w(workers, splits)}: lag 1 / lag 0 = "
                    f"{ratio:.2f}x"
                )
        for lag, cores, workers in itertools.product(args.lags, args.cores, args.workers):
            for splits in (s for s in args.splits if s > 1 and 1 in args.splits):
                ratio = (
                    best[(suite, lag, cores, workers, splits)]["rate"]
                    / best[(suite, lag, cores, workers, 1)]["rate"]
                )
                print(
                    f"{suite:9s} lag {lag} {cores} core(s) {_w(workers)}: env_splits {splits} "
                    f"/ 1 = {ratio:.2f}x"
                )
    if args.json:
        args.json.write_text(json.dumps(rates, indent=1))
    return 0


def _w(workers: int, splits: int = 1) -> str:
    where = f"{workers} env workers" if workers else "envs in-process"
    return where + (f", env_splits {splits}" if splits > 1 else "")


if __name__ == "__main__":
    raise SystemExit(main())
