"""MEAL speed: our IPPO learners against MEAL's own JAX IPPO, side by side in one run.

**Training** (issues 15 item 8 and 20 item 7; the default). Sides (``--sides``, default
``meal jax jax-seeds``): ``meal``, MEAL's trainer; ``jax``, our JAX learner (``ppo-jax``,
``baselines_jax.JaxIPPO``, the default learner of ``cl-suites run --suite MEAL-N``) with
one seed; ``jax-seeds``, the same with ``--seeds`` K seeds vmapped in one program (its
rate counts the env steps of every seed; K MEAL runs one after another run at one MEAL
run's rate, so the ratio to ``meal`` is the speed-up over them); ``ours``, the torch
learner's main job (below). The JAX sides call ``train`` twice per task with
``--updates`` updates: the first call compiles (the learner's own compile time is
reported), the second is timed as training (the same compiled program; no evaluation).
Targets: ``jax`` >= 1.0x MEAL at 16 envs; ``jax-seeds`` (K=5) >= 2.0x.

The torch side (``ours``): training env-steps/s of ``cl-suites run
--suite MEAL-2 --method ft --preset paper`` (the real ``run_main_job``: 16 envs x 128
steps per update, 8 epochs x 8 minibatches, MEAL's network) against MEAL's paper-time
``baselines/IPPO_CL.py`` with the same settings (``--cl-method ft --seq-length 2
--difficulty easy``, its defaults being Table 4's), on the same machine, at each
``--num-envs``. Each side runs in its own process, the two alternate ``--repeats`` times,
and the best rate of each side gives the ratio. Evaluation is off on both sides and
compile time is reported apart:

* MEAL jits one ``lax.scan`` over all updates of a task. Its ``train_on_environment`` is
  compiled ahead of time (``.lower().compile()``, timed as compile) and then run (timed
  as training: all ``--updates`` + 1 updates of the first task). ``--no-evaluation``
  switches off its periodic evaluation.
* Ours runs the job with ``--updates`` + 2 updates per task and times the first task:
  setup and the first update (JAX compile of the kitchen, torch warm-up) are reported
  as compile, the next ``--updates`` updates as training (the last update, whose
  rollout compiles the next kitchen's reset, is not timed). Evaluation and checkpoints
  fall outside the timed updates.

``ours-host`` is ``ours`` with its observations on the host (issue 39, Deliver 4): by
default (``ours`` here sets ``device_observations=true``, on the CPU too) the torch
learner on MEAL takes the engine's observation arrays on the device
(``torch.from_dlpack``) into a device-side rollout buffer
(``cl_suites.job.torch.device_observations``); ``ours-host`` forces the numpy path SB3 takes
otherwise (a device_get and a copy into SB3's numpy buffer per step), so ``--sides
ours-host ours`` measures the difference (pin cores with ``taskset``)::

    taskset -c 0 python benchmarks/bench_meal.py --sides ours-host ours --num-envs 16 \
        --updates 4 --repeats 3

``--busy N``: every comparison runs once more next to ``N`` processes that each spin a
core (``busy.py``; started before the first side, stopped after the last), and the script
prints each side's slowdown and the ratios to MEAL alone and busy (issue 20 item 7: next
to two busy processes the ratio no worse than alone, i.e. no bigger slowdown than MEAL's).

The script also prints each side's seconds per update, ours split into the rollout and the
PPO epochs, and the ratio a rollout that cost nothing would give (MEAL's update / our
epochs).

MEAL's code is never copied into this project; get a checkout of it and pass its path::

    git clone https://github.com/TTomilin/MEAL /tmp/meal && git -C /tmp/meal checkout 7d81858
    python -m benchmarks.speed.bench_meal --meal-repo /tmp/meal [--num-envs 16 256 1024]
        [--updates 8 4 2] [--repeats 3] [--sides meal jax jax-seeds ours] [--seeds 5]
        [--busy 2]
    python -m benchmarks.speed.bench_meal --sides jax jax-seeds --num-envs 16 --updates 2 \
        --repeats 1     # our JAX sides alone, no MEAL checkout needed

MEAL's script is imported from that checkout and run with runtime patches only (no file
is edited; ``meal_reference.py``, shared with ``parity_meal.py``, lists them): CPU, W&B
off, its files in a temporary directory, visualisation-only packages stubbed (GIF
recording is off). It needs flax, optax, distrax, chex, tyro and tensorboardX.

**Env** (``--env``): the adapters alone against meal-bench's own jitted loops.
``MealSB3VecEnv`` (random actions, host arrays every step) vs meal-bench's jit+vmap
``lax.scan`` rollout (target >= 0.30), and ``MealParallelEnv`` vs a bare loop of jitted
single-env steps fetching observations and rewards (target >= 0.80).

**MAPPO** (issue 51 item 6): ``meal-mappo``, MEAL 057f862's MAPPO trainer
(``--meal057-repo``, its defaults but ``--num-envs`` and 128 steps per env: lr 1e-3, 8
epochs x 16 minibatches), against ``mappo`` / ``mappo-seeds`` (``mappo-jax``, the same
settings); their ratios are to ``meal-mappo``::

    python -m benchmarks.speed.bench_meal --meal057-repo /tmp/refs/meal057 \
        --sides meal-mappo mappo mappo-seeds --num-envs 16 --updates 8 --repeats 2

Steps are env steps (one joint action of all agents).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from benchmarks.parity.meal_reference import check_meal_repo, load_meal_trainer, meal_argv
from benchmarks.speed.busy import busy_processes

ROOT = Path(__file__).resolve().parents[2]
N_STEPS = 128
"""Steps per env per PPO update, both sides (MEAL Table 4)."""


# ----------------------------------------------------------------------------- MEAL's side
class _StopAfterTasks(Exception):
    pass


def run_meal(repo: Path, num_envs: int, updates: int, tasks: int) -> dict:
    """MEAL's ``IPPO_CL.main()`` on MEAL-2 (easy); per task: compile and training seconds."""
    import jax

    results: list[dict] = []

    def timed_jit(fun, jitted, kwargs):
        if getattr(fun, "__name__", "") != "train_on_environment":
            return jitted
        static = set(kwargs.get("static_argnums", ()))

        def run(*args):
            env = args[2]
            t0 = time.perf_counter()
            compiled = jitted.lower(*args).compile()
            t1, c1 = time.perf_counter(), time.process_time()
            out = compiled(*[a for i, a in enumerate(args) if i not in static])
            jax.block_until_ready(out)
            t2, c2 = time.perf_counter(), time.process_time()
            results.append(
                {
                    "compile_s": t1 - t0,
                    "train_s": t2 - t1,
                    "train_cpu_s": c2 - c1,
                    "updates": updates + 1,
                    "obs_shape": list(env.observation_space().shape),
                }
            )
            if len(results) >= tasks:
                raise _StopAfterTasks
            return out

        return run

    workdir = Path(tempfile.mkdtemp(prefix="meal-bench-"))
    module = load_meal_trainer(repo, workdir, jit_hook=timed_jit)
    sys.argv = meal_argv("ft", 0, (updates + 1) * num_envs * N_STEPS, num_envs=num_envs)
    with contextlib.suppress(_StopAfterTasks):
        module.main()
    return {"tasks": results}


