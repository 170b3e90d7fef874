"""MEAL 057f862's MAPPO update beside ``baselines_jax.JaxMAPPO``'s, from the same
parameters, Adam state, rollout batch, CL state and key.

MEAL's ``MAPPO.build_train_on_environment`` runs its first update on task 0 of a MEAL-2
easy sequence eagerly (its ``lax.scan`` of updates, epochs and minibatches as Python
loops, so the values between them can be read); its CL state is a drawn one (anchor
= the parameters moved by a small noise, importance drawn positive) so that the penalty
is not zero. For every minibatch step: the loss, the gradient and the Adam step from
MEAL's state before it, ours from the same inputs; then our whole update (our shuffles
from MEAL's key) against MEAL's, and the key after it. MEAL's parameter names map onto
ours (``actor_Dense_1`` -> ``actor_dense1``, ..., ``actor_Dense_multi_head`` ->
``actor_head``), its rows ``(obs, global_state, agent_id)`` onto ``central_rows``'.

    JAX_PLATFORMS=cpu python -m benchmarks.parity.parity_meal mappo \\
        --meal057-repo /tmp/refs/meal057 --write

writes ``tests/golden/meal_mappo_reference.json`` (the figures; the test
``tests/baselines/test_jax_mappo.py`` pins that every check held and replays the
pinned minibatch through our loss).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "meal_mappo_reference.json"
METHODS = ("ft", "ewc", "l2")
DRAWN = {"ft": (0.05, 1.0), "ewc": (0.05, 1e-9), "l2": (1e-4, 1.0)}
"""method -> (the anchor's noise std, the importance's scale): penalties near the PPO
loss's size (EWC's lambda 1e11, L2's 1e7), so both parts of the gradient show."""
MINIBATCH = GOLDEN.with_name("meal_mappo_minibatch.npz")
"""EWC's first minibatch: our parameters, CL state and rows, MEAL's loss and gradient."""
TINY = dict(num_envs=4, num_steps=16, num_minibatches=4, update_epochs=2, hidden_size=32)


class _Stop(Exception):
    pass


def our_name(meal_name: str) -> str:
    """MEAL's layer name -> ours: ``actor_Dense_1`` -> ``actor_dense1``, ``critic_LayerNorm_2``
    -> ``critic_ln2``, ``actor_Dense_multi_head`` / ``_single_head`` -> ``actor_head``."""
    m = re.fullmatch(r"(actor|critic)_(Dense|LayerNorm)_(\w+)", meal_name)
    if m is None:
        raise ValueError(f"not a MEAL decoupled-MLP layer name: {meal_name!r}")
    trunk, kind, suffix = m.groups()
    if suffix.endswith("_head"):
        return f"{trunk}_head"
    return f"{trunk}_{'dense' if kind == 'Dense' else 'ln'}{suffix}"


