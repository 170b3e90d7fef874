"""Our JAX CL methods against MEAL's own functions on the same inputs, and the pins.

Imports MEAL's continual-learning code from a checkout of TTomilin/MEAL at 057f862 (nothing
of it is copied into this project; ``--meal-repo``, default ``/tmp/refs/meal057``) and runs
it on the cases of ``benchmarks/parity/meal_cl_cases.py``:

* ``experiments/continual/agem.py``: ``init_agem_memory`` and ``update_agem_memory`` (the
  memory after several stores), ``sample_task_slot``, ``compute_memory_gradient``;
* ``experiments/algos/on_policy.py`` ``OnPolicyAlgo.apply_cl_gradient_step`` (AGEM's
  projection, ER-ACE's addition), once with an optimizer that only records the gradient it
  is given (the gradient MEAL hands to its optimizer) and once with MEAL's
  ``clip_by_global_norm`` + Adam (eps 1e-5), for the parameters after one minibatch step;
* ``experiments/continual/er_ace.py`` ``compute_er_ace_gradient``.

MEAL's functions call ``network.apply(params, obs, env_idx=t) -> (pi, value, dormant)``:
:class:`MealApi` gives our network (``baselines_jax.network.ActorCritic``, the same
parameters) that interface, so both sides compute on identical weights; MEAL's memory
keeps float32 observations, ours uint8 (compared as numbers).

``--only SECTION`` runs one section of ``meal_cl_cases.SECTIONS`` (``agem``, ``er-ace``;
a method adds its own section, its cases and a ``MEAL_CASES`` entry per case). ``--write``
stores MEAL's values of the cases run into ``tests/golden/meal_cl_reference.json`` (other
sections' pins are kept), which ``tests/baselines/test_jax_cl_replay.py::
test_reference_pins`` checks ours against::

    python benchmarks/parity/meal_cl_reference.py --write
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from benchmarks.parity import meal_cl_cases as C  # noqa: E402

PINS = ROOT / "tests" / "golden" / "meal_cl_reference.json"


def load_meal(repo: Path) -> dict[str, Any]:
    """MEAL's CL modules."""
    if not (repo / "experiments" / "continual" / "agem.py").exists():
        raise SystemExit(f"--meal-repo must be a checkout of TTomilin/MEAL at 057f862: {repo}")
    sys.path.insert(0, str(repo))
    names = {
        "agem": "experiments.continual.agem",
        "er_ace": "experiments.continual.er_ace",
        "on_policy": "experiments.algos.on_policy",
    }
    return {k: importlib.import_module(v) for k, v in names.items()}


class MealApi:
    """Our network with MEAL's ``apply(params, obs, env_idx=t) -> (pi, value, dormant)``."""

    def __init__(self, net: Any):
        self.net = net

    def apply(self, params: Any, obs: jax.Array, env_idx: Any = 0):
        import distrax

        logits, values = self.net.apply(params, obs, env_idx)
        return distrax.Categorical(logits=logits), values, jnp.float32(0.0)


def recorder() -> optax.GradientTransformation:
    """An optimizer whose state is the last gradient it was given (no step)."""
    return optax.GradientTransformation(
        lambda p: jax.tree.map(jnp.zeros_like, p),
        lambda g, state, params=None: (jax.tree.map(jnp.zeros_like, g), g),
    )


def meal_tx() -> optax.GradientTransformation:
    """MEAL's ``tx`` (``experiments/algos/ippo.py``): clip, then Adam with eps 1e-5."""
    c = C.CONFIG
    return optax.chain(
        optax.clip_by_global_norm(c.max_grad_norm), optax.adam(c.learning_rate, eps=1e-5)
    )


def meal_memory(meal: dict) -> Any:
    """MEAL's memory after :data:`~C.STORES` (its ``init_agem_memory`` and
    ``update_agem_memory``, float32 observations)."""
    A = meal["agem"]
    mem = A.init_agem_memory(C.CONFIG.agem_memory_size, (C.OBS_DIM,), max_tasks=C.NUM_TASKS)
    for i, task in enumerate(C.STORES):
        traj, adv, tgt = C.rollout(i)
        traj = jax.tree.map(jnp.asarray, traj)._replace(obs=jnp.asarray(traj.obs, jnp.float32))
        mem, _ = A.update_agem_memory(
            C.CONFIG.agem_sample_size, task, jnp.asarray(adv), mem, C.store_key(i),
            jnp.asarray(tgt), traj,
        )  # fmt: skip
    return mem