# ----------------------------------------------------------------------------- our side
def run_ours(
    num_envs: int, updates: int, tasks: int, host: bool = False, device: str | None = None
) -> dict:
    """``run_main_job`` on MEAL-2 with the torch learner (ft, paper preset); per task:
    first update (compile and warm-up) and the next ``updates`` updates, timed at the end
    of each PPO update. ``host``: observations through host numpy (SB3's path);
    ``device``: the torch device (default: the run's own choice, ``auto``)."""
    import torch as th

    from baselines_sb3 import learners
    from cl_suites.job.main_job import run_main_job
    from cl_suites.job.torch import device_observations

    if host:
        device_observations.observation_device = lambda *args: None

    marks: list[tuple[float, float, int]] = []
    epochs_s: list[float] = []  # seconds in the PPO epochs (``train``) of each update
    train = learners.ContinualPPO.train
    started = time.perf_counter()
    per_task = updates + 2  # the next task's kitchens compile in the last rollout: untimed

    def timed_train(self) -> None:
        start = time.perf_counter()
        train(self)
        epochs_s.append(time.perf_counter() - start)
        marks.append((time.perf_counter(), time.process_time(), th.get_num_threads()))
        if len(marks) >= (tasks - 1) * per_task + updates + 1:
            raise _StopAfterTasks

    learners.ContinualPPO.train = timed_train
    run_dir = Path(tempfile.mkdtemp(prefix="ours-bench-"))
    budget = per_task * num_envs * N_STEPS
    with contextlib.suppress(_StopAfterTasks):
        run_main_job(
            suite="MEAL-2",
            method="ft",
            learner="ppo",
            preset="paper",
            seed=0,
            run_dir=run_dir,
            resume=False,
            num_envs=num_envs,
            overrides={
                "steps_per_task": budget,
                "eval_every": budget,
                "checkpoint_every": 10**12,
                "report": False,
                "device_observations": not host,
                **({"device": device} if device else {}),
            },
        )
    results = []
    for task in range(tasks):
        first = task * per_task
        begin = marks[first - 1][0] if first else started
        results.append(
            {
                "compile_s": marks[first][0] - begin,  # setup + first update (JIT, warm-up)
                "train_s": marks[first + updates][0] - marks[first][0],
                "train_cpu_s": marks[first + updates][1] - marks[first][1],
                # of train_s: the PPO epochs; the rest is the rollout (env steps + acting)
                "epochs_s": sum(epochs_s[first + 1 : first + updates + 1]),
                "updates": updates,
                "torch_threads": marks[first + updates][2],
            }
        )
    return {"tasks": results}


