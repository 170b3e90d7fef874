"""CORA speed: env steps per second of CORA's monobeast and of our V-trace learner, side by
side in one run (issue 28 item 4).

    /work/main/.venv/bin/python -m benchmarks.speed.bench_cora --cora-repo /tmp/cora/continual_rl \\
        [--suites minihack procgen procgen-residual atari] [--cora-actors 2 4 8 32] \\
        [--repeats 2] [--busy 2] [--warmup 20] [--seconds 40]

**What runs.** For each suite, its first training task (MiniHack15: Room-Random-5x5;
Procgen6: climber, 200 levels, easy; Atari6: SpaceInvaders, full action space), with the
paper's network, unroll length (20), batch (32 unrolls) and learner settings on both sides:

* ``cora``: CORA's own code (AGI-Labs/continual_rl at f2754bb, a checkout passed with
  ``--cora-repo``), in its scratch interpreter (``cora_env.sh``; ``--cora-python``) with
  the shims of ``cora_reference.py``. The policy is built from CORA's config file
  (``configs/<suite>/impala_<suite>*.json``) with ``num_actors`` set to the measured
  actor count and ``device`` cpu, over CORA's experiment (``atari_6_tasks_5_cycles``,
  ``procgen_6_tasks_5_cycles``, ``minihack_nav_paired_2_cycles``: its observation space
  and action spaces, as its experiment runner builds the policy), and the experiment's
  first task runs through CORA's own task loop (``TaskBase.run``: ``ImpalaEnvironmentRunner``
  -> ``Monobeast.train``: N actor processes each stepping one env with a forward pass of
  batch 1 per step, 2 learner threads, a yield every 5 s with the actors paused), without
  its continual evaluation and checkpoints. Torch runs one intra-op thread
  (``OMP_NUM_THREADS=1``, which CORA's ``Monobeast.setup`` asks for, set before torch is
  imported; ``--cora-threads`` sets another count).
* ``ours``: ``cl-suites run --suite <suite> --method ft --preset paper`` (``run_main_job``,
  32 envs stepped in lockstep in one process, one torch thread: the defaults), the same
  task budget (so the same per-task learning-rate schedule), evaluation, checkpoints and
  the report off.

**The same number of actors.** Our batch of 32 unrolls comes from 32 envs stepped in
lockstep by one process, which computes one batched forward pass (32 rows) per step and
then the update; CORA's batch of 32 unrolls comes from N actor processes, each stepping
one env with its own forward pass per step, while the learner trains on the batches
they fill. "32 envs" on our side is N = 32 actors on CORA's (``--cora-actors`` includes
32); CORA's configs run 64 actors on a GPU machine, which 2 cores cannot usefully hold, so
CORA is also measured at smaller counts (default 2, 4, 8) and compared at its best count.

**Counting.** Steps are env steps trained (agent steps: one ``env.step`` of one env; an
Atari step is 4 emulator frames), counted where each learner counts them: CORA's ``step``
(``T * B`` after each ``learn``; rollouts the actors fill while the learners stop for a
yield are dropped by CORA and not counted), ours the learner's ``num_timesteps`` after
each update; each side marks the time after every update. Each run starts, trains
``--warmup`` seconds after its first update (actor start-up, env creation, the first
updates), then the rate is taken over the next ``--seconds`` (from the first mark after
the warm-up to the last mark, so CORA's pauses for its yields count). CPU seconds of
the whole process tree (actors included) over the same window are reported per 1,000
steps.

**Interleaving.** ``--repeats`` rounds; in each round every side runs once in its own
process, the order alternating between rounds; each side's best rate gives the ratio.
``--busy N`` repeats everything next to N processes that each spin a core (``busy.py``).
The script prints, per suite, every run as it ends, then a table of best rates, the ratio
ours / CORA at CORA's best actor count and at 32 actors, and the load average.

The background runs of the development machine should be paused around a measurement
(``/work/runs_cora/pause.sh stop``, then ``cont``; see ``benchmarks/results/LOG.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.parity.cora_reference import (
    CORA_PYTHON,
    CoraSetupError,
    check_cora_repo,
    cora_thread_env,
)
from benchmarks.speed.busy import busy_processes

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Bench:
    """One suite's comparison: our suite and options, CORA's experiment, config and
    additions (both sides run the same task with the same network)."""

    suite: str
    cora_experiment: str
    cora_config: str
    network: str
    """the network on both sides (ours: ``network``; CORA: ``conv_net_arch``)."""
    ours_overrides: dict[str, Any] = field(default_factory=dict)
    cora_extra: dict[str, Any] = field(default_factory=dict)


BENCHES: dict[str, Bench] = {
    "minihack": Bench(
        "MiniHack15",
        "minihack_nav_paired_2_cycles",
        "minihack/impala_minihack_paperdefaults.json",
        "shallow",
    ),
    # CORA's Procgen config runs its shallow network ("orig"); our paper preset runs the
    # residual one (CORA's "impala_res_cnn"): both are compared like for like
    "procgen": Bench(
        "Procgen6",
        "procgen_6_tasks_5_cycles",
        "procgen/impala_procgen.json",
        "shallow",
        ours_overrides={"network": "shallow"},
    ),
    "procgen-residual": Bench(
        "Procgen6",
        "procgen_6_tasks_5_cycles",
        "procgen/impala_procgen.json",
        "residual",
        cora_extra={"conv_net_arch": "impala_res_cnn"},
    ),
    "atari": Bench("Atari6", "atari_6_tasks_5_cycles", "atari/impala_atari.json", "shallow"),
}


class _Stop(Exception):
    """Raised inside our learner's update once the measurement is complete."""


