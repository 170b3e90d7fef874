"""l2logger TSV export: layout, columns and JSON files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cl_suites.metrics import l2m, load_run
from cl_suites.metrics.l2logger_export import TSV_COLUMNS, export_l2logger

from .conftest import HAND, write_run


def test_export_layout_and_columns(tmp_path):
    run_dir = write_run(tmp_path / "run", returns=HAND, splits=("train", "test"))
    out = export_l2logger(run_dir, tmp_path / "l2", scenario_info={"complexity": "1-low"})
    info = json.loads((out / "logger_info.json").read_text())
    assert info == {"metrics_columns": ["reward"], "log_format_version": "1.1"}
    scen = json.loads((out / "scenario_info.json").read_text())
    assert scen["scenario_type"] == "custom" and scen["complexity"] == "1-low"
    worker = out / "ft-seed0"
    blocks = sorted(worker.iterdir(), key=lambda p: int(p.name.split("-")[0]))
    assert [b.name for b in blocks] == [
        "0-test",
        "1-train",
        "2-test",
        "3-train",
        "4-test",
        "5-train",
        "6-test",
    ]
    frames = [pd.read_csv(b / "data-log.tsv", sep="\t") for b in blocks]
    for b, f in zip(blocks, frames, strict=False):
        assert tuple(f.columns) == TSV_COLUMNS
        assert (f["block_type"] == b.name.split("-")[1]).all()
        assert (f["block_num"] == int(b.name.split("-")[0])).all()
        assert set(f["exp_status"]) == {"complete"} and set(f["block_subtype"]) == {"wake"}
        for p in f["task_params"]:
            assert set(json.loads(p)) == {"task_id", "split"}
    allrows = pd.concat(frames)
    assert allrows["exp_num"].is_monotonic_increasing and allrows["exp_num"].is_unique
    # evaluation block 1 (after training task 0): test split rewards = train + 0.5
    eb1 = frames[2].set_index("task_name")["reward"]
    assert eb1["task0"] == 10.5 and eb1["task2"] == 5.5
    assert len(frames[1]) == 10 and set(frames[1]["task_name"]) == {"task0"}
    assert pd.to_datetime(allrows["timestamp"], format="%Y%m%dT%H%M%S.%f").notna().all()


def test_export_warns_on_a_training_block_without_finished_episode(tmp_path):
    run_dir = write_run(tmp_path / "run", returns=HAND)
    episodes = pd.read_csv(run_dir / "episodes.csv")
    episodes[episodes["task_id"] != 1].to_csv(run_dir / "episodes.csv", index=False)
    with pytest.warns(UserWarning, match=r"training segment 1 \(task 1 task1, steps 100-200\)"):
        out = export_l2logger(run_dir, tmp_path / "l2")
    blocks = sorted((out / "ft-seed0").iterdir(), key=lambda p: int(p.name.split("-")[0]))
    assert [b.name for b in blocks] == [
        "0-test",
        "1-train",
        "2-test",
        "3-test",
        "4-train",
        "5-test",
    ]


def test_export_writes_the_lifetime_log_that_l2m_metrics_score(tmp_path):
    run_dir = write_run(tmp_path / "run", returns=HAND, splits=("train", "test"))
    out = export_l2logger(run_dir, tmp_path / "l2", worker="../evil")
    (worker,) = [p for p in out.iterdir() if p.is_dir()]
    assert worker.name.startswith("___evil-")  # a safe directory name
    rows = pd.concat(
        pd.read_csv(b / "data-log.tsv", sep="\t") for b in sorted(worker.iterdir())
    ).sort_values("exp_num")
    log = l2m.lifetime_log(load_run(run_dir))
    assert rows["exp_num"].tolist() == log["exp_num"].tolist()
    assert rows["reward"].tolist() == log["perf"].tolist()
    assert rows["block_num"].tolist() == log["block_num"].tolist()
