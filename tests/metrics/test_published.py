"""Published CORA / MEAL results as package data, and the report's comparison with them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cl_suites.metrics import build_report, load_run, published

from .conftest import HAND, write_run

PROCGEN = ("climber", "dodgeball", "ninja", "starpilot", "bigfish", "fruitbot")


def test_package_data_holds_the_papers_tables():
    one = published.published("Procgen6", "clear", "F")
    assert [(v.mean, v.error, v.table) for v in one] == [(-0.0, 0.0, "Table 1(a)")]
    (atari_ft,) = published.published("CLSuite/Atari6-v0", "ft", "F")  # IMPALA
    assert (atari_ft.mean, atari_ft.error, atari_ft.display()) == (2.3, 0.1, "2.3 ± 0.1")
    finals = {
        (v.task_name, v.split): (v.mean, v.error, v.table)
        for v in published.published("Procgen6", "clear", "final return")
    }
    assert finals[("climber", "test")] == (0.74, 0.04, "Table 6")
    assert finals[("fruitbot", "train")] == (27.04, 0.21, "Table 7")
    assert len(finals) == 12
    assert len(published.published("MiniHack15", "ft", "final return")) == 30
    (hang,) = [
        v for v in published.published("CHORES-VaryTask", "clear") if v.metric == "final return"
    ][:1]
    assert (hang.task_name, hang.mean) == ("hang_toilet_paper_402", -3.83)
    (cabinet,) = [
        v
        for v in published.published("CHORES-VaryTask", "clear", "final return")
        if v.task_name == "two_toilet_paper_cabinet_402"
    ]
    assert cabinet.mean == 12.71  # matched by task, not by Table 10's row order
    (ewc_a,) = published.published("MEAL-20", "ewc", "A")
    assert (ewc_a.mean, ewc_a.error, ewc_a.display()) == (0.839, 0.03, "0.839 ± 0.03")
    assert ewc_a.sem == pytest.approx(0.03 / 1.96)  # Table 2's ± is a 95% half-width
    (fpr,) = published.published("MEAL-10", "ft", "FPR", repeats=10)
    assert (fpr.mean, fpr.error, fpr.table) == (0.896, None, "Table 3")
    assert published.protocol("Procgen6")[1]["seeds"] == 20
    assert published.protocol("MEAL-20")[1]["steps_per_task"] == 10_000_000


def test_unknown_suite_or_method_has_no_published_values():
    assert published.published("Toy3", "ft") == []
    assert published.published("Procgen6", "random") == []
    assert published.published("MEAL-10", "ft", repeats=4) == []
    assert published.protocol("Diagnostic") is None


def test_agreement_within_two_combined_standard_errors():
    (v,) = published.published("Atari6", "ft", "F")  # 2.3 ± 0.1
    verdict, combined = published.agreement(2.5, 0.1, v)
    assert combined == pytest.approx(math.hypot(0.1, 0.1))
    assert verdict == "agrees"  # |0.2| <= 2 * 0.1414
    assert published.agreement(2.6, 0.1, v)[0] == "differs"  # |0.3| > 0.283
    # one seed: only the paper's error counts
    assert published.agreement(2.45, float("nan"), v) == ("agrees", pytest.approx(0.1))
    assert published.agreement(float("nan"), 0.1, v)[0] == "n/a"
    # a printed "± 0.00" is a rounded error: at least half a unit of the last digit
    (ft_a,) = published.published("MEAL-20", "ft", "A")  # 0.048 ± 0.00 (95% half-width)
    assert published.agreement(0.048, float("nan"), ft_a)[1] == pytest.approx(0.005 / 1.96)
    # Table 3 gives no error: with one seed nothing can be said
    (auc,) = published.published("MEAL-10", "ft", "AUC-loss", repeats=3)
    assert published.agreement(0.2, float("nan"), auc)[0] == "n/a"
    assert published.agreement(0.2, 0.01, auc)[0] == "differs"  # |0.046| > 2 * 0.01


def _procgen_runs(root, method, seeds=(0, 1)):
    return [
        write_run(
            root / f"{method}-{s}",
            method=method,
            seed=s,
            suite="Procgen6",
            n_tasks=6,
            task_names=PROCGEN,
            splits=("train", "test"),
            returns=lambda t, split, k, s=s: 0.74 + 0.01 * s if t == 0 else 0.1 * t + k / 1e4,
            steps_per_task=100,
            eval_every=50,
            extra_meta={"learner": "ppo"},
        )
        for s in seeds
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    dirs = [*_procgen_runs(root, "clear"), write_run(root / "toy", suite="Toy3", returns=HAND)]
    return build_report(dirs, root / "out", bootstrap_reps=50)


def test_report_shows_published_values_for_a_reported_pair_only(report):
    table = report.tables["Published"]
    assert set(table.index.get_level_values("suite")) == {"Procgen6"}  # none for Toy3
    row = table.loc[("Procgen6", "clear", "F (x10)")]
    assert row["paper"] == "-0.0 ± 0.0" and row["source"] == "CORA Table 1(a)"
    assert row["agreement"] in {"agrees", "differs"}
    assert "seeds 2 vs paper 20" in row["protocol differences"]
    assert "cycles 1 vs paper 5" in row["protocol differences"]
    assert "learner ppo vs paper IMPALA (V-trace)" in row["protocol differences"]
    comp = report.comparison.set_index(["metric", "task", "split"])
    climber = comp.loc[("final return", "climber", "test")]
    assert climber["paper"] == "0.74 ± 0.04"
    assert climber["ours"] == "0.74 ± 0.01" and climber["agreement"] == "agrees"
    page = report.html.read_text()
    assert "CORA Table 1(a)" in page and "CORA Table 6" in page
    assert "Toy3 / ft" not in page
    assert (report.out_dir / "published.csv").is_file()
    assert "Published" not in build_toy_only(report.out_dir.parent).tables


def build_toy_only(root):
    return build_report([root / "toy"], root / "out-toy", bootstrap_reps=20)


def test_meal_table_2_and_table_3_next_to_a_run(tmp_path):
    # published values are keyed by the suite name; few tasks keep the test fast
    norms = {str(t): 2.0 for t in range(3)}
    meal20 = write_run(
        tmp_path / "meal20",
        suite="MEAL-20",
        method="ewc",
        n_tasks=3,
        returns=lambda t, s, k: 1.64,
        steps_per_task=100,
        eval_every=100,
        extra_meta={"score_normalizers": norms, "num_agents": 2},
    )
    meal10 = write_run(
        tmp_path / "meal10",
        suite="MEAL-10",
        method="ft",
        n_tasks=3,
        cycles=3,
        returns=lambda t, s, k: 1.0,
        steps_per_task=100,
        eval_every=100,
        episode_return=lambda t, seg, n: float(n) / (1 + seg // 10),
        extra_meta={"score_normalizers": norms},
    )
    res = build_report([meal20, meal10], tmp_path / "out", bootstrap_reps=20)
    table = res.tables["Published"]
    a = table.loc[("MEAL-20", "ewc", "A")]
    assert (a["paper"], a["ours"], a["source"]) == ("0.839 ± 0.03", "0.820", "MEAL Table 2")
    # |0.019| <= 2 * 0.03 / 1.96 (one seed: only the paper's error counts)
    assert a["agreement"] == "agrees"
    assert (
        published.agreement(0.80, float("nan"), published.published("MEAL-20", "ewc", "A")[0])[0]
        == "differs"
    )  # |0.039| > 0.0306
    assert "seeds 1 vs paper 5" in a["protocol differences"]
    assert "steps/task 100 vs paper 10,000,000" in a["protocol differences"]
    # the protocol its authors say produced Table 2 (MEAL#10) and Table 3's repeats (MEAL#11)
    assert "1e8 env steps per task" in a["paper protocol"] and "MEAL#10" in a["paper protocol"]
    notes = dict(published.protocol_notes(res.comparison))
    assert set(notes) == {"MEAL Table 2", "MEAL Table 3"} and "MEAL#11" in notes["MEAL Table 3"]
    assert published.table_protocols("MEAL-20") == [("MEAL Table 2", notes["MEAL Table 2"])]
    assert all(v.protocol is None for v in published.published("Procgen6", "ft"))
    page = res.html.read_text()
    for note in notes.values():
        assert note in page.replace("&#39;", "'")
    fpr = table.loc[("MEAL-10", "ft", "FPR")]
    assert fpr["paper"] == "1.228" and fpr["source"] == "MEAL Table 3"
    assert fpr["ours"] != "n/a" and fpr["agreement"] == "n/a"  # no error on either side
    # the value is MEAL's code-variant FPR of the training traces
    run = load_run(meal10)
    traces = published_traces(run)
    expected = np.mean([v["fpr"] for v in traces])
    assert float(fpr["ours"]) == pytest.approx(expected, abs=5e-4)


def published_traces(run):
    from cl_suites.metrics import meal
    from cl_suites.metrics.report import PLASTICITY_BINS

    norms = {int(k): v for k, v in run.metadata["score_normalizers"].items()}
    traces = meal.training_traces(run.episodes, run.schedule, norms, PLASTICITY_BINS)
    return [meal.sequence_plasticity(traces)]