def run_meal_mappo(repo: Path, num_envs: int, updates: int, tasks: int) -> dict:
    """MEAL 057f862's MAPPO (``experiments/algos/mappo.py``, its defaults but ``num_envs``
    and 128 steps per env) on MEAL-2 easy, ft, evaluation off: per task its jitted
    ``train_on_environment`` compiled ahead of time (timed as compile), then run (timed
    as training: all ``updates`` + 1 updates). Its metrics go to a writer that keeps none
    (its every-5-updates logging callback still runs, as in training)."""
    import jax

    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    os.environ["WANDB_MODE"] = "disabled"
    from experiments.algos.mappo import MAPPO, MAPPOConfig
    from experiments.utils import init_cl_state

    cfg = MAPPOConfig(
        cl_method="ft",
        seq_length=2,
        seed=0,
        num_envs=num_envs,
        num_steps=N_STEPS,
        steps_per_task=float((updates + 1) * num_envs * N_STEPS),
        evaluation=False,
        record_video=False,
        use_wandb=False,
    )
    os.chdir(tempfile.mkdtemp(prefix="meal-mappo-bench-"))
    algo = MAPPO(cfg)
    algo.setup_envs()
    algo.init_network()
    algo.writer = types.SimpleNamespace(add_scalar=lambda *a, **k: None)
    params = algo.train_state.params
    cl_state = init_cl_state(params, cfg.regularize_critic, not cfg.use_multihead, algo.cl, cfg)
    train = algo.build_train_on_environment()
    results, state = [], algo.train_state
    for task in range(tasks):
        rng = jax.random.PRNGKey(task)
        t0 = time.perf_counter()
        compiled = train.lower(rng, state, cl_state, task).compile()
        t1, c1 = time.perf_counter(), time.process_time()
        out = compiled(rng, state, cl_state, task)
        jax.block_until_ready(out)
        t2, c2 = time.perf_counter(), time.process_time()
        state = out[0][0]
        results.append(
            {"compile_s": t1 - t0, "train_s": t2 - t1, "train_cpu_s": c2 - c1,
             "updates": int(cfg.num_updates)}
        )  # fmt: skip
    return {"tasks": results}


