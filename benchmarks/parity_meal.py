"""MEAL parity: our IPPO against MEAL's paper-time trainer (issue 20 item 1).

Modes (MEAL's code is imported from a checkout at 7d81858, never copied; see
``meal_reference.py`` for the runtime patches)::

    python benchmarks/parity_meal.py --meal-repo /tmp/meal train-meal --cl-method ewc \\
        --seed 1 --out /tmp/meal_runs/ewc_s1

``train-meal`` runs MEAL's ``baselines/IPPO_CL.py`` on MEAL-2 (easy; 16 envs x 128 steps,
Table 4's annealed lr, ``--steps-per-task`` env steps per task, evaluation off) and keeps,
under ``--out``: its per-task parameter files and their JSON (the padded kitchens it
trained on), ``metrics_task{i}.npz`` (its per-update training metrics) and
``timing.json`` (compile and training seconds per task).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from meal_reference import check_meal_repo, load_meal_trainer, meal_argv

STEPS_PER_TASK = 400_000
"""Env steps per task given to MEAL (``--steps-per-task``): 195 updates of 16 x 128,
i.e. 399,360 env steps trained."""


def _flat_metrics(metrics, prefix: str = "") -> dict:
    import numpy as np

    out = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_metrics(value, name + "."))
        else:
            out[name.replace("/", ".")] = np.asarray(value)
    return out


def train_meal(repo: Path, cl_method: str, seed: int, out: Path, steps_per_task: int) -> None:
    """MEAL's own trainer on MEAL-2 easy; per-task parameters, metrics and timing to ``out``."""
    import jax
    import numpy as np

    timing: list[dict] = []

    def hook(fun, jitted, kwargs):
        if getattr(fun, "__name__", "") != "train_on_environment":
            return jitted
        static = set(kwargs.get("static_argnums", ()))

        def run(*args):
            t0 = time.perf_counter()
            compiled = jitted.lower(*args).compile()
            t1 = time.perf_counter()
            out_ = compiled(*[a for i, a in enumerate(args) if i not in static])
            jax.block_until_ready(out_)
            t2 = time.perf_counter()
            task = len(timing)
            np.savez(out / f"metrics_task{task}.npz", **_flat_metrics(out_[1]))
            timing.append({"task": task, "compile_s": t1 - t0, "train_s": t2 - t1})
            (out / "timing.json").write_text(json.dumps(timing, indent=1))
            return out_

        return run

    out.mkdir(parents=True, exist_ok=True)
    module = load_meal_trainer(repo, out, jit_hook=hook)
    sys.argv = meal_argv(cl_method, seed, steps_per_task, extra=["--anneal-lr"])
    (out / "argv.json").write_text(json.dumps(sys.argv))
    module.main()


# ----------------------------------------------------------------------------- checks
class _Stop(Exception):
    pass