def to_ours(tree: Any) -> Any:
    """A MEAL ``{'actor': {'params': ...}, 'critic': {'params': ...}}`` tree (parameters,
    gradients, Adam moments, masks) as ours ``{'params': {...}}``; other nodes mapped
    inside (an optax state's tuples)."""
    if isinstance(tree, dict) and set(tree) == {"actor", "critic"}:
        out = {}
        for part in ("actor", "critic"):
            for name, leaf in tree[part]["params"].items():
                out[our_name(name)] = leaf
        return {"params": out}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(to_ours(x) for x in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(to_ours(x) for x in tree)
    if hasattr(tree, "items"):  # FrozenDict
        return to_ours(dict(tree))
    return tree


def _python_scan(f, init, xs, length, carries: list):
    n = length if xs is None else len(jax.tree.leaves(xs)[0])
    carry, ys = init, []
    for i in range(n):
        carries.append(carry)
        carry, y = f(carry, None if xs is None else jax.tree.map(lambda x, i=i: x[i], xs))
        ys.append(y)
    return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


def capture(method: str, seed: int) -> dict:
    """MEAL's first MAPPO update of task 0 with ``method``'s drawn CL state."""
    from experiments.algo_common import resolve_reg_coef
    from experiments.algos.mappo import MAPPO
    from experiments.algos.mappo import MAPPOConfig as MealConfig
    from experiments.continual.base import RegCLState
    from experiments.utils import build_reg_weights

    cfg = MealConfig(
        cl_method=method,
        seq_length=2,
        seed=seed,
        steps_per_task=TINY["num_envs"] * TINY["num_steps"] * 4,
        evaluation=False,
        record_video=False,
        use_wandb=False,
        **TINY,
    )
    resolve_reg_coef(cfg)
    algo = MAPPO.__new__(MAPPO)  # its __init__ asks for a GPU; the same fields here
    algo.cfg, algo.rng, algo.cl = cfg, jax.random.PRNGKey(seed), None
    algo.cl = algo.build_cl_method()
    algo.setup_envs()
    algo.init_network()
    algo.writer = None
    params = algo.train_state.params
    k_anchor, k_imp, k_train = jax.random.split(jax.random.PRNGKey(seed + 100), 3)
    leaves, tdef = jax.tree.flatten(params)
    shift, scale = DRAWN[method]
    noise = jax.random.split(k_anchor, len(leaves))
    anchor = tdef.unflatten(
        [x + shift * jax.random.normal(k, x.shape) for x, k in zip(leaves, noise, strict=True)]
    )
    imp_keys = jax.random.split(k_imp, len(leaves))
    importance = tdef.unflatten(
        [scale * jax.random.uniform(k, x.shape) for x, k in zip(leaves, imp_keys, strict=True)]
    )
    mask = build_reg_weights(params, cfg.regularize_critic, not cfg.use_multihead)
    cl_state = RegCLState(old_params=anchor, importance=importance, mask=mask)
    captured: dict = {"steps": []}
    real_scan, real_jit = jax.lax.scan, jax.jit

    def scan(f, init=None, xs=None, length=None, **kwargs):
        name = getattr(f, "__name__", "")
        if name == "_update_step":
            f(init, None)
            raise _Stop
        if name == "_update_epoch":
            captured["epochs_in"] = init
            carry, out = _python_scan(f, init, xs, length, [])
            captured["epochs_out"] = carry
            raise _Stop
        if name == "_update_minbatch":
            carries: list = []
            carry, out = _python_scan(f, init, xs, length, carries)
            for i, before in enumerate(carries):
                mb = jax.tree.map(lambda x, i=i: x[i], xs)
                captured["steps"].append((before[0], mb, jax.tree.map(lambda y, i=i: y[i], out)))
            captured["steps_end"] = carry[0]
            return carry, out
        if name == "_env_step":
            out = real_scan(f, init, xs, length, **kwargs)
            captured["last_obs"] = out[0][2]
            return out
        return real_scan(f, init, xs, length, **kwargs)

    jax.lax.scan = scan
    jax.jit = lambda f, *a, **k: f
    try:
        train_on_environment = algo.build_train_on_environment()
        with contextlib.suppress(_Stop):
            train_on_environment(k_train, algo.train_state, cl_state, 0)
    finally:
        jax.lax.scan, jax.jit = real_scan, real_jit
    captured.update(cfg=cfg, cl_state=cl_state, mask=mask, agents=algo.agents)
    return captured


def our_rows(obs, global_state, agent_id, num_agents: int):
    """MEAL's rows (local obs, global state, agent id) as ``central_rows``'."""
    ids = jax.nn.one_hot(agent_id, num_agents, dtype=obs.dtype)
    return jnp.concatenate([obs, ids, global_state], axis=-1)


def compare(method: str, seed: int) -> dict:
    """The checks of one method: ``{name: [ours-vs-MEAL figure, tolerance]}``."""
    import optax

    from baselines_jax import cl as jcl
    from baselines_jax.mappo import JaxMAPPO, MAPPOConfig
    from baselines_jax.ppo import Transition, ppo_loss
    from cl_suites.meal.suite import build_suite

    cap = capture(method, seed)
    mc = cap["cfg"]
    cfg = MAPPOConfig(
        cl_method=method,
        num_envs=mc.num_envs,
        num_steps=mc.num_steps,
        num_minibatches=mc.num_minibatches,
        update_epochs=mc.update_epochs,
        hidden_sizes=(mc.hidden_size,) * mc.num_layers,
    )
    suite = build_suite("MEAL-2", steps_per_task=int(mc.steps_per_task), seed=seed)
    learner = JaxMAPPO(suite, cfg, [seed])
    n = learner.num_agents
    checks: dict[str, list[float]] = {}

    def check(name: str, value: float, tol: float) -> None:
        checks[name] = [float(value), tol]
        print(f"  {'ok ' if value <= tol else 'BAD'} {name}: {value:.3g} (tolerance {tol:g})")

    importance = to_ours(cap["cl_state"].importance)
    if method == "l2":  # MEAL's L2 reads no importance; ours holds ones (init_cl_state)
        importance = jax.tree.map(jnp.ones_like, importance)
    cl_state = jcl.CLState(to_ours(cap["cl_state"].old_params), importance)
    our_mask = learner.mask
    mask_diff = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(
            jax.tree.leaves(our_mask), jax.tree.leaves(to_ours(cap["mask"])), strict=True
        )
    )
    check("regularisation mask (actor and heads, no critic)", mask_diff, 0.0)

    def loss_fn(p, rows, traj, adv, tgt):
        logits, values = learner.apply(p, rows, 0)
        loss, aux = ppo_loss(logits, values, traj, adv, tgt, cfg)
        return loss + learner.method.penalty(p, cl_state), aux

    @jax.jit
    def step(params, opt_state, rows, traj, adv, tgt):
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rows, traj, adv, tgt)
        updates, opt_state = learner.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), loss, grads

    first = cap["steps"][0]
    pinned = {
        "params": to_ours(first[0].params),
        "anchor": cl_state.anchor,
        "importance": cl_state.importance,
        "rows": our_rows(first[1][0].obs, first[1][0].global_state, first[1][0].agent_id, n),
        "traj": first[1][0]._asdict(),
        "advantages": first[1][1],
        "targets": first[1][2],
        "meal_loss": first[2][0][0],
        "meal_grads": to_ours(first[2][1]),
    }
    losses, grads_rel, params_rel = [], [], []
    ends = [s[0] for s in cap["steps"][1:]] + [cap["steps_end"]]
    for (before, (traj, adv, tgt), (loss_info, grads, _)), after in zip(
        cap["steps"], ends, strict=True
    ):
        rows = our_rows(traj.obs, traj.global_state, traj.agent_id, n)
        ours_traj = Transition(traj.done, traj.action, traj.value, traj.reward, traj.log_prob, rows)
        p0, o0 = to_ours(before.params), to_ours(before.opt_state)
        p1, loss, g = step(p0, o0, rows, ours_traj, adv, tgt)
        mg = to_ours(grads)
        scale = max(float(np.abs(np.asarray(x)).max()) for x in jax.tree.leaves(mg))
        losses.append(abs(float(loss) - float(loss_info[0])))
        grads_rel.append(
            max(
                float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(mg), strict=True)
            )
            / scale
        )
        moved = max(
            float(np.abs(np.asarray(a) - np.asarray(b)).max())
            for a, b in zip(
                jax.tree.leaves(to_ours(after.params)), jax.tree.leaves(p0), strict=True
            )
        )
        params_rel.append(
            max(
                float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(
                    jax.tree.leaves(p1), jax.tree.leaves(to_ours(after.params)), strict=True
                )
            )
            / moved
        )
    k = len(losses)
    check(f"{k} minibatch losses, max |ours - MEAL|", max(losses), 1e-5)
    check(f"{k} minibatch gradients, max relative difference", max(grads_rel), 1e-4)
    check(f"{k} Adam steps from MEAL's state, max difference / MEAL's step", max(params_rel), 1e-3)

    # the whole update: our epochs (GAE, shuffles, minibatches) from MEAL's inputs
    train_state, traj, _, _, _, rng, _ = cap["epochs_in"]
    rows = our_rows(traj.obs, traj.global_state, traj.agent_id, n)
    ours_traj = Transition(traj.done, traj.action, traj.value, traj.reward, traj.log_prob, rows)
    last = cap["last_obs"]
    last_obs = jnp.stack([last[a] for a in cap["agents"]], axis=1)  # (M, n, H, W, C)
    epochs = jax.jit(
        lambda p, o, c, t, lo, r: learner._epochs(p, o, c, t, lo, r, 0, None, None, None)
    )
    params, _, rng_out, *_ = epochs(
        to_ours(train_state.params),
        to_ours(train_state.opt_state),
        cl_state,
        ours_traj,
        last_obs,
        rng,
    )
    out = cap["epochs_out"]
    start = to_ours(train_state.params)
    delta_ours = jax.tree.map(jnp.subtract, params, start)
    delta_meal = jax.tree.map(jnp.subtract, to_ours(out[0].params), start)

    def norm(tree: Any) -> float:
        leaves = jax.tree.leaves(tree)
        return float(np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in leaves)))

    rel = norm(jax.tree.map(jnp.subtract, delta_ours, delta_meal)) / norm(delta_meal)
    check("whole update, |change ours - change MEAL| / |change MEAL|", rel, 1e-3)
    same_key = float(np.any(np.asarray(rng_out) != np.asarray(out[5])))
    check("key after the update (0: the same)", same_key, 0.0)
    return checks, pinned


