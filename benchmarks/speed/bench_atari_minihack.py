"""Speed of the Atari6 and MiniHack15 paths, measured side by side in one run.

    python -m benchmarks.speed.bench_atari_minihack [--seconds 3] [--repeats 3]
        [--only atari|minihack]

For each simulator (Atari: SpaceInvaders with the full Atari6 preprocessing stack;
MiniHack: Room-Random-15x15 with pixel_crop 84x84x3) prints agent steps/s of

1. ``bare``: the task env the suite builds (``make_atari_env`` / ``make_minihack_env``);
2. ``sequence``: the single-env sequence env over it (``cl_suites.make_env``);
3. ``vec1``: ``cl_suites.make_vec(num_envs=1)`` (sync);
4. ``async2``: ``cl_suites.make_vec(num_envs=2, vectorization_mode="async")``, one worker
   process per sub-env;
5. ``bare_async2``: gymnasium's ``AsyncVectorEnv`` over 2 task envs, without the sequence
   layer (where the vector path's limit comes from);

and the ratios ``sequence / bare`` (target >= 0.95; also in steps per CPU second of this
process, and as the median of 60 paired windows in which both envs do the same work back
to back, the most robust of the three on a shared machine) and ``async2 / sequence``
(target >= 1.5 on 2 cores; it needs two idle cores). Finally it times gymnasium's
``AsyncVectorEnv(2)`` over a zero-cost env with the same observations: the fixed
per-step cost of process-parallel stepping, from which the best possible 2-core speed-up
``2 * step / (step + overhead)`` follows.

Uniformly random actions, episodes reset as they end, the same games on every side (same
seeds). Every measurement is repeated ``--repeats`` times, interleaved (A, B, C, D, A,
B, ...), and the best of each is compared, which cancels most of the noise of a shared
machine. One step is one agent step (an Atari agent step is 4 emulator frames).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

import gymnasium as gym
import numpy as np

import cl_suites
from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import task_seed
from cl_suites.core.vector import SequenceVectorEnv
from cl_suites.envs.atari import make_atari_env
from cl_suites.envs.minihack import make_minihack_env

ATARI_GAME = "SpaceInvaders"
MINIHACK_ENV = "Room-Random-15x15"
BUDGET = 10**9  # never switch task while measuring


def time_single(env, seconds: float, num_actions: int) -> tuple[float, float]:
    """Agent steps per wall-clock second and per CPU second of this process, of a single
    env over ``seconds`` (reset on episode end). CPU time is immune to other processes
    sharing the cores, so it measures the per-step cost of the layers themselves."""
    actions = np.random.default_rng(0).integers(num_actions, size=1 << 16)
    # the sequence env seeds its task env with task_seed(0, 0, 0): same games on both sides
    env.reset(seed=0 if isinstance(env.unwrapped, SequenceEnv) else task_seed(0, 0, 0))
    steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while True:
        for _ in range(200):
            _, _, terminated, truncated, _ = env.step(int(actions[steps & 0xFFFF]))
            steps += 1
            if terminated or truncated:
                env.reset()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed, steps / (time.process_time() - cpu_start)


def paired_ratio(bare, sequence, num_actions: int, windows: int, steps: int) -> float:
    """Median over ``windows`` of (bare time / sequence time) for ``steps`` steps each.

    Both envs play the same games (same seeds, same actions) in lockstep: window k of the
    bare env and window k of the sequence env do identical simulator work back to back,
    so load changes on a shared machine (slower than a window) cancel in each pair.
    """
    actions = np.random.default_rng(1).integers(num_actions, size=windows * steps)
    bare.reset(seed=task_seed(0, 0, 0))
    sequence.reset(seed=0)
    ratios = []
    for k in range(windows):
        times = []
        for env in (bare, sequence):
            start = time.perf_counter()
            for a in actions[k * steps : (k + 1) * steps]:
                _, _, terminated, truncated, _ = env.step(int(a))
                if terminated or truncated:
                    env.reset()
            times.append(time.perf_counter() - start)
        ratios.append(times[0] / times[1])
    return float(np.median(ratios))


def _worker_cpu_seconds(venv) -> list[float]:
    """CPU seconds used so far by each worker process of an ``AsyncVectorEnv`` (Linux)."""
    backend = getattr(venv, "_backend", venv)
    ticks = os.sysconf("SC_CLK_TCK")
    out = []
    for process in getattr(backend, "processes", []):
        with open(f"/proc/{process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out.append((int(fields[11]) + int(fields[12])) / ticks)  # utime + stime
    return out


def time_vector(venv, seconds: float, num_actions: int) -> tuple[float, float | None]:
    """Agent steps/s (sub-env steps summed) of a same-step-autoreset vector env, and for
    process-parallel envs the CPU microseconds per vector step on the critical path
    (this process + the busiest worker), which other processes do not disturb."""
    n = venv.num_envs
    actions = np.random.default_rng(0).integers(num_actions, size=(1 << 12, n))
    venv.reset(seed=0 if isinstance(venv, SequenceVectorEnv) else task_seed(0, 0, 0))
    workers = _worker_cpu_seconds(venv)
    steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while True:
        for _ in range(100):
            venv.step(actions[steps & 0xFFF])
            steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            main_cpu = time.process_time() - cpu_start
            used = [b - a for a, b in zip(workers, _worker_cpu_seconds(venv), strict=True)]
            path_us = 1e6 * (main_cpu + max(used)) / steps if used else None
            return steps * n / elapsed, path_us


class NullEnv(gym.Env):
    """Zero-cost env with a given observation space: isolates the per-step vector overhead."""

    def __init__(self, observation_space: gym.spaces.Box, num_actions: int):
        self.observation_space = observation_space
        self.action_space = gym.spaces.Discrete(num_actions)
        self._obs = observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        return self._obs, 0.0, False, False, {}


def null_overhead_us(space: gym.spaces.Box, num_actions: int, seconds: float) -> float:
    """Microseconds per vector step of gymnasium's AsyncVectorEnv(2) over ``NullEnv``."""
    venv = bare_async(partial(NullEnv, space, num_actions))
    sps, _ = time_vector(venv, seconds, num_actions)
    venv.close()
    return 2e6 / sps


