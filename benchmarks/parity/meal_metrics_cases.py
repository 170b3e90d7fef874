"""Logs on which our MEAL 2026 metrics are compared with MEAL's own code
(``benchmarks/parity/meal_metrics_reference.py``) and pinned
(``tests/metrics/test_meal_2026.py::test_reference_pins``), and our values of each case
(``our_values``, what the pins check).

A case holds, per seed, what MEAL's result scripts read from their downloaded files:

* ``eval``: ``task -> evaluation score curve`` over the whole run (``{i}_soup.json``);
* ``train``: ``task -> training score curve`` of the task's segment (their concatenation
  is ``training_soup.json``);
* ``reference``: ``task -> training score curve`` of the single-task reference run
  (``single/.../{i}_training_soup.json``);
* ``het``: ``task -> heterogeneity curve`` over the whole run (``{i}_heterogeneity.json``);
* ``actions``: per task, the greedy actions of one evaluation ``(n_envs, n_agents,
  horizon)``, whose counts MEAL's evaluator turns into the role-heterogeneity index;
* ``matrix``: a coordination matrix (normalised scores).

The synthetic cases are drawn from seeded generators, so the script and the test build the
same arrays; the ``real`` case is read from run directories of ``cl-suites run`` (the
script stores its arrays in the pins, so the test needs no run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.heterogeneity import role_heterogeneity
from cl_suites.metrics import meal
from cl_suites.metrics.stats import mean_ci95

SYNTHETIC = ("meal_layout", "flat_and_zero", "steps_layout")
"""``meal_layout``: 5 tasks, 4 evaluations per task, none at step 0 (MEAL's log layout
and a cl-suites MEAL run's); ``flat_and_zero``: a task that never scores, a flat one, a
reference whose AUC is 0, 3 agents; ``steps_layout``: 3 tasks, an evaluation at step 0
too (where MEAL's positional end index is the task's own last evaluation)."""

N_ACTIONS = 6
HORIZON = 12
"""Steps of one evaluation episode in the heterogeneity cases (MEAL: 400)."""


def _seed_case(rng: np.random.Generator, n_tasks: int, k: int, start_point: bool, agents: int):
    length = n_tasks * k + (1 if start_point else 0)
    eval_curves, het = {}, {}
    for t in range(n_tasks):
        c = np.zeros(length)
        first = t * k + (1 if start_point else 0)
        c[first : first + k] = np.linspace(0.1, 1.0, k) * rng.uniform(0.5, 1.0)
        c[first + k :] = c[first + k - 1] * np.exp(
            -rng.uniform(0.1, 1.0) * np.arange(length - first - k)
        )
        c[:first] = rng.uniform(0, 0.1, first)
        eval_curves[t] = np.round(c + rng.normal(0, 0.02, length).clip(-0.02, 0.02), 6).clip(
            0, None
        )
        het[t] = rng.uniform(0, 0.6, length).round(6)
    train = {t: rng.uniform(0, 1, 3 * k).cumsum().round(6) / (3 * k) for t in range(n_tasks)}
    reference = {t: rng.uniform(0, 1, 3 * k).cumsum().round(6) / (3 * k) for t in range(n_tasks)}
    actions = [rng.integers(0, N_ACTIONS, (4, agents, HORIZON)) for _ in range(n_tasks)]
    for a in actions:  # agents that prefer their own actions: indices well inside (0, 1)
        a[:, 0][a[:, 0] > 3] = 0
    matrix = rng.uniform(0, 1, (n_tasks, n_tasks)).round(6)
    return {
        "eval": eval_curves,
        "train": train,
        "reference": reference,
        "het": het,
        "actions": actions,
        "matrix": matrix,
    }


def build(case: str) -> dict[str, Any]:
    """``{"n_tasks", "seeds": [per-seed dict]}`` of a synthetic case (deterministic)."""
    rng = np.random.default_rng(SYNTHETIC.index(case) + 2026)
    if case == "meal_layout":
        seeds = [_seed_case(rng, 5, 4, False, 2) for _ in range(3)]
        return {"n_tasks": 5, "seeds": seeds}
    if case == "steps_layout":
        seeds = [_seed_case(rng, 3, 3, True, 2) for _ in range(2)]
        return {"n_tasks": 3, "seeds": seeds}
    seeds = [_seed_case(rng, 4, 3, False, 3) for _ in range(2)]
    for s in seeds:
        s["eval"][1] = np.zeros_like(s["eval"][1])  # never scores: skipped by weighted
        s["eval"][2] = np.full_like(s["eval"][2], 0.5)  # flat: no forgetting
        s["reference"][3] = np.zeros_like(s["reference"][3])  # AUC 0: FT skips the task
        s["het"][0] = np.full_like(s["het"][0], np.nan)  # no finite heterogeneity
        s["actions"][1][0] = 2  # an env where every agent always takes action 2: 0
        s["actions"][2][:, 1] = s["actions"][2][:, 0]  # agents 0 and 1 act alike
    return {"n_tasks": 4, "seeds": seeds}


def from_runs(cl_dirs: list[Path], reference_dirs: list[Path]) -> dict[str, Any]:
    """The ``real`` case from ``cl-suites run`` directories: each continual run (one per
    seed) with its single-task reference runs (MEAL-1 runs on its kitchens)."""
    from cl_suites.metrics.report_data import _episode_len, _normalizers, reference_curve
    from cl_suites.metrics.runs import load_run, metric_split

    refs = [load_run(d) for d in reference_dirs]
    seeds = []
    for d in cl_dirs:
        run = load_run(d)
        norms, _ = _normalizers(run)
        frame = meal.normalize_scores(metric_split(run.eval), norms)
        order = list(run.schedule["task_id"])
        eval_curves = {
            int(t): frame[frame.task_id == t].sort_values("total_step")["score"].to_numpy()
            for t in order
        }
        train = meal.training_score_curves(
            run.episode_soups, run.schedule, norms, episode_len=_episode_len(run)
        )
        reference = {t: reference_curve(run, t, refs)[0] for t in train}
        het = {
            int(t): g.sort_values("total_step")["heterogeneity"].to_numpy(dtype=float)
            for t, g in run.heterogeneity.groupby("task_id")
        }
        seeds.append(
            {
                "eval": eval_curves,
                "train": train,
                "reference": reference,
                "het": het,
                "actions": [],
                "matrix": None,
            }
        )
    return {"n_tasks": len(seeds[0]["eval"]), "seeds": seeds}


def to_json(case: dict[str, Any]) -> dict[str, Any]:
    """A case as JSON data (curves as lists; NaN as ``None``)."""

    def arr(x):
        if x is None:
            return None
        return [None if not np.isfinite(v) else float(v) for v in np.asarray(x, float).ravel()]

    out = []
    for s in case["seeds"]:
        out.append(
            {
                key: {str(t): arr(c) for t, c in s[key].items()}
                for key in ("eval", "train", "reference", "het")
            }
            | {
                "actions": [np.asarray(c).tolist() for c in s["actions"]],
                "matrix": None if s["matrix"] is None else np.asarray(s["matrix"]).tolist(),
            }
        )
    return {"n_tasks": case["n_tasks"], "seeds": out}


def from_json(data: dict[str, Any]) -> dict[str, Any]:
    """:func:`to_json` undone."""

    def arr(x):
        return None if x is None else np.array([np.nan if v is None else v for v in x], float)

    seeds = []
    for s in data["seeds"]:
        seeds.append(
            {
                key: {int(t): arr(c) for t, c in s[key].items()}
                for key in ("eval", "train", "reference", "het")
            }
            | {
                "actions": [np.asarray(c) for c in s["actions"]],
                "matrix": None if s["matrix"] is None else np.asarray(s["matrix"], float),
            }
        )
    return {"n_tasks": data["n_tasks"], "seeds": seeds}


def action_counts(actions: np.ndarray) -> np.ndarray:
    """``(n_envs, n_agents, horizon)`` actions as counts ``(n_agents, n_envs, N_ACTIONS)``."""
    a = np.asarray(actions)
    counts = np.zeros((a.shape[1], a.shape[0], N_ACTIONS), dtype=np.int64)
    for e in range(a.shape[0]):
        for i in range(a.shape[1]):
            counts[i, e] = np.bincount(a[e, i], minlength=N_ACTIONS)
    return counts


def our_values(case: dict[str, Any]) -> dict[str, Any]:
    """Our metrics of a case, per seed and over seeds (mean and MEAL's 1.96 SE)."""
    n = case["n_tasks"]
    per_seed: dict[str, list[float]] = {
        k: [] for k in ("A", "F_weighted", "F_peak_final", "FT", "H", "CF", "PF", "Lead")
    }
    het_index, coordination = [], []
    for s in case["seeds"]:
        curves = {t: s["eval"][t] for t in range(n)}
        length = len(curves[0])
        per_seed["A"].append(float(np.mean([c[-1] for c in curves.values()])))
        ends = {t: meal.meal_end_index(t, n, length) for t in range(n)}
        per_seed["F_weighted"].append(
            meal.meal_forgetting(method="weighted", curves=curves, train_end_idx=ends)
        )
        per_seed["F_peak_final"].append(meal.meal_forgetting(method="peak_final", curves=curves))
        per_seed["FT"].append(meal.forward_transfer(s["train"], s["reference"]))
        het = {t: s["het"][t] for t in range(n)}
        vals = [np.nanmean(h) for h in het.values() if np.isfinite(h).any()]
        per_seed["H"].append(float(np.mean(vals)) if vals else float("nan"))
        cf = meal.coordination_forgetting(het, curves)
        for key in ("CF", "PF", "Lead"):
            per_seed[key].append(cf[key])
        het_index.append([role_heterogeneity(action_counts(a)) for a in s["actions"]])
        if s["matrix"] is not None:
            coordination.append(meal.coordination_retention(s["matrix"]))
    summary = {}
    for key, vals in per_seed.items():
        m, ci, _ = mean_ci95(vals)
        summary[key] = {"per_seed": vals, "mean": m, "ci": 0.0 if np.isnan(ci) else ci}
    return {"summary": summary, "het_index": het_index, "coordination": coordination}


class _ScriptedEnv:
    """Eval envs that replay fixed actions: env ``e`` shows agent ``i`` the action it is to
    take at step ``t`` (an observation of one number); episodes last ``horizon`` steps."""

    def __init__(self, actions: np.ndarray):
        self.actions = np.asarray(actions)  # (n_envs, n_agents, horizon)
        self.t = 0

    def obs(self) -> np.ndarray:
        t = min(self.t, self.actions.shape[2] - 1)
        return self.actions[:, :, t, None].astype(np.float32)

    def step(self, actions):
        self.t += 1
        n = self.actions.shape[0]
        end = np.full(n, self.t >= self.actions.shape[2])
        if end.all():
            self.t = 0
        return self.obs(), np.zeros(n), np.zeros(n, bool), end, {}

    def close(self) -> None:
        pass


class _ScriptedSource:
    """A core ``Evaluator`` env source over per-task action tables (one batch per task)."""

    def __init__(self, tables: list[np.ndarray]):
        self.tables = tables

    def start(self, keys, seeds, episodes):
        from cl_suites.core.evaluation import EvalBatch

        batches = []
        for task_id, _split in keys:
            env = _ScriptedEnv(self.tables[task_id])
            n, k = env.actions.shape[:2]
            batches.append(
                EvalBatch(env, env.obs(), np.full(n, task_id), ("train",) * n, np.ones(n, int), k)
            )
        return batches

    def close(self) -> None:
        pass


def evaluator_heterogeneity(tables: list[np.ndarray]) -> list[float]:
    """The role-heterogeneity index our core ``Evaluator`` writes for each task when its
    policy plays the actions of ``tables`` (``(n_envs, n_agents, horizon)`` per task)."""
    from types import SimpleNamespace

    from cl_suites.core.evaluation import Evaluator

    tasks = [SimpleNamespace(name=f"task{t}", splits=("train",)) for t in range(len(tables))]
    seq = SimpleNamespace(tasks=tasks, eval_every=1, eval_episodes=1, eval_source=None, name="s")
    ev = Evaluator(seq, env_source=_ScriptedSource(tables), episodes=1)
    ev.evaluate(0, lambda obs, task_ids: np.asarray(obs).reshape(-1).astype(np.int64))
    return [r["heterogeneity"] for r in ev.last_heterogeneity]