def check_meal057_repo(repo: Path | None) -> Path:
    """The checkout path of MEAL at 057f862, or a ValueError naming what is missing."""
    if repo is None or not (Path(repo) / "experiments" / "algos" / "mappo.py").exists():
        raise ValueError(
            "--meal057-repo must be a checkout of TTomilin/MEAL at 057f862 (with "
            f"experiments/algos/mappo.py); got {repo!r}"
        )
    return Path(repo)


def run(repo: Path, seed: int, write: bool) -> list[str]:
    """Every method's checks with MEAL's code imported from ``repo``; with ``write``, the
    pins. Returns the checks that failed (``"method: check"``)."""
    import sys

    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    results = {}
    for method in METHODS:
        print(f"MAPPO {method}, MEAL 057f862 vs ours, seed {seed}:", flush=True)
        results[method], pinned = compare(method, seed)
        if write and method == "ewc":
            flat = jax.tree_util.tree_flatten_with_path(pinned)[0]
            arrays = {jax.tree_util.keystr(k): np.asarray(v) for k, v in flat}
            np.savez_compressed(MINIBATCH, **arrays)
    if write:
        GOLDEN.write_text(json.dumps({"seed": seed, "tiny": TINY, "checks": results}, indent=1))
    return [f"{m}: {c}" for m, cs in results.items() for c, (v, tol) in cs.items() if v > tol]
