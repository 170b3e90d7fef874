"""Speed/memory ratios of the baselines, measured side by side in one run.

    .venv/bin/python -m benchmarks.speed.bench_baselines [--steps 12000] [--repeats 3] [--skip-disk]

All rates are agent steps (env.step calls summed over the 8 sub-envs) per CPU second of
the process during ``model.learn`` (``time.process_time``; one torch thread and
in-process envs, so on an idle machine it equals wall time, and on a shared one it is not
inflated by time spent descheduled); each configuration runs ``--repeats`` times,
interleaved with the others, and the best run of each is compared.

* PPO + EWC / online EWC / L2 / MAS vs plain PPO (Diagnostic suite, 3 tasks of
  ``steps / 3`` agent steps, n_steps=64, batch 128, 4 epochs, MLP 64x64). The penalties
  are active after the first switch (2/3 of the run) and each switch pays its one-off
  importance estimate (100 states); a real task is 5M+ agent steps, so the bench's
  switch cost share (about 2 switches per ``--steps``) is an upper bound of a real run's.
* V-trace vs SB3 A2C with the same network (``ContinualPolicy``, MLP 64x64), n_envs=8,
  n_steps=20, learning rate, device and threads; A2C with SB3's own ``MlpPolicy`` is
  printed for reference.
* CORA's IMPALA inputs and schedule (issue 10): V-trace with the previous action and
  reward as inputs (``PreviousActionReward``) and the per-task linear learning rate vs
  V-trace as before (plain observations, constant learning rate), same network, envs and
  batch: 32 envs x 20 steps on 64x64x3 frames with the shallow CNN (a synthetic
  two-task image sequence, so the learner dominates as on a GPU-less Procgen run) and on
  Diagnostic with a 64x64 MLP (the worst case: the extra inputs next to a tiny network).
* CLEAR buffer: resident bytes per stored transition vs raw uint8 observation bytes
  (Procgen 64x64x3), and the disk-backed mode filled with 1M Procgen transitions
  (resident set of the process measured with psutil/resource).
* ``--memmap-compare N``: the disk buffer's ``pwrite`` storage vs an ``np.memmap`` of the
  same file, each filled with N Procgen transitions in its own process (peak RSS of each).
* ``--code-compare OLD_ROOT`` (issue 21): V-trace with the running reward normaliser, alone
  and with CLEAR (whole replayed unrolls, 50/50), 32 envs x 20 steps on 64x64x3 frames
  with the shallow CNN, measured with this checkout's ``baselines_sb3`` vs the one under
  ``OLD_ROOT`` (e.g. ``git worktree add /tmp/old <commit>``): each measurement is a
  subprocess of this script with ``PYTHONPATH`` set to one of the two, interleaved.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import A2C

from baselines_sb3.cl import ReservoirBuffer, attach_method, make_method
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.networks import ImpalaShallowCNN
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.wrappers import PreviousActionReward
from cl_suites.api import make_vec
from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.core.vector import SequenceVectorEnv
from cl_suites.sb3.adapter import SB3VecEnv

th.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]


def _env(steps, n_envs):
    env = SB3VecEnv(make_vec("Diagnostic", n_envs, n_tasks=3, steps_per_task=steps // 3 + 1))
    env.seed(0)
    return env


def _learn_rate(model, env, steps: int, method=None) -> float:
    """Agent steps per CPU second of ``model.learn`` on ``env`` (with ``method`` attached)
    over all but the last two rollouts of the ``steps`` budget."""
    cb = attach_method(model, method, env) if method else None
    t = time.process_time()
    model.learn(steps - 2 * model.n_envs * model.n_steps, callback=cb)
    return model.num_timesteps / (time.process_time() - t)


def ppo_rate(method_name: str | None, steps: int, n_envs: int = 8) -> float:
    env = _env(steps, n_envs)
    method = make_method(method_name, lam=10.0) if method_name else None
    model = ContinualPPO(
        ContinualPolicy,
        env,
        cl_method=method,
        n_steps=64,
        batch_size=128,
        n_epochs=4,
        policy_kwargs={"net_arch": [64, 64]},
        seed=0,
        device="cpu",
    )
    return _learn_rate(model, env, steps, method)


def ac_rate(cls, steps: int, n_envs: int = 8, policy: object = ContinualPolicy) -> float:
    env = _env(steps, n_envs)
    kw = dict(
        n_steps=20,
        policy_kwargs={"net_arch": [64, 64]},
        seed=0,
        learning_rate=7e-4,
        device="cpu",
    )
    model = cls(policy, env, **kw)
    return _learn_rate(model, env, steps)


class _FrameEnv(gym.Env):
    """64x64x3 frames from a fixed bank, rewards in {-1, 0, 1}, 100-step episodes: an
    image task whose simulator costs next to nothing."""

    observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = spaces.Discrete(15)
    _bank = np.random.default_rng(0).integers(0, 255, (64, 64, 64, 3), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._bank[0], {}

    def step(self, action):
        self._t += 1
        reward = float(self.np_random.integers(-1, 2))
        return self._bank[self._t % 64], reward, False, self._t >= 100, {}


def _sequence(kind: str, steps: int) -> TaskSequence:
    if kind == "mlp":
        from cl_suites.suites.diagnostic import build

        return build(n_tasks=2, steps_per_task=steps // 2 + 1)
    tasks = tuple(TaskSpec(f"frames{i}", _FrameEnv, steps // 2 + 1) for i in range(2))
    space = _FrameEnv.observation_space
    return TaskSequence("Frames", tasks, space, _FrameEnv.action_space)


def cora_inputs_rate(new: bool, kind: str, steps: int, n_envs: int = 32) -> float:
    """V-trace agent steps per CPU-second, with (``new``) or without CORA's previous
    action/reward inputs and per-task learning-rate schedule."""
    env = SB3VecEnv(SequenceVectorEnv(_sequence(kind, steps), n_envs))
    env.seed(0)
    if new:
        env = PreviousActionReward(env)
    policy_kwargs: dict = {"net_arch": [64, 64] if kind == "mlp" else []}
    if kind == "cnn":
        policy_kwargs["features_extractor_class"] = ImpalaShallowCNN
    model = VTrace(
        ContinualPolicy,
        env,
        n_steps=20,
        learning_rate=4e-4,
        loss_reduction="sum",
        lr_schedule="linear-per-task" if new else "constant",
        policy_kwargs=policy_kwargs,
        seed=0,
        device="cpu",
    )
    return _learn_rate(model, env, steps)


def buffer_memory(skip_disk: bool) -> None:
    space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    raw = 64 * 64 * 3
    buf = ReservoirBuffer(100_000, 20, space, 15)
    print(
        f"CLEAR RAM buffer: {buf.resident_bytes / buf.capacity:.0f} B/transition = "
        f"{buf.resident_bytes / buf.capacity / raw:.4f}x raw uint8 obs (target <= 1.1)"
    )
    del buf
    if skip_disk:
        return
    with tempfile.TemporaryDirectory() as d:
        buf = ReservoirBuffer(1_000_000, 20, space, 15, disk_dir=d)
        chunk = np.random.default_rng(0).integers(0, 255, (21, 64, 64, 64, 3), dtype=np.uint8)
        small, frames = np.zeros((20, 64)), np.zeros((21, 64))
        t = time.perf_counter()
        for _ in range(1_000_000 // (20 * 64)):
            buf.add(
                {"": chunk},
                small.astype(np.int32),
                np.zeros((21, 64, 15)),
                frames,
                small,
                frames.astype(bool),
            )
        batch = buf.sample(32)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(
            f"CLEAR disk buffer: {buf.size * 20:,} transitions in {time.perf_counter() - t:.1f}s, "
            f"peak RSS {rss:.2f} GiB (target < 2), sample {batch['obs'][''].shape}"
        )
        buf.close()


def fill(storage: str, transitions: int) -> None:
    """Fill ``transitions`` Procgen transitions into a disk buffer (``pwrite``) or an
    ``np.memmap`` of the same layout; print this process's peak RSS in GiB."""
    chunk = np.random.default_rng(0).integers(0, 255, (21, 64, 64, 3), dtype=np.uint8)
    slots = transitions // 20
    with tempfile.TemporaryDirectory() as d:
        if storage == "memmap":
            array = np.memmap(
                os.path.join(d, "obs.bin"), np.uint8, "w+", shape=(slots, 21, 64, 64, 3)
            )
            for i in range(slots):
                array[i] = chunk
            array.flush()
        else:
            space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
            buf = ReservoirBuffer(transitions, 20, space, 15, disk_dir=d)
            for i in range(slots):
                buf.obs[""].write_slot(i, chunk)
            buf.close()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)


