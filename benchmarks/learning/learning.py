"""Learning evidence on real suites: CORA's paper preset with shortened budgets on this CPU.

    .venv/bin/python -m benchmarks.learning.learning            # all runs, then plots
    .venv/bin/python -m benchmarks.learning.learning --smoke    # a few hundred steps each
    .venv/bin/python -m benchmarks.learning.learning --only atari-spaceinvaders
    .venv/bin/python -m benchmarks.learning.learning --plot-only

Every run is ``cl-suites run --preset paper --method ft`` (CORA's "IMPALA" baseline: the
V-trace learner, CORA's hyperparameters and networks for the suite) on the first task of
Procgen6 (climber), MiniHack15 (pair 0: Room-Random 5x5 -> 15x15) and Atari6
(SpaceInvaders), with the budget, evaluation cadence and evaluation episodes shortened
(``RUNS``). Procgen6 runs twice: CORA's residual network (the preset's default, the paper
line) for what it can do here, and the shallow network (``--set network=shallow``, CORA's
Figure 11 line) as a documented second line.

Each run is a separate ``cl-suites`` process under ``nice`` with one torch thread
(``--threads``; one was 3-4x faster than two on this shared 2-core machine), writing
``runs/learning/<name>/`` (``--root``). The script is resumable: a finished run
(``progress.json`` state ``finished``) is skipped, an unfinished one continues with
``--resume`` from its last checkpoint, so killing the script loses at most one
checkpoint interval. Wall time, CPU time and the load average are accumulated over
resumptions in ``<root>/<name>.timing.json`` (wall time saved every poll, so a killed
session keeps it; CPU time is known only for sessions that ended); the job's output goes
to ``<root>/<name>.log``.

At the end (or with ``--plot-only``) it plots each suite's evaluation curves (greedy
policy, train split dashed and test split solid, as CORA draws them; training episode
returns as a thin moving average) next to CORA's final IMPALA values, into
``benchmarks/results/learning-<suite>.png`` (``--smoke``: into the run root), and prints a
summary table (Markdown). Steps are agent steps (``env.step`` calls summed over the 32
sub-envs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from cl_suites.rundir.progress import read_progress

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
POLL_S = 5.0


@dataclass(frozen=True)
class CoraReference:
    """CORA's published IMPALA numbers for a suite's first task (``cora_published.md``).

    ``final_*``: final return after the whole sequence (mean, SEM over seeds), ``None``
    where the suite has no such split (Atari's one split is logged as ``train``);
    ``task_steps`` / ``eval_every``: CORA's budget of the task and its evaluation cadence,
    in agent steps (the x axis of CORA's curves)."""

    table: str
    final_train: tuple[float, float] | None
    final_test: tuple[float, float] | None
    task_steps: int
    eval_every: int
    after: str


CORA: dict[str, CoraReference] = {
    "Procgen6": CoraReference(
        "Tables 6-7 (0-Climber)", (0.24, 0.04), (0.22, 0.04), 5_000_000, 250_000, "5 cycles"
    ),
    "MiniHack15": CoraReference(
        "Tables 8-9 (0-Room-Random)",
        (0.38, 0.12),
        (-0.02, 0.08),
        10_000_000,
        1_000_000,
        "2 cycles",
    ),
    "Atari6": CoraReference(
        "Table 5 (0-SpaceInvaders)", (247.64, 39.18), None, 50_000_000, 250_000, "2 cycles"
    ),
}


@dataclass(frozen=True)
class LearningRun:
    """One shortened paper-preset run.

    Attributes:
        name: run directory name under the root.
        suite: suite name.
        line: what the run stands for in the record.
        options: ``--set`` options besides the budgets (first task, network).
        steps: training budget of the (single) task, agent steps.
        eval_every: evaluation cadence, agent steps.
        eval_episodes: episodes per task and split at each evaluation.
        method: the CL method (``ft``: CORA's IMPALA line).
    """

    name: str
    suite: str
    line: str
    options: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    eval_every: int = 0
    eval_episodes: int = 5
    method: str = "ft"


RUNS: tuple[LearningRun, ...] = (
    LearningRun(
        "procgen-climber-residual",
        "Procgen6",
        "paper: CORA's residual network",
        {"games": ["climber"]},
        steps=12_800,
        eval_every=6_400,
        eval_episodes=5,
    ),
    LearningRun(
        "procgen-climber-shallow",
        "Procgen6",
        "second line: shallow network (CORA Fig. 11)",
        {"games": ["climber"], "network": "shallow"},
        steps=1_600_000,
        eval_every=160_000,
        eval_episodes=5,
    ),
    LearningRun(
        "minihack-room-random",
        "MiniHack15",
        "paper: shallow network",
        {"pairs": [0]},
        steps=320_000,
        eval_every=40_000,
        eval_episodes=10,
    ),
    LearningRun(
        "atari-spaceinvaders",
        "Atari6",
        "paper: shallow network",
        {"games": ["SpaceInvaders"]},
        steps=230_400,
        eval_every=38_400,
        eval_episodes=3,
    ),
    LearningRun(  # not plotted: two tasks; summarised per task in benchmarks/results/LOG.md
        "minihack-clear-two-tasks",
        "MiniHack15",
        "CLEAR: pairs 0-1, buffer larger than the run",
        {"pairs": [0, 1], "buffer_size": 100_000},
        steps=40_000,
        eval_every=20_000,
        eval_episodes=10,
        method="clear",
    ),
)
SMOKE = {"num_envs": 4, "steps": 320, "eval_every": 160, "eval_episodes": 1}
"""``--smoke``: 4 sub-envs x 20-step unrolls = 80 agent steps per update, 4 updates."""


def cli_command(run: LearningRun, run_dir: Path, *, resume: bool, smoke: bool) -> list[str]:
    """The ``cl-suites run`` command line of ``run`` (``--resume`` when it has started)."""
    steps, every, episodes = run.steps, run.eval_every, run.eval_episodes
    cmd = [sys.executable, "-m", "cl_suites.cli", "run", "--suite", run.suite]
    cmd += ["--method", run.method, "--preset", "paper", "--seed", "0", "--run-dir", str(run_dir)]
    if smoke:
        steps, every, episodes = SMOKE["steps"], SMOKE["eval_every"], SMOKE["eval_episodes"]
        cmd += ["--num-envs", str(SMOKE["num_envs"])]
    cmd += ["--steps-per-task", str(steps), "--cycles", "1"]
    cmd += ["--eval-every", str(every), "--eval-episodes", str(episodes)]
    job = {"progress": False, "report": False, "device": "cpu", **run.options}
    for key, value in job.items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    return cmd + (["--resume"] if resume else [])


def run_state(run_dir: Path) -> str:
    """``"finished"``, ``"started"`` (metadata written: resume it) or ``"new"``."""
    progress = read_progress(run_dir)
    if progress is not None and progress.get("state") == "finished":
        return "finished"
    return "started" if (run_dir / "metadata.json").exists() else "new"


def _load_timing(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"wall_s": 0.0, "cpu_s": 0.0, "load_samples": [], "sessions": 0}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def execute(
    run: LearningRun, root: Path, *, smoke: bool, threads: int, nice: int, console: Console
) -> None:
    """Run (or resume) ``run`` to its end in a ``cl-suites`` subprocess, showing progress."""
    run_dir = root / run.name
    state = run_state(run_dir)
    if state == "finished":
        console.print(f"[green]{run.name}[/]: finished, skipped")
        return
    cmd = [
        "nice",
        "-n",
        str(nice),
        *cli_command(run, run_dir, resume=state == "started", smoke=smoke),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    timing_path = root / f"{run.name}.timing.json"
    timing = _load_timing(timing_path)
    console.print(
        f"[bold]{run.name}[/] ({run.suite}, {run.line}): "
        f"{'resuming' if state == 'started' else 'starting'}"
    )
    start, cpu0, wall0 = time.time(), _children_cpu(), timing["wall_s"]
    timing["sessions"] += 1

    def save_timing() -> None:  # every poll: a killed session keeps its wall time
        timing["wall_s"] = wall0 + time.time() - start
        timing_path.write_text(json.dumps(timing, indent=1))

    with open(root / f"{run.name}.log", "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _follow(proc, run, run_dir, console, timing, save_timing)
    timing["cpu_s"] += _children_cpu() - cpu0  # known once the process has ended
    save_timing()
    if proc.returncode != 0:
        raise SystemExit(
            f"{run.name} failed (exit {proc.returncode}); see {root / (run.name + '.log')}; "
            "rerun this script to resume it"
        )


def _follow(
    proc: subprocess.Popen,
    run: LearningRun,
    run_dir: Path,
    console: Console,
    timing: dict[str, Any],
    save_timing: Callable[[], None],
) -> None:
    """Poll ``progress.json`` until ``proc`` ends: a rich bar on a terminal, else a line a
    minute. Samples the 1-minute load average into ``timing`` and saves it every poll."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    last_line = 0.0
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task(run.name, total=None, info="starting")
        while proc.poll() is None:
            time.sleep(POLL_S)
            timing["load_samples"].append(os.getloadavg()[0])
            save_timing()
            progress = read_progress(run_dir)
            if progress is None:
                continue
            info = (
                f"{progress['total_step']:,}/{progress['total_steps']:,} agent steps, "
                f"{progress['steps_per_s']:.0f} steps/s, load {os.getloadavg()[0]:.1f}"
            )
            bar.update(
                task, completed=progress["total_step"], total=progress["total_steps"], info=info
            )
            if not console.is_terminal and time.time() - last_line > 60:
                console.print(f"  {run.name}: {info}")
                last_line = time.time()


# ----------------------------------------------------------------- results
def read_run(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(eval.csv, episodes.csv) of a run directory, empty frames when missing.

    Training episodes that the end of a finished run's budget cut (logged at its last step
    with partial returns, one per sub-env) are left out: they are not played episodes."""
    frames = []
    for name in ("eval.csv", "episodes.csv"):
        path = run_dir / name
        frames.append(
            pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()
        )
    evals, episodes = frames
    progress = read_progress(run_dir) or {}
    if len(episodes) and progress.get("state") == "finished":
        episodes = episodes[episodes["total_step"] < progress["total_steps"]]
    return evals, episodes


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to ``window`` values (shorter at the start)."""
    sums = np.cumsum(np.insert(np.asarray(values, dtype=float), 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def summary_rows(runs: tuple[LearningRun, ...], root: Path) -> list[dict[str, Any]]:
    """One row per run: steps done, timing, load, first and last evaluation per split."""
    rows = []
    for run in runs:
        run_dir = root / run.name
        evals, episodes = read_run(run_dir)
        timing = _load_timing(root / f"{run.name}.timing.json")
        progress = read_progress(run_dir) or {}
        done = int(progress.get("total_step", 0))
        row: dict[str, Any] = {
            "run": run.name,
            "suite": run.suite,
            "line": run.line,
            "state": progress.get("state", "not run"),
            "steps": done,
            "wall_min": timing["wall_s"] / 60,
            "steps_per_s": done / timing["wall_s"] if timing["wall_s"] else float("nan"),
            "steps_per_cpu_s": done / timing["cpu_s"] if timing["cpu_s"] else float("nan"),
            "load": float(np.mean(timing["load_samples"]))
            if timing["load_samples"]
            else float("nan"),
        }
        for split in ("train", "test"):
            part = evals[evals["split"] == split] if len(evals) else evals
            if len(part):
                row[f"{split}_first"] = float(part["mean_return"].iloc[0])
                row[f"{split}_last"] = float(part["mean_return"].iloc[-1])
                row[f"{split}_best"] = float(part["mean_return"].max())
        if len(episodes):
            returns = episodes["episode_return"].to_numpy()
            k = max(1, min(100, len(returns) // 10))
            row["train_episodes_first"] = float(returns[:k].mean())
            row["train_episodes_last"] = float(returns[-k:].mean())
            row["train_episodes_k"] = k
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The summary as a Markdown table (returns: first -> last evaluation, best)."""

    def cell(row: dict[str, Any], split: str) -> str:
        if f"{split}_first" not in row:
            return "-"
        return (
            f"{row[f'{split}_first']:.3g} -> {row[f'{split}_last']:.3g} "
            f"(best {row[f'{split}_best']:.3g})"
        )

    lines = [
        "| run | line | agent steps | wall min | steps/s | steps/CPU-s | load | eval train | "
        "eval test | training episodes (first -> last k) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        episodes = (
            f"{r['train_episodes_first']:.3g} -> {r['train_episodes_last']:.3g} "
            f"(k={r['train_episodes_k']})"
            if "train_episodes_k" in r
            else "-"
        )
        lines.append(
            f"| {r['run']} | {r['line']} | {r['steps']:,} ({r['state']}) | {r['wall_min']:.1f} | "
            f"{r['steps_per_s']:.0f} | {r['steps_per_cpu_s']:.0f} | {r['load']:.1f} | "
            f"{cell(r, 'train')} | {cell(r, 'test')} | {episodes} |"
        )
    return "\n".join(lines)


def plot_suite(suite: str, runs: list[LearningRun], root: Path, out: Path) -> Path | None:
    """Evaluation curves of ``runs`` (one suite) next to CORA's final IMPALA values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    ref = CORA[suite]
    fig, ax = plt.subplots(figsize=(9.0, 5.2), dpi=90)
    colors = ("tab:blue", "tab:orange")
    drawn = False
    for run, color in zip(runs, colors, strict=False):
        evals, episodes = read_run(root / run.name)
        if len(episodes):
            returns = episodes["episode_return"].to_numpy()
            window = max(1, min(200, len(returns) // 20))
            ax.plot(
                episodes["total_step"],
                moving_average(returns, window),
                color=color,
                alpha=0.3,
                lw=1,
                label=f"{run.line}: training episodes (avg of {window})",
            )
            drawn = True
        splits = set(evals["split"]) if len(evals) else set()
        for split, style in (("test", "-"), ("train", "--")):
            part = evals[evals["split"] == split] if len(evals) else evals
            if len(part):
                one = len(splits) == 1  # Atari: one split, drawn solid as CORA does
                ax.plot(
                    part["total_step"],
                    part["mean_return"],
                    "-" if one else style,
                    color=color,
                    marker="o",
                    ms=3,
                    lw=1.6,
                    label=f"{run.line}: eval" + ("" if one else f" {split}"),
                )
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    finals = [
        (split, value, style)
        for split, value, style in (("train", ref.final_train, "--"), ("test", ref.final_test, "-"))
        if value is not None
    ]
    for _split, value, style in finals:
        ax.axhline(value[0], color="gray", ls=style if len(finals) > 1 else "-", lw=1)
    label = " / ".join(
        f"{split if len(finals) > 1 else ''} {v[0]:g}\u00b1{v[1]:g}".strip()
        for split, v, _ in finals
    )
    ax.text(
        0.99,
        max(v[0] for _, v, _ in finals),
        f"CORA IMPALA final ({ref.after}): {label}",
        color="dimgray",
        fontsize=8,
        ha="right",
        va="bottom",
        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1},
        transform=ax.get_yaxis_transform(),
    )
    task_name = ref.table.split("(")[-1].rstrip(")")
    ax.set_title(
        f"{suite} {task_name}: cl-suites paper preset, IMPALA (ft), seed 0\n"
        f"CORA's task: {ref.task_steps:,} agent steps, first eval point at "
        f"{ref.eval_every:,}",
        fontsize=9,
    )
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("agent steps")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="4 envs x 320 agent steps per run (checks the script, not learning)",
    )
    parser.add_argument("--only", nargs="+", choices=[r.name for r in RUNS], help="these runs")
    parser.add_argument("--root", type=Path, help="run root (default runs/learning[-smoke])")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--nice", type=int, default=10, help="nice level of the runs")
    parser.add_argument("--plot-only", action="store_true", help="plot and summarise only")
    args = parser.parse_args(argv)
    console = Console()
    runs = tuple(r for r in RUNS if not args.only or r.name in args.only)
    root = args.root or REPO / "runs" / ("learning-smoke" if args.smoke else "learning")
    root.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        for run in runs:
            execute(
                run, root, smoke=args.smoke, threads=args.threads, nice=args.nice, console=console
            )
    out_dir = root if args.smoke else RESULTS
    for suite in dict.fromkeys(r.suite for r in runs if r.method == "ft"):
        path = plot_suite(
            suite,
            [r for r in runs if r.suite == suite and r.method == "ft"],
            root,
            out_dir / f"learning-{suite}.png",
        )
        if path is not None:
            console.print(f"plot: {path}")
    table = markdown_table(summary_rows(runs, root))
    (root / "summary.md").write_text(table + "\n")
    console.print(table, markup=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
