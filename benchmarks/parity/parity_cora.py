"""CORA parity: our V-trace learners beside CORA's own code (issue 28).

CORA's code (AGI-Labs/continual_rl at f2754bb) is imported from a checkout, never copied;
it runs in the scratch interpreter ``benchmarks/parity/cora_env.sh`` builds, with the runtime
shims of ``cora_reference.py``. Modes::

    bash benchmarks/parity/cora_env.sh       # once: CORA's interpreter at /tmp/cora/venv
    /tmp/cora/venv/bin/python -m benchmarks.parity.parity_cora --cora-repo /tmp/cora/continual_rl \\
        train-cora --policy impala --pairs 0 1 --steps-per-task 1000000 \\
        --out /tmp/cora_runs/impala_s0
    /tmp/cora/venv/bin/python -m benchmarks.parity.parity_cora --cora-repo /tmp/cora/continual_rl \\
        update [--cases atari/ewc ...] [--write-pins tests/golden/cora_parity.json]

``train-cora`` runs CORA's own experiment runner (``Experiment.try_run``) and policy on
MiniHack15's first pairs (train env, test env), each train task for ``--steps-per-task``
env steps, with CORA's MiniHack paper-default config (``configs/minihack/
<policy>_minihack_paperdefaults.json``; EWC takes its Procgen/Atari method settings) and
``--num-actors`` actors (the machine's cores, not CORA's 64). Under ``--out`` it keeps
CORA's own output (``0/``: logs, TensorBoard events, ``model.tar``), a parameter snapshot
every ``--snapshot-every`` steps (``snapshots/task<k>_step<s>.tar``), and every training
episode's return (``episodes.jsonl``: task, task step, returns). A run that is stopped
resumes where CORA's last save left it with the same command (CORA's ``resume_id``).
It runs with ``OMP_NUM_THREADS=1`` (``cora_reference.cora_thread_env``; the command
starts itself again with it when it is not set, as CORA's forked actors hang otherwise).

``compare`` (issue 28 item 3, the project's interpreter, no CORA import) pairs the runs
under ``--root``: CORA's ``cora_<policy>_s<k>`` (``train-cora --out``) with ours
``ours_<method>_s<k>`` (``train-ours``, ``cl-suites run --preset paper`` at the same
budget; ``impala`` is our ``ft``), scores CORA's snapshots with our evaluator
(``cora_learning.py``: one scorer, the same evaluation episodes), with ``--check-scorer``
checks that the scorer reproduces our own run's last evaluation, and writes per method a
plot of both sides' learning curves (``--plots``) and Markdown tables of the scores after
each task::

    .venv/bin/python -m benchmarks.parity.parity_cora train-ours --method ft --seed 0 \
        --out /tmp/cora_runs/ours_ft_s0
    .venv/bin/python -m benchmarks.parity.parity_cora compare --root /tmp/cora_runs

``update`` (issue 28 items 2 and 5) plays every case of ``cora_cases.py`` (beside this
file) on CORA's side (``cora_side.py``: CORA's policy classes from its configs,
``Monobeast.learn``) and ours (``cora_ours.py``), each of our updates from
CORA's state before it, and every observation case (CORA's env stacks and ours, same seed
and actions); prints one table of each and exits 1 on any difference beyond
``cora_cases.TOLERANCES`` (or from the values the CI pins). ``--write-pins PATH`` stores
CORA's values for ``tests/baselines/test_cora_parity_pins.py``.
``benchmarks/results/LOG.md`` has the results."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path

# the cases live in benchmarks/, not tests/: once CORA's checkout is on sys.path, its own
# top-level ``tests`` package would shadow ours
from benchmarks.parity import cora_cases
from benchmarks.parity.cora_reference import (
    CORA_COMMIT,
    CoraSetupError,
    check_cora_repo,
    cora_thread_env,
    import_cora,
    install_shims,
    stop_children,
)

MINIHACK_PAIRS = (
    ("Room-Random-5x5-v0", "Room-Random-15x15-v0"),
    ("Room-Dark-5x5-v0", "Room-Dark-15x15-v0"),
    ("Room-Monster-5x5-v0", "Room-Monster-15x15-v0"),
    ("Room-Trap-5x5-v0", "Room-Trap-15x15-v0"),
)
"""CORA's ``minihack_nav_paired_2_cycles`` pairs (train, test), the first four
(``experiment_specs.py:318-335``)."""

MINIHACK_PAPER_CONFIG = {
    "discounting": 0.999,
    "epsilon": 0.000001,
    "batch_size": 32,
    "unroll_length": 20,
    "entropy_cost": 0.001,
    "learning_rate": 0.0002,
    "num_learner_threads": 2,
    "reward_clipping": "none",
    "normalize_reward": True,
}
"""CORA's ``configs/minihack/impala_minihack_paperdefaults.json`` (f2754bb) less
``num_actors`` (64 there) and its comment; ``clear_minihack_paperdefaults.json`` adds
``replay_buffer_frames`` 10e6 and a ``large_file_path``."""

METHOD_CONFIG = {
    "impala": {},
    "clear": {"replay_buffer_frames": 10e6, "always_reuse_actor_indices": True},
    "ewc": {
        "ewc_lambda": 10000,
        "replay_buffer_frames": 1e6,
        "n_fisher_samples": 100,
        "ewc_per_task_min_frames": 2e5,
    },
}
"""Method settings on top of the MiniHack config: CLEAR's from its MiniHack paper-default
config; EWC has no MiniHack config in CORA, so its settings are CORA's Procgen/Atari EWC
configs' (``configs/procgen/ewc_procgen.json``), as our paper preset's.

