"""MEAL parity: our IPPO against MEAL's paper-time trainer (issue 20 item 1).

Modes (MEAL's code is imported from a checkout at 7d81858, never copied; see
``meal_reference.py`` for the runtime patches)::

    python -m benchmarks.parity.parity_meal --meal-repo /tmp/meal train-meal --cl-method ewc \\
        --seed 1 --out /tmp/meal_runs/ewc_s1

``train-meal`` runs MEAL's ``baselines/IPPO_CL.py`` on MEAL-2 (easy; 16 envs x 128 steps,
Table 4's annealed lr, ``--steps-per-task`` env steps per task, evaluation off) and keeps,
under ``--out``: its per-task parameter files and their JSON (the padded kitchens it
trained on), ``metrics_task{i}.npz`` (its per-update training metrics) and
``timing.json`` (compile and training seconds per task).

``mappo`` runs MEAL 057f862's MAPPO update beside ``mappo-jax``'s from the same inputs
(``--meal057-repo``: a checkout at 057f862; ``meal_mappo_reference.py``), ``--write``
pinning what it shows in ``tests/golden``.

``env --meal057-repo /tmp/refs/meal057`` also plays Overcooked's knobs against MEAL's
current code (``meal_knobs_reference.py``, issue 53 item 2).

``bounds`` compares our score bound with MEAL's ``estimate_max_soup`` (paper-time
``jax_marl/environments/overcooked/upper_bound.py``) on the paper generator's kitchens of
every difficulty and ``--seeds N`` seeds, and lists the kitchens where MEAL's is 0 (issue
29 item 4: such a task has no bound).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import types
from pathlib import Path

from benchmarks.parity.meal_reference import (
    check_meal_repo,
    import_meal,
    load_meal_trainer,
    meal_argv,
)

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


def meal_suite(seed: int, steps_per_task: int = STEPS_PER_TASK):
    """Our MEAL-2 easy with MEAL's kitchens for ``seed`` and MEAL's code's settings at this
    budget: whole updates of 16 x 128 (399,360 env steps), shaping annealed over
    ``steps_per_task / 2`` env steps (``IPPO_CL.py:601``), random episode starts."""
    from cl_suites.meal import build_suite

    per_update = 16 * 128
    return build_suite(
        2,
        difficulty="easy",
        layout_seed=seed,
        random_reset=True,
        steps_per_task=steps_per_task // per_update * per_update,
        shaping_horizon=steps_per_task // 2,
    )


def train_ours(cl_method: str, seed: int, out: Path, steps_per_task: int) -> None:
    """Our JAX learner (``baselines_jax``) on MEAL's kitchens for ``seed``; per-task
    parameters, per-update metrics and timing to ``out``."""
    import jax
    import numpy as np

    from baselines_jax import IPPOConfig, JaxIPPO

    out.mkdir(parents=True, exist_ok=True)
    suite = meal_suite(seed, steps_per_task)
    learner = JaxIPPO(suite, IPPOConfig(cl_method=cl_method), [seed])
    state = learner.init_state()
    timing = []
    for task in range(len(suite.layouts)):
        t0 = time.perf_counter()
        state, metrics = learner.train(state, task, learner.updates_per_task)
        jax.block_until_ready(state)
        t1 = time.perf_counter()
        state = learner.end_task(state, task)
        jax.block_until_ready(state)
        params = jax.tree.map(lambda x: np.asarray(x[0]), state.params)
        flat = {
            jax.tree_util.keystr(path): leaf
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
        }
        np.savez(out / f"params_task{task}.npz", **flat)
        np.savez(out / f"metrics_task{task}.npz", **{k: np.asarray(v) for k, v in metrics.items()})
        timing.append({"task": task, "train_s": t1 - t0, "end_task_s": time.perf_counter() - t1})
        (out / "timing.json").write_text(json.dumps(timing, indent=1))
    (out / "compile.json").write_text(json.dumps({"compile_s": learner.compile_seconds}))


# ----------------------------------------------------------------------------- scoring
def _nest(flat: dict) -> dict:
    """``{"['params']['actor_head']['bias']": array}`` -> nested dicts."""
    out: dict = {}
    for key, value in flat.items():
        parts = [p.strip("'\"") for p in key.strip("[]").split("][")]
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def load_run_params(run: Path) -> list:
    """Per-task parameters ``{"params": ...}`` of a run directory: MEAL's saved
    ``model_env_{i}`` files (flax msgpack) or ours (``params_task{i}.npz``)."""
    import flax.serialization
    import numpy as np

    ours = sorted(run.glob("params_task*.npz"))
    if ours:
        return [{"params": _nest(dict(np.load(f)))["params"]} for f in ours]
    files = sorted(
        (f for f in run.glob("checkpoints/*/*/*/model_env_*") if not f.name.endswith(".json")),
        key=lambda f: int(f.name.rsplit("_", 1)[1]),
    )
    if not files:
        raise FileNotFoundError(f"no per-task parameters under {run}")
    return [
        {"params": flax.serialization.msgpack_restore(f.read_bytes())["params"]["params"]}
        for f in files
    ]


def score_policy(suite, params, episodes: int, seed: int) -> list[float]:
    """One scorer for both sides: per task, ``episodes`` greedy episodes of the full 400
    steps on our engine (MEAL's env: random starts), soups / the kitchen's single-agent
    bound (our MEAL score normaliser), averaged over the episodes."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from baselines_jax.network import ActorCritic
    from cl_suites.meal.engine import MealEngine

    engine = MealEngine(suite)
    n_tasks = len(suite.layouts)
    network = ActorCritic(action_dim=6, num_tasks=n_tasks)
    obs_dim = int(np.prod(suite.obs_shape))

    @jax.jit
    def act(p, obs, task):
        logits, _ = network.apply(p, obs.reshape(-1, obs_dim), task)
        return jnp.argmax(logits, -1).reshape(obs.shape[:2])

    scores = []
    for task in range(n_tasks):
        keys = engine.env_keys(10_000 * seed + task, episodes)
        state, obs = engine.reset(np.full(episodes, task), keys)
        soups = np.zeros(episodes)
        for _ in range(suite.episode_len):
            state, obs, _, delivered = engine.step(state, act(params, obs, task), 0.0)
            soups += np.asarray(delivered)
        scores.append(float(soups.mean() / suite.layouts[task].max_soups))
    return scores


def score_runs(runs: list[Path], episodes: int, out: Path | None) -> None:
    """Scores of every run directory (``<method>_s<seed>`` or ``ours_<method>_s<seed>``):
    the score matrix (after task i, on task j), and A, F, P as the paper's eqs. 1-3."""
    import numpy as np

    rows = []
    for run in runs:
        name = run.name.removeprefix("ours_")
        method, seed = name.rsplit("_s", 1)
        side = "ours" if run.name.startswith("ours_") else "MEAL"
        suite = meal_suite(int(seed))
        matrix = np.array([score_policy(suite, p, episodes, 0) for p in load_run_params(run)])
        n = len(matrix)
        final = matrix[-1]
        rows.append(
            {
                "side": side,
                "method": method,
                "seed": int(seed),
                "matrix": matrix.round(4).tolist(),
                "A": float(final.mean()),
                "F": float(np.mean([matrix[i, i] - final[i] for i in range(n - 1)])),
                "P": float(np.mean([matrix[i, i] for i in range(n)])),
                "bounds": [t.max_soups for t in suite.layouts],
            }
        )
        r = rows[-1]
        print(
            f"{side:4s} {method:3s} seed {seed}: after task 0 {matrix[0].round(3).tolist()}, "
            f"after task 1 {matrix[1].round(3).tolist()}; A {r['A']:.3f} F {r['F']:.3f} "
            f"P {r['P']:.3f} (bounds {r['bounds']})",
            flush=True,
        )
    if out is not None:
        out.write_text(json.dumps(rows, indent=1))


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


def capture_meal_updates(repo: Path, seed: int, updates: int, steps_per_task: int) -> dict:
    """MEAL's own ``train_on_environment`` on task 0, run eagerly for ``updates`` updates:
    per update, its ``_update_epoch`` scan's input (params, Adam state, rollout batch,
    advantages, targets, RNG key) and output, the GAE scan's bootstrap values and the
    last observations. Its jitted functions run as in training; only the outer update
    loop runs in Python so that the values between the pieces can be read."""
    import jax

    captured: dict = {"updates": []}
    real_scan = jax.lax.scan

    def scan(f, init=None, xs=None, length=None, **kwargs):
        name = getattr(f, "__name__", "")
        if name == "_update_step":
            carry = init
            for _ in range(updates):
                carry, _ = f(carry, None)
            raise _Stop
        carries: list = []
        if name in ("_update_epoch", "_update_minbatch"):  # eager: read every minibatch
            out = _python_scan(f, init, xs, length, carries)
        else:
            out = real_scan(f, init, xs, length, **kwargs)
        current = captured["updates"][-1] if captured["updates"] else None
        if name == "_update_minbatch":  # carries: (train_state, cl_state) before each step
            steps = current.setdefault("steps", [])
            for i, carry in enumerate(carries):
                minibatch = jax.tree.map(lambda x, i=i: x[i], xs)
                steps.append((carry[0], minibatch, jax.tree.map(lambda y, i=i: y[i], out[1])))
            current["steps_end"] = out[0][0]
        if name == "_env_step":
            captured["updates"].append({"last_obs": out[0][2]})
        elif name == "_get_advantages":
            current["last_val"] = init[1]
        elif name == "_update_epoch":
            current["in"], current["out"] = init, out[0]
        return out

    class LaxProxy(types.ModuleType):
        def __getattr__(self, name):
            return getattr(jax.lax, name)

    def hook(fun, jitted, kwargs):
        if getattr(fun, "__name__", "") != "train_on_environment":
            return jitted
        return fun  # eager: the update loop above runs in Python

    module = load_meal_trainer(repo, Path(tempfile.mkdtemp(prefix="meal-upd-")), jit_hook=hook)
    lax = LaxProxy("lax")
    lax.scan = scan
    module.jax.lax = lax
    captured["envs"] = []
    real_make = module.make

    def make(name, **kwargs):
        env = real_make(name, **kwargs)
        if "layout_name" in kwargs:
            captured["envs"].append(env)
        return env

    module.make = make
    sys.argv = meal_argv("ft", seed, steps_per_task, extra=["--anneal-lr"])
    with contextlib.suppress(_Stop):
        module.main()
    return captured


def _python_scan(f, init, xs, length, carries: list):
    """``lax.scan``'s result, computed by a Python loop (so each step's values exist);
    the carry before each step is appended to ``carries``."""
    import jax
    import jax.numpy as jnp

    n = length if xs is None else len(jax.tree.leaves(xs)[0])
    carry, ys = jax.tree.map(jnp.asarray, init), []
    for i in range(n):
        carries.append(carry)
        carry, y = f(carry, None if xs is None else jax.tree.map(lambda x, i=i: x[i], xs))
        ys.append(y)
    return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


def _tree_diff(ours, theirs) -> tuple[float, float]:
    """(max |ours - theirs|, max |theirs|) over two pytrees of the same structure."""
    import jax
    import numpy as np

    a = jax.tree.leaves(ours)
    b = jax.tree.leaves(theirs)
    assert len(a) == len(b), (len(a), len(b))
    diff = max(
        float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y))))
        for x, y in zip(a, b, strict=True)
    )
    scale = max(float(np.max(np.abs(np.asarray(y)))) for y in b)
    return diff, scale