def bare_async(factory: Callable[[], gym.Env]) -> gym.vector.VectorEnv:
    """gymnasium's ``AsyncVectorEnv`` of 2 task envs, without the sequence layer."""
    return gym.vector.AsyncVectorEnv(
        [factory] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def bench(name: str, makers: dict[str, Callable], seconds: float, repeats: int, actions: int):
    envs = {label: make() for label, make in makers.items()}
    best = dict.fromkeys(envs, 0.0)
    best_cpu = {"bare": 0.0, "sequence": 0.0}
    path_us = {"async2": float("inf"), "bare_async2": float("inf")}
    for _ in range(repeats):
        for label, env in envs.items():
            if label in best_cpu:
                wall, cpu = time_single(env, seconds, actions)
                best_cpu[label] = max(best_cpu[label], cpu)
            else:
                wall, cpu_path = time_vector(env, seconds, actions)
                if cpu_path is not None:
                    path_us[label] = min(path_us[label], cpu_path)
            best[label] = max(best[label], wall)
    space = envs["bare"].observation_space
    paired = paired_ratio(envs["bare"], envs["sequence"], actions, windows=60, steps=100)
    for env in envs.values():
        env.close()
    print(f"\n{name} (best of {repeats} x {seconds:g}s, agent steps/s)")
    for label, sps in best.items():
        print(f"  {label:<11} {sps:9.0f}")
    print(f"  sequence / bare   = {best['sequence'] / best['bare']:.3f}  (target >= 0.95)")
    cpu_ratio = best_cpu["sequence"] / best_cpu["bare"]
    print(f"  sequence / bare   = {cpu_ratio:.3f}  in steps per CPU second (target >= 0.95)")
    print(f"  sequence / bare   = {paired:.3f}  median of paired lockstep windows (target >= 0.95)")
    print(f"  vec1 / sequence   = {best['vec1'] / best['sequence']:.3f}")
    print(f"  async2 / sequence = {best['async2'] / best['sequence']:.3f}  (target >= 1.5)")
    print(f"  bare_async2 / bare = {best['bare_async2'] / best['bare']:.3f}  (gymnasium alone)")
    cpu_step_us = 1e6 / best_cpu["sequence"]
    print(
        f"  async2 CPU per vector step on the critical path (this process + busiest worker): "
        f"{path_us['async2']:.0f} us vs {cpu_step_us:.0f} us per single-env step -> "
        f"speed-up on 2 idle cores <= {2 * cpu_step_us / path_us['async2']:.2f}x"
    )
    step_us = 1e6 / best["bare"]
    null_us = null_overhead_us(space, actions, seconds)
    print(
        f"  one env step {step_us:.0f} us; AsyncVectorEnv(2) over a zero-cost env: "
        f"{null_us:.0f} us per vector step -> 2-core ceiling "
        f"{2 * step_us / (step_us + null_us):.2f}x"
    )
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
                "bare_async2": lambda: bare_async(partial(make_atari_env, ATARI_GAME)),
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
                "bare_async2": lambda: bare_async(partial(make_minihack_env, MINIHACK_ENV)),
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
