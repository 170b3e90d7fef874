"""Speed of the Atari6 and MiniHack15 paths, measured side by side in one run.

    python benchmarks/bench_atari_minihack.py [--seconds 3] [--repeats 3] [--only atari|minihack]

For each simulator (Atari: SpaceInvaders with the full Atari6 preprocessing stack;
MiniHack: Room-Random-15x15 with pixel_crop 84x84x3) prints agent steps/s of

1. ``bare``: the task env the suite builds (``make_atari_env`` / ``make_minihack_env``);
2. ``sequence``: the single-env sequence env over it (``cl_suites.make_env``);
3. ``vec1``: ``cl_suites.make_vec(num_envs=1)`` (sync);
4. ``async2``: ``cl_suites.make_vec(num_envs=2, vectorization_mode="async")``, one worker
   process per sub-env;

and the ratios ``sequence / bare`` (target >= 0.95) and ``async2 / sequence`` (target
>= 1.5 on 2 cores). Uniformly random actions, episodes reset as they end. Every
measurement is repeated ``--repeats`` times, interleaved (A, B, C, D, A, B, ...), and the
best of each is compared, which cancels most of the noise of a shared machine. One step
is one agent step (an Atari agent step is 4 emulator frames).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import cl_suites
from cl_suites.envs.atari import make_atari_env
from cl_suites.envs.minihack import make_minihack_env

ATARI_GAME = "SpaceInvaders"
MINIHACK_ENV = "Room-Random-15x15"
BUDGET = 10**9  # never switch task while measuring


def time_single(env, seconds: float, num_actions: int) -> float:
    """Agent steps/s of a single env over ``seconds`` (reset on episode end)."""
    actions = np.random.default_rng(0).integers(num_actions, size=1 << 16)
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            _, _, terminated, truncated, _ = env.step(int(actions[steps & 0xFFFF]))
            steps += 1
            if terminated or truncated:
                env.reset()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def time_vector(venv, seconds: float, num_actions: int) -> float:
    """Agent steps/s (sub-env steps summed) of a same-step-autoreset vector env."""
    n = venv.num_envs
    actions = np.random.default_rng(0).integers(num_actions, size=(1 << 12, n))
    venv.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while True:
        for _ in range(100):
            venv.step(actions[steps & 0xFFF])
            steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps * n / elapsed


def bench(name: str, makers: dict[str, Callable], seconds: float, repeats: int, actions: int):
    envs = {label: make() for label, make in makers.items()}
    best = dict.fromkeys(envs, 0.0)
    for _ in range(repeats):
        for label, env in envs.items():
            timer = time_vector if label.startswith(("vec", "async")) else time_single
            best[label] = max(best[label], timer(env, seconds, actions))
    for env in envs.values():
        env.close()
    print(f"\n{name} (best of {repeats} x {seconds:g}s, agent steps/s)")
    for label, sps in best.items():
        print(f"  {label:<9} {sps:9.0f}")
    print(f"  sequence / bare   = {best['sequence'] / best['bare']:.3f}  (target >= 0.95)")
    print(f"  vec1 / sequence   = {best['vec1'] / best['sequence']:.3f}")
    print(f"  async2 / sequence = {best['async2'] / best['sequence']:.3f}  (target >= 1.5)")
    print(f"  async2 / bare     = {best['async2'] / best['bare']:.3f}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("atari", "minihack"))
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}")
    if args.only in (None, "atari"):
        atari = {"steps_per_task": BUDGET, "cycles": 1, "games": (ATARI_GAME,)}
        bench(
            f"Atari {ATARI_GAME} (4x84x84, frame skip 4)",
            {
                "bare": lambda: make_atari_env(ATARI_GAME),
                "sequence": lambda: cl_suites.make_env("Atari6", **atari),
                "vec1": lambda: cl_suites.make_vec("Atari6", 1, **atari),
                "async2": lambda: cl_suites.make_vec(
                    "Atari6", 2, vectorization_mode="async", **atari
                ),
            },
            args.seconds,
            args.repeats,
            18,
        )
    if args.only in (None, "minihack"):
        minihack = {"steps_per_task": BUDGET, "cycles": 1, "pairs": ((MINIHACK_ENV,) * 2,)}
        bench(
            f"MiniHack {MINIHACK_ENV} (pixel_crop 84x84x3)",
            {
                "bare": lambda: make_minihack_env(MINIHACK_ENV),
                "sequence": lambda: cl_suites.make_env("MiniHack15", **minihack),
                "vec1": lambda: cl_suites.make_vec("MiniHack15", 1, **minihack),
                "async2": lambda: cl_suites.make_vec(
                    "MiniHack15", 2, vectorization_mode="async", **minihack
                ),
            },
            args.seconds,
            args.repeats,
            8,
        )
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
