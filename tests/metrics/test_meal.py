"""MEAL A, F, P, forgetting variants and repetition plasticity by hand."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.metrics import meal
from cl_suites.metrics.runs import MetricsInputError, load_run

NORMS = {0: 10.0, 1: 10.0, 2: 20.0}


def test_score_matrix_and_a_f_p_by_hand(hand_run):
    run = load_run(hand_run)
    s = meal.score_matrix(run.eval, run.schedule, NORMS)
    # s_i(j): row = after training task i, column = task j
    np.testing.assert_allclose(s.to_numpy(), [[1.0, 0.2, 0.25], [0.4, 0.8, 0.25], [0.2, 0.6, 1.0]])
    m = meal.meal_metrics(run.eval, run.schedule, NORMS, forgetting="paper")
    assert m["A"] == pytest.approx((0.2 + 0.6 + 1.0) / 3)
    assert m["P"] == pytest.approx((1.0 + 0.8 + 1.0) / 3)
    assert m["F"] == pytest.approx(((1.0 - 0.2) + (0.8 - 0.6)) / 2)  # eq. 2


def test_already_normalised_scores(hand_run):
    run = load_run(hand_run)
    m = meal.meal_metrics(run.eval, run.schedule, None)
    assert m["A"] == pytest.approx((2 + 6 + 20) / 3)


def test_code_forgetting_variants_by_hand(hand_run):
    run = load_run(hand_run)
    pf = meal.meal_metrics(run.eval, run.schedule, NORMS, forgetting="peak_final")
    # peak - mean(last 10 points) = peak - mean(whole 4-point curve), over every task, the
    # last one too (MEAL's algorithm_comparison.py): task0 1-0.4, task1 .8-.425, task2 1-.375
    assert pf["F"] == pytest.approx(((1.0 - 0.4) + (0.8 - 0.425) + (1.0 - 0.375)) / 3)
    curves = {0: np.array([0, 1.0, 0.4, 0.2]), 1: np.array([0.1, 0.2, 0.8, 0.6]), 2: np.zeros(4)}
    assert meal.meal_forgetting(method="peak_final", curves=curves, end_window=2) == pytest.approx(
        ((1 - 0.3) + (0.8 - 0.7) + 0.0) / 3
    )
    w = meal.meal_metrics(run.eval, run.schedule, NORMS, forgetting="weighted")
    task0 = (0.6 + 0.8 * np.exp(-2)) / (1 + np.exp(-2))
    task1 = 0.2 / 0.8
    assert w["F"] == pytest.approx((task0 + task1) / 2)


def test_bad_normalisers_are_named(hand_run):
    run = load_run(hand_run)
    with pytest.raises(MetricsInputError, match="must be > 0"):
        meal.score_matrix(run.eval, run.schedule, {0: 0.0, 1: 1.0, 2: 1.0})
    with pytest.raises(MetricsInputError, match=r"task id\(s\) \[2\]"):
        meal.score_matrix(run.eval, run.schedule, {0: 1.0, 1: 1.0})


def test_repetition_plasticity_code_and_paper_by_hand():
    traces = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])  # R=2, L=3, one seed
    code = meal.repetition_plasticity(traces, sigma=0)
    assert code["auc_loss"] == pytest.approx(1 - 2 / 4)
    assert code["fpr"] == pytest.approx(1 / 3)
    assert code["rauc"] == pytest.approx(2 / 4)
    paper = meal.repetition_plasticity(traces, sigma=0, variant="paper")
    # cumulative averages: rep0 [1, 1.5, 2] (AUC 3), rep1 [1, 1, 1] (AUC 2)
    assert paper["auc_loss"] == pytest.approx(1 - 2 / 3)
    assert paper["fpr"] == pytest.approx(1 / 2)
    assert paper["rauc"] == pytest.approx(2 / 3)


def test_fpr_cap_and_loss_floor():
    traces = np.array([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    out = meal.repetition_plasticity(traces, sigma=0)
    assert out["fpr"] == pytest.approx(1.25)
    assert out["auc_loss"] == 0.0
    assert out["rauc"] == pytest.approx(3.0)


def test_training_traces_from_episodes(tmp_path):
    from .conftest import write_run

    run = load_run(
        write_run(
            tmp_path / "r",
            returns=lambda t, s, k: 0.0,
            n_tasks=2,
            cycles=2,
            episodes_per_segment=4,
            episode_return=lambda t, seg, n: float(seg),
        )
    )
    traces = meal.training_traces(run.episodes, run.schedule, None, bins_per_segment=2)
    assert traces[0].shape == (2, 2)
    np.testing.assert_allclose(traces[0], [[0, 0], [2, 2]])
    np.testing.assert_allclose(traces[1], [[1, 1], [3, 3]])
    out = meal.sequence_plasticity(traces, sigma=0)
    # task 0 has a zero repetition-0 baseline (n/a); task 1: AUC ratio 3 / 1
    assert np.isnan(meal.repetition_plasticity(traces[0], sigma=0)["rauc"])
    assert out["rauc"] == pytest.approx(3.0)


def test_default_forgetting_is_the_released_codes_weighted_formula(hand_run):
    """Table 2's F lies in [0, 1] (FT 0.899 with P - A = 1.115): MEAL's released weighted
    formula, not eq. 2, produced it; eq. 2 is forgetting="paper"."""
    run = load_run(hand_run)
    default = meal.meal_metrics(run.eval, run.schedule, NORMS)
    weighted = meal.meal_metrics(run.eval, run.schedule, NORMS, forgetting="weighted")
    assert default == weighted
    per_task = meal.forgetting_per_task(run.eval, run.schedule, NORMS)
    task0 = (0.6 + 0.8 * np.exp(-2)) / (1 + np.exp(-2))  # e = 1.0 at step 100, then .4, .2
    np.testing.assert_allclose(per_task.to_numpy(), [task0, 0.2 / 0.8])
    assert list(per_task.index) == [0, 1]  # the last task has no later tasks
    # a task that never scores is skipped (the released code's `any(curve > 0)`), one that
    # scores but ends its training at 0 forgets nothing
    curves = {0: np.zeros(4), 1: np.array([1.0, 0.0, 0.0, 0.0]), 2: np.ones(4)}
    vals = meal.forgetting_values(method="weighted", curves=curves, train_end_idx={0: 1, 1: 1})
    assert np.isnan(vals[0]) and vals[1] == 0.0
    assert meal.meal_forgetting(method="weighted", curves=curves, train_end_idx={0: 1, 1: 1}) == 0
    with pytest.raises(ValueError, match="known"):
        meal.meal_metrics(run.eval, run.schedule, NORMS, forgetting="average")


def test_curves_are_drawn_against_the_runs_step_unit(tmp_path):
    """Issue 23: MEAL's report axes said agent steps for env steps."""
    from cl_suites.metrics import cora
    from cl_suites.metrics.plots import plot_continual_eval
    from cl_suites.metrics.runs import combined_eval, task_names
    from tests.metrics.conftest import HAND, write_run

    meal_run = load_run(
        write_run(
            tmp_path / "meal",
            returns=HAND,
            extra_meta={"step_unit": "env steps (one joint action of all agents)"},
        )
    )
    plain = load_run(write_run(tmp_path / "plain", returns=HAND))
    assert (meal_run.step_unit, plain.step_unit) == ("env steps", "agent steps")
    curves = cora.continual_eval_curves(combined_eval([meal_run]), 1, 50)
    fig = plot_continual_eval(
        curves, meal_run.schedule, task_names([meal_run]), step_unit=meal_run.step_unit
    )
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {"env steps"}
