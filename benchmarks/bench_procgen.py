"""Overhead of the sequence machinery over procgen, measured side by side in one run.

    python benchmarks/bench_procgen.py [--steps 20000] [--vec-steps 1500] [--repeats 3]

Prints steps/s of (1) the bare single-env procgen adapter vs the single-env sequence env
and (2) bare ``ProcgenGym3Env(num=64)`` vs ``cl_suites.make_vec(..., num_envs=64)``, with
their ratios. Targets: (1) >= 0.95x, (2) >= 0.90x. Each measurement is repeated and
interleaved (A, B, A, B, ...) and the best of each side is compared, which cancels most
of the noise of a shared machine. One step = one agent step.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import numpy as np

import cl_suites
from cl_suites.envs.procgen import ProcgenEnv

GAME = "climber"
OPTIONS = {"distribution_mode": "easy", "num_levels": 200, "start_level": 0}


def single_bare(steps: int, actions: np.ndarray) -> float:
    env = ProcgenEnv(GAME, **OPTIONS)
    env.reset(seed=0)
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[t])
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def single_sequence(steps: int, actions: np.ndarray) -> float:
    env = cl_suites.make_env("Procgen6", steps_per_task=10 * steps, cycles=1)
    env.reset(seed=0)
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[t])
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def vec_bare(vec_steps: int, num_envs: int, actions: np.ndarray) -> float:
    with contextlib.redirect_stderr(io.StringIO()):
        from procgen import ProcgenGym3Env
    env = ProcgenGym3Env(
        num=num_envs, env_name=GAME, rand_seed=0, num_threads=4, **OPTIONS
    )  # 4 = default_num_threads(64)
    env.observe()
    start = time.perf_counter()
    for t in range(vec_steps):
        env.act(actions[t])
        env.observe()
    return vec_steps * num_envs / (time.perf_counter() - start)


def vec_sequence(vec_steps: int, num_envs: int, actions: np.ndarray) -> float:
    env = cl_suites.make_vec(
        "Procgen6", num_envs=num_envs, steps_per_task=10 * vec_steps * num_envs, cycles=1
    )
    env.reset(seed=0)
    start = time.perf_counter()
    for t in range(vec_steps):
        env.step(actions[t])
    rate = vec_steps * num_envs / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--vec-steps", type=int, default=1_500)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    actions = rng.integers(15, size=args.steps)
    vec_actions = rng.integers(15, size=(args.vec_steps, args.num_envs)).astype(np.int32)

    results: dict[str, list[float]] = {k: [] for k in ("bare", "seq", "vbare", "vseq")}
    for _ in range(args.repeats):
        results["bare"].append(single_bare(args.steps, actions))
        results["seq"].append(single_sequence(args.steps, actions))
        results["vbare"].append(vec_bare(args.vec_steps, args.num_envs, vec_actions))
        results["vseq"].append(vec_sequence(args.vec_steps, args.num_envs, vec_actions))
    best = {k: max(v) for k, v in results.items()}
    print(f"single env  bare ProcgenEnv     {best['bare']:>10,.0f} steps/s")
    print(f"single env  SequenceEnv         {best['seq']:>10,.0f} steps/s")
    print(f"  ratio sequence/bare           {best['seq'] / best['bare']:.3f}  (target >= 0.95)")
    print(f"{args.num_envs} envs     bare ProcgenGym3Env {best['vbare']:>10,.0f} steps/s")
    print(f"{args.num_envs} envs     make_vec            {best['vseq']:>10,.0f} steps/s")
    print(f"  ratio make_vec/bare           {best['vseq'] / best['vbare']:.3f}  (target >= 0.90)")


if __name__ == "__main__":
    main()
