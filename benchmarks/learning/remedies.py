"""Do the remedies help? FT, ReDo and shrink-and-perturb side by side (issue 54 item 5).

    .venv/bin/python -m benchmarks.learning.remedies              # all runs, then the report
    .venv/bin/python -m benchmarks.learning.remedies --smoke      # tiny budgets, to check it
    .venv/bin/python -m benchmarks.learning.remedies --plot-only

Two sequences, three seeds each, the remedies at their defaults (Plasticine's cadences):

* MEAL-2 repeated four times (``--cycles 4``), ``ppo-jax``, small preset, 25,000 env steps
  per task, evaluation every 2,500: the setting where fine-tuning's actor went from 0.64 to
  0.90 dormant (docs/metrics.md, "What they showed on a real run"); the three seeds of a
  method are one program (``--seeds 0 1 2``).
* Procgen6 (CORA), the ``vtrace`` learner (CORA's IMPALA), small preset, 2,000 agent steps
  per task, evaluation at each task's end (1 episode per task and split, cut at 100 steps):
  one CORA sequence a 2-core CPU can run three times per method in minutes. Far from CORA's
  budget (25M steps per task): what the remedies do to the diagnostics, not a result about
  Procgen's returns.

Each run is a ``cl-suites run`` process writing ``<root>/<sequence>-<method>/``; a finished
one is skipped, an unfinished one resumed (``--resume``). Then ``cl-suites report`` over all
of them writes ``<root>/report`` (forgetting, MEAL's plasticity metrics and the plasticity
diagnostics per method), and this script draws
``benchmarks/results/remedies-<sequence>.png``: the actor's dormant ratio and the mean
evaluation return over training, one line per method (mean over seeds, the band one
standard error).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from cl_suites.rundir.progress import read_progress
from cl_suites.rundir.runlog import read_eval, read_plasticity

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
METHODS = ("ft", "redo", "shrink-perturb")


@dataclass(frozen=True)
class Sequence:
    name: str
    args: tuple[str, ...]
    smoke: tuple[str, ...]
    seeds_in_one_program: bool


SEQUENCES = (
    Sequence(
        "meal2x4",
        (
            "--suite", "MEAL-2", "--learner", "ppo-jax", "--preset", "small", "--cycles", "4",
            "--steps-per-task", "25000", "--eval-every", "2500",
        ),
        (
            "--suite", "MEAL-2", "--learner", "ppo-jax", "--preset", "small", "--cycles", "2",
            "--steps-per-task", "2048", "--eval-every", "1024",
        ),
        True,
    ),
    Sequence(
        "procgen6",
        (
            "--suite", "Procgen6", "--learner", "vtrace", "--preset", "small",
            "--steps-per-task", "2000", "--eval-every", "2000", "--eval-episodes", "1",
            "--set", "eval_max_episode_steps=100",
        ),
        (
            "--suite", "Procgen6", "--learner", "vtrace", "--preset", "small",
            "--steps-per-task", "500", "--eval-every", "500", "--eval-episodes", "1",
        ),
        False,
    ),
)  # fmt: skip


def _finished(run_dir: Path) -> bool:
    progress = read_progress(run_dir)
    return bool(progress) and progress.get("state") == "finished"


def _run(cmd: list[str], log: Path) -> float:
    start = time.monotonic()
    with log.open("a") as out:
        code = subprocess.call(["nice", *cmd], stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed with {code}; see {log}")
    return time.monotonic() - start


def run_all(root: Path, smoke: bool, seeds: tuple[int, ...], only: str | None = None) -> None:
    cli = [sys.executable, "-m", "cl_suites", "run"]
    common = ["--set", "report=false", "--set", "progress=false"]
    for seq in SEQUENCES:
        if only is not None and seq.name != only:
            continue
        args = list(seq.smoke if smoke else seq.args)
        for method in METHODS:
            if seq.seeds_in_one_program:
                groups = [(root / f"{seq.name}-{method}", ["--seeds", *map(str, seeds)])]
            else:
                groups = [
                    (root / f"{seq.name}-{method}" / f"seed-{s}", ["--seed", str(s)]) for s in seeds
                ]
            for run_dir, seed_args in groups:
                one_program = seq.seeds_in_one_program
                dirs = [run_dir / f"seed-{s}" for s in seeds] if one_program else [run_dir]
                if all(_finished(d) for d in dirs):
                    continue
                started = any((d / "metadata.json").exists() for d in dirs)
                resume = ["--resume"] if started else []
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                cmd = [*cli, *args, "--method", method, *seed_args, "--run-dir", str(run_dir)]
                seconds = _run([*cmd, *common, *resume], root / f"{seq.name}-{method}.log")
                print(f"{seq.name} {method} {seed_args}: {seconds:.0f} s", flush=True)


def _seed_dirs(root: Path, seq: Sequence, method: str) -> list[Path]:
    return sorted(p.parent for p in (root / f"{seq.name}-{method}").glob("**/metadata.json"))


def plot(root: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for seq in SEQUENCES:
        fig, (ax_d, ax_r) = plt.subplots(1, 2, figsize=(12, 4))
        drawn = False
        for method in METHODS:
            dirs = _seed_dirs(root, seq, method)
            if not dirs:
                continue
            dormant, returns = [], []
            for d in dirs:
                p = read_plasticity(d)
                p = p[(p.network == "actor") & (p.layer == "all") & (p.metric == "dormant_ratio")]
                dormant.append(p.set_index("total_step")["value"])
                e = read_eval(d)
                e = e[e.split == "train"] if (e.split == "train").any() else e
                returns.append(e.groupby("total_step")["mean_return"].mean())
            for ax, series in ((ax_d, dormant), (ax_r, returns)):
                frame = pd.concat(series, axis=1)
                mean, sem = frame.mean(axis=1), frame.sem(axis=1).fillna(0.0)
                ax.plot(mean.index, mean.values, label=f"{method} ({len(dirs)} seeds)")
                ax.fill_between(mean.index, mean - sem, mean + sem, alpha=0.2)
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ends = [seg["end_step"] for seg in _schedule(root, seq)]
        for ax in (ax_d, ax_r):
            for end in ends[:-1]:
                ax.axvline(end, color="grey", lw=0.5, ls=":")
            ax.set_xlabel("steps (the suite's unit: env steps on MEAL, agent steps on CORA)")
        ax_d.set_ylabel("actor dormant ratio (tau 0.025)")
        ax_r.set_ylabel("mean evaluation return over tasks")
        ax_d.legend()
        fig.suptitle(f"{seq.name}: FT vs ReDo vs shrink-and-perturb (task switches dotted)")
        fig.tight_layout()
        path = out_dir / f"remedies-{seq.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"figure: {path}")


def _schedule(root: Path, seq: Sequence) -> list[dict]:
    import json

    for method in METHODS:
        dirs = _seed_dirs(root, seq, method)
        if dirs:
            return json.loads((dirs[0] / "metadata.json").read_text())["schedule"]
    return []


def report(root: Path) -> None:
    dirs = [str(p) for p in sorted(root.glob("*-*")) if p.is_dir()]
    subprocess.check_call(
        [sys.executable, "-m", "cl_suites", "report", *dirs, "--out", str(root / "report")]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "remedies")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", choices=[s.name for s in SEQUENCES], help="one sequence")
    args = parser.parse_args()
    root = args.root / "smoke" if args.smoke else args.root
    root.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        run_all(root, args.smoke, tuple(args.seeds), args.only)
    report(root)
    plot(root, root if args.smoke else RESULTS)


if __name__ == "__main__":
    main()