def run_jax(
    num_envs: int, updates: int, tasks: int, seeds: int, learner_name: str = "ppo-jax"
) -> dict:
    """Our JAX learner (``ppo-jax``: ``baselines_jax.JaxIPPO``, the learner of
    ``cl-suites run --suite MEAL-2``; or ``mappo-jax`` at 128 steps per env) on MEAL-2
    (ft, paper preset) with ``seeds`` seeds vmapped in one program; per task: a first
    ``train`` call of ``updates`` updates (compiles; ``compile_s`` is the learner's own
    compile time), then a second one, timed as training (the same compiled program)."""
    import jax

    from cl_suites.job.jax.entry import jax_api, make_config
    from cl_suites.job.main_job import resolve_job

    overrides: dict = {"steps_per_task": 2 * (updates + 1) * num_envs * N_STEPS}
    if learner_name != "ppo-jax":
        overrides["num_steps"] = N_STEPS
    spec = resolve_job(
        suite="MEAL-2",
        method="ft",
        learner=learner_name,
        preset="paper",
        num_envs=num_envs,
        overrides=overrides,
        seed=0,
    )
    entry = spec.learner_entry
    config = make_config(spec.hp["learner"], entry.config_type)
    learner = getattr(jax_api(), entry.learner_type)(spec.meal, config, list(range(seeds)))
    started = time.perf_counter()
    state = learner.init_state()
    results = []
    for task in range(tasks):
        compiled = learner.compile_seconds
        state, _ = learner.train(state, task, updates)
        jax.block_until_ready(state)
        first_s = time.perf_counter() - started
        t1, c1 = time.perf_counter(), time.process_time()
        state, _ = learner.train(state, task, updates)
        jax.block_until_ready(state)
        t2, c2 = time.perf_counter(), time.process_time()
        results.append(
            {
                "compile_s": learner.compile_seconds - compiled,
                "first_call_s": first_s,
                "train_s": t2 - t1,
                "train_cpu_s": c2 - c1,
                "updates": updates * seeds,  # env steps of every seed count
            }
        )
        state = learner.end_task(state, task)
        jax.block_until_ready(state)
        started = time.perf_counter()
    return {"tasks": results}


def _rate(result: dict, num_envs: int) -> float:
    """Training env-steps/s over the timed tasks (all seeds of a vmapped run together)."""
    steps = sum(t["updates"] for t in result["tasks"]) * num_envs * N_STEPS
    return steps / sum(t["train_s"] for t in result["tasks"])


def _per_update(result: dict, key: str) -> float:
    """Seconds of ``key`` per timed update."""
    return sum(t[key] for t in result["tasks"]) / sum(t["updates"] for t in result["tasks"])


