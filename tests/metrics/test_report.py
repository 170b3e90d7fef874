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
