"""Our MEAL 2026 metrics against MEAL's own result scripts on the same logs, and the pins.

Imports MEAL's metric code from a checkout of TTomilin/MEAL at 057f862 (nothing of it is
copied into this project; ``--meal-repo``, default ``/tmp/refs/meal057``) and runs it on
the cases of ``benchmarks/parity/meal_metrics_cases.py``, written in MEAL's downloaded-data
layout (``<algo>/<method>/level_1/agents_2/generate_<N>/seed_<s>/{i}_soup.json``,
``training_soup.json``, ``{i}_heterogeneity.json`` and the single-task references'
``single/.../{i}_training_soup.json``):

* ``numerical/results_table.py`` ``compute_metrics``: A, F (``weighted``) and FT, with
  their ``mean ± 1.96 SE`` over seeds;
* ``numerical/algorithm_comparison.py`` ``compute_metrics``: F (``peak_final``);
* ``numerical/heterogeneity_table.py`` ``load_method_het``: the heterogeneity index;
* ``numerical/coordination_forgetting_table.py`` ``seed_metrics``: CF, PF, Lead;
* ``evaluation.py`` ``make_eval_fn``: the role-heterogeneity index of one evaluation, on
  scripted envs whose agents play fixed actions (the same actions our core ``Evaluator``
  plays in ``meal_metrics_cases.evaluator_heterogeneity``);
* ``coordination_matrix.py`` ``coordination_retention``.

With ``--cl-runs`` and ``--reference-runs`` (``cl-suites run`` directories: continual MEAL
runs and their MEAL-1 references) the ``real`` case is added. ``--write`` stores MEAL's
values (and the real case's arrays) in ``tests/golden/meal_metrics_reference.json``, which
``tests/metrics/test_meal_2026.py::test_reference_pins`` checks ours against::

    python benchmarks/parity/meal_metrics_reference.py --cl-runs runs/cl-ft \\
        --reference-runs runs/ref-0 runs/ref-1 runs/ref-2 --write
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.parity import meal_metrics_cases as C  # noqa: E402

PINS = ROOT / "tests" / "golden" / "meal_metrics_reference.json"
METHOD = "FT"
TOLERANCE = 1e-6


def load_meal(repo: Path) -> dict:
    """MEAL's result-script modules (matplotlib on its non-interactive backend)."""
    if not (repo / "experiments" / "results" / "plotting" / "utils" / "metrics.py").exists():
        raise SystemExit(f"--meal-repo must be a checkout of TTomilin/MEAL at 057f862: {repo}")
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(repo))
    names = {
        "metrics": "experiments.results.plotting.utils.metrics",
        "results_table": "experiments.results.numerical.results_table",
        "algorithm_comparison": "experiments.results.numerical.algorithm_comparison",
        "heterogeneity_table": "experiments.results.numerical.heterogeneity_table",
        "coordination_forgetting": "experiments.results.numerical.coordination_forgetting_table",
        "coordination_matrix": "experiments.results.coordination_matrix",
        "evaluation": "experiments.evaluation",
    }
    return {k: importlib.import_module(v) for k, v in names.items()}


def _dump(path: Path, values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([None if not np.isfinite(v) else float(v) for v in values]))


def write_layout(case: dict, root: Path) -> None:
    """The case in MEAL's downloaded-data layout under ``root``."""
    n = case["n_tasks"]
    for s, seed in enumerate(case["seeds"], start=1):
        sd = root / "ippo" / METHOD / "level_1" / "agents_2" / f"generate_{n}" / f"seed_{s}"
        ref = root / "ippo" / "single" / "level_1" / "agents_2" / f"generate_{n}" / f"seed_{s}"
        lengths = {len(seed["train"][t]) for t in range(n)}
        if len(lengths) != 1:
            raise SystemExit(f"training curves of unequal lengths {lengths}: MEAL chunks by index")
        _dump(sd / "training_soup.json", np.concatenate([seed["train"][t] for t in range(n)]))
        for t in range(n):
            _dump(sd / f"{t}_soup.json", seed["eval"][t])
            _dump(sd / f"{t}_heterogeneity.json", seed["het"][t])
            if seed["reference"].get(t) is not None:
                _dump(ref / f"{t}_training_soup.json", seed["reference"][t])