def _child(side: str, args: argparse.Namespace, num_envs: int, updates: int) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        side,
        "--num-envs",
        str(num_envs),
        "--updates",
        str(updates),
        "--tasks",
        str(args.tasks),
    ]
    if side == "meal":
        command += ["--meal-repo", str(args.meal_repo)]
    if side == "meal-mappo":
        command += ["--meal057-repo", str(args.meal057_repo)]
    if side in ("jax-seeds", "mappo-seeds"):
        command += ["--seeds", str(args.seeds)]
    if side in ("ours", "ours-host") and args.device:
        command += ["--device", args.device]
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("BENCH_RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise RuntimeError(f"the {side} run with {num_envs} envs failed (exit {done.returncode})")
    return json.loads(lines[-1][len("BENCH_RESULT ") :])


SIDES: dict[str, str] = {
    "meal": "MEAL IPPO_CL.py",
    "ours": "torch run_main_job",
    "ours-host": "torch, obs via host",
    "jax": "ppo-jax, 1 seed",
    "jax-seeds": "ppo-jax, K seeds",
    "meal-mappo": "MEAL 057 MAPPO",
    "mappo": "mappo-jax, 1 seed",
    "mappo-seeds": "mappo-jax, K seeds",
}
"""The sides of the training comparison (``--sides``)."""
REFERENCE_OF: dict[str, str] = {"mappo": "meal-mappo", "mappo-seeds": "meal-mappo"}
"""The MEAL side a side's ratio is taken to (the others: ``meal``, MEAL's IPPO)."""


def _best_of(args: argparse.Namespace, num_envs: int, n_updates: int, label: str) -> dict:
    """Each side's best run of ``--repeats`` (sides alternate in order)."""
    best: dict[str, dict | None] = {side: None for side in args.sides}
    for repeat in range(args.repeats):
        order = args.sides if repeat % 2 == 0 else args.sides[::-1]
        for side in order:
            result = _child(side, args, num_envs, n_updates)
            rate = _rate(result, num_envs)
            print(
                f"  {num_envs:5d} envs  {side:9s} {label}run {repeat + 1}: {rate:9,.0f} "
                f"env-steps/s (compile {result['tasks'][0]['compile_s']:.1f} s, "
                f"load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            if best[side] is None or rate > _rate(best[side], num_envs):
                best[side] = result
    return best


def bench_training(args: argparse.Namespace) -> None:
    """Every side at every ``--num-envs``; with ``--busy N`` each comparison runs again
    next to ``N`` spinning processes (started for both sides, stopped after them)."""
    updates = list(args.updates) + [args.updates[-1]] * (len(args.num_envs) - len(args.updates))
    rows, busy_rows = [], []
    for num_envs, n_updates in zip(args.num_envs, updates, strict=False):
        rows.append((num_envs, _best_of(args, num_envs, n_updates, "")))
        if args.busy:
            with busy_processes(args.busy):
                label = f"next to {args.busy} busy, "
                busy_rows.append((num_envs, _best_of(args, num_envs, n_updates, label)))
    _print_training(args, rows)
    if args.busy:
        print(f"\nNEXT TO {args.busy} BUSY PROCESSES (each spins a core)")
        _print_training(args, busy_rows)
        _print_busy(args, rows, busy_rows)


def _print_busy(args: argparse.Namespace, rows: list, busy_rows: list) -> None:
    """Each side's slowdown (alone / busy rate) and its ratio to MEAL alone and busy
    (target: the busy ratio no worse than the ratio alone, i.e. no bigger slowdown than
    MEAL's own)."""
    print(f"\nalone vs next to {args.busy} busy processes: slowdown (alone / busy rate)")
    print(" envs | " + " | ".join(f"{s} slowdown" for s in args.sides))
    for (num_envs, alone), (_, busy) in zip(rows, busy_rows, strict=True):
        cells = [
            f"{_rate(alone[s], num_envs) / _rate(busy[s], num_envs):5.2f}x" for s in args.sides
        ]
        print(f" {num_envs:4d} | " + " | ".join(cells))
    if "meal" not in args.sides:
        return
    print("ratio to MEAL alone -> next to busy (target: busy ratio >= alone ratio)")
    for (num_envs, alone), (_, busy) in zip(rows, busy_rows, strict=True):
        cells = []
        for side in (s for s in args.sides if s != "meal"):
            before = _rate(alone[side], num_envs) / _rate(alone["meal"], num_envs)
            after = _rate(busy[side], num_envs) / _rate(busy["meal"], num_envs)
            met = "met" if after >= before else "NOT met"
            cells.append(f"{side} {before:5.2f} -> {after:5.2f} ({met})")
        print(f" {num_envs:4d} | " + " | ".join(cells))


def _print_training(args: argparse.Namespace, rows: list[tuple[int, dict]]) -> None:
    k = args.seeds
    print(
        "\nMEAL-2 ft, 128 steps/update, 8 epochs x 8 minibatches (MAPPO: x 16); "
        f"best of {args.repeats}"
    )
    print("training env-steps/s (compile apart, seconds in brackets); jax-seeds: all K seeds")
    print(" envs | " + " | ".join(f"{SIDES[s].replace('K', str(k))}" for s in args.sides))
    for num_envs, best in rows:
        cells = [
            f"{_rate(best[s], num_envs):10,.0f} ({best[s]['tasks'][0]['compile_s']:5.1f} s)"
            for s in args.sides
        ]
        print(f" {num_envs:4d} | " + " | ".join(cells))
    if {"ours", "ours-host"} <= set(args.sides):
        print("\ntorch learner, observations on the device / via the host:")
        for num_envs, best in rows:
            ratio = _rate(best["ours"], num_envs) / _rate(best["ours-host"], num_envs)
            print(f" {num_envs:4d} | {ratio:5.3f}x")
    references = {REFERENCE_OF.get(s, "meal") for s in args.sides} & set(args.sides)
    if not references:
        return
    print("\nratios to MEAL's trainer of the same algorithm (target: single seed >= 1.0 at 16")
    print(f"envs; K seeds in one program >= 2.0 x {k} MEAL runs one after another)")
    for num_envs, best in rows:
        pairs = [(s, REFERENCE_OF.get(s, "meal")) for s in args.sides]
        ratios = [
            f"{s} {_rate(best[s], num_envs) / _rate(best[ref], num_envs):5.2f}"
            for s, ref in pairs
            if s not in ("meal", "meal-mappo") and ref in best
        ]
        print(f" {num_envs:4d} | " + " | ".join(ratios))
    if "meal" not in args.sides:
        return
    if "ours" in args.sides:
        print("\nseconds per update: MEAL | torch ours: rollout + PPO epochs")
        for num_envs, best in rows:
            meal_update = _per_update(best["meal"], "train_s")
            epochs = _per_update(best["ours"], "epochs_s")
            rollout = _per_update(best["ours"], "train_s") - epochs
            print(f" {num_envs:4d} | {meal_update:6.3f} s | {rollout:6.3f} s + {epochs:6.3f} s")
    print(f"load average now {os.getloadavg()[0]:.2f}")


# ----------------------------------------------------------------------------- env level
def bench_meal_bench_vmap(layout: str, num_envs: int, steps: int) -> float:
    import jax
    from meal.env import Overcooked

    env = Overcooked(layout_name=layout, max_steps=400)
    agents = env.agents

    @jax.jit
    def rollout(key):
        keys = jax.random.split(key, num_envs)
        _, state = jax.vmap(env.reset)(keys)

        def body(state, k):
            k_act, k_step = jax.random.split(k)
            acts = jax.random.randint(k_act, (len(agents), num_envs), 0, 6)
            _obs, state, rew, _, _ = jax.vmap(env.step)(
                jax.random.split(k_step, num_envs),
                state,
                {a: acts[i] for i, a in enumerate(agents)},
            )
            return state, rew[agents[0]].sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))

    jax.block_until_ready(rollout(jax.random.PRNGKey(0)))  # compile
    start = time.perf_counter()
    jax.block_until_ready(rollout(jax.random.PRNGKey(1)))
    return num_envs * steps / (time.perf_counter() - start)


