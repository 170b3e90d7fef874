"""Learning at equal budgets beside CORA's own training (issue 28 item 3): one scorer for
both sides, their training curves in one plot, per-task scores after each task.

Used by ``parity_cora.py``'s ``train-ours`` and ``compare`` modes. The two sides:

* CORA: ``parity_cora.py train-cora --out DIR`` (CORA's experiment runner and policy): a
  parameter snapshot about every 100k steps (``DIR/snapshots/cycle0_task<k>_step<s>.tar``,
  ``k`` CORA's task index, train and test envs alternating, so train task ``i`` is
  ``k = 2 i``) and every training episode's return (``DIR/episodes.jsonl``);
* ours: ``cl-suites run --preset paper`` (``train-ours``), whose own evaluator writes
  ``eval.csv`` every ``--eval-every`` steps and whose ``episodes.csv`` holds every
  training episode's return.

**One scorer.** A CORA snapshot is loaded into our policy (``cora_weights``) and played by
the same ``cl_suites`` ``Evaluator`` our run uses, with our run's seed and the same
nominal evaluation step, so both sides play the same evaluation episodes (levels from
``(seed, step, task, split)``), greedy (CORA's ``test()`` puts its net in eval mode and
takes the argmax). ``compare --check-scorer`` also rescores our own final checkpoint the
same way and checks it reproduces our run's last ``eval.csv`` rows, so the offline path and
the in-run path are one scorer.

Steps: agent steps (``env.step`` calls summed over envs / actors) per task; CORA's task
runner overshoots a task's budget by up to one of its 5-second yields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SUITE = "MiniHack15"
SNAPSHOT = re.compile(r"cycle(\d+)_task(\d+)_step(\d+)\.tar$")
CURVE_BIN = 100_000
"""Training-return curves: mean return of the episodes that ended in each bin of this many
steps of a task."""


@dataclass(frozen=True)
class Budget:
    """The compared budget: MiniHack15 ``pairs``, ``steps_per_task`` agent steps each,
    greedy evaluation every ``eval_every`` steps with ``eval_episodes`` per task and
    split."""

    pairs: tuple[int, ...] = (0, 1)
    steps_per_task: int = 1_000_000
    eval_every: int = 250_000
    eval_episodes: int = 50


def ours_command(method: str, seed: int, run_dir: Path, budget: Budget) -> list[str]:
    """``cl-suites run --preset paper`` at ``budget`` (``--resume`` when it has started)."""
    cmd = ["cl-suites", "run", "--suite", SUITE, "--method", method, "--preset", "paper"]
    cmd += ["--seed", str(seed), "--steps-per-task", str(budget.steps_per_task)]
    cmd += ["--cycles", "1", "--eval-every", str(budget.eval_every)]
    cmd += ["--eval-episodes", str(budget.eval_episodes)]
    cmd += ["--set", f"pairs={list(budget.pairs)}", "--set", "device=cpu", "--set", "report=false"]
    cmd += ["--run-dir", str(run_dir)]
    if (run_dir / "metadata.json").exists():
        cmd.append("--resume")
    return cmd


# --- the scorer -------------------------------------------------------------------------


class Scorer:
    """Our paper-preset IMPALA policy for MiniHack15 ``pairs`` and the evaluator of a run
    with seed ``seed``; ``score(state, step)`` plays the evaluation of step ``step`` with
    the given parameters."""

    def __init__(self, budget: Budget, seed: int, episodes: int | None = None):
        from baselines_sb3.cl import make_method
        from baselines_sb3.factory import build_model, wrap_env
        from cl_suites import make_sequence, make_vec
        from cl_suites.core.evaluation import Evaluator
        from cl_suites.job.hyperparameters import preset_settings

        kwargs = dict(
            pairs=list(budget.pairs),
            steps_per_task=budget.steps_per_task,
            cycles=1,
            eval_every=budget.eval_every,
            eval_episodes=episodes or budget.eval_episodes,
        )
        hp = preset_settings(SUITE, "vtrace", "ft", "paper")
        self.sequence = make_sequence(SUITE, **kwargs)
        vec = make_vec(f"CLSuite/{SUITE}-v0", num_envs=1, **kwargs).to_sb3()
        env, _ = wrap_env(vec, self.sequence, hp, multi_head=False, task_id_input=False)
        self.model = build_model(
            "vtrace",
            env,
            self.sequence,
            hp,
            make_method("ft", seed=seed),
            method="ft",
            seed=seed,
            multi_head=False,
            task_id_input=False,
            device="cpu",
        )
        self.evaluator = Evaluator(self.sequence, seed=seed, first_eval_step=0)
        self.env = env

    def load_ours(self, policy_state: dict) -> None:
        self.model.policy.load_state_dict(policy_state)

    def load_cora(self, model_state: dict) -> None:
        from baselines_sb3.cora_weights import load_cora_state_dict

        load_cora_state_dict(self.model.policy, model_state)

    def score(self, step: int) -> list[dict[str, Any]]:
        from baselines_sb3.callbacks import make_eval_policy

        self.model.policy.set_training_mode(False)
        return self.evaluator.evaluate(int(step), make_eval_policy(self.model))

    def close(self) -> None:
        self.evaluator.close()
        self.env.close()


def cora_snapshots(cora_dir: Path) -> list[tuple[int, int, Path]]:
    """``(train task, task step, path)`` of CORA's snapshots of its train tasks."""
    out = []
    for path in sorted((cora_dir / "snapshots").glob("*.tar")):
        m = SNAPSHOT.search(path.name)
        if m and int(m.group(2)) % 2 == 0:
            out.append((int(m.group(2)) // 2, int(m.group(3)), path))
    return out


def nominal_points(budget: Budget) -> list[tuple[int, int]]:
    """``(train task, task step)`` of every evaluation point after step 0."""
    points = []
    for task in range(len(budget.pairs)):
        for step in range(budget.eval_every, budget.steps_per_task + 1, budget.eval_every):
            points.append((task, step))
    return points


def score_cora(
    cora_dir: Path, budget: Budget, seed: int, out: Path, reuse: bool = True
) -> pd.DataFrame:
    """Score CORA's snapshot nearest each evaluation point (and the untrained start) with
    our scorer; rows as ``eval.csv``'s plus ``snapshot_step``; written to ``out`` after
    every point, so a run still training can be scored as it goes. ``reuse``: keep the
    rows ``out`` already holds for a point whose nearest snapshot and episode count are
    unchanged (scoring one point takes about a minute here)."""
    import torch as th

    snaps = cora_snapshots(cora_dir)
    done = pd.read_csv(out) if reuse and out.exists() else pd.DataFrame()
    scorer: Scorer | None = None
    rows: list[dict[str, Any]] = []
    try:
        for task, step in nominal_points(budget):
            own = [(abs(s - step), s, p) for t, s, p in snaps if t == task]
            if not own:
                continue
            gap, snap_step, path = min(own)
            if gap > budget.eval_every // 4:
                continue  # the run has not reached this point yet
            total = task * budget.steps_per_task + step
            if not done.empty:
                kept = done[(done.total_step == total) & (done.snapshot == path.name)]
                if len(kept) and (kept.episodes == budget.eval_episodes).all():
                    rows += kept.to_dict("records")
                    continue
            if scorer is None:
                scorer = Scorer(budget, seed)
            state = th.load(path, map_location="cpu", weights_only=False)["model_state_dict"]
            scorer.load_cora(state)
            for row in scorer.score(total):
                rows.append({**row, "snapshot": path.name, "snapshot_step": snap_step})
            pd.DataFrame(rows).to_csv(out, index=False)
    finally:
        if scorer is not None:
            scorer.close()
    frame = pd.DataFrame(rows)
    if rows:
        frame.to_csv(out, index=False)
    return frame


def rescore_ours(run_dir: Path, budget: Budget, seed: int) -> float:
    """Largest difference between our run's last ``eval.csv`` rows and the scorer's
    evaluation of the run's last checkpoint at the same step (0.0: one scorer)."""
    import torch as th

    from cl_suites.rundir.checkpoint_files import checkpoint_files

    files = checkpoint_files(run_dir / "checkpoint")
    if not files:
        raise FileNotFoundError(f"{run_dir}/checkpoint holds no checkpoint")
    step, path = files[0]
    state = th.load(path, map_location="cpu", weights_only=False)
    evals = pd.read_csv(run_dir / "eval.csv")
    logged = evals[evals.total_step == step]
    if logged.empty:
        raise ValueError(f"{run_dir}/eval.csv has no evaluation at the last checkpoint {step}")
    scorer = Scorer(budget, seed, episodes=int(logged.episodes.iloc[0]))
    try:
        scorer.load_ours(state["policy"])
        rows = pd.DataFrame(scorer.score(step))
    finally:
        scorer.close()
    merged = rows.merge(logged, on=["task_id", "split"], suffixes=("", "_logged"))
    return float((merged.mean_return - merged.mean_return_logged).abs().max())


# --- curves and tables -------------------------------------------------------------------


def cora_training_returns(cora_dir: Path) -> pd.DataFrame:
    """CORA's training episodes: ``task`` (train task index), ``step`` (task step at which
    CORA reported them), ``episode_return``."""
    rows = []
    with (cora_dir / "episodes.jsonl").open() as f:
        for line in f:
            rec = json.loads(line)
            task = int(str(rec["task"]).rsplit("_", 1)[-1])
            rows += [(task, rec["task_step"], r) for r in rec["returns"]]
    return pd.DataFrame(rows, columns=["task", "step", "episode_return"])


def our_training_returns(run_dir: Path, budget: Budget) -> pd.DataFrame:
    """Our training episodes as CORA counts them: ``task``, ``step`` (task step at which
    the episode ended), ``episode_return``.

    ``episodes.csv`` also holds the games a task switch cut (logged at the task's last step
    with their return so far, `docs/fidelity.md` "game cut by a task switch"); CORA reports
    a game only at its real end, so those rows are left out here. Without a flag in the
    log they are told apart by their step alone: a game that really ended on the task's
    last vector step (a few of the ~4,000 episodes a bin holds) is left out with them.
    """
    episodes = pd.read_csv(run_dir / "episodes.csv")
    task = episodes.task_id.to_numpy()
    step = episodes.total_step.to_numpy() - task * budget.steps_per_task
    ended = step < budget.steps_per_task
    return pd.DataFrame(
        {"task": task[ended], "step": step[ended], "episode_return": episodes.episode_return[ended]}
    ).reset_index(drop=True)


def binned(returns: pd.DataFrame, budget: Budget) -> pd.DataFrame:
    """Mean training return per (task, ``CURVE_BIN`` steps); ``bin_end`` is the bin's last
    step within the task."""
    edges = np.clip(returns.step.to_numpy() - 1, 0, None) // CURVE_BIN
    edges = np.minimum(edges, budget.steps_per_task // CURVE_BIN - 1)
    frame = returns.assign(bin_end=(edges + 1) * CURVE_BIN)
    return frame.groupby(["task", "bin_end"]).episode_return.agg(["mean", "count"]).reset_index()


def eval_table(frames: dict[str, pd.DataFrame], budget: Budget) -> str:
    """Markdown: every side's greedy return per (task, split) after each task's training
    (``after task i``), one column per scored run."""
    names = list(frames)
    lines = ["| after | task / split | " + " | ".join(names) + " |"]
    lines.append("|---" * (2 + len(names)) + "|")
    for after in range(len(budget.pairs)):
        step = (after + 1) * budget.steps_per_task
        keys = frames[names[0]][["task_id", "task_name", "split"]].drop_duplicates()
        for _, key in keys.iterrows():
            cells = []
            for name in names:
                f = frames[name]
                hit = f[
                    (f.total_step == step) & (f.task_id == key.task_id) & (f.split == key.split)
                ]
                cells.append(f"{hit.mean_return.iloc[0]:.3f}" if len(hit) else "-")
            lines.append(
                f"| task {after} | {key.task_name} / {key.split} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines)


SIDE_COLORS = {
    "CORA": ("#1f77b4", "#17becf", "#393b79", "#6baed6"),
    "ours": ("#ff7f0e", "#d62728", "#8c564b", "#e377c2"),
}
"""Line colours of each side (blues for CORA, warm for ours), one per run in the order the
curves come; a fifth run of a side repeats the first colour."""


def plot(
    curves: dict[str, tuple[pd.DataFrame, pd.DataFrame]], budget: Budget, out: Path, title: str
) -> None:
    """One figure: training returns (binned per 100k steps of a task) in the first panel,
    then one panel per task with its greedy evaluation on the train (circles) and test
    (squares, faint) env, over the whole run's steps. CORA solid, ours dashed; one colour
    per side and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: dict[int, str] = {}
    for _, evals in curves.values():
        names.update(zip(evals.task_id.astype(int), evals.task_name, strict=True))
    tasks = sorted(names)
    fig, axes = plt.subplots(
        1, 1 + len(tasks), figsize=(5 * (1 + len(tasks)), 4.4), dpi=90, sharey=True
    )
    titles = ["training returns (sampled)"] + [f"greedy: task {t} {names[t]}" for t in tasks]
    for ax, panel in zip(axes, titles, strict=True):
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("agent steps (whole run)")
        ax.grid(alpha=0.3)
        for t in range(1, len(budget.pairs)):
            ax.axvline(t * budget.steps_per_task, color="grey", lw=0.8)
    seen: dict[str, int] = {}
    for name, (train, evals) in curves.items():
        side = name.split()[0]
        index = seen.setdefault(name, sum(n.startswith(side) for n in seen))
        color = SIDE_COLORS[side][index % len(SIDE_COLORS[side])]
        style = "-" if side == "CORA" else "--"
        for task, part in train.groupby("task"):
            x = task * budget.steps_per_task + part.bin_end
            axes[0].plot(
                x, part["mean"], style, color=color, lw=1.6, label=name if task == 0 else None
            )
        for (task, split), part in evals.groupby(["task_id", "split"]):
            axes[1 + tasks.index(int(task))].plot(
                part.total_step,
                part.mean_return,
                style,
                marker="o" if split == "train" else "s",
                ms=3.5,
                color=color,
                lw=1.1,
                alpha=0.9 if split == "train" else 0.4,
                label=f"{name} {split}" if task == tasks[-1] else None,
            )
    axes[0].set_ylabel("episode return")
    axes[0].legend(fontsize=7, loc="lower right")
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def summary(values: Sequence[float]) -> str:
    arr = np.asarray(values, dtype=float)
    return f"{arr.mean():.3f}" + (f" ± {arr.std():.3f}" if len(arr) > 1 else "")