def _norm(tree) -> float:
    import jax
    import numpy as np

    return float(
        np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree.leaves(tree)))
    )


def _appender(store: dict):
    def note(key: str, value: float) -> None:
        store.setdefault(key, []).append(value)

    return note


def _rel(ours, theirs, start) -> float:
    """Largest parameter difference relative to the largest change MEAL made."""
    diff, _ = _tree_diff(ours, theirs)
    moved, _ = _tree_diff(theirs, start)
    return diff / max(moved, 1e-30)


def compare_update(repo: Path, seed: int, report: Report, updates: int = 2) -> None:
    """MEAL's PPO updates against the JAX learner's and the torch learner's, from MEAL's
    parameters, optimizer state, rollout batch and RNG key: GAE; every minibatch step
    (loss, gradients, clipped Adam step from MEAL's state before it); the JAX learner's
    whole update (8 epochs x 8 minibatches, its own shuffling from MEAL's key)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from baselines_jax import IPPOConfig, JaxIPPO
    from baselines_jax import cl as jcl
    from baselines_jax.ppo import Transition, gae, ppo_loss

    print(f"PPO updates, MEAL-2 easy seed {seed}, MEAL's first {updates} updates:", flush=True)
    cap = capture_meal_updates(repo, seed, updates, STEPS_PER_TASK)
    cfg = IPPOConfig(cl_method="ft")
    learner = JaxIPPO(meal_suite(seed), cfg, [seed])
    report.check("updates per task (lr schedule)", learner.updates_per_task, 195)
    ppo = jax.jit(lambda *a: learner._ppo(*a, 0))
    torch_side = TorchStep(cfg, learner.obs_dim, learner.updates_per_task)

    @jax.jit
    def jax_step(params, opt_state, minibatch):
        traj, adv, tgt = minibatch

        def loss_fn(p):
            logits, values = learner.apply(p, traj.obs, 0)
            return ppo_loss(logits, values, Transition(*traj), adv, tgt, cfg)

        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        step, opt_state = learner.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, step), loss, grads

    for u, rec in enumerate(cap["updates"]):
        train_state, traj, adv, targets, _, rng, _ = rec["in"]
        last_obs = jnp.stack([rec["last_obs"][a] for a in ("agent_0", "agent_1")], axis=1)
        ours_adv, ours_tgt = gae(
            traj.done, traj.value, traj.reward, rec["last_val"], cfg.gamma, cfg.gae_lambda
        )
        report.check(f"update {u}: GAE advantages (JAX)", ours_adv, adv, 1e-5)
        report.check(f"update {u}: GAE targets (JAX)", ours_tgt, targets, 1e-5)
        t_adv, t_tgt = torch_gae(traj, rec["last_val"], cfg)
        report.check(f"update {u}: GAE advantages (torch SB3 buffer)", t_adv, adv, 1e-5)
        report.check(f"update {u}: GAE targets (torch SB3 buffer)", t_tgt, targets, 1e-5)
        _, last_val = learner.apply(train_state.params, learner._flat(last_obs), 0)
        report.check(f"update {u}: bootstrap values (JAX network)", last_val, rec["last_val"], 1e-5)
        per_step: dict[str, list[float]] = {}
        note = _appender(per_step)
        ends = [s[0] for s in rec["steps"][1:]] + [rec["steps_end"]]
        for (before, minibatch, (loss_info, grads, _)), after in zip(
            rec["steps"], ends, strict=True
        ):
            params, loss, our_grads = jax_step(before.params, before.opt_state, minibatch)
            scale = _tree_diff(grads, jax.tree.map(jnp.zeros_like, grads))[0]
            note("jax loss", abs(float(loss - loss_info[0])))
            note("jax grads", _tree_diff(our_grads, grads)[0] / scale)
            note("jax params", _rel(params, after.params, before.params))
            t_params, t_loss, t_grads = torch_side.step(before, minibatch)
            note("torch loss", abs(t_loss - float(loss_info[0])))
            note("torch grads", _tree_diff(t_grads, grads["params"])[0] / scale)
            note("torch params", _rel(t_params, after.params["params"], before.params["params"]))
        n = len(rec["steps"])
        for side in ("jax", "torch"):
            grads = np.asarray(per_step[f"{side} grads"])
            print(
                f"  update {u} ({side}): per-step relative gradient difference: median "
                f"{np.median(grads):.2g}, max {grads.max():.2g}; steps above 1e-5: "
                f"{int((grads > 1e-5).sum())} of {n} (float32 rounding at a non-smooth point,"
                " e.g. a ReLU at its kink)",
                flush=True,
            )
            report.check(
                f"update {u}: {n} minibatch losses ({side})",
                max(per_step[f"{side} loss"]),
                0.0,
                1e-5,
            )
            report.check(
                f"update {u}: median relative gradient difference over {n} minibatches ({side})",
                float(np.median(grads)),
                0.0,
                1e-5,
            )
            report.check(
                f"update {u}: median Adam step from MEAL's state, params vs MEAL's relative to "
                f"MEAL's step, over {n} minibatches ({side})",
                float(np.median(per_step[f"{side} params"])),
                0.0,
                1e-2,
            )
        cl_state = jcl.init_cl_state(train_state.params, cfg)
        params, _, rng_out, _ = ppo(
            train_state.params, train_state.opt_state, cl_state, Transition(*traj), last_obs, rng
        )
        out_params = rec["out"][0].params
        delta_ours = jax.tree.map(jnp.subtract, params, train_state.params)
        delta_meal = jax.tree.map(jnp.subtract, out_params, train_state.params)
        rel = _norm(jax.tree.map(jnp.subtract, delta_ours, delta_meal)) / _norm(delta_meal)
        report.check(
            f"update {u}: whole update (JAX learner's compiled epochs), "
            "|change ours - change MEAL| / |change MEAL|",
            rel,
            0.0,
            0.05,
        )
        report.check(f"update {u}: RNG key after the epochs", rng_out, rec["out"][5])


def torch_gae(traj, last_val, cfg):
    """Advantages and targets from SB3's ``RolloutBuffer`` (the torch learner's GAE) with
    MEAL's rewards, values and dones (done at step t = episode start at t + 1)."""
    import gymnasium as gym
    import numpy as np
    import torch as th
    from stable_baselines3.common.buffers import RolloutBuffer

    done = np.asarray(traj.done, np.float32)
    t_len, n = done.shape
    buf = RolloutBuffer(
        t_len,
        gym.spaces.Box(-1, 1, (1,)),
        gym.spaces.Discrete(2),
        gae_lambda=cfg.gae_lambda,
        gamma=cfg.gamma,
        n_envs=n,
    )
    for t in range(t_len):
        starts = np.zeros(n) if t == 0 else done[t - 1]
        buf.add(
            np.zeros((n, 1)),
            np.zeros((n, 1)),
            np.asarray(traj.reward[t]),
            starts,
            th.as_tensor(np.asarray(traj.value[t])),
            th.zeros(n),
        )
    buf.compute_returns_and_advantage(th.as_tensor(np.asarray(last_val)), done[-1])
    return buf.advantages, buf.returns


