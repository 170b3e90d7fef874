"""``benchmarks.learning.cora_learning.score_cora`` scores a CORA run as it trains: points already
scored from the same snapshot are kept, a point whose nearest snapshot changed is scored
again, and a point the run has not reached is left out (issue 28 item 3's ``compare``);
our training returns are counted as CORA counts them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch as th

from benchmarks.learning import cora_learning

BUDGET = cora_learning.Budget(pairs=(0, 1), steps_per_task=1000, eval_every=500, eval_episodes=3)


class RecordingScorer:
    """Stands in for the evaluator: one row per task and split, the step as the return."""

    scored: list[int] = []

    def __init__(self, budget, seed, episodes=None):
        self.episodes = episodes or budget.eval_episodes

    def load_cora(self, state):
        assert state == {"w": 1}

    def score(self, step):
        RecordingScorer.scored.append(step)
        return [
            {
                "total_step": step,
                "task_id": t,
                "split": split,
                "mean_return": float(step),
                "episodes": self.episodes,
            }
            for t in (0, 1)
            for split in ("train", "test")
        ]

    def close(self):
        pass


def _snapshot(cora_dir: Path, train_task: int, step: int) -> None:
    path = cora_dir / "snapshots" / f"cycle0_task{2 * train_task}_step{step:09d}.tar"
    path.parent.mkdir(parents=True, exist_ok=True)
    th.save({"model_state_dict": {"w": 1}}, path)


def test_scores_are_kept_rescored_when_the_snapshot_changes_and_unreached_points_left_out(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(cora_learning, "Scorer", RecordingScorer)
    RecordingScorer.scored = []
    out = tmp_path / "scores.csv"
    _snapshot(tmp_path, 0, 380)  # gap 120 to task 0's 500, within eval_every / 4: scored
    first = cora_learning.score_cora(tmp_path, BUDGET, 0, out)
    assert RecordingScorer.scored == [500]  # 1000 and task 1 not reached
    assert set(first.snapshot) == {"cycle0_task0_step000000380.tar"}

    _snapshot(tmp_path, 0, 1000)
    _snapshot(tmp_path, 1, 490)  # task 1's 500 (total step 1500)
    RecordingScorer.scored = []
    second = cora_learning.score_cora(tmp_path, BUDGET, 0, out)
    assert RecordingScorer.scored == [1000, 1500]  # 500 kept
    assert sorted(set(second.total_step)) == [500, 1000, 1500]
    assert pd.read_csv(out).equals(second)

    _snapshot(tmp_path, 0, 520)  # now nearer to 500 than 380: scored again
    RecordingScorer.scored = []
    cora_learning.score_cora(tmp_path, BUDGET, 0, out)
    assert RecordingScorer.scored == [500]
    RecordingScorer.scored = []
    cora_learning.score_cora(tmp_path, BUDGET, 0, out, reuse=False)
    assert RecordingScorer.scored == [500, 1000, 1500]


def test_a_run_without_a_reached_point_gives_no_rows_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cora_learning, "Scorer", RecordingScorer)
    _snapshot(tmp_path, 0, 100)
    out = tmp_path / "scores.csv"
    assert cora_learning.score_cora(tmp_path, BUDGET, 0, out).empty
    assert not out.exists()


def test_our_training_returns_leave_out_the_games_a_task_switch_cut(tmp_path):
    """CORA reports a game only at its real end; our log also holds the games a switch cut
    (at the task's last step, return so far): the curve leaves them out, as CORA counts."""
    pd.DataFrame(
        {
            "total_step": [500, 990, 1000, 1000, 1500, 2000],
            "task_id": [0, 0, 0, 0, 1, 1],
            "episode_return": [1.0, 0.5, -0.01, -0.02, 0.9, -0.03],
            "episode_length": [5, 7, 3, 9, 4, 2],
        }
    ).to_csv(tmp_path / "episodes.csv", index=False)
    returns = cora_learning.our_training_returns(tmp_path, BUDGET)
    assert returns.to_dict("list") == {
        "task": [0, 0, 1],
        "step": [500, 990, 500],
        "episode_return": [1.0, 0.5, 0.9],
    }