class Report:
    """Named comparisons: the largest absolute difference of each and whether it is within
    its tolerance."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def check(self, name: str, ours, theirs, tol: float = 0.0) -> float:
        import numpy as np

        a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
        if a.shape != b.shape:
            print(f"  {name}: shapes differ: ours {a.shape}, MEAL's {b.shape}  FAIL", flush=True)
            self.rows.append((name, float("inf"), tol))
            return float("inf")
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        ok = diff <= tol * max(1.0, scale)
        print(
            f"  {name}: max |ours - MEAL| = {diff:.3g} (scale {scale:.3g})  "
            f"{'ok' if ok else 'FAIL'}",
            flush=True,
        )
        self.rows.append((name, diff, tol if ok else -1.0))
        return diff

    @property
    def failed(self) -> list[str]:
        return [name for name, _, tol in self.rows if tol < 0 or tol == float("inf")]


def meal_training_envs(repo: Path, seed: int, workdir: Path) -> list:
    """The Overcooked envs MEAL's ``main()`` builds for MEAL-2 easy with ``seed`` (its
    generated, wall-padded kitchens; its training envs' ``random_reset``), taken before
    the first task trains."""

    def hook(fun, jitted, kwargs):
        if getattr(fun, "__name__", "") != "train_on_environment":
            return jitted

        def stop(*args):
            raise _Stop

        return stop

    module = load_meal_trainer(repo, workdir, jit_hook=hook)
    envs: list = []
    real_make = module.make

    def make(name, **kwargs):
        env = real_make(name, **kwargs)
        if "layout_name" in kwargs:  # the training envs (after padding), :510-512
            envs.append(env)
        return env

    module.make = make
    sys.argv = meal_argv("ft", seed, 4096)
    with contextlib.suppress(_Stop):
        module.main()
    return envs


def compare_env(repo: Path, seed: int, report: Report, num_envs: int = 8, steps: int = 900):
    """Same kitchens, same start states and actions: our engine against MEAL's env."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from cl_suites.meal import build_suite
    from cl_suites.meal.engine import MealEngine

    print(f"env, MEAL-2 easy seed {seed}:", flush=True)
    theirs = meal_training_envs(repo, seed, Path(tempfile.mkdtemp(prefix="meal-env-")))
    suite = build_suite(2, difficulty="easy", layout_seed=seed, random_reset=True)
    engine = MealEngine(suite)
    keys_of = ("wall_idx", "agent_idx", "goal_idx", "plate_pile_idx", "onion_pile_idx", "pot_idx")
    rng = np.random.default_rng(seed)
    coef = 0.7
    for task, menv in enumerate(theirs):
        ours_layout = engine._padded[task][0]
        for key in keys_of:
            report.check(
                f"task {task} padded kitchen {key}",
                sorted(set(np.asarray(ours_layout[key]).tolist())),
                sorted(set(np.asarray(menv.layout[key]).tolist())),
            )
        report.check(
            f"task {task} grid size",
            [ours_layout["height"], ours_layout["width"]],
            [int(menv.layout["height"]), int(menv.layout["width"])],
        )
        report.check(f"task {task} random_reset", [True], [bool(menv.random_reset)])
        report.check(f"task {task} episode length", [suite.episode_len], [menv.max_steps])
        keys = engine.env_keys(1000 * seed + task, num_envs)
        state, obs = engine.reset(np.full(num_envs, task), keys)
        m_reset = jax.jit(jax.vmap(menv.reset))
        m_step = jax.jit(jax.vmap(menv.step_env))
        subs = jax.vmap(lambda k: jax.random.split(k)[1])(keys)
        m_obs, m_state = m_reset(subs)
        diffs = {"obs": 0.0, "reward": 0.0, "soups": 0.0, "done": 0.0}
        rewarded = 0
        for t in range(1, steps + 1):
            stacked = np.stack([np.asarray(m_obs[a]) for a in menv.agents], axis=1)
            diffs["obs"] = max(diffs["obs"], float(np.abs(np.asarray(obs, float) - stacked).max()))
            actions = rng.integers(6, size=(num_envs, 2))
            step_subs = jax.vmap(lambda k: jax.random.split(k)[1])(state.keys)
            state, obs, rewards, soups = engine.step(state, actions, coef)
            m_act = {a: jnp.asarray(actions[:, i]) for i, a in enumerate(menv.agents)}
            m_obs, m_state, m_rew, m_done, m_info = m_step(step_subs, m_state, m_act)
            team = m_rew["agent_0"] + m_rew["agent_1"]  # IPPO_CL.py:673-682
            m_rewards = np.stack(
                [np.asarray(team + coef * m_info["shaped_reward"][a]) for a in menv.agents], 1
            )
            rewarded += int(np.count_nonzero(m_rewards))
            diffs["reward"] = max(
                diffs["reward"], float(np.abs(np.asarray(rewards) - m_rewards).max())
            )
            m_soups = np.asarray(m_info["soups"]["agent_0"] + m_info["soups"]["agent_1"])
            diffs["soups"] = max(diffs["soups"], float(np.abs(np.asarray(soups) - m_soups).max()))
            ours_done = t % suite.episode_len == 0
            diffs["done"] = max(
                diffs["done"], float(np.any(np.asarray(m_done["__all__"]) != ours_done))
            )
            if ours_done:  # both sides start the next episode from the same keys
                keys = state.keys
                state, obs = engine.reset(np.full(num_envs, task), keys)
                m_obs, m_state = m_reset(jax.vmap(lambda k: jax.random.split(k)[1])(keys))
        print(f"  task {task}: {rewarded} non-zero agent rewards in the comparison", flush=True)
        for name, value in diffs.items():
            report.check(
                f"task {task} {name} over {steps} steps x {num_envs} envs", value, 0.0, 1e-5
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meal-repo", type=Path, help="a checkout of TTomilin/MEAL at 7d81858")
    sub = parser.add_subparsers(dest="mode", required=True)
    tm = sub.add_parser("train-meal", help="run MEAL's own trainer, keep per-task parameters")
    tm.add_argument("--cl-method", choices=("ft", "ewc", "mas", "l2"), required=True)
    tm.add_argument("--seed", type=int, required=True)
    tm.add_argument("--out", type=Path, required=True)
    tm.add_argument("--steps-per-task", type=int, default=STEPS_PER_TASK)
    ev = sub.add_parser("env", help="same kitchens, states and actions: env outputs")
    ev.add_argument("--seeds", type=int, nargs="+", default=[1])
    args = parser.parse_args()
    try:
        repo = check_meal_repo(args.meal_repo)
    except ValueError as err:
        parser.error(str(err))
    if args.mode == "train-meal":
        train_meal(
            repo.resolve(), args.cl_method, args.seed, args.out.resolve(), args.steps_per_task
        )
        return
    report = Report()
    if args.mode == "env":
        for seed in args.seeds:
            compare_env(repo.resolve(), seed, report)
    print("FAILED: " + ", ".join(report.failed) if report.failed else "all checks agree")
    sys.exit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