def memmap_compare(transitions: int) -> None:
    rss = {}
    for storage in ("pwrite", "memmap"):
        out = subprocess.run(
            [sys.executable, __file__, "--fill", storage, str(transitions)],
            capture_output=True,
            text=True,
            check=True,
        )
        rss[storage] = float(out.stdout.split()[-1])
    gib = transitions * 64 * 64 * 3 / 2**30
    print(
        f"CLEAR disk buffer, {transitions:,} Procgen transitions ({gib:.1f} GiB): peak RSS "
        f"pwrite {rss['pwrite']:.2f} GiB vs np.memmap {rss['memmap']:.2f} GiB "
        f"(= {rss['memmap'] / rss['pwrite']:.1f}x)"
    )


def learner_rate(method: str, steps: int, n_envs: int = 32) -> float:
    """V-trace agent steps per CPU-second on 64x64x3 frames (shallow CNN, summed losses,
    running reward std), with CLEAR (``method="clear"``) or alone (``"ft"``). Uses only
    arguments that the code before issue 21 takes too."""
    env = SB3VecEnv(SequenceVectorEnv(_sequence("cnn", steps), n_envs))
    env.seed(0)
    method_obj = (
        make_method("clear", buffer_size=100_000, storage="ram") if method == "clear" else None
    )
    model = VTrace(
        ContinualPolicy,
        env,
        n_steps=20,
        learning_rate=4e-4,
        loss_reduction="sum",
        normalize_reward=True,
        cl_method=method_obj,
        policy_kwargs={"net_arch": [], "features_extractor_class": ImpalaShallowCNN},
        seed=0,
        device="cpu",
    )
    return _learn_rate(model, env, steps, method_obj)


