"""Overhead of the sequence machinery over procgen, measured side by side in one run.

    python -m benchmarks.speed.bench_procgen [--steps 30000] [--vec-steps 1500] [--window 500]

Prints steps/s of (1) the bare single-env procgen adapter vs the single-env sequence env
and (2) bare ``ProcgenGym3Env(num=64)`` vs ``cl_suites.make_vec(..., num_envs=64)``, with
their ratios. Targets: (1) >= 0.95x, (2) >= 0.90x. One step = one agent step.

Both sides play the same levels with the same actions, in alternating windows of
``--window`` (vector) steps: A, B, A, B, ... Each side's rate is its steps over the sum
of its windows' times, so load swings of a shared machine hit both sides alike.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import cl_suites
from cl_suites.core.task import task_seed
from cl_suites.envs.procgen import ProcgenEnv, _procgen, default_num_threads

GAME = "climber"
OPTIONS = {"distribution_mode": "easy", "num_levels": 200, "start_level": 0}


def single_stepper(env) -> Callable[[int], None]:
    def step(action: int) -> None:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()

    return step


def lockstep(steppers: dict[str, Callable], actions: np.ndarray, window: int) -> dict[str, float]:
    """Steps/s of each stepper over the same actions, run in alternating windows."""
    spent = dict.fromkeys(steppers, 0.0)
    for start in range(0, len(actions), window):
        chunk = actions[start : start + window]
        for name, step in steppers.items():
            t = time.perf_counter()
            for action in chunk:
                step(action)
            spent[name] += time.perf_counter() - t
    return {name: len(actions) / seconds for name, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--vec-steps", type=int, default=1_500)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--window", type=int, default=500)
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    bare = ProcgenEnv(GAME, **OPTIONS)
    bare.reset(seed=task_seed(0, 0, 0))  # the levels the sequence env plays with seed 0
    sequence = cl_suites.make_env("Procgen6", steps_per_task=10 * args.steps, cycles=1)
    sequence.reset(seed=0)
    single = lockstep(
        {"bare": single_stepper(bare), "sequence": single_stepper(sequence)},
        rng.integers(15, size=args.steps),
        args.window,
    )

    n = args.num_envs
    bare_vec = _procgen().ProcgenGym3Env(
        num=n,
        env_name=GAME,
        rand_seed=task_seed(0, 0, 0),
        num_threads=default_num_threads(n),
        **OPTIONS,
    )
    bare_vec.observe()
    seq_vec = cl_suites.make_vec("Procgen6", num_envs=n, steps_per_task=10 * args.vec_steps * n)
    seq_vec.reset(seed=0)

    def bare_vec_step(actions: np.ndarray) -> None:
        bare_vec.act(actions)
        bare_vec.observe()

    vec = lockstep(
        {"bare": bare_vec_step, "sequence": seq_vec.step},
        rng.integers(15, size=(args.vec_steps, n)).astype(np.int32),
        max(args.window // 20, 1),
    )
    vec = {k: v * n for k, v in vec.items()}

    print(f"single env  bare ProcgenEnv      {single['bare']:>10,.0f} steps/s")
    print(f"single env  SequenceEnv          {single['sequence']:>10,.0f} steps/s")
    print(f"  ratio sequence/bare            {single['sequence'] / single['bare']:.3f}  (>= 0.95)")
    print(f"{n} envs     bare ProcgenGym3Env  {vec['bare']:>10,.0f} steps/s")
    print(f"{n} envs     make_vec             {vec['sequence']:>10,.0f} steps/s")
    print(f"  ratio make_vec/bare            {vec['sequence'] / vec['bare']:.3f}  (>= 0.90)")


if __name__ == "__main__":
    main()