CLEAR with 8 actors needs CORA's own flag ``always_reuse_actor_indices``: CORA draws each
actor's reservoir at most once per batch and asserts ``num_actors >= batch_size *
batch_replay_ratio`` (32; its configs run 64 actors) unless the flag lets an actor be drawn
again (``continual_rl/policies/clear/clear_monobeast.py:25,216-219``). Our CLEAR draws
unrolls uniformly with replacement (``docs/fidelity.md``, CLEAR replay ratio row), so the
flag is also the closer of CORA's two sampling schemes."""

WIDEST_ACTION_SPACE_ENV = "Corridor-R2-v0"
"""The MiniHack15 train env with the most actions (11: 8 directions, OPEN, KICK, SEARCH)."""


def _experiment_loader(pairs: list[int], steps_per_task: int, eval_every: int):
    """CORA's ``create_minihack_loader`` for ``pairs`` (train task, then its test task,
    per pair), plus one task that never runs and is never evaluated but has MiniHack15's
    largest action space (Corridor: 11 actions). CORA sizes its network's policy output
    and previous-action input by the largest action space of the experiment's tasks:
    11 in its MiniHack15 run (and ours), but only 8 for the Room pairs alone; the extra
    task keeps the network CORA ran (``experiment.py:_get_action_spaces``,
    ``impala_policy.py``: ``Utils.get_max_discrete_action_space``)."""
    from continual_rl.experiment_specs import create_minihack_loader
    from continual_rl.experiments.tasks.image_task import ImageTask
    from continual_rl.experiments.tasks.make_minihack_task import make_minihack

    loader = create_minihack_loader(
        "cora_parity",
        [MINIHACK_PAIRS[i] for i in pairs],
        num_timesteps=steps_per_task,
        continual_testing_freq=eval_every,
        cycle_count=1,
    )

    def with_action_space():
        experiment = loader()
        widest = ImageTask(
            task_id="cora_parity_widest_action_space",
            action_space_id=len(pairs),
            env_spec=lambda: make_minihack(WIDEST_ACTION_SPACE_ENV),
            num_timesteps=0,
            time_batch_size=1,
            eval_mode=True,
            image_size=[84, 84],
            grayscale=False,
            continual_eval=False,
        )
        return type(experiment)(
            [*experiment.tasks, widest],
            continual_testing_freq=eval_every,
            cycle_count=1,
        )

    return with_action_space