def bench_sb3(layout: str, num_envs: int, steps: int) -> float:
    import numpy as np

    from cl_suites.meal import build_suite
    from cl_suites.meal.batched import MealBatchedEnv
    from cl_suites.sb3.meal import MealSB3VecEnv

    suite = build_suite(1, strategy="ordered", layout_names=[layout], steps_per_task=10**9)
    vec = MealSB3VecEnv(MealBatchedEnv(suite, num_envs))
    vec.seed(0)
    vec.reset()
    actions = np.random.default_rng(0).integers(6, size=(steps + 5, vec.num_envs))
    for t in range(5):  # compile + warm up
        vec.step(actions[t])
    start = time.perf_counter()
    for t in range(steps):
        vec.step(actions[5 + t])
    return num_envs * steps / (time.perf_counter() - start)


def bench_bare_single(layout: str, steps: int) -> float:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from meal.env import Overcooked

    env = Overcooked(layout_name=layout, max_steps=400)
    step = jax.jit(env.step)
    split = jax.jit(jax.random.split)
    key = jax.random.PRNGKey(0)
    _obs, state = jax.jit(env.reset)(key)
    actions = np.random.default_rng(0).integers(6, size=(steps + 5, 2))

    def one(key, state, t):
        key, sub = split(key)
        obs, state, rew, done, _ = step(
            sub, state, {"agent_0": jnp.int32(actions[t, 0]), "agent_1": jnp.int32(actions[t, 1])}
        )
        host = jax.device_get((obs, rew, done))
        return key, state, host

    for t in range(5):
        key, state, _ = one(key, state, t)
    start = time.perf_counter()
    for t in range(steps):
        key, state, _ = one(key, state, 5 + t)
    return steps / (time.perf_counter() - start)


def bench_parallel(layout: str, steps: int) -> float:
    import numpy as np

    from cl_suites.meal import make_parallel

    env = make_parallel(1, strategy="ordered", layout_names=[layout], steps_per_task=10**9)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(6, size=(steps + 5, 2))
    for t in range(5):
        env.step({"agent_0": int(actions[t, 0]), "agent_1": int(actions[t, 1])})
    start = time.perf_counter()
    for t in range(steps):
        if not env.agents:
            env.reset()
        env.step({"agent_0": int(actions[5 + t, 0]), "agent_1": int(actions[5 + t, 1])})
    return steps / (time.perf_counter() - start)