def code_compare(old_root: str, repeats: int, steps: int) -> None:
    """This checkout vs ``old_root``: the same ``learner_rate`` in subprocesses."""
    best = {}
    for _ in range(repeats):
        for method in ("ft", "clear"):
            for side, root in (("old", old_root), ("new", str(REPO))):
                out = subprocess.run(
                    [sys.executable, __file__, "--learner-rate", method, str(steps)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"},
                )
                rate = float(out.stdout.split()[-1])
                best[(method, side)] = max(best.get((method, side), 0.0), rate)
    for method, label in (("ft", "V-trace, running reward std"), ("clear", "V-trace + CLEAR")):
        old, new = best[(method, "old")], best[(method, "new")]
        print(
            f"{label} (32 envs x 20, 64x64x3, shallow CNN): new {new:,.0f} vs old {old:,.0f} "
            f"steps per CPU-s = {new / old:.3f}x (target >= 0.95; best of {repeats})"
        )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-disk", action="store_true")
    p.add_argument("--memmap-compare", type=int, default=0, metavar="TRANSITIONS")
    p.add_argument("--fill", nargs=2, metavar=("STORAGE", "TRANSITIONS"), help=argparse.SUPPRESS)
    p.add_argument("--image-steps", type=int, default=12_800)
    p.add_argument("--only-cora-inputs", action="store_true", help="run only that comparison")
    p.add_argument("--code-compare", metavar="OLD_ROOT", help="this checkout vs OLD_ROOT")
    p.add_argument("--learner-rate", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.learner_rate:
        print(learner_rate(a.learner_rate[0], int(a.learner_rate[1])))
        return
    if a.code_compare:
        code_compare(a.code_compare, a.repeats, a.image_steps)
        return
    if a.fill:
        fill(a.fill[0], int(a.fill[1]))
        return
    if a.memmap_compare:
        memmap_compare(a.memmap_compare)
        return
    cora_inputs(a.repeats, a.steps, a.image_steps)
    if a.only_cora_inputs:
        return
    runs: dict[str, object] = {
        "ppo": lambda: ppo_rate(None, a.steps),
        **{m: (lambda m=m: ppo_rate(m, a.steps)) for m in ("ewc", "online-ewc", "l2", "mas")},
        "a2c": lambda: ac_rate(A2C, a.steps),
        "vtrace": lambda: ac_rate(VTrace, a.steps),
        "a2c-mlp": lambda: ac_rate(A2C, a.steps, policy="MlpPolicy"),
    }
    ppo_rate(None, 2000)  # warm-up: lazy imports, allocator
    best = {k: 0.0 for k in runs}
    for _ in range(a.repeats):
        for key, fn in runs.items():
            best[key] = max(best[key], fn())
    base = best["ppo"]
    print(f"PPO plain: {base:,.0f} steps per CPU-s (best of {a.repeats})")
    for m in ("ewc", "online-ewc", "l2", "mas"):
        print(f"PPO + {m}: {best[m]:,.0f} steps/s = {best[m] / base:.3f}x plain (target >= 0.90)")
    a2c, vt, mlp = best["a2c"], best["vtrace"], best["a2c-mlp"]
    print(
        f"A2C {a2c:,.0f} steps/s, V-trace {vt:,.0f} steps/s = {vt / a2c:.3f}x (target >= 1.0; "
        f"same ContinualPolicy); A2C with SB3 MlpPolicy {mlp:,.0f} steps/s (V-trace = "
        f"{vt / mlp:.3f}x)"
    )
    buffer_memory(a.skip_disk)


def cora_inputs(repeats: int, mlp_steps: int, image_steps: int) -> None:
    runs = {
        (kind, new): (lambda kind=kind, new=new, steps=steps: cora_inputs_rate(new, kind, steps))
        for kind, steps in (("cnn", image_steps), ("mlp", mlp_steps))
        for new in (False, True)
    }
    cora_inputs_rate(True, "mlp", 2000)  # warm-up
    best = dict.fromkeys(runs, 0.0)
    for _ in range(repeats):
        for key, fn in runs.items():
            best[key] = max(best[key], fn())
    for kind, label in (("cnn", "64x64x3 frames, shallow CNN"), ("mlp", "Diagnostic, MLP 64x64")):
        old, new = best[(kind, False)], best[(kind, True)]
        print(
            f"V-trace with CORA's previous action/reward inputs and per-task LR ({label}): "
            f"{new:,.0f} vs {old:,.0f} steps per CPU-s = {new / old:.3f}x (target >= 0.95)"
        )


if __name__ == "__main__":
    main()
