"""Evaluator records, the run log's incremental CSVs, and the random-agent run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from cl_suites.core.evaluation import Evaluator
from cl_suites.rundir.runlog import (
    EPISODE_COLUMNS,
    EVAL_COLUMNS,
    CorruptRunLogError,
    RunLog,
    read_episodes,
    read_eval,
    read_metadata,
)
from tests.helpers.toy_envs import toy_sequence


def constant_policy(action: int):
    def policy(obs, task_ids):
        assert len(obs) == len(task_ids)
        return np.full(len(obs), action)

    return policy


def test_evaluator_records_per_point_task_and_split(tmp_path):
    seq = toy_sequence(
        num_tasks=3, with_test=True, eval_every=10, eval_episodes=4, episode_length=5
    )
    with RunLog(tmp_path / "run", {"suite": "Toy"}) as log:
        ev = Evaluator(seq, seed=0, run_log=log, num_envs=2)
        points = [s for s in range(0, 35) if ev.maybe_evaluate(s, constant_policy(2))]
    assert points == [0, 10, 20, 30]
    frame = read_eval(tmp_path / "run")
    assert len(frame) == 4 * 3 * 2
    assert frame.groupby("total_step").size().tolist() == [6, 6, 6, 6]
    assert sorted(set(zip(frame.task_id, frame.split, strict=True))) == [
        (t, s) for t in range(3) for s in ("test", "train")
    ]
    assert (frame.mean_return == 10.0).all()  # 5 steps x reward 2
    assert (frame.episodes == 4).all() and (frame.std_return == 0).all()


def test_evaluator_train_only_tasks_have_one_split_and_no_cross_talk_with_training():
    seq = toy_sequence(num_tasks=2, with_test=False)
    ev = Evaluator(seq, seed=0)
    records = ev.evaluate(0, constant_policy(1))
    assert [(r["task_id"], r["split"]) for r in records] == [(0, "train"), (1, "train")]
    assert ev.next_eval_step == seq.eval_every
    again = ev.evaluate(0, constant_policy(1))
    assert [r["mean_return"] for r in again] == [r["mean_return"] for r in records]


def test_runlog_is_readable_mid_run_and_appends_on_resume(tmp_path):
    run = tmp_path / "run"
    log = RunLog(run, {"suite": "Toy", "seed": 3})
    log.log_eval(
        [
            {
                "total_step": 0,
                "task_id": 0,
                "task_name": "a",
                "split": "train",
                "mean_return": 1.5,
                "std_return": 0.1,
                "episodes": 10,
                "wall_time": 0.5,
            }
        ]
    )
    log.log_episodes([{"total_step": 7, "task_id": 0, "episode_return": 2.0, "episode_length": 7}])
    # still open: pandas reads what was flushed
    assert read_eval(run).mean_return.tolist() == [1.5]
    assert read_episodes(run).episode_length.tolist() == [7]
    assert tuple(pd.read_csv(run / "eval.csv").columns) == EVAL_COLUMNS
    assert tuple(pd.read_csv(run / "episodes.csv").columns) == EPISODE_COLUMNS
    meta = read_metadata(run)
    assert meta["seed"] == 3 and meta["versions"]["gymnasium"] and "start_time" in meta
    log.close()
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunLog(run, {"suite": "Toy"})
    with RunLog(run, resume=True) as log2:
        log2.log_episodes(
            [{"total_step": 9, "task_id": 1, "episode_return": 0.0, "episode_length": 2}]
        )
    assert read_episodes(run).total_step.tolist() == [7, 9]


def test_corrupt_logs_raise_clear_errors(tmp_path):
    with pytest.raises(CorruptRunLogError, match="metadata.json is missing"):
        read_metadata(tmp_path)
    (tmp_path / "metadata.json").write_text("{not json")
    with pytest.raises(CorruptRunLogError, match="not valid JSON"):
        read_metadata(tmp_path)
    (tmp_path / "eval.csv").write_text("total_step,wrong\n1,2\n")
    with pytest.raises(CorruptRunLogError, match="expected"):
        read_eval(tmp_path)


def test_random_agent_run_writes_complete_log(tmp_path):
    from cl_suites.random_agent import run_random_agent

    run = run_random_agent(
        "Procgen6",
        seed=0,
        run_dir=tmp_path / "r",
        num_envs=4,
        progress=False,
        steps_per_task=200,
        cycles=1,
        eval_every=400,
        eval_episodes=2,
    )
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["suite_id"] == "CLSuite/Procgen6-v0" and meta["method"] == "random"
    assert [s["end_step"] for s in meta["schedule"]] == [200, 400, 600, 800, 1000, 1200]
    frame = read_eval(run)
    # eval points 0, 400, 800 and the final one at 1200; 6 tasks x 2 splits each
    assert sorted(frame.total_step.unique().tolist()) == [0, 400, 800, 1200]
    assert len(frame) == 4 * 12
    episodes = read_episodes(run)
    assert episodes.total_step.is_monotonic_increasing
    assert set(episodes.task_id) <= set(range(6))


def test_tensorboard_scalars_are_written_when_requested(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    with RunLog(tmp_path / "run", {"suite": "Toy"}, tensorboard=True) as log:
        log.log_eval(
            [
                {
                    "total_step": 5,
                    "task_id": 0,
                    "task_name": "a",
                    "split": "test",
                    "mean_return": 1.0,
                    "std_return": 0.0,
                    "episodes": 1,
                    "wall_time": 0.1,
                }
            ]
        )
    assert list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))