def cl_step(meal: dict, method: str, grads: Any, tx: optax.GradientTransformation):
    """MEAL's ``apply_cl_gradient_step`` for ``method`` (``"agem"``, ``"er_ace"``) on the
    case's memory, current task and key: ``(train state after, stats)``."""
    from flax.training.train_state import TrainState

    c = C.CONFIG
    cfg = types.SimpleNamespace(
        cl_method=method,
        agem_sample_size=c.agem_sample_size,
        clip_eps=c.clip_eps,
        ent_coef=c.ent_coef,
        er_ace_coef=c.er_ace_coef,
    )
    algo = types.SimpleNamespace(cfg=cfg, cl=None)
    state = TrainState.create(apply_fn=None, params=C.params(), tx=tx)
    state, _, stats = meal["on_policy"].OnPolicyAlgo.apply_cl_gradient_step(
        algo, MealApi(C.network()), c.vf_coef, meal_memory(meal), C.CURRENT, state, grads,
        C.STEP_KEY, is_packnet=False,
    )  # fmt: skip
    return state, stats


AGEM_STATS = {
    "agem/agem_is_proj": "agem/is_proj",
    "agem/agem_dot_g": "agem/dot_g",
    "agem/agem_alpha": "agem/alpha",
    "agem/agem_ppo_grad_norm": "agem/ppo_grad_norm",
    "agem/agem_mem_grad_norm": "agem/mem_grad_norm",
    "agem/agem_projected_grad_norm": "agem/projected_grad_norm",
    "agem/agem_final_grad_norm": "agem/final_grad_norm",
    "agem/memory_fullness_pct": "agem/memory_fullness_pct",
    "agem/ppo_total_loss": "agem/mem_total_loss",
    "agem/ppo_value_loss": "agem/mem_value_loss",
    "agem/ppo_actor_loss": "agem/mem_actor_loss",
    "agem/ppo_entropy": "agem/mem_entropy",
}
"""MEAL's AGEM statistics -> ours (MEAL's ``mem_grad_norm_raw`` is ``agem_mem_grad_norm``)."""


def _stats(stats: dict, names: dict[str, str] | None = None) -> dict[str, np.float64]:
    names = names or {k: k for k in stats}
    return {ours: np.float64(stats[theirs]) for theirs, ours in names.items()}


def meal_memory_case(meal: dict, case: str) -> dict:
    return C.memory_values(meal_memory(meal))


def meal_slots_case(meal: dict, case: str) -> dict:
    mem, out = meal_memory(meal), {}
    for t in range(C.NUM_TASKS):
        rows = meal["agem"].sample_task_slot(mem, t, C.SLOT_SAMPLES, C.slot_key(t))
        fields = ("obs", "actions", "log_probs", "advantages", "targets", "values")
        out.update(
            {f"task{t}/{k}": np.asarray(v, np.float64) for k, v in zip(fields, rows, strict=True)}
        )
        out[f"task{t}/ptrs"] = np.float64(mem.ptrs[t])
        out[f"task{t}/sizes"] = np.float64(mem.sizes[t])
    return out


def meal_memory_gradient_case(meal: dict, case: str) -> dict:
    t = int(case[-1])
    c, A = C.CONFIG, meal["agem"]
    obs, act, logp, adv, tgt, val = A.sample_task_slot(
        meal_memory(meal), t, c.agem_sample_size // C.NUM_TASKS, C.slot_key(t)
    )
    grads, stats = A.compute_memory_gradient(
        MealApi(C.network()), C.params(), c.clip_eps, c.vf_coef, c.ent_coef,
        obs, act, adv, logp, tgt, val, env_idx=t,
    )  # fmt: skip
    names = {f"agem/ppo_{k}": k for k in ("total_loss", "value_loss", "actor_loss", "entropy")}
    return {"grads": C.flat(grads), **_stats(stats, names)}


