"""Issue 55 deliver 4 and issue 54's boundary order: every task's end is an evaluation
and checkpoint point whatever the cadence (a note says so, once, and metadata.json keeps
it), the end of a task is evaluated before any task-switch hook changes the network, and
a plug-in hook that raises is one line naming the plug-in, the hook and how to resume."""

from __future__ import annotations

import pytest
import torch as th

from cl_suites.cli import main
from cl_suites.core.evaluation import Evaluator
from cl_suites.job.main_job import run_main_job
from cl_suites.job.run_spec import cadence_note, resolve_job
from cl_suites.job.torch.checkpoint import CheckpointCallback
from cl_suites.rundir.runlog import read_eval, read_metadata

th.set_num_threads(1)

JOB = dict(suite="Diagnostic", learner="ppo", preset="small", seed=3, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 600,
    "eval_every": 400,
    "eval_episodes": 2,
    "report": False,
    "progress": False,
}
PLUGINS = "tests.helpers.boundary_plugins"


def _run(tmp_path, name, method, **extra):
    run_dir = tmp_path / name
    run_main_job(
        run_dir=run_dir, resume=False, method=method, overrides={**OVERRIDES, **extra}, **JOB
    )
    return run_dir


def test_procgen6_small_with_2000_steps_per_task_evaluates_every_task_end():
    spec = resolve_job(
        suite="Procgen6", method="ft", preset="small", seed=0,
        overrides={"steps_per_task": 2000}, probe_device=False,
    )  # fmt: skip
    ends = [seg.end_step for seg in spec.schedule]
    assert spec.sequence.eval_every == 4000 and spec.options.checkpoint_every == 4000
    note = cadence_note(spec)
    assert note is not None and "eval_every=4000" in note and "checkpoint_every=4000" in note
    assert "\n" not in note
    ev = Evaluator(spec.sequence, task_ends=ends, env_source=object())
    points = ev.points(0, ends[-1])
    assert set(ends) <= set(points), (ends, points)
    # per-task cadence (MEAL's): the task's end too, when the cadence does not reach it
    per_task = Evaluator(
        spec.sequence, every=1500, segments=spec.schedule, task_ends=ends, env_source=object()
    )
    assert set(ends) <= set(per_task.points(0, ends[-1]))


def test_a_run_evaluates_and_checkpoints_every_task_end_and_notes_it_once(tmp_path, capsys):
    run_dir = _run(tmp_path, "ft", "ft")
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note:") and "task ends" in line]
    assert len(notes) == 1, err
    meta = read_metadata(run_dir)
    assert meta["evaluation"]["cadence_note"] in notes[0]
    ends = [seg["end_step"] for seg in meta["schedule"]]
    steps = set(read_eval(run_dir).total_step)
    assert set(ends) <= steps, (ends, sorted(steps))
    # checkpoints: the cadence and every task's end (the callback's points)
    cb = CheckpointCallback(run_dir / "x", 400, None, None, None, task_ends=ends)
    assert [cb._point_after(s) for s in (0, 400, ends[0])] == [400, ends[0], 800]


@pytest.fixture(scope="module")
def ft_and_resets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("boundary")
    return (
        _run(tmp, "ft", "ft"),
        _run(tmp, "reset", f"{PLUGINS}:HeadReset"),
        _run(tmp, "reset-end", f"{PLUGINS}:HeadReset", only_at_end=True),
    )


def _rows(run_dir, step):
    ev = read_eval(run_dir).drop(columns="wall_time")
    return ev[ev.total_step == step].reset_index(drop=True)


def test_the_end_of_a_task_is_evaluated_before_a_head_reset_hook(ft_and_resets):
    ft, reset, reset_end = ft_and_resets
    ends = [seg["end_step"] for seg in read_metadata(ft)["schedule"]]
    # a reset at every switch: the first task's end describes the network ft has there
    assert _rows(reset, ends[0]).equals(_rows(ft, ends[0]))
    # a reset only at the sequence's end: training equals ft's, so every task end does
    for end in ends:
        assert _rows(reset_end, end).equals(_rows(ft, end)), end
    assert (
        read_eval(reset_end)
        .drop(columns="wall_time")
        .equals(read_eval(ft).drop(columns="wall_time"))
    )


def test_a_failing_plugin_hook_is_one_line_naming_it_and_how_to_resume(tmp_path, capsys):
    run_dir = tmp_path / "fails"
    code = main([
        "run", "--suite", "Diagnostic", "--method", f"{PLUGINS}:Fails", "--learner", "ppo",
        "--preset", "small", "--set", "n_tasks=2", "--set", "show_task=false",
        "--steps-per-task", "200", "--eval-every", "200", "--eval-episodes", "1",
        "--set", "report=false", "--set", "progress=false", "--run-dir", str(run_dir),
    ])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    line = errors[0]
    assert f"{PLUGINS}:Fails" in line and "(Fails)" in line and "on_task_switch" in line
    assert "RuntimeError: the head is gone" in line
    assert f"cl-suites run --resume --run-dir {run_dir}" in line
    assert "unexpected" not in line
