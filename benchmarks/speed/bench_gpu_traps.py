"""CPU cost of the PPO update's host syncs and CLEAR's replay draws (issue 39 item 6),
before and after.

The PPO update used to turn five tensors into Python floats per minibatch (the three
losses, the KL, the clip fraction) and the CL loss hook one more; on a GPU each of those
waits for the device to finish. They now stay on the device until the update ends. This
script times ``model.train()`` (one PPO update: ``n_epochs`` x ``minibatches``) of a
MEAL-sized MLP policy on Diagnostic with MEAL's L2 penalty attached, on the CPU, with one
torch thread, and prints the median CPU milliseconds per update and per minibatch.

``--method clear``: CLEAR instead of L2 (its buffer filled by 8 rollouts first); CLEAR
now draws the replay of an update's minibatches at once (one gather, one copy to the
device), ``--per-minibatch-replay`` draws it minibatch by minibatch as before.

Run it against two checkouts to compare (``PYTHONPATH`` picks the code)::

    PYTHONPATH=. python -m benchmarks.speed.bench_gpu_traps [--minibatches 32] [--repeats 30]
        [--method clear [--per-minibatch-replay]]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch as th

from baselines_sb3.cl import CLEAR, MealL2, attach_method
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.policies import ContinualPolicy
from cl_suites.api import make_vec
from cl_suites.sb3.adapter import SB3VecEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minibatches", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--method", choices=("l2", "clear"), default="l2")
    parser.add_argument("--per-minibatch-replay", action="store_true")
    args = parser.parse_args()
    if args.per_minibatch_replay:
        CLEAR.start_update = lambda *a: None  # type: ignore[method-assign]
    th.set_num_threads(1)
    env = SB3VecEnv(make_vec("Diagnostic", 8, n_tasks=2, steps_per_task=10**6, show_task=False))
    env.seed(0)
    method = MealL2(1.0) if args.method == "l2" else CLEAR(buffer_size=8192)
    n_steps = 128
    model = ContinualPPO(
        ContinualPolicy, env, n_steps=n_steps, batch_size=n_steps * 8 // args.minibatches,
        n_epochs=4, seed=0, cl_method=method, policy_kwargs={"net_arch": [128, 128]},
    )  # fmt: skip
    callback = attach_method(model, method, env)
    rollouts = 8 if args.method == "clear" else 1  # CLEAR: replay to draw from
    model.learn(n_steps * 8 * rollouts, callback=callback)  # the logger set up
    times = []
    for _ in range(args.repeats):
        start = time.process_time()
        model.train()
        times.append(time.process_time() - start)
    per_update = statistics.median(times) * 1e3
    per_minibatch = per_update / (4 * args.minibatches)
    print(
        f"PPO update ({args.method}), {args.minibatches} minibatches x 4 epochs: "
        f"{per_update:.1f} ms CPU "
        f"(median of {args.repeats}), {per_minibatch:.3f} ms per minibatch"
    )


if __name__ == "__main__":
    main()
