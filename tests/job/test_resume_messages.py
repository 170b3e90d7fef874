"""What a refused or inexact resume says (issue 55 items 4 and 6)."""

from __future__ import annotations

import copy
import json

import pytest

from cl_suites.errors import RunDirConflictError
from cl_suites.job.shared import check_resumable


def _metadata(steps=(100, 100, 100), cycles=1, order=("a", "b", "c"), num_envs=1) -> dict:
    schedule, start = [], 0
    for c in range(cycles):
        for t, name in enumerate(order):
            end = start + steps[t]
            schedule.append(
                {"index": len(schedule), "cycle": c, "task_id": t, "task_name": name}
                | {"start_step": start, "end_step": end}
            )
            start = end
    return {
        "suite": "Diagnostic",
        "method": "ft",
        "preset": "small",
        "learner": "ppo",
        "seed": 0,
        "num_envs": num_envs,
        "steps_per_task": list(steps),
        "cycles": cycles,
        "schedule": schedule,
    }


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"steps": (200, 200, 200)}, "steps_per_task: run has [100, 100, 100], requested [200, "),
        ({"cycles": 2}, "cycles: run has 1, requested 2"),
        ({"order": ("c", "b", "a")}, "task order: run has ['a', 'b', 'c'], requested ['c', "),
    ],
)
def test_a_refused_resume_names_the_schedule_field_that_differs(tmp_path, change, named):
    """Issue 55 item 4: not "schedule differs", but which field and both values."""
    (tmp_path / "metadata.json").write_text(json.dumps(_metadata()))
    with pytest.raises(RunDirConflictError) as info:
        check_resumable(tmp_path, _metadata(**change))
    assert named in str(info.value)


def test_a_schedule_that_differs_in_its_segments_alone_names_the_first(tmp_path):
    """Same settings, other segment bounds (e.g. budgets cut to another env count)."""
    old = _metadata()
    (tmp_path / "metadata.json").write_text(json.dumps(old))
    new = copy.deepcopy(old)
    new["schedule"][1]["end_step"] = 196
    new["schedule"][2]["start_step"] = 196
    with pytest.raises(RunDirConflictError) as info:
        check_resumable(tmp_path, new)
    assert "segment 1 (b): run has steps 100-200, requested 100-196" in str(info.value)


DIAG = dict(suite="Diagnostic", method="ft", learner="ppo", preset="small", seed=3, num_envs=None)
DIAG_OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 1000,
    "eval_every": 500,
    "checkpoint_every": 300,
    "report": False,
    "plasticity": False,
}


def _resume_output(tmp_path, capsys, monkeypatch, restorable: bool) -> str:
    from cl_suites.job.main_job import run_main_job
    from cl_suites.job.torch import checkpoint
    from tests.helpers.kill_drills import kill_run_at

    if not restorable:
        save_env_state = checkpoint.env_state

        def unrestorable(env):
            state = save_env_state(env)
            state["state"]["task_env"] = None  # as NetHack's: no simulator state
            state["state"]["task_env_note"] = "NLE cannot export its state"
            return state

        monkeypatch.setattr(checkpoint, "env_state", unrestorable)
    run_dir = tmp_path / "run"
    kill_run_at(run_dir, DIAG, DIAG_OVERRIDES, 1400)
    capsys.readouterr()
    run_main_job(run_dir=run_dir, resume=True, overrides=dict(DIAG_OVERRIDES), **DIAG)
    out = capsys.readouterr()
    return out.out + out.err


def test_an_inexact_resume_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    """Issue 55 item 6: where the simulator's state cannot be saved (MiniHack15's NetHack,
    CHORES, async envs), the resume says it is not bit-exact, and why."""
    text = _resume_output(tmp_path, capsys, monkeypatch, restorable=False)
    (line,) = [x for x in text.splitlines() if "not bit-exact" in x]
    assert line.startswith("note: resuming at step 1280")
    assert "NLE cannot export its state" in line and "8 running episode(s)" in line


def test_an_exact_resume_says_nothing_of_it(tmp_path, capsys, monkeypatch):
    text = _resume_output(tmp_path, capsys, monkeypatch, restorable=True)
    assert "bit-exact" not in text
