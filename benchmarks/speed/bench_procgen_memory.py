"""Memory of long Procgen sequences: env create/close leak and RSS over many task switches.

    python -m benchmarks.speed.bench_procgen_memory [--creates 1000] [--switches 1000]

Prints, measured in one run:

1. resident memory per ``ProcgenGym3Env`` create/close, with gym3's plain ``close()`` (the
   cffi library object of every env stays in gym3's shared ``FFI``) and with
   ``cl_suites.envs.procgen.close_gym3`` (which drops it), side by side;
2. a Procgen6 ``SequenceVectorEnv`` (8 sub-envs) played over ``--switches`` task
   switches (one vector step per task) after ``--warmup`` switches, with an
   ``Evaluator`` (2 episodes per task and split) every 10 switches: task envs built per
   task segment, procgen games created, and resident memory per switch.

Target: one task env per task segment, and no growth per switch beyond noise (the issue
measured about 11 KB per create/close before the fix, +10 MB per 1000 switches).
"""

from __future__ import annotations

import argparse
import gc
import os

import numpy as np

import cl_suites
from cl_suites.envs import procgen as procgen_adapter


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def create_close_growth(count: int, close) -> float:
    """KB of resident memory added per create/observe/close of a one-game env."""
    procgen = procgen_adapter._procgen()

    def cycle(seed: int) -> None:
        game = procgen.ProcgenGym3Env(num=1, env_name="climber", rand_seed=seed, num_threads=0)
        game.observe()
        close(game)

    for seed in range(50):  # warm-up: allocator pools, asset caches
        cycle(seed)
    gc.collect()
    before = rss_mb()
    for seed in range(count):
        cycle(seed)
    gc.collect()
    return (rss_mb() - before) * 1024 / count


class CountingFactory:
    """Counts the procgen games built (``_make_gym3`` calls) and the batched task envs."""

    def __init__(self):
        self.games = 0
        self.task_envs = 0
        self._make_gym3 = procgen_adapter._make_gym3
        self._init = procgen_adapter.ProcgenVectorEnv.__init__

    def __enter__(self):
        def make_gym3(*args, **kwargs):
            self.games += 1
            return self._make_gym3(*args, **kwargs)

        def init(env, *args, **kwargs):
            self.task_envs += 1
            self._init(env, *args, **kwargs)

        procgen_adapter._make_gym3 = make_gym3
        procgen_adapter.ProcgenVectorEnv.__init__ = init
        return self

    def __exit__(self, *exc):
        procgen_adapter._make_gym3 = self._make_gym3
        procgen_adapter.ProcgenVectorEnv.__init__ = self._init


def sequence_growth(switches: int, num_envs: int, warmup: int) -> dict[str, float]:
    """Play ``warmup + switches`` task switches of Procgen6 (one vector step per task),
    evaluating every 10 switches; memory and counts over the last ``switches``. procgen
    loads its sprite and background images lazily, level by level, so resident memory
    grows during the warm-up whatever the env handling; only growth after it is a leak."""
    cycles = (switches + warmup) // 6 + 2
    sequence = cl_suites.make_sequence(
        "Procgen6", steps_per_task=num_envs, cycles=cycles, eval_every=num_envs, eval_episodes=2
    )
    env = cl_suites.SequenceVectorEnv(sequence, num_envs)
    evaluator = cl_suites.Evaluator(sequence, seed=0, num_envs=2)
    zeros = np.zeros(num_envs, dtype=np.int64)
    with CountingFactory() as counts:
        _, infos = env.reset(seed=0)
        marks = {}
        for switch in range(switches + warmup):
            if switch == warmup:
                gc.collect()
                marks = {"rss": rss_mb(), "games": counts.games, "task_envs": counts.task_envs}
            _, _, _, _, infos = env.step(zeros)
            if switch % 10 == 0:  # evaluation envs: built once per (task, split), reseeded
                evaluator.evaluate(
                    int(infos["total_step"][0]), lambda obs, _: np.zeros(len(obs), int)
                )
        gc.collect()
        result = {
            "rss_kb_per_switch": (rss_mb() - marks["rss"]) * 1024 / switches,
            "rss_mb": rss_mb(),
            "task_envs_per_switch": (counts.task_envs - marks["task_envs"]) / switches,
            "games_per_switch": (counts.games - marks["games"]) / switches,
        }
    env.close()
    evaluator.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=1000)
    parser.add_argument("--switches", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=600, help="switches before measuring")
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()

    plain = create_close_growth(args.creates, lambda game: game.close())
    fixed = create_close_growth(args.creates, procgen_adapter.close_gym3)
    print(f"ProcgenGym3Env create/close x{args.creates}:")
    print(f"  gym3 close():  {plain:6.2f} KB resident per create/close")
    print(f"  close_gym3():  {fixed:6.2f} KB resident per create/close")
    seq = sequence_growth(args.switches, args.num_envs, args.warmup)
    print(
        f"Procgen6 SequenceVectorEnv({args.num_envs}), {args.switches} switches, "
        "evaluation every 10:"
    )
    print(f"  task envs built per switch:  {seq['task_envs_per_switch']:.3f} (target 1)")
    print(
        f"  procgen games built per switch (training + evaluation reseeds): "
        f"{seq['games_per_switch']:.2f}"
    )
    print(
        f"  resident memory per switch after {args.warmup} warm-up switches: "
        f"{seq['rss_kb_per_switch']:6.2f} KB (process: {seq['rss_mb']:.0f} MB)"
    )


if __name__ == "__main__":
    main()