def _resume_episodes(path: Path, experiment, run_dir: Path) -> dict[str, int]:
    """Where CORA resumes a stopped run (its ``run_metadata.json``: the task and its step at
    the last save): ``{task id: step}``, and the episodes of ``path`` that task logged past
    that step removed (CORA trains those steps again)."""
    from continual_rl.experiments.run_metadata import RunMetadata

    meta = RunMetadata(str(run_dir))
    if not meta.task_timesteps:
        return {}
    task, start = experiment.tasks[meta.task_id].task_id, int(meta.task_timesteps)
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        kept = [r for r in rows if r["task"] != task or r["task_step"] <= start]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        print(f"resuming {task} at step {start}: {len(rows) - len(kept)} logged rows dropped")
    return {task: start}


def _record_episodes(policy, path: Path, resumed: dict[str, int]) -> None:
    """Append every training episode's return to ``path`` (JSON lines) as CORA's runner
    reports them, the task's step counted from ``resumed``'s step for a resumed task;
    evaluation runners are left as they are."""
    get_runner = policy.get_environment_runner

    def get_environment_runner(task_spec):
        runner = get_runner(task_spec)
        if task_spec.eval_mode:
            return runner
        collect = runner.collect_data
        steps = {"task": resumed.get(task_spec.task_id, 0)}

        def collect_data(spec):
            out = collect(spec)
            steps["task"] += out[0]
            if out[2]:
                with path.open("a") as f:
                    f.write(
                        json.dumps(
                            {
                                "task": spec.task_id,
                                "task_step": steps["task"],
                                "returns": [float(r) for r in out[2]],
                            }
                        )
                        + "\n"
                    )
            return out

        runner.collect_data = collect_data
        return runner

    policy.get_environment_runner = get_environment_runner


def _snapshot_saves(policy, run_dir: Path, snapshots: Path) -> None:
    """Keep a copy of CORA's ``model.tar`` at every periodic save of the run directory."""
    save = policy.save

    def snapshot_save(output_path_dir, cycle_id, task_id, task_total_steps):
        save(output_path_dir, cycle_id, task_id, task_total_steps)
        model = Path(output_path_dir) / "model.tar"
        if Path(output_path_dir) == run_dir and model.exists():
            snapshots.mkdir(exist_ok=True)
            name = f"cycle{cycle_id}_task{task_id}_step{int(task_total_steps):09d}.tar"
            shutil.copyfile(model, snapshots / name)

    policy.save = snapshot_save


def train_cora(args: argparse.Namespace) -> None:
    """CORA's own experiment runner and policy on MiniHack15's first pairs."""
    repo = check_cora_repo(args.cora_repo)
    install_shims(repo)
    from continual_rl.available_policies import LazyDict, get_available_policies
    from continual_rl.utils.configuration_loader import ConfigurationLoader

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    large = out / "large_files"
    large.mkdir(exist_ok=True)
    config = {
        "policy": args.policy,
        "experiment": "cora_parity",
        **MINIHACK_PAPER_CONFIG,
        **METHOD_CONFIG[args.policy],
        "num_actors": args.num_actors,
        "device": "cpu",
        "timesteps_per_save": args.snapshot_every,
    }
    if args.policy != "impala":
        config["large_file_path"] = str(large)
    experiments = LazyDict(
        {"cora_parity": _experiment_loader(args.pairs, args.steps_per_task, args.eval_every)}
    )
    loader = ConfigurationLoader(get_available_policies(), experiments)
    (out / "config.json").write_text(
        json.dumps({**config, "pairs": args.pairs, "steps_per_task": args.steps_per_task}, indent=1)
    )
    resume_id = 0 if (out / "0").exists() else None
    experiment, policy = loader.load_next_experiment_from_dicts(
        str(out), [dict(config)], subdirectory_from_timestamp=False, resume_id=resume_id
    )
    if experiment is None:  # CORA returns None when the run has finished
        print(f"{out}: CORA's run has finished")
        return
    run_dir = Path(experiment.output_dir).resolve()
    episodes = out / "episodes.jsonl"
    _record_episodes(policy, episodes, _resume_episodes(episodes, experiment, run_dir))
    _snapshot_saves(policy, run_dir, out / "snapshots")

    from torch.utils.tensorboard.writer import SummaryWriter

    writer = SummaryWriter(log_dir=str(run_dir))
    try:
        experiment.try_run(policy, summary_writer=writer)
    finally:
        writer.close()
        stop_children()
    (out / "done").write_text("finished\n")