def bench_env(args: argparse.Namespace) -> None:
    num_envs = args.num_envs[-1]
    ref = ours = bare = par = 0.0
    for _ in range(args.repeats):
        ref = max(ref, bench_meal_bench_vmap(args.layout, num_envs, args.steps))
        ours = max(ours, bench_sb3(args.layout, num_envs, args.steps))
    print(f"meal-bench jit+vmap scan, {num_envs} envs : {ref:12,.0f} env-steps/s")
    print(f"MealSB3VecEnv,           {num_envs} envs : {ours:12,.0f} env-steps/s")
    print(f"  ratio {ours / ref:.2f}  (target >= 0.30; best of {args.repeats} each)")
    for _ in range(args.repeats):
        bare = max(bare, bench_bare_single(args.layout, args.single_steps))
        par = max(par, bench_parallel(args.layout, args.single_steps))
    print(f"bare jitted meal-bench loop, 1 env   : {bare:12,.0f} env-steps/s")
    print(f"MealParallelEnv, 1 env               : {par:12,.0f} env-steps/s")
    print(f"  ratio {par / bare:.2f}  (target >= 0.80)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meal-repo", type=Path, help="a checkout of TTomilin/MEAL at 7d81858")
    parser.add_argument(
        "--meal057-repo", type=Path, help="a checkout of TTomilin/MEAL at 057f862 (meal-mappo)"
    )
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument(
        "--updates", type=int, nargs="+", default=[8, 4, 2], help="timed updates per --num-envs"
    )
    parser.add_argument("--tasks", type=int, default=1, help="tasks of MEAL-2 to time (1 or 2)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved; best of N each")
    parser.add_argument("--env", action="store_true", help="the env-level comparisons instead")
    parser.add_argument("--steps", type=int, default=400, help="--env: steps per vector rollout")
    parser.add_argument("--single-steps", type=int, default=2000, help="--env: single-env steps")
    parser.add_argument("--layout", default="cramped_room", help="--env: preset kitchen")
    parser.add_argument(
        "--sides",
        nargs="+",
        choices=tuple(SIDES),
        default=["meal", "jax", "jax-seeds"],
        help="what to time: " + "; ".join(f"{k}: {v}" for k, v in SIDES.items()),
    )
    parser.add_argument("--seeds", type=int, default=5, help="K of the jax-seeds side")
    parser.add_argument(
        "--device", help="the torch device of the ours/ours-host sides (default: auto)"
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="also time every comparison next to N processes that each spin a core",
    )
    parser.add_argument("--child", choices=tuple(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        n, updates = args.num_envs[0], args.updates[0]
        if args.child == "meal":
            result = run_meal(args.meal_repo, n, updates, args.tasks)
        elif args.child == "meal-mappo":
            result = run_meal_mappo(args.meal057_repo, n, updates, args.tasks)
        elif args.child in ("mappo", "mappo-seeds"):
            seeds = args.seeds if args.child == "mappo-seeds" else 1
            result = run_jax(n, updates, args.tasks, seeds, "mappo-jax")
        elif args.child in ("ours", "ours-host"):
            host = args.child == "ours-host"
            result = run_ours(n, updates, args.tasks, host=host, device=args.device)
        else:
            seeds = args.seeds if args.child == "jax-seeds" else 1
            result = run_jax(n, updates, args.tasks, seeds)
        print("BENCH_RESULT " + json.dumps(result), flush=True)
        return
    if args.env:
        bench_env(args)
        return
    if "meal" in args.sides:
        try:
            check_meal_repo(args.meal_repo)
        except ValueError as err:
            parser.error(f"{err}; see this script's docstring")
    if "meal-mappo" in args.sides:
        from benchmarks.parity.meal_mappo_reference import check_meal057_repo

        try:
            check_meal057_repo(args.meal057_repo)
        except ValueError as err:
            parser.error(str(err))
    if args.tasks not in (1, 2):
        parser.error(f"--tasks must be 1 or 2, got {args.tasks}")
    if args.busy < 0:
        parser.error(f"--busy must be >= 0, got {args.busy}")
    bench_training(args)


if __name__ == "__main__":
    main()
