"""The report writes every artefact for a two-method, two-seed fixture."""

from __future__ import annotations

import pandas as pd
import pytest

from cl_suites.metrics import build_report

from .conftest import learning_curve, write_run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for method in ("ft", "clear"):
        for seed in (0, 1):
            dirs.append(
                write_run(
                    root / f"{method}-{seed}",
                    method=method,
                    seed=seed,
                    suite="Toy3",
                    returns=learning_curve(method, seed),
                    cycles=2,
                    steps_per_task=1000,
                    eval_every=50,
                    splits=("train", "test"),
                    window=5,
                    episode_return=lambda t, seg, n: float(n + seg),
                )
            )
    dirs.append(
        write_run(
            root / "ste-0",
            method="ste",
            n_tasks=1,
            returns=lambda t, s, k: 1.0,
            steps_per_task=1000,
            eval_every=50,
        )
    )
    return build_report(dirs, root / "out", bootstrap_reps=200, progress=False)


def test_every_artefact_is_written(report):
    out = report.out_dir
    for name in (
        "report.html",
        "summary.md",
        "summary.csv",
        "summary.tex",
        "notes.md",
        "Toy3/continual_eval.png",
        "Toy3/final_performance.md",
        "Toy3/final_performance.csv",
        "Toy3/final_performance.tex",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for method in ("ft", "clear"):
        for metric in ("F", "Z"):
            for ext in ("png", "md", "csv", "tex"):
                assert (out / f"Toy3/{method}_{metric}.{ext}").is_file()


def test_html_is_self_contained_and_summary_has_no_nan(report):
    page = report.html.read_text()
    assert page.count("data:image/png;base64,") == 1 + 2 * 2
    assert 'src="http' not in page and "<link" not in page
    summary = pd.read_csv(report.out_dir / "summary.csv", index_col=[0, 1], keep_default_na=False)
    assert list(summary.index.get_level_values("method")) == ["clear", "ft"]
    assert not summary.astype(str).apply(lambda c: c.str.contains("nan")).any().any()
    assert summary.loc[("Toy3", "ft"), "seeds"] == 2
    text = (report.out_dir / "summary.md").read_text()
    assert "±" in text and "nan" not in text.lower()


def test_cora_tables_show_clear_forgets_less(report):
    s = report.summary
    f = {m: float(s.loc[("Toy3", m), "CORA F"].split(" ")[0]) for m in ("ft", "clear")}
    assert f["clear"] < f["ft"]


def test_a_meal_task_without_a_bound_is_na_with_its_reason(tmp_path):
    """Issue 29 item 4: a kitchen with MEAL's single-agent bound 0 has no normaliser: the
    report leaves it out of MEAL A/F/P and says so for that task, with the reason."""
    reason = "no score bound: MEAL's single-agent max-soup bound is 0 (one agent ...)"
    layouts = [
        {"task_id": t, "task_name": f"task{t}", "no_bound": reason if t == 1 else None}
        for t in range(3)
    ]
    run = write_run(
        tmp_path / "meal",
        suite="MEAL-3",
        method="ewc",
        n_tasks=3,
        returns=lambda t, s, k: {0: 1.0, 1: 5.0, 2: 3.0}[t],
        steps_per_task=100,
        eval_every=100,
        extra_meta={"score_normalizers": {"0": 2.0, "1": None, "2": 2.0}, "layouts": layouts},
    )
    res = build_report([run], tmp_path / "out", bootstrap_reps=20)
    row = res.summary.iloc[0]
    assert row["MEAL A"].startswith("1.000")  # (1/2 + 3/2) / 2: task 1 left out, not / 0
    assert row["MEAL P"].startswith("1.000")
    (note,) = [n for n in res.notes if "task 1 (task1): n/a" in n]
    assert reason in note and "over the tasks with a score bound" in note
    assert "task 0 (" not in note and "task 2 (" not in note
