"""MEAL speed: our adapters against meal-bench's own JAX loops, side by side in one run.

1. SB3 VecEnv (``MealSB3VecEnv``, ``--num-envs`` envs x 2 agents, random actions, host
   arrays every step) vs meal-bench's jit+vmap rollout of the same kitchen (``lax.scan``
   over ``Overcooked.step`` with on-device random actions). Target ratio >= 0.30.
2. ``MealParallelEnv`` (one env, dict actions, numpy observations) vs a bare Python loop of
   jitted single-env meal-bench steps that also fetches the observations and rewards to
   the host (what any policy needs). Target ratio >= 0.80.

Both count env steps (one joint action = one step). Usage::

    python benchmarks/bench_meal.py [--num-envs 1024] [--steps 400] [--repeats 3]
        [--layout cramped_room]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from cl_suites.meal import build_suite, make_parallel
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.sb3_vec import MealSB3VecEnv


def bench_meal_bench_vmap(layout: str, num_envs: int, steps: int) -> float:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=400, help="400 = one episode end included")
    parser.add_argument("--single-steps", type=int, default=2000)
    parser.add_argument("--layout", default="cramped_room")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved; best of N each")
    args = parser.parse_args()

    ref = ours = bare = par = 0.0
    for _ in range(args.repeats):
        ref = max(ref, bench_meal_bench_vmap(args.layout, args.num_envs, args.steps))
        ours = max(ours, bench_sb3(args.layout, args.num_envs, args.steps))
    print(f"meal-bench jit+vmap scan, {args.num_envs} envs : {ref:12,.0f} env-steps/s")
    print(f"MealSB3VecEnv,           {args.num_envs} envs : {ours:12,.0f} env-steps/s")
    print(f"  ratio {ours / ref:.2f}  (target >= 0.30; best of {args.repeats} each)")
    for _ in range(args.repeats):
        bare = max(bare, bench_bare_single(args.layout, args.single_steps))
        par = max(par, bench_parallel(args.layout, args.single_steps))
    print(f"bare jitted meal-bench loop, 1 env   : {bare:12,.0f} env-steps/s")
    print(f"MealParallelEnv, 1 env               : {par:12,.0f} env-steps/s")
    print(f"  ratio {par / bare:.2f}  (target >= 0.80)")


if __name__ == "__main__":
    main()