def train_until_stopped(
    bench: Bench,
    overrides: dict[str, Any],
    extra: dict[str, Any] | None = None,
    preset: str = "paper",
) -> None:
    """``run_main_job`` (``cl-suites run --method ft``, V-trace) on ``bench``'s suite with
    evaluation, checkpoints and the report off, until a patched update raises
    :class:`_Stop`. Options: ``overrides``, then the bench's own, then ``extra``."""
    from cl_suites.job.main_job import run_main_job

    never = 10**12
    training_only = {
        "eval_every": never,
        "eval_at_start": False,
        "checkpoint_every": never,
        "report": False,
    }
    with tempfile.TemporaryDirectory(prefix="bench-") as run_dir, contextlib.suppress(_Stop):
        run_main_job(
            suite=bench.suite,
            method="ft",
            learner="vtrace",
            preset=preset,
            seed=0,
            run_dir=Path(run_dir),
            resume=False,
            num_envs=None,
            overrides={**training_only, **overrides, **bench.ours_overrides, **(extra or {})},
        )


def child_result(
    command: list[str], what: str, root: Path = ROOT, **env_vars: str
) -> dict[str, Any]:
    """Run a benchmark's child process (the checkout ``root`` first on ``PYTHONPATH``, then
    this one for the ``benchmarks`` package, and ``env_vars`` set) and return the JSON it
    printed after ``BENCH_RESULT``; ``RuntimeError`` naming ``what`` (with the child's
    output on stderr) when it failed. Children run by path (``__file__``), so nothing but
    ``PYTHONPATH`` decides which checkout's ``cl_suites`` they import."""
    pythonpath = os.pathsep.join([str(root), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=pythonpath, **env_vars)
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("BENCH_RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-5000:])
        raise RuntimeError(f"{what} failed (exit {done.returncode})")
    return json.loads(lines[-1][len("BENCH_RESULT ") :])


# ----------------------------------------------------------------------------- timing
def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, its live children and its reaped ones."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:4])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(child.cpu_times()[:2])
    return total


class Marks:
    """``(wall seconds, steps trained, tree CPU seconds)`` marks; ``done`` once the run has
    trained ``warmup`` seconds after its first mark with steps, then ``seconds`` more."""

    def __init__(self, warmup: float, seconds: float) -> None:
        self.warmup, self.seconds = warmup, seconds
        self.started = time.perf_counter()
        self.marks: list[tuple[float, int, float]] = []

    def add(self, steps: int) -> None:
        self.marks.append((time.perf_counter(), int(steps), tree_cpu_seconds()))

    def _first(self) -> tuple[float, int, float] | None:
        return next((m for m in self.marks if m[1] > 0), None)

    def done(self) -> bool:
        first = self._first()
        return first is not None and self.marks[-1][0] - first[0] >= self.warmup + self.seconds

    def result(self) -> dict[str, Any]:
        first = self._first()
        if first is None:
            raise RuntimeError("no steps were trained")
        start = next(m for m in self.marks if m[0] >= first[0] + self.warmup)
        end = self.marks[-1]
        if end[0] <= start[0]:
            raise RuntimeError("the run ended before its measurement window")
        return {
            "rate": (end[1] - start[1]) / (end[0] - start[0]),
            "cpu_per_1k": 1000 * (end[2] - start[2]) / max(end[1] - start[1], 1),
            "window_s": end[0] - start[0],
            "window_steps": end[1] - start[1],
            "startup_s": first[0] - self.started,
            "marks": len(self.marks),
        }


# ----------------------------------------------------------------------------- CORA's side
def run_cora(repo: Path, bench: Bench, actors: int, marks: Marks) -> dict[str, Any]:
    """CORA's first task of ``bench``'s experiment through its own task loop (see the module
    docstring), ``actors`` actor processes, until ``marks`` is done."""
    from benchmarks.parity.cora_reference import import_cora, stop_children

    import_cora(repo)
    from continual_rl.available_policies import get_available_policies
    from continual_rl.experiment_specs import get_available_experiments

    out = Path(tempfile.mkdtemp(prefix="bench-cora-"))
    experiment = get_available_experiments()[bench.cora_experiment]  # a LazyDict: built here
    (settings,) = json.loads((repo / "configs" / bench.cora_config).read_text())
    name = settings.pop("policy")
    settings.pop("experiment", None)
    settings.update(num_actors=actors, device="cpu", **bench.cora_extra)
    struct = get_available_policies()[name]
    config = struct.config()
    config.load_from_dict(settings)
    experiment.set_output_dir(str(out))
    config.set_output_dir(str(out))
    policy = struct.policy(config, experiment.observation_space, experiment.action_spaces)
    task = experiment.tasks[0]
    trainer = policy.impala_trainer
    learn, trained = trainer.learn, [0]

    def counted_learn(*args: Any, **kwargs: Any) -> dict:
        stats = learn(*args, **kwargs)  # in a learner thread; CORA serialises learn()
        trained[0] += config.unroll_length * config.batch_size  # CORA's step += T * B
        marks.add(trained[0])
        return stats

    trainer.learn = counted_learn
    try:
        for _ in task.run(0, policy, None, str(out)):  # a yield about every 5 s
            if marks.done():
                break
    finally:
        trainer.cleanup()
        stop_children()
        shutil.rmtree(out, ignore_errors=True)  # CORA's logs of a benchmark run
    return {
        "side": "cora",
        "actors": actors,
        "task": task.task_id,
        "arch": config.conv_net_arch,
        **marks.result(),
    }


# ----------------------------------------------------------------------------- our side
def run_ours(
    bench: Bench, threads: int, marks: Marks, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``run_main_job`` (``cl-suites run --method ft --preset paper``) on ``bench``'s suite
    with ``threads`` torch threads (``--set torch_threads``; 1 is the default) and the
    options ``extra`` (``--ours-set``, e.g. ``policy_lag=1``) until ``marks`` is done; a
    mark after every update, counting the steps updated on (``updates * n_steps *
    num_envs``: with ``policy_lag=1`` collection runs ahead of the update)."""
    from baselines_sb3.learners import VTrace

    train = VTrace.train
    model: dict[str, Any] = {}

    def timed_train(self: VTrace) -> None:
        train(self)
        model["num_envs"] = self.n_envs
        marks.add(self._n_updates * self.n_steps * self.n_envs)
        if marks.done():
            raise _Stop

    VTrace.train = timed_train
    train_until_stopped(bench, {"torch_threads": threads}, extra)
    return {"side": "ours", "actors": model.get("num_envs"), "threads": threads, **marks.result()}


# ----------------------------------------------------------------------------- driver
def _child(args: argparse.Namespace, suite: str, side: str, count: int) -> dict[str, Any]:
    """One run in its own process: CORA with ``count`` actors, or ours with ``count`` torch
    threads."""
    python = str(args.cora_python) if side == "cora" else sys.executable
    root = args.before if side == "before" else ROOT
    command = [
        python,
        __file__,
        "--child",
        "cora" if side == "cora" else "ours",
        "--suites",
        suite,
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
    ]
    if side == "cora":
        command += ["--cora-actors", str(count), "--cora-repo", str(args.cora_repo)]
    else:
        command += ["--ours-threads", str(count)]
        command += [x for kv in args.ours_set for x in ("--ours-set", kv)]
    threads = args.cora_threads if side == "cora" else 1  # ours: --set torch_threads
    return child_result(command, f"the {side} run on {suite}", root, **cora_thread_env(threads))


def _label(side: str, count: int) -> str:
    if side == "cora":
        return f"CORA {count} actors"
    if side == "before":
        return "ours before"
    return "ours (32 envs)" if count == 1 else f"ours {count} threads"


def _rounds(args: argparse.Namespace, suite: str, phase: str) -> dict[str, dict[str, Any]]:
    """Every side of ``suite`` once per round, the order reversed every other round; each
    side's best run (by rate)."""
    sides = [("ours", n) for n in args.ours_threads] + [("cora", n) for n in args.cora_actors]
    if args.before:
        sides.insert(1, ("before", 1))
    best: dict[str, dict[str, Any]] = {}
    for repeat in range(args.repeats):
        for side, count in sides if repeat % 2 == 0 else sides[::-1]:
            load = os.getloadavg()[0]
            result = _child(args, suite, side, count)
            result["load"] = (load, os.getloadavg()[0])
            label = _label(side, count)
            print(
                f"  {suite:<16} {phase:<6} round {repeat + 1}  {label:<16} "
                f"{result['rate']:8,.0f} steps/s  {result['cpu_per_1k']:6.2f} CPU-s/1k steps  "
                f"(window {result['window_s']:.0f} s, start-up {result['startup_s']:.0f} s, "
                f"load {load:.1f} -> {result['load'][1]:.1f})",
                flush=True,
            )
            if label not in best or result["rate"] > best[label]["rate"]:
                best[label] = result
    return best


def _table(args: argparse.Namespace, results: dict[tuple[str, str], dict[str, dict]]) -> None:
    print(f"\nbest of {args.repeats} interleaved rounds; env steps trained per second")
    header = f"{'suite':<17}{'phase':<7}{'network':<10}{'side':<17}{'steps/s':>9}"
    print(header + f"{'CPU-s/1k':>10}{'vs CORA best':>14}{'vs CORA 32':>12}")
    for (suite, phase), best in results.items():
        cora = {k: v for k, v in best.items() if k.startswith("CORA")}
        top = max(cora.values(), key=lambda r: r["rate"]) if cora else None
        same = cora.get(_label("cora", 32))
        for label, result in best.items():
            cells = [
                f"{result['rate'] / top['rate']:>13.2f}x" if top else f"{'-':>14}",
                f"{result['rate'] / same['rate']:>11.2f}x" if same else f"{'-':>12}",
            ]
            print(
                f"{suite:<17}{phase:<7}{BENCHES[suite].network:<10}{label:<17}"
                f"{result['rate']:>9,.0f}{result['cpu_per_1k']:>10.2f}" + "".join(cells)
            )
        if top is not None and _label("ours", 1) in best:
            ours = best[_label("ours", 1)]["rate"]
            print(
                f"{'':<24}ours / CORA at its best count ({top['actors']} actors): "
                f"{ours / top['rate']:.2f}x"
            )
        if _label("before", 1) in best and _label("ours", 1) in best:
            after, before = best[_label("ours", 1)]["rate"], best[_label("before", 1)]["rate"]
            print(f"{'':<24}ours / ours before: {after / before:.2f}x")
    print(f"load average now {os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cora-repo", help="a checkout of AGI-Labs/continual_rl at f2754bb")
    parser.add_argument(
        "--cora-python", default=CORA_PYTHON, help="CORA's interpreter (cora_env.sh builds it)"
    )
    parser.add_argument(
        "--suites", nargs="+", choices=tuple(BENCHES), default=["minihack", "procgen", "atari"]
    )
    parser.add_argument("--cora-actors", type=int, nargs="+", default=[2, 4, 8, 32])
    parser.add_argument(
        "--cora-threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of CORA's processes (1, as CORA's Monobeast.setup asks)",
    )
    parser.add_argument(
        "--ours-threads",
        type=int,
        nargs="+",
        default=[1],
        help="our side with these torch_threads (1: the default; 2 also times the opt-in)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; best of N")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds trained before timing")
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds timed per run")
    parser.add_argument(
        "--busy", type=int, default=0, help="also measure next to N processes spinning a core"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also time our side with the code of this checkout (e.g. `git worktree add "
        "/tmp/before HEAD~1`): a change's before and after, side by side",
    )
    parser.add_argument(
        "--phases",
        nargs="+",
        choices=("alone", "busy"),
        default=["alone", "busy"],
        help="which phases to run (busy: only with --busy N)",
    )
    parser.add_argument(
        "--ours-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run options of our side (JSON values), e.g. policy_lag=1",
    )
    parser.add_argument("--child", choices=("cora", "ours"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        bench, marks = BENCHES[args.suites[0]], Marks(args.warmup, args.seconds)
        if args.child == "cora":
            result = run_cora(Path(args.cora_repo), bench, args.cora_actors[0], marks)
        else:
            extra = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.ours_set)}
            result = run_ours(bench, args.ours_threads[0], marks, extra)
        print("BENCH_RESULT " + json.dumps(result), flush=True)
        if args.child == "cora":  # CORA's generators would try to clean up again at exit
            os._exit(0)
        return 0
    try:
        check_cora_repo(args.cora_repo)
    except CoraSetupError as e:
        parser.error(str(e))
    if not Path(args.cora_python).exists():
        parser.error(f"CORA's interpreter {args.cora_python} is missing; run cora_env.sh")
    counts = [args.repeats, args.cora_threads, *args.cora_actors, *args.ours_threads]
    if args.busy < 0 or min(counts) < 1:
        parser.error("--busy must be >= 0; --repeats, --cora-actors, --*-threads >= 1")
    results: dict[tuple[str, str], dict[str, dict]] = {}
    for suite in args.suites:
        if "alone" in args.phases:
            results[(suite, "alone")] = _rounds(args, suite, "alone")
        if args.busy and "busy" in args.phases:
            with busy_processes(args.busy):
                results[(suite, "busy")] = _rounds(args, suite, "busy")
    _table(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
