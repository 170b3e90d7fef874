"""Issue 23 item 7: every report of a suite the papers report shows their published
baselines (reference rows and, for CORA's final returns, dotted lines in the continual
evaluation figure), also when the report holds only a user's own method."""

from __future__ import annotations

import pandas as pd

from cl_suites.metrics import build_report
from cl_suites.metrics.published import reference_finals, suite_baselines

from .conftest import write_run

PROCGEN = ["climber", "dodgeball", "ninja", "starpilot", "bigfish", "fruitbot"]


def test_report_of_an_own_method_shows_the_published_rows(tmp_path):
    run = write_run(
        tmp_path / "mine", method="cleanrl-ppo", suite="Procgen6", n_tasks=6,
        task_names=PROCGEN, splits=("train", "test"), returns=lambda t, s, step: 0.5,
    )  # fmt: skip
    res = build_report([run], tmp_path / "report", bootstrap_reps=20)
    page = res.html.read_text()
    assert "<h3>Published baselines</h3>" in page
    rows = pd.read_csv(res.out_dir / "Procgen6" / "published_baselines.csv", dtype=str)
    assert len(rows) == 70  # CORA's Procgen6 values: Table 1 F and Z and Table 6 finals
    climber = rows[(rows["method"] == "ft (IMPALA)") & (rows["task"] == "climber")]
    assert sorted(climber[["table", "split", "published"]].values.tolist()) == [
        ["Table 6", "test", "0.22 ± 0.04"],
        ["Table 7", "train", "0.24 ± 0.04"],
    ]
    summary = rows[rows["task"].isna()].set_index(["method", "metric"])["published"]
    assert summary[("ft (IMPALA)", "F")] == "1.2 ± 0.0"
    assert summary[("ft (IMPALA)", "Z")] == "-0.1 ± 0.0"


def test_reference_lines_are_the_papers_finals_of_the_reports_methods_and_ft():
    names = dict(enumerate(PROCGEN))
    own = reference_finals("Procgen6", ["cleanrl-ppo"], names)
    assert set(own["method"]) == {"ft"}  # the paper's fine-tuning baseline, always
    climber = own[(own["task_id"] == 0) & (own["split"] == "test")]
    assert climber["value"].tolist() == [0.22]
    both = reference_finals("Procgen6", ["cleanrl-ppo", "clear"], names)
    assert set(both["method"]) == {"ft", "clear"}
    assert both[(both["method"] == "clear") & (both["task_id"] == 0)]["value"].tolist()[0] == 0.74
    assert reference_finals("Diagnostic", ["ft"], {0: "cue-identity"}).empty
    assert suite_baselines("Diagnostic").empty