class TorchStep:
    """The torch learner's minibatch step (``ContinualPPO.minibatch_loss``, backward,
    global-norm clipping, torch Adam) on the MEAL preset's policy, started from a MEAL
    ``TrainState`` (parameters and Adam moments loaded)."""

    def __init__(self, cfg, obs_dim: int, updates_per_task: int):
        import gymnasium as gym
        import numpy as np
        import torch as th

        from baselines_sb3.learners import ContinualPPO
        from baselines_sb3.policies import ContinualPolicy

        self.cfg, self.updates = cfg, updates_per_task
        self.shape = (7, 7, 26) if obs_dim == 7 * 7 * 26 else (obs_dim,)
        space = gym.spaces.Dict(
            {"obs": gym.spaces.Box(0, 255, self.shape, np.uint8), "task_id": gym.spaces.Discrete(2)}
        )
        self.policy = ContinualPolicy(  # the MEAL preset's policy (presets._resolve_meal)
            space,
            gym.spaces.Discrete(6),
            lambda _: cfg.learning_rate,
            num_tasks=2,
            multi_head=True,
            task_id_input=True,
            trunk_layer_norm=True,
            net_arch=[128, 128],
            activation_fn=th.nn.ReLU,
            ortho_init=True,
            normalize_images=False,
            optimizer_kwargs={"eps": cfg.adam_eps, "fused": True},
        )
        learner = object.__new__(ContinualPPO)
        learner.policy, learner.ent_coef, learner.vf_coef = self.policy, cfg.ent_coef, cfg.vf_coef
        learner.value_loss, learner.advantage_normalization = "clipped-max", "minibatch-biased"
        self.learner = learner

    def step(self, state, minibatch):
        import numpy as np
        import torch as th

        from cl_suites.job.convert import load_into_torch, params_from_torch, torch_names

        policy, cfg = self.policy, self.cfg
        load_into_torch(policy, state.params)
        adam = state.opt_state[1][0]
        count = int(adam.count)
        named = dict(policy.named_parameters())
        for name, (module, leaf) in torch_names(policy).items():
            mu = np.asarray(adam.mu["params"][module][leaf])
            nu = np.asarray(adam.nu["params"][module][leaf])
            if leaf == "kernel":
                mu, nu = mu.T, nu.T
            policy.optimizer.state[named[name]] = {
                "step": th.tensor(float(count)),
                "exp_avg": th.tensor(np.ascontiguousarray(mu)),
                "exp_avg_sq": th.tensor(np.ascontiguousarray(nu)),
            }
        per_update = cfg.num_minibatches * cfg.update_epochs
        for group in policy.optimizer.param_groups:  # MEAL's schedule (the job sets it per update)
            group["lr"] = cfg.learning_rate * (1 - (count // per_update) / self.updates)
        traj, adv, tgt = minibatch
        data = type("Minibatch", (), {})()
        n = len(np.asarray(adv))
        data.observations = {
            "obs": th.as_tensor(np.asarray(traj.obs).reshape(n, *self.shape)),
            "task_id": th.zeros(n, dtype=th.long),
        }
        data.old_log_prob = th.as_tensor(np.asarray(traj.log_prob))
        data.old_values = th.as_tensor(np.asarray(traj.value))
        data.advantages = th.as_tensor(np.asarray(adv))
        data.returns = th.as_tensor(np.asarray(tgt))
        actions = th.as_tensor(np.asarray(traj.action)).long()
        loss = self.learner.minibatch_loss(data, actions, cfg.clip_eps, None)[0]
        policy.optimizer.zero_grad()
        loss.backward()
        grads = {}
        for name, (module, leaf) in torch_names(policy).items():
            g = named[name].grad.detach().numpy().copy()  # clipping works in place
            grads.setdefault(module, {})[leaf] = g.T if leaf == "kernel" else g
        th.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
        policy.optimizer.step()
        return params_from_torch(policy)["params"], float(loss), grads


def compare_cl(repo: Path, run: Path, seed: int, report: Report) -> None:
    """EWC, MAS and L2 on MEAL's trained parameters of ``run`` (after task 0: the anchor;
    after task 1: the current parameters): MEAL's importance (its ``compute_importance``
    on its env, 5 x 500 steps) folded in by MEAL's and by our JAX learner's state update
    gives the same penalty; our JAX learner's own importance estimate from fresh episodes
    on our env (other random numbers) is compared by scale and rank correlation."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from baselines_jax import IPPOConfig, JaxIPPO
    from baselines_jax import cl as jcl

    print(f"CL penalties and importances, MEAL's run {run.name}:", flush=True)
    envs = meal_training_envs(repo, seed, Path(tempfile.mkdtemp(prefix="meal-cl-")))
    mlp = import_meal(repo, "architectures.mlp")
    network = mlp.ActorCritic(6, "relu", 2, True, False, False, True, False, True)
    files = sorted(
        (f for f in run.glob("checkpoints/*/*/*/model_env_*") if not f.name.endswith(".json")),
        key=lambda f: int(f.name.rsplit("_", 1)[1]),
    )
    import flax.serialization

    full = [flax.serialization.msgpack_restore(f.read_bytes())["params"] for f in files]
    anchor, current = full[0], full[1]
    key = jax.random.PRNGKey(seed)
    methods = {
        "ewc": import_meal(repo, "cl_methods.EWC").EWC(mode="multi"),
        "mas": import_meal(repo, "cl_methods.MAS").MAS(),
        "l2": import_meal(repo, "cl_methods.L2").L2(),
    }
    coefs = {"ewc": 1e11, "mas": 1e9, "l2": 1e7}
    suite = meal_suite(seed)
    for name, method in methods.items():
        state = method.init_state(anchor, False, False)
        importance = None
        if name != "l2":
            importance = method.compute_importance(
                anchor, envs[0], network, 0, key, False, 5, 500, False
            )
        meal_state = method.update_state(state, anchor, importance)
        meal_penalty = float(method.penalty(current, meal_state, coefs[name]))
        cfg = IPPOConfig(cl_method=name)
        ours_params = lambda tree: {"params": tree["params"]}  # noqa: E731
        learner = JaxIPPO(suite, cfg, [seed])
        ours_state = jcl.init_cl_state(ours_params(anchor), cfg)
        new = None if importance is None else ours_params(importance)
        ours_state = jcl.update(ours_state, ours_params(anchor), new, cfg)
        ours_penalty = float(jcl.penalty(ours_params(current), ours_state, learner.mask, cfg))
        report.check(
            f"{name}: penalty from MEAL's importance (JAX learner)",
            ours_penalty,
            meal_penalty,
            1e-4,
        )
        if importance is None:
            continue
        stacked = jax.tree.map(lambda x: jnp.asarray(x)[None], ours_params(anchor))
        estimate = learner._fisher if name == "ewc" else learner._mas
        ours_imp = jax.jit(lambda p, k, f=estimate: f(p, k, 0))(stacked, key[None])
        mine = np.concatenate([np.ravel(x[0]) for x in jax.tree.leaves(ours_imp)])
        theirs = np.concatenate([np.ravel(x) for x in jax.tree.leaves(ours_params(importance))])
        ratio = mine.sum() / theirs.sum()
        rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
        corr = float(np.corrcoef(rank(mine), rank(theirs))[0, 1])
        print(
            f"  {name}: our estimator / MEAL's, sum over parameters {ratio:.3f}; Spearman "
            f"correlation {corr:.3f} (fresh episodes: other random numbers)",
            flush=True,
        )
        report.check(f"{name}: importance scale (sum ours / sum MEAL's) - 1", ratio - 1, 0.0, 0.25)


def compare_bounds(repo: Path, seeds: int, episode_len: int = 400) -> None:
    """MEAL's ``estimate_max_soup`` (20 points a soup) against ``20 x max_soups`` on the
    paper generator's kitchens (2 agents), per difficulty."""
    from cl_suites.meal.layouts import PAPER_LEVELS, REWARD_PER_SOUP, generate, max_soups

    upper = import_meal(repo, "jax_marl.environments.overcooked.upper_bound")
    for difficulty in PAPER_LEVELS:
        agree, zero = 0, []
        for seed in range(seeds):
            layout = generate(difficulty, seed, 2, generator="paper")
            theirs = int(upper.estimate_max_soup(layout, episode_len, n_agents=2))
            ours = REWARD_PER_SOUP * max_soups(layout, episode_len, 2)
            agree += theirs == ours
            if theirs == 0:
                zero.append(seed)
        print(f"{difficulty}: {agree}/{seeds} kitchens agree; MEAL's bound is 0 on seeds {zero}")


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
    ev.add_argument("--meal057-repo", type=Path, help="also the knobs against MEAL 057f862 here")
    to = sub.add_parser("train-ours", help="our JAX learner on MEAL's kitchens")
    to.add_argument("--cl-method", choices=("ft", "ewc", "mas", "l2"), required=True)
    to.add_argument("--seed", type=int, required=True)
    to.add_argument("--out", type=Path, required=True)
    to.add_argument("--steps-per-task", type=int, default=STEPS_PER_TASK)
    clp = sub.add_parser("cl", help="EWC/MAS/L2 penalties and importances on a MEAL run")
    clp.add_argument("run", type=Path, help="a train-meal --out directory (2 tasks)")
    clp.add_argument("--seed", type=int, default=1)
    sc = sub.add_parser("score", help="score saved per-task policies of both sides")
    sc.add_argument("runs", type=Path, nargs="+", help="run directories (train-meal/-ours --out)")
    sc.add_argument("--episodes", type=int, default=10)
    sc.add_argument("--json", type=Path, help="write the rows here")
    bd = sub.add_parser("bounds", help="our score bound against MEAL's estimate_max_soup")
    bd.add_argument("--seeds", type=int, default=200, help="seeds 0..N-1 per difficulty")
    mp = sub.add_parser("mappo", help="MEAL 057f862's MAPPO update against ours, same inputs")
    mp.add_argument("--meal057-repo", type=Path, help="a checkout of TTomilin/MEAL at 057f862")
    mp.add_argument("--seed", type=int, default=1)
    mp.add_argument("--write", action="store_true", help="write the pins in tests/golden")
    up = sub.add_parser("update", help="MEAL's PPO updates against ours, same inputs")
    up.add_argument("--seed", type=int, default=1)
    up.add_argument("--updates", type=int, default=2)
    args = parser.parse_args()
    if args.mode == "score":
        score_runs(args.runs, args.episodes, args.json)
        return
    if args.mode == "mappo":
        from benchmarks.parity import meal_mappo_reference as mappo

        try:
            repo = mappo.check_meal057_repo(args.meal057_repo)
        except ValueError as err:
            parser.error(str(err))
        failed = mappo.run(repo.resolve(), args.seed, args.write)
        print("FAILED: " + "; ".join(failed) if failed else "all checks agree")
        sys.exit(1 if failed else 0)
    if args.mode == "train-ours":
        train_ours(args.cl_method, args.seed, args.out.resolve(), args.steps_per_task)
        return
    try:
        repo = check_meal_repo(args.meal_repo)
    except ValueError as err:
        parser.error(str(err))
    if args.mode == "bounds":
        compare_bounds(repo.resolve(), args.seeds)
        return
    if args.mode == "train-meal":
        train_meal(
            repo.resolve(), args.cl_method, args.seed, args.out.resolve(), args.steps_per_task
        )
        return
    report = Report()
    if args.mode == "env":
        from benchmarks.parity import meal_knobs_cases, meal_knobs_reference

        try:
            knobs = args.meal057_repo and meal_knobs_reference.check_repo(args.meal057_repo)
        except ValueError as err:
            parser.error(f"--meal057-repo: {err}")
        for seed in args.seeds:
            compare_env(repo.resolve(), seed, report)
        if knobs:  # Overcooked's knobs against MEAL 057f862
            _, failed = meal_knobs_reference.compare(knobs, list(meal_knobs_cases.CASES))
            report.rows += [(f"knob {name}", float("inf"), -1.0) for name in failed]
    elif args.mode == "cl":
        compare_cl(repo.resolve(), args.run.resolve(), args.seed, report)
    elif args.mode == "update":
        compare_update(repo.resolve(), args.seed, report, args.updates)
    print("FAILED: " + ", ".join(report.failed) if report.failed else "all checks agree")
    sys.exit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
