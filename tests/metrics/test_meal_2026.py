"""MEAL's 2026 metrics (TTomilin/MEAL@057f862): both forgetting formulas, forward transfer
against single-task references, the role-heterogeneity index, coordination forgetting and
the coordination matrix's summary; hand-worked 3-task examples, the evaluator's
``heterogeneity.csv``, the report's options, and the pins of MEAL's own code.

The hand-worked MEAL-layout run (``meal_run``): 3 tasks of 200 env steps, an evaluation
every 100 (2 per task, none at step 0, as MEAL's logs and a cl-suites MEAL run), bound 20:

* task 0 scores ``[.2, .8, 1, .5, .5, 0]``: MEAL's end index ``int(1/3 * 6) = 2`` (the
  first evaluation of task 1), ``e = 1``, then ``.5, .5, 0``: drops ``.5, .5, 1`` weighted
  ``exp(-2 t / 2)``, ``t = 0, 1, 2``: ``F_0 = (.5 + .5/e + 1/e^2) / (1 + 1/e + 1/e^2)``.
  The task's own last evaluation (``end_rule="step"``, index 1, ``e = .8``): drops ``0,
  .375, .375, 1`` weighted ``exp(-2 t / 3)``;
* task 1 ``[0, 0, .4, .6, .6, .3]``: index ``int(2/3 * 6) = 4``, ``e = .6``, one later
  point ``.3``: ``F_1 = .5``; task 2 (the last) has no ``F``;
* ``peak_final`` (every task, the last too; window 10 = the whole curve): ``1 - .5``,
  ``.6 - .3167``, ``.9 - .45`` for task 2 ``[0, 0, 0, .3, .9, .9]``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.parity import meal_metrics_cases as C
from cl_suites.core.heterogeneity import jensen_shannon, role_heterogeneity
from cl_suites.metrics import meal
from cl_suites.metrics.runs import MetricsInputError, load_run
from cl_suites.metrics.stats import mean_ci95
from cl_suites.rundir.runlog import RunLog, read_heterogeneity, truncate_logs
from tests.helpers import TESTS

E1, E2 = math.exp(-1), math.exp(-2)
SCORES = np.array(
    [
        [0.2, 0.8, 1.0, 0.5, 0.5, 0.0],
        [0.0, 0.0, 0.4, 0.6, 0.6, 0.3],
        [0.0, 0.0, 0.0, 0.3, 0.9, 0.9],
    ]
)
F0 = (0.5 + 0.5 * E1 + E2) / (1 + E1 + E2)
F1 = 0.5


def write_meal_run(
    run_dir: Path,
    scores: np.ndarray = SCORES,
    *,
    seed: int = 0,
    layout_seed: int = 0,
    soups: dict[int, list[list[float]]] | None = None,
    het: np.ndarray | None = None,
    method: str = "ft",
) -> Path:
    """A MEAL run directory: ``len(scores)`` tasks of 200 env steps, evaluations every 100
    (none at step 0), returns ``20 * scores`` (bound 20); ``soups[task]``: per episode-end
    step of its segment, the soups of the episodes that ended there; ``het``: the
    heterogeneity of each task at each evaluation."""
    n = len(scores)
    names = [f"easy_gen_{t}" for t in range(n)]
    schedule = [
        {
            "index": t,
            "cycle": 0,
            "task_id": t,
            "task_name": names[t],
            "start_step": 200 * t,
            "end_step": 200 * (t + 1),
        }
        for t in range(n)
    ]
    layouts = [
        {
            "task_id": t,
            "task_name": names[t],
            "difficulty": "easy",
            "layout_seed": layout_seed + t,
            "height": 7,
            "width": 7,
            "max_soups": 1,
            "no_bound": None,
        }
        for t in range(n)
    ]
    meta = {
        "suite_id": f"CLSuite/MEAL-{n}-v0",
        "suite": f"MEAL-{n}",
        "method": method,
        "seed": seed,
        "env_kwargs": {"episode_len": 50},
        "tasks": [{"task_id": t, "task_name": names[t], "splits": ["train"]} for t in range(n)],
        "schedule": schedule,
        "steps_per_task": [200] * n,
        "cycles": 1,
        "eval_every": 100,
        "eval_episodes": 2,
        "num_envs": 2,
        "metric_settings": {"smoothing_window": 1, "return_clip_min": None},
        "num_agents": 2,
        "layouts": layouts,
        "score_normalizers": {str(t): 20.0 for t in range(n)},
        "step_unit": "env steps (one joint action of all agents)",
    }
    with RunLog(run_dir, meta) as log:
        for e in range(scores.shape[1]):
            step = 100 * (e + 1)
            rows = [
                {
                    "total_step": step,
                    "task_id": t,
                    "task_name": names[t],
                    "split": "train",
                    "mean_return": 20.0 * scores[t, e],
                    "std_return": 0.0,
                    "episodes": 2,
                    "wall_time": 0.0,
                }
                for t in range(n)
            ]
            log.log_eval(rows)
            if het is not None:
                keys = ("total_step", "task_id", "task_name", "split")
                log.log_heterogeneity(
                    {**{k: r[k] for k in keys}, "heterogeneity": het[r["task_id"], e], "envs": 2}
                    for r in rows
                )
        for t, per_step in (soups or {}).items():
            for j, values in enumerate(per_step):
                step = 200 * t + 50 * (j + 1)
                log.log_episodes(
                    {"total_step": step, "task_id": t, "episode_return": 0.0, "episode_length": 50}
                    for _ in values
                )
                log.log_episode_soups(
                    {"total_step": step, "task_id": t, "soups": v, "episode_length": 50}
                    for v in values
                )
    return run_dir


@pytest.fixture
def meal_run(tmp_path: Path) -> Path:
    return write_meal_run(tmp_path / "meal")


# -- forgetting ------------------------------------------------------------------------------
def test_weighted_forgetting_by_hand_at_meals_end_index(meal_run):
    run = load_run(meal_run)
    norms = {0: 20.0, 1: 20.0, 2: 20.0}
    assert [meal.meal_end_index(i, 3, 6) for i in range(3)] == [2, 4, 5]
    per_task = meal.forgetting_per_task(run.eval, run.schedule, norms)
    np.testing.assert_allclose(per_task.to_numpy(), [F0, F1])
    assert list(per_task.index) == [0, 1]
    assert meal.meal_metrics(run.eval, run.schedule, norms)["F"] == pytest.approx((F0 + F1) / 2)
    # t runs over the later points and is normalised by their count minus one
    t = np.arange(4) / 3
    step0 = float(np.sum(np.array([0, 0.375, 0.375, 1]) * np.exp(-2 * t)) / np.exp(-2 * t).sum())
    step = meal.forgetting_per_task(run.eval, run.schedule, norms, end_rule="step")
    assert step[0] == pytest.approx(step0)
    assert step[0] != pytest.approx(F0)
    with pytest.raises(ValueError, match="end_rule"):
        meal.forgetting_per_task(run.eval, run.schedule, norms, end_rule="middle")


def test_weighted_forgetting_edge_rules():
    """Never scoring: skipped (NaN); the end value below 1e-8 or no later point: 0; the
    drop is clipped at 0 (a task that improves forgets nothing)."""
    curves = {0: np.zeros(6), 1: np.array([0, 0, 0, 0.1, 0.5, 0.2]), 2: np.ones(6)}
    vals = meal.forgetting_values(curves=curves, train_end_idx={0: 2, 1: 2})
    assert np.isnan(vals[0]) and vals[1] == 0.0  # e = 0 at index 2
    vals = meal.forgetting_values(curves={0: np.array([0.5, 0.4, 1.0]), 1: np.ones(3)},
                                  train_end_idx={0: 1})  # fmt: skip
    assert vals[0] == 0.0  # rises after the end


def test_peak_final_covers_every_task_by_hand(meal_run):
    run = load_run(meal_run)
    norms = {0: 20.0, 1: 20.0, 2: 20.0}
    per_task = meal.forgetting_per_task(run.eval, run.schedule, norms, method="peak_final")
    expected = [1.0 - SCORES[0].mean(), 0.6 - SCORES[1].mean(), 0.9 - SCORES[2].mean()]
    np.testing.assert_allclose(per_task.to_numpy(), expected)
    assert list(per_task.index) == [0, 1, 2]
    short = meal.forgetting_per_task(
        run.eval, run.schedule, norms, method="peak_final", end_window=2
    )
    np.testing.assert_allclose(short.to_numpy(), [1.0 - 0.25, 0.6 - 0.45, 0.0])


# -- forward transfer ------------------------------------------------------------------------
def test_task_auc_and_forward_transfer_by_hand():
    # AUC = trapezoids with unit spacing over the number of points
    assert meal.task_auc(np.array([0.0, 1.0, 1.0])) == pytest.approx(1.5 / 3)
    assert meal.task_auc(np.array([0.7])) == 0.7 and meal.task_auc(np.array([])) == 0.0
    cl = {0: np.array([0.0, 1.0, 1.0]), 1: np.array([0.2, 0.2]), 2: np.array([1.0, 1.0])}
    ref = {0: np.array([0.5, 0.5]), 1: np.array([0.4, 0.4]), 2: np.zeros(2)}
    vals = meal.forward_transfer_values(cl, ref)
    # task 0: (0.5 - 0.25) / 0.25; task 1: (0.1 - 0.2) / 0.2; task 2: reference AUC 0, skipped
    np.testing.assert_allclose(vals.to_numpy(), [1.0, -0.5, np.nan])
    assert meal.forward_transfer(cl, ref) == pytest.approx(0.25)
    assert np.isnan(meal.forward_transfer(cl, {}))


def test_training_score_curves_from_episode_soups(tmp_path):
    soups = {0: [[1, 0], [1, 1]], 1: [[0, 0], [2, 0]], 2: [[1, 1], [1, 1]]}
    run = load_run(write_meal_run(tmp_path / "r", soups=soups))
    curves = meal.training_score_curves(run.episode_soups, run.schedule, {0: 2.0, 1: 2.0, 2: 2.0})
    np.testing.assert_allclose(curves[0], [0.25, 0.5])
    np.testing.assert_allclose(curves[1], [0.0, 0.5])
    cut = meal.training_score_curves(run.episode_soups, run.schedule, None, episode_len=51)
    assert all(len(c) == 0 for c in cut.values())  # 50-step episodes are shorter: left out


# -- heterogeneity ---------------------------------------------------------------------------
def test_jensen_shannon_in_bits_by_hand():
    assert jensen_shannon([1, 0], [0, 1]) == pytest.approx(1.0)
    assert jensen_shannon([0.5, 0.5], [0.5, 0.5]) == pytest.approx(0.0)
    # m = (.75, .25): KL(p||m) = log2(4/3), KL(q||m) = .5 log2(2/3) + .5 log2(2)
    expected = 0.5 * (math.log2(4 / 3) + 0.5 * math.log2(2 / 3) + 0.5)
    assert jensen_shannon([1.0, 0.0], [0.5, 0.5]) == pytest.approx(expected, abs=1e-9)


def test_role_heterogeneity_averages_envs_then_pairs_by_hand():
    # 2 envs, 3 actions; env 0: agents 0/1 never share an action (1), env 1 alike (0)
    a0 = [[2, 0, 0], [1, 1, 0]]
    a1 = [[0, 2, 0], [1, 1, 0]]
    a2 = [[2, 0, 0], [1, 1, 0]]
    assert role_heterogeneity(np.array([a0, a1])) == pytest.approx(0.5)
    # 3 agents: pairs (0,1) .5, (0,2) 0, (1,2) .5
    assert role_heterogeneity(np.array([a0, a1, a2])) == pytest.approx(1 / 3)
    assert np.isnan(role_heterogeneity(np.array([a0])))  # one agent: no pair


def test_evaluator_writes_heterogeneity_and_keeps_eval_rows(tmp_path):
    """The core Evaluator (both MEAL learners evaluate through it) counts the greedy
    actions of every agent over its recorded episodes and writes heterogeneity.csv; the
    eval records are what they were."""
    from types import SimpleNamespace

    from cl_suites.core.evaluation import Evaluator

    tables = [
        np.array([[[0, 0, 0], [1, 1, 1]], [[2, 2, 2], [2, 2, 2]]]),  # env 0: 1; env 1: 0
        np.array([[[0, 1, 0], [0, 1, 0]], [[0, 1, 0], [0, 1, 0]]]),  # alike: 0
    ]
    tasks = [SimpleNamespace(name=f"t{i}", splits=("train",)) for i in range(2)]
    seq = SimpleNamespace(tasks=tasks, eval_every=1, eval_episodes=1, eval_source=None, name="s")
    meta = {"schedule": [], "tasks": []}
    with RunLog(tmp_path / "run", meta) as log:
        ev = Evaluator(seq, env_source=C._ScriptedSource(tables), episodes=1, run_log=log)
        records = ev.evaluate(7, lambda obs, ids: np.asarray(obs).reshape(-1).astype(int))
    assert [sorted(r) for r in records] == [sorted(
        ["total_step", "task_id", "task_name", "split", "mean_return", "std_return", "episodes",
         "wall_time"])] * 2  # fmt: skip
    het = read_heterogeneity(tmp_path / "run")
    assert het["heterogeneity"].tolist() == pytest.approx([0.5, 0.0])
    assert het["total_step"].tolist() == [7, 7] and het["envs"].tolist() == [2, 2]
    assert C.evaluator_heterogeneity(tables) == pytest.approx([0.5, 0.0])
    assert truncate_logs(tmp_path / "run", 6)["heterogeneity.csv"] == 2  # a resume cuts it


def test_single_agent_evaluations_write_no_heterogeneity(tmp_path):
    from types import SimpleNamespace

    from cl_suites.core.evaluation import EvalBatch, Evaluator

    class Source:
        def start(self, keys, seeds, episodes):
            env = C._ScriptedEnv(np.zeros((2, 1, 3), int))
            return [
                EvalBatch(env, env.obs()[:, 0], np.zeros(2, int), ("train",) * 2, np.ones(2, int))
            ]

        def close(self):
            pass

    seq = SimpleNamespace(
        tasks=[SimpleNamespace(name="t", splits=("train",))],
        eval_every=1, eval_episodes=1, eval_source=None, name="s",
    )  # fmt: skip
    ev = Evaluator(seq, env_source=Source(), episodes=1)
    ev.evaluate(0, lambda obs, ids: np.zeros(len(obs), int))
    assert ev.last_heterogeneity == []


def test_heterogeneity_of_a_run_by_hand(tmp_path):
    het = np.array([[0.2, 0.4, 0.6, 0.2, 0.1, 0.1], [0.0] * 6, [0.6] * 6])
    run = load_run(write_meal_run(tmp_path / "r", het=het))
    per = meal.heterogeneity_per_task(run.heterogeneity)
    np.testing.assert_allclose(per.to_numpy(), [1.6 / 6, 0.0, 0.6])  # every evaluation
    assert meal.run_heterogeneity(run.heterogeneity) == pytest.approx((1.6 / 6 + 0.6) / 3)


def test_coordination_forgetting_by_hand():
    # 2 tasks of 2 points each: task 0 ends at index round(1 * 4/2) = 2
    het = {0: np.array([0.4, 0.8, 0.2, 0.2]), 1: np.array([0.1, 0.1, 0.5, 0.5])}
    soup = {0: np.array([0.5, 1.0, 0.5, 0.5]), 1: np.array([0.0, 0.0, 0.2, 0.4])}
    out = meal.coordination_forgetting(het, soup, window=1)
    # task 0: het .8 -> .2 (CF .75), soup 1 -> .5 (PF .5); task 1: end index 3, het .5 -> .5
    # (0), soup .2 -> .4 (clipped 0)
    assert out["CF"] == pytest.approx((0.75 + 0.0) / 2)
    assert out["PF"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["Lead"] == pytest.approx(0.375 - 0.25)


# -- coordination matrix ---------------------------------------------------------------------
def test_coordination_matrix_and_retention_by_hand():
    soups = np.array([[2.0, 1.0, 0.5], [1.0, 4.0, 2.0], [0.0, 1.0, 3.0]])
    m = meal.coordination_matrix(lambda i, j: soups[i, j], 3, [2.0, 4.0, None])
    np.testing.assert_allclose(m[:2], [[1.0, 0.5, 0.25], [0.25, 1.0, 0.5]])
    assert np.isnan(m[2]).all()  # no bound: no scores
    r = meal.coordination_retention(m)
    assert r["diagonal_mean"] == pytest.approx(1.0)
    assert r["upper_tri_mean"] == pytest.approx((0.5 + 0.25 + 0.5) / 3)
    assert r["coord_forgetting"] == pytest.approx(1 - 1.25 / 3)


def test_a_run_without_task_checkpoints_is_refused_in_one_line(tmp_path):
    run = write_meal_run(tmp_path / "r")
    with pytest.raises(MetricsInputError) as err:
        meal.task_checkpoints(run)
    assert "\n" not in str(err.value)
    assert "checkpoint" in str(err.value) and str(run) in str(err.value)


# -- the ± of MEAL's tables ------------------------------------------------------------------
def test_mean_ci95_is_196_standard_errors():
    m, ci, n = mean_ci95([1.0, 2.0, 3.0, 6.0])
    assert (m, n) == (3.0, 4)
    assert ci == pytest.approx(1.96 * np.std([1, 2, 3, 6], ddof=1) / 2)
    assert np.isnan(mean_ci95([1.0])[1]) and np.isnan(mean_ci95([])[0])


# -- the report ------------------------------------------------------------------------------
def test_report_gives_ft_h_and_the_196_se_columns(tmp_path):
    from cl_suites.cli import main

    soups = {t: [[1, 1], [1, 1]] for t in range(3)}
    het = np.full((3, 6), 0.25)
    runs = [
        write_meal_run(tmp_path / f"cl-s{s}", seed=s, soups=soups, het=het + 0.1 * s)
        for s in (0, 1)
    ]
    refs = []
    for s in (0, 1):
        for t in range(3):
            ref_soups = {0: [[0, 1], [1, 1]]}
            refs.append(
                write_meal_run(
                    tmp_path / "refs" / f"s{s}-t{t}", SCORES[:1], seed=s, layout_seed=t,
                    soups=ref_soups, method="ft",
                )
            )  # fmt: skip
    out = tmp_path / "report"
    assert main(["report", *map(str, runs), "--out", str(out), "--meal-ci",
                 "--reference-runs", str(tmp_path / "refs")]) == 0  # fmt: skip
    table = (out / "summary_meal.csv").read_text()
    header = table.splitlines()[0]
    for column in ("FT", "H", "A ± 1.96 SE", "F ± 1.96 SE", "FT ± 1.96 SE", "H ± 1.96 SE"):
        assert column in header.split(","), (column, header)
    # every task of both seeds: the learner's curve [1/20, 1/20] (AUC 0.05 / 2), the
    # reference's [0.5/20, 1/20] (AUC 0.0375 / 2): FT = (0.025 - 0.01875) / 0.01875 = 1/3
    row = table.splitlines()[1]
    assert "0.333 ± 0.000" in row
    # H: seeds 0.25 and 0.35, SEM 0.05, MEAL's ± 1.96 x 0.05
    assert "0.300 ± 0.050" in row
    assert "0.300 ± 0.098" in row  # H: seeds 0.25 and 0.35, 1.96 x 0.05 / ... = 0.098


def test_reference_runs_must_train_one_task(tmp_path):
    from cl_suites.metrics.report import build_report

    run = write_meal_run(tmp_path / "cl")
    with pytest.raises(MetricsInputError, match="one task"):
        build_report([run], tmp_path / "out", reference_runs=[run])


# -- MEAL's own code on the same logs ----------------------------------------------------------
def test_reference_pins():
    """Ours equals MEAL 057f862's result scripts on the synthetic and the real logs
    (``benchmarks/parity/meal_metrics_reference.py`` wrote the pins)."""
    pins = json.loads((TESTS / "golden" / "meal_metrics_reference.json").read_text())
    tol = pins["tolerance"]
    assert set(pins["cases"]) >= {*C.SYNTHETIC, "real"}
    for name, entry in pins["cases"].items():
        case = C.from_json(entry["inputs"]) if "inputs" in entry else C.build(name)
        ours, theirs = C.our_values(case), entry["meal"]
        for key, mine in ours["summary"].items():
            for part in ("mean", "ci"):
                want = theirs[key][part]
                want = float("nan") if want is None else want
                assert mine[part] == pytest.approx(want, abs=tol, nan_ok=True), (name, key, part)
        for mine, want in zip(ours["het_index"], theirs["het_index"], strict=True):
            np.testing.assert_allclose(mine, want, atol=tol)
        for s, want in zip(case["seeds"], theirs["het_index"], strict=True):
            if s["actions"]:  # our Evaluator's counting on the same actions
                np.testing.assert_allclose(C.evaluator_heterogeneity(s["actions"]), want, atol=tol)
        for mine, want in zip(ours["coordination"], theirs["coordination"], strict=True):
            for k, v in want.items():
                assert mine[k] == pytest.approx(np.nan if v is None else v, abs=tol, nan_ok=True)


def test_report_draws_stored_coordination_matrices_and_names_what_is_missing(tmp_path):
    from cl_suites.metrics.report import build_report

    runs = [write_meal_run(tmp_path / f"s{s}", seed=s) for s in (0, 1)]
    bare = build_report(runs, tmp_path / "bare")
    assert any(
        "coordination matrix n/a" in n and "no per-task checkpoints" in n for n in bare.notes
    )
    m0 = np.array([[1.0, 0.5, 0.0], [0.2, 1.0, 0.5], [0.0, 0.0, 1.0]])
    meal.write_coordination_matrix(runs[0], m0)
    meal.write_coordination_matrix(runs[1], np.eye(3))
    out = build_report(runs, tmp_path / "out")
    assert (tmp_path / "out" / "MEAL-3" / "ft_coordination.png").stat().st_size > 0
    # coordination forgetting per run: 1 - (1/3) / 1 and 1 - 0 / 1
    assert out.tables["MEAL"]["coord. F"].iloc[0] == "0.833 ± 0.167"
    assert "ft coordination matrix" in (tmp_path / "out" / "report.html").read_text()