def meal_agem_case(meal: dict, case: str) -> dict:
    update = case == "agem_update"
    state, stats = cl_step(meal, "agem", C.ppo_input(case), meal_tx() if update else recorder())
    out = {"params": C.flat(state.params)} if update else {"grads": C.flat(state.opt_state)}
    return {**out, **_stats(stats, AGEM_STATS)}


def meal_er_ace_case(meal: dict, case: str) -> dict:
    if case == "er_ace_gradient":
        mem = meal_memory(meal)
        _, sub = jax.random.split(C.STEP_KEY)
        grads, _ = meal["er_ace"].compute_er_ace_gradient(
            MealApi(C.network()), C.params(), mem, C.CONFIG.agem_sample_size, sub,
            mem.sizes.at[C.CURRENT].set(0),
        )  # fmt: skip
        return {"grads": C.flat(grads)}
    update = case == "er_ace_update"
    state, stats = cl_step(meal, "er_ace", C.ppo_gradient(), meal_tx() if update else recorder())
    out = {"params": C.flat(state.params)} if update else {"grads": C.flat(state.opt_state)}
    return {**out, **_stats(stats)}


MEAL_CASES: dict[str, Callable[[dict, str], dict]] = {
    "memory_after_stores": meal_memory_case,
    "sampled_slots": meal_slots_case,
    "memory_gradient_task0": meal_memory_gradient_case,
    "memory_gradient_task1": meal_memory_gradient_case,
    "agem_projection_active": meal_agem_case,
    "agem_projection_inactive": meal_agem_case,
    "agem_projection_clipped": meal_agem_case,
    "agem_update": meal_agem_case,
    "er_ace_gradient": meal_er_ace_case,
    "er_ace_step": meal_er_ace_case,
    "er_ace_update": meal_er_ace_case,
}
"""Case -> MEAL's values (``meal_cl_cases.SECTIONS`` names the cases of each section)."""


def to_json(values: dict) -> dict:
    return {k: np.asarray(v, np.float64).tolist() for k, v in values.items()}


def pins_text(pins: dict) -> str:
    """The pins as JSON, one line per case."""
    cases = ",\n".join(
        f"  {json.dumps(name)}: {json.dumps(entry)}"
        for name, entry in sorted(pins["cases"].items())
    )
    return f'{{\n "meal": {json.dumps(pins["meal"])},\n "cases": {{\n{cases}\n }}\n}}\n'


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--meal-repo", type=Path, default=Path("/tmp/refs/meal057"))
    p.add_argument("--only", choices=sorted(C.SECTIONS), help="one section's cases")
    p.add_argument("--write", action="store_true", help=f"write the pins to {PINS}")
    args = p.parse_args(argv)
    meal = load_meal(args.meal_repo)
    sections = [args.only] if args.only else list(C.SECTIONS)
    pins = json.loads(PINS.read_text()) if PINS.exists() else {}
    pins.setdefault("meal", "TTomilin/MEAL@057f862")
    pins.setdefault("cases", {})
    ok = True
    print(f"{'section':8s} {'case':26s} {'max |d|':>9s} {'max rel':>9s}  tolerance   result")
    for section in sections:
        for case in C.SECTIONS[section]:
            theirs = MEAL_CASES[case](meal, case)
            mine = C.our_values(case)
            d_abs, d_rel, exact = C.compare(mine, theirs)
            good = C.within(case, mine, theirs)
            ok = ok and good
            tol = C.TOLERANCE.get(case, C.FLOAT_TOLERANCE)
            told = "bit for bit" if tol is None else f"{tol[0]:.0e}/{tol[1]:.0e}"
            result = ("exact" if exact else "ok") if good else "FAIL"
            print(f"{section:8s} {case:26s} {d_abs:9.2e} {d_rel:9.2e}  {told:11s} {result}")
            pins["cases"][case] = {"section": section, "meal": to_json(theirs)}
    if args.write:
        PINS.write_text(pins_text(pins))
        print(f"pins written to {PINS}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