# ------------------------------------------------------------------------------ update
def _quiet(log):
    """Send what CORA prints to the console to the open file ``log`` (its loggers, and the
    root handler its ``Monobeast.setup`` installs, keep writing there)."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(log))
    stack.enter_context(contextlib.redirect_stderr(log))
    return stack


def run_update_case(
    case, repo: Path, workdir: Path, log
) -> tuple[list[dict], list[dict], list[dict]]:
    """CORA's records of ``case``, ours with every update starting from CORA's state before
    it (parameters, RMSProp's state), and ours run freely (what the CI test runs)."""
    from benchmarks.parity.cora_ours import OurSide
    from benchmarks.parity.cora_side import CoraSide

    with _quiet(log):
        cora = CoraSide(case, repo, workdir, OurSide(case)).run()
    return cora, OurSide(case).run(start_from=cora), OurSide(case).run()


def run_observation_case(case, log) -> tuple[dict, dict]:
    """Our observation stream and CORA's for ``case`` (same seed and actions)."""
    from benchmarks.parity.cora_ours import our_observation_stream
    from benchmarks.parity.cora_side import cora_observation_stream

    ours = our_observation_stream(case)
    with _quiet(log):
        return ours, cora_observation_stream(case)


def print_update_table(results: dict[str, list[dict]], drifts: dict[str, list[dict]]) -> None:
    """One line per case and quantity: the largest difference over the case's updates (each
    of ours from CORA's state before it), and the largest of our free run ("free run")."""

    print(
        f"{'update case':<20} {'quantity':<10} {'updates':>7} {'max abs':>10} {'max rel':>10} "
        f"{'tol':>8} {'free run':>9}  result"
    )
    for name, rows in results.items():
        for quantity in dict.fromkeys(r["quantity"] for r in rows):
            mine = [r for r in rows if r["quantity"] == quantity]
            worst = max(mine, key=lambda r: r["rel"])
            free = max(r["rel"] for r in drifts[name] if r["quantity"] == quantity)
            ok = all(r["ok"] for r in mine)
            tol = cora_cases.TOLERANCES[quantity]
            print(
                f"{name:<20} {quantity:<10} {len(mine):>7} {worst['abs']:>10.2e} "
                f"{worst['rel']:>10.2e} {tol:>8.0e} {free:>9.1e}  {'ok' if ok else 'DIFFERENT'}"
            )


def print_observation_table(results: dict[str, dict]) -> None:
    """One line per env: steps, episode ends, and per stream the first differing step."""

    keys = cora_cases.STREAM_KEYS
    print(f"{'observation case':<38} {'steps':>5} {'ends':>4}  " + "  ".join(keys) + "  result")
    for name, row in results.items():
        cells = [
            "same" if row[k]["first"] is None else f"step {row[k]['first']} ({row[k]['max_abs']:g})"
            for k in keys
        ]
        print(
            f"{name:<38} {row['steps']:>5} {row['episode_ends']:>4}  "
            + "  ".join(f"{c:<{len(k)}}" for c, k in zip(cells, keys, strict=True))
            + f"  {'identical' if row['ok'] else 'DIFFERENT'}"
        )


def _selected(cases, names: list[str] | None):
    return [c for c in cases if not names or c.name in names]


def update(args: argparse.Namespace) -> int:
    """Every case of ``cora_cases.CASES`` and ``OBSERVATION_CASES`` on both sides; tables;
    1 on any difference beyond tolerance (or from the values the CI pins would hold)."""
    import tempfile

    import torch

    repo = check_cora_repo(args.cora_repo)
    import_cora(repo)

    known = {c.name for c in (*cora_cases.CASES, *cora_cases.OBSERVATION_CASES)}
    unknown = sorted(set(args.cases or ()) - known)
    if unknown:
        raise CoraSetupError(f"unknown case(s) {unknown}; cases: {', '.join(sorted(known))}")
    torch.set_num_threads(1)
    results, drifts, observations = {}, {}, {}
    pins, problems = {"cases": {}, "observations": {}}, []
    with (
        tempfile.TemporaryDirectory(prefix="cora_parity_") as tmp,
        (Path(tmp) / "cora.log").open("w") as log,
    ):
        for case in _selected(cora_cases.CASES, args.cases):
            workdir = Path(tmp) / case.name.replace("/", "_")
            workdir.mkdir()
            cora, ours, free = run_update_case(case, repo, workdir, log)
            stop_children()
            results[case.name] = cora_cases.compare_records(ours, cora)
            drift = drifts[case.name] = cora_cases.compare_records(free, cora)
            pinned = pins["cases"][case.name] = [
                cora_cases.pin_record(record, [r for r in drift if r["update"] == i])
                for i, record in enumerate(cora)
            ]
            for i, (pin, record) in enumerate(zip(pinned, free, strict=True)):
                problems += [
                    f"{case.name} update {i}: {p}" for p in cora_cases.pin_differences(pin, record)
                ]
        for case in _selected(cora_cases.OBSERVATION_CASES, args.cases):
            ours, cora = run_observation_case(case, log)
            observations[case.name] = cora_cases.compare_streams(ours, cora)
            pins["observations"][case.name] = cora_cases.stream_pins(cora)
    if results:
        print_update_table(results, drifts)
    if observations:
        print_observation_table(observations)
    failed = [n for n, rows in results.items() if not all(r["ok"] for r in rows)]
    failed += [n for n, row in observations.items() if not row["ok"]]
    for problem in problems:  # the CI test compares our side with CORA's values this way
        print(f"pinned values (tests/baselines/test_cora_parity_pins.py): {problem}")
    failed += sorted({p.split(" update ")[0] for p in problems} - set(failed))
    if args.write_pins:
        write_pins(Path(args.write_pins), pins)
    if failed:
        print(f"parity_cora: differences beyond tolerance in {', '.join(failed)}")
        return 1
    return 0


def write_pins(path: Path, pins: dict) -> None:
    """Add (or replace) the cases' values in the pins file, with their provenance."""

    stored = cora_cases.load_pins(path) if path.exists() else {}
    for kind in ("cases", "observations"):
        stored.setdefault(kind, {}).update(pins[kind])
    stored["provenance"] = {
        "cora": f"AGI-Labs/continual_rl@{CORA_COMMIT}: cases: Monobeast.learn of the policy "
        "classes its experiment runner builds from its configs (ImpalaPolicy, EWCPolicy, "
        "ProgressAndCompressPolicy, ClearPolicy); observations: its task factories' env "
        "stacks (get_single_<suite>_task) in TorchBeast's Environment",
        "command": "/tmp/cora/venv/bin/python -m benchmarks.parity.parity_cora --cora-repo "
        "/tmp/cora/continual_rl update --write-pins tests/golden/cora_parity.json",
        "harness_sizes": cora_cases.HARNESS_SIZES,
    }
    path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(f"CORA's values of {sum(len(v) for v in pins.values())} cases written to {path}")


# --- learning at equal budgets (item 3) --------------------------------------------------

POLICY_OF_METHOD = {"ft": "impala", "ewc": "ewc", "clear": "clear"}
"""Our ``--method`` -> CORA's policy name (CORA's plain IMPALA is our fine-tuning)."""


def train_ours(args: argparse.Namespace) -> int:
    """``cl-suites run --preset paper`` at ``train-cora``'s budget (resumes a started run)."""
    import subprocess

    from benchmarks.learning.cora_learning import Budget, ours_command

    budget = Budget(tuple(args.pairs), args.steps_per_task, args.eval_every, args.eval_episodes)
    out = Path(args.out)
    cmd = ours_command(args.method, args.seed, out, budget)
    return subprocess.call([sys.executable, "-m", "cl_suites.cli", *cmd[1:]])


def _runs(root: Path) -> dict[str, tuple[list[tuple[int, Path]], list[tuple[int, Path]]]]:
    """``method -> ([(k, CORA dir)], [(seed, our dir)])`` for each method with runs on both sides.

    A side's runs are counted independently (``cora_<policy>_s<k>``, ``ours_<method>_s<seed>``):
    CORA's runner takes no seed, so its ``k`` only names a sample (and seeds our scorer), and
    a method may have more seeds on one side than on the other.
    """

    def numbered(prefix: str) -> list[tuple[int, Path]]:
        found = (re.fullmatch(rf"{prefix}_s(\d+)", d.name) for d in root.iterdir() if d.is_dir())
        return sorted((int(m[1]), root / m[0]) for m in found if m)

    runs: dict[str, tuple[list[tuple[int, Path]], list[tuple[int, Path]]]] = {}
    for method, policy in POLICY_OF_METHOD.items():
        ours = [(s, d) for s, d in numbered(f"ours_{method}") if (d / "eval.csv").exists()]
        cora = numbered(f"cora_{policy}")
        if ours and cora:
            runs[method] = (cora, ours)
    return runs


def compare(args: argparse.Namespace) -> int:
    """Score, plot and tabulate every CORA/ours run pair under ``--root``."""
    import pandas as pd

    from benchmarks.learning.cora_learning import (
        Budget,
        binned,
        cora_training_returns,
        eval_table,
        our_training_returns,
        plot,
        rescore_ours,
        score_cora,
    )

    root = Path(args.root)
    budget = Budget(tuple(args.pairs), args.steps_per_task, args.eval_every, args.eval_episodes)
    runs = _runs(root)
    if not runs:
        print(f"parity_cora: no ours_<method>_s<k> / cora_<policy>_s<k> runs under {root}")
        return 2
    plots = Path(args.plots)
    plots.mkdir(parents=True, exist_ok=True)
    for method, (cora_runs, our_runs) in runs.items():
        curves, tables = {}, {}
        for k, cora in cora_runs:
            scores = cora / "scores.csv"
            print(f"scoring {cora.name} with our evaluator (seed {k}) ...", flush=True)
            cora_eval = score_cora(cora, budget, k, scores, reuse=not args.rescore)
            if cora_eval.empty:
                print(f"{cora.name}: no evaluation point reached yet, left out")
                continue
            curves[f"CORA s{k}"] = (binned(cora_training_returns(cora), budget), cora_eval)
            tables[f"CORA s{k}"] = cora_eval
        if not curves:
            continue
        for seed, ours in our_runs:
            if args.check_scorer and (ours / "checkpoint").exists():
                gap = rescore_ours(ours, budget, seed)
                print(f"{ours.name}: scorer vs the run's own last evaluation: max |diff| {gap:.2e}")
            our_eval = pd.read_csv(ours / "eval.csv")
            our_eval = our_eval[our_eval.total_step > 0]
            curves[f"ours s{seed}"] = (binned(our_training_returns(ours, budget), budget), our_eval)
            tables[f"ours s{seed}"] = our_eval
        title = (
            f"MiniHack15 pairs {list(budget.pairs)}, {method} (CORA: {POLICY_OF_METHOD[method]}), "
            f"{budget.steps_per_task:,} steps per task; CORA solid, ours dashed"
        )
        out = plots / f"cora-parity-minihack-{method}.png"
        plot(curves, budget, out, title)
        print(f"\n### {method}: greedy return after each task ({budget.eval_episodes} episodes)\n")
        print(eval_table(tables, budget))
        print(f"\ntraining returns per {100_000:,}-step bin (task, bin end: CORA / ours):")
        for name, (train, _) in curves.items():
            cells = " ".join(f"{m:.3f}" for m in train["mean"])
            print(f"  {name:8s} {cells}")
        print(f"plot: {out}")
    return 0


def rerun_with_cora_threads(argv: list[str]) -> None:
    """Replace this process (same pid, so signals reach it as before) by the same command
    with :func:`cora_thread_env` set, unless it is set already: torch, imported with this
    module, read ``OMP_NUM_THREADS`` when it started, so setting it here is too late for
    this process and for the actors CORA forks from it."""
    wanted = cora_thread_env()
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    root = str(Path(__file__).resolve().parents[2])  # the benchmarks package, from any cwd
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, **wanted, "PYTHONPATH": pythonpath}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks.parity.parity_cora", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cora-repo", help="checkout of AGI-Labs/continual_rl at f2754bb")
    sub = parser.add_subparsers(dest="mode", required=True)
    train = sub.add_parser("train-cora", help="CORA's own training on MiniHack15 pairs")
    train.add_argument("--policy", choices=sorted(METHOD_CONFIG), default="impala")
    train.add_argument("--pairs", type=int, nargs="+", default=[0, 1])
    train.add_argument("--steps-per-task", type=int, default=1_000_000)
    train.add_argument(
        "--eval-every", type=int, default=250_000, help="CORA's continual_testing_freq (env steps)"
    )
    train.add_argument(
        "--snapshot-every",
        type=int,
        default=100_000,
        help="CORA's timesteps_per_save: a parameter snapshot every this many steps",
    )
    train.add_argument("--num-actors", type=int, default=8)
    train.add_argument("--out", required=True)
    ours = sub.add_parser("train-ours", help="cl-suites run --preset paper at the same budget")
    ours.add_argument("--method", choices=sorted(POLICY_OF_METHOD), default="ft")
    ours.add_argument("--seed", type=int, default=0)
    ours.add_argument("--out", required=True)
    cmp_ = sub.add_parser("compare", help="score, plot and tabulate the run pairs under --root")
    cmp_.add_argument(
        "--root", required=True, help="holds cora_<policy>_s<k> and ours_<method>_s<k>"
    )
    cmp_.add_argument("--plots", default="benchmarks/results")
    cmp_.add_argument("--rescore", action="store_true", help="score CORA's snapshots again")
    cmp_.add_argument(
        "--check-scorer",
        action="store_true",
        help="rescore our last checkpoint and compare with the run's own evaluation",
    )
    for p in (ours, cmp_):
        p.add_argument("--pairs", type=int, nargs="+", default=[0, 1])
        p.add_argument("--steps-per-task", type=int, default=1_000_000)
        p.add_argument("--eval-every", type=int, default=250_000)
        p.add_argument("--eval-episodes", type=int, default=50)
    upd = sub.add_parser("update", help="update-for-update checks against CORA's learners")
    upd.add_argument("--cases", nargs="+", help="case names (default: all)")
    upd.add_argument("--write-pins", help="write CORA's values for the CI test to this JSON")
    args = parser.parse_args(argv)
    if args.mode == "train-cora":  # CORA's actors fork: one OpenMP thread from the start
        rerun_with_cora_threads(argv)

    def on_term(signum, frame):
        stop_children()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    # Forked children (CORA's actors, its evaluation pools) keep SIGTERM's default action:
    # Pool.terminate ends its workers with it, and an inherited Python handler left one
    # worker hanging in a semaphore wait, and the run with it.
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        if args.mode == "train-cora":
            train_cora(args)
        elif args.mode == "train-ours":
            return train_ours(args)
        elif args.mode == "compare":
            return compare(args)
        elif args.mode == "update":
            try:
                return update(args)
            finally:  # CORA's Monobeast leaves its Manager process behind otherwise
                stop_children()
    except CoraSetupError as e:
        print(f"parity_cora: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