def meal_values(meal: dict, case: dict, root: Path) -> dict:
    """MEAL's numbers of a case (its scripts on the files of :func:`write_layout`)."""
    n = case["n_tasks"]
    seeds = list(range(1, len(case["seeds"]) + 1))
    write_layout(case, root)
    rt = meal["results_table"].compute_metrics(root, "ippo", [METHOD], "generate", n, seeds)
    ac = meal["algorithm_comparison"].compute_metrics(
        root, "ippo", METHOD, "generate", n, seeds, level=1, agents=2
    )
    het = meal["heterogeneity_table"].load_method_het(
        root, "ippo", METHOD, 1, 2, "generate", n, seeds
    )
    cf_mod = meal["coordination_forgetting"]
    base = root / "ippo" / METHOD / "level_1" / "agents_2" / f"generate_{n}"
    cf = [cf_mod.seed_metrics(base / f"seed_{s}", n, 10) for s in seeds]
    mean_ci = meal["metrics"].mean_ci
    row = rt.iloc[0]
    out = {
        "A": {"mean": row["AveragePerformance"], "ci": row["AveragePerformance_CI"]},
        "F_weighted": {"mean": row["Forgetting"], "ci": row["Forgetting_CI"]},
        "FT": {"mean": row["ForwardTransfer"], "ci": row["ForwardTransfer_CI"]},
        "F_peak_final": {"mean": ac["F"], "ci": ac["F_CI"]},
        "H": dict(zip(("mean", "ci"), mean_ci(het), strict=True)),
    }
    for k, key in enumerate(("CF", "PF", "Lead")):
        out[key] = dict(zip(("mean", "ci"), cf_mod.mean_ci([c[k] for c in cf]), strict=True))
    out = {k: {kk: float(vv) for kk, vv in v.items()} for k, v in out.items()}
    out["het_index"] = [meal_heterogeneity(meal, s["actions"]) for s in case["seeds"]]
    out["coordination"] = [
        {
            k: float(v)
            for k, v in meal["coordination_matrix"].coordination_retention(s["matrix"]).items()
        }
        for s in case["seeds"]
        if s["matrix"] is not None
    ]
    return out


def meal_heterogeneity(meal: dict, tables: list[np.ndarray]) -> list[float]:
    """MEAL's ``evaluate_env`` (``experiments/evaluation.py``) on scripted envs: env ``e`` of
    task ``i`` shows each agent the action ``tables[i][e, agent, t]`` and a network whose
    greedy action is that number; returns its heterogeneity of every task."""
    if not tables:
        return []
    import jax
    import jax.numpy as jnp

    n_envs, n_agents, horizon = np.asarray(tables[0]).shape
    agents = [f"agent_{i}" for i in range(n_agents)]
    table = jnp.asarray(np.stack(tables), jnp.int32)  # (tasks, envs, agents, horizon)
    seed = 0
    keys = []  # the reset keys MEAL's evaluator derives (eval_deterministic=True)
    for idx in range(len(tables)):
        _, env_rng = jax.random.split(jax.random.PRNGKey(idx + seed))
        keys.append(jax.random.split(env_rng, n_envs))
    keys = jnp.stack(keys)

    def observe(idx, pos, t):
        t = jnp.minimum(t, horizon - 1)
        return {a: table[idx, pos, i, t][None].astype(jnp.float32) for i, a in enumerate(agents)}

    def reset_switch(key, idx):
        pos = jnp.argmax(jnp.all(keys[idx] == key, axis=-1))
        return observe(idx, pos, 0), (pos, jnp.int32(0))

    def step_switch(key, state, actions, idx):
        pos, t = state
        zero = {a: jnp.float32(0.0) for a in agents}
        return observe(idx, pos, t + 1), (pos, t + 1), zero, zero, {"soups": zero}

    class Greedy:
        def __init__(self, obs):
            self.obs = obs

        def mode(self):
            return self.obs[:, 0].astype(jnp.int32)

    class Network:
        action_dim = C.N_ACTIONS

        @staticmethod
        def apply(params, obs, env_idx=0):
            return Greedy(obs), None, None

    evaluate = meal["evaluation"].make_eval_fn(
        None, reset_switch, step_switch, Network(), agents, n_envs, horizon, False, True, seed
    )
    return [
        float(evaluate(None, jax.random.PRNGKey(0), None, idx)[2]) for idx in range(len(tables))
    ]


SUMMARY_KEYS = ("A", "F_weighted", "F_peak_final", "FT", "H", "CF", "PF", "Lead")


def compare(name: str, ours: dict, theirs: dict, keys=SUMMARY_KEYS) -> float:
    """Print ours next to MEAL's; return the largest absolute difference."""
    worst = 0.0
    for key in keys:
        for part in ("mean", "ci"):
            a, b = ours["summary"][key][part], theirs[key][part]
            diff = 0.0 if (np.isnan(a) and np.isnan(b)) else abs(a - b)
            worst = max(worst, diff)
            print(f"{name:14s} {key:13s} {part:4s} ours {a: .9f}  MEAL {b: .9f}  |d| {diff:.1e}")
    for s, (mine, their) in enumerate(zip(ours["het_index"], theirs["het_index"], strict=True)):
        d = float(np.max(np.abs(np.subtract(mine, their)))) if mine else 0.0
        worst = max(worst, d)
        print(f"{name:14s} het index seed {s}: max |d| {d:.1e} over {len(mine)} tasks")
    for mine, their in zip(ours["coordination"], theirs["coordination"], strict=False):
        for k in mine:
            d = 0.0 if (np.isnan(mine[k]) and np.isnan(their[k])) else abs(mine[k] - their[k])
            worst = max(worst, d)
    return worst


def run_api_values(cl_dirs: list[Path], reference_dirs: list[Path]) -> dict[str, float]:
    """The real case through our run-level API (what ``cl-suites report`` calls), per
    seed, averaged: ``meal_metrics`` (both forgetting formulas), the report's forward
    transfer (``training_score_curves`` + ``reference_curve``) and ``run_heterogeneity``."""
    from cl_suites.metrics import meal as M
    from cl_suites.metrics.report_data import _episode_len, _normalizers, reference_curve
    from cl_suites.metrics.runs import load_run

    refs = [load_run(d) for d in reference_dirs]
    vals: dict[str, list[float]] = {k: [] for k in ("A", "F_weighted", "F_peak_final", "FT", "H")}
    for d in cl_dirs:
        run = load_run(d)
        norms, _ = _normalizers(run)
        vals["A"].append(M.meal_metrics(run.eval, run.schedule, norms)["A"])
        vals["F_weighted"].append(M.meal_metrics(run.eval, run.schedule, norms)["F"])
        pf = M.meal_metrics(run.eval, run.schedule, norms, forgetting="peak_final")
        vals["F_peak_final"].append(pf["F"])
        cl = M.training_score_curves(
            run.episode_soups, run.schedule, norms, episode_len=_episode_len(run)
        )
        vals["FT"].append(M.forward_transfer(cl, {t: reference_curve(run, t, refs)[0] for t in cl}))
        vals["H"].append(M.run_heterogeneity(run.heterogeneity))
    return {k: float(np.mean(v)) for k, v in vals.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--meal-repo", type=Path, default=Path("/tmp/refs/meal057"))
    p.add_argument("--cl-runs", nargs="*", type=Path, default=[])
    p.add_argument("--reference-runs", nargs="*", type=Path, default=[])
    p.add_argument("--write", action="store_true", help=f"write the pins to {PINS}")
    args = p.parse_args(argv)
    meal = load_meal(args.meal_repo)
    cases = {name: C.build(name) for name in C.SYNTHETIC}
    if args.cl_runs:
        cases["real"] = C.from_runs(args.cl_runs, args.reference_runs)
    pins: dict = {"meal": "TTomilin/MEAL@057f862", "tolerance": TOLERANCE, "cases": {}}
    worst = 0.0
    for name, case in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            theirs = meal_values(meal, case, Path(tmp))
        ours = C.our_values(case)
        ours_eval = [
            C.evaluator_heterogeneity(s["actions"]) if s["actions"] else [] for s in case["seeds"]
        ]
        worst = max(worst, compare(name, ours, theirs))
        evaluated = {**ours, "het_index": ours_eval, "coordination": []}
        worst = max(worst, compare(name + " (Evaluator)", evaluated, theirs, keys=()))
        entry = {"meal": theirs}
        if name == "real":
            entry["inputs"] = C.to_json(case)
            api = run_api_values(args.cl_runs, args.reference_runs)
            for key, value in api.items():
                diff = abs(value - theirs[key]["mean"])
                worst = max(worst, diff)
                print(f"real (run API) {key:13s} mean ours {value: .9f}  MEAL "
                      f"{theirs[key]['mean']: .9f}  |d| {diff:.1e}")  # fmt: skip
        pins["cases"][name] = entry
    print(f"largest difference over all cases: {worst:.2e} (tolerance {TOLERANCE:g})")
    if args.write:
        PINS.write_text(json.dumps(pins, indent=1, allow_nan=True) + "\n")
        print(f"pins written to {PINS}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
