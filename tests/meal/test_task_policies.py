"""The policy of every task's end (``keep_task_policies``) in both MEAL learners, loaded
back, and MEAL's coordination matrix of a real run (issue 52 item 4).

Every MEAL run here is the tiny configuration of ``test_meal_job.py`` and
``test_meal_jax_job.py`` (MEAL-2, generated easy kitchens of layout seed 0, 4 envs x 2
agents, 512 env steps per task, 100-step episodes, a checkpoint every 128 steps). Each run
records what the evaluator's policy did at every evaluation (its observations, task ids
and greedy actions), so that a loaded task policy is compared with the run's own
evaluation policy of that task's end on the same observations.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import shutil

import numpy as np
import pytest
import torch as th

pytest.importorskip("meal")

from cl_suites.cli import main
from cl_suites.core.evaluation import EVAL_SEED_OFFSET, Evaluator
from cl_suites.core.task import task_seed
from cl_suites.errors import InputError
from cl_suites.job import task_policies as tp
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.job.torch.task_policies import read_task_policy
from cl_suites.meal.evaluation import cross_play
from cl_suites.metrics import meal
from cl_suites.rundir.checkpoint_files import CheckpointError
from cl_suites.rundir.runlog import read_eval
from cl_suites.rundir.task_policies import remove_task_policies_after, task_policy_files
from tests.helpers.kill_drills import jax_run_dies_after_checkpoint, torch_run_dies_at

pytestmark = pytest.mark.usefixtures("compile_cache")

th.set_num_threads(1)

TINY = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
    "layout_seed": 0,
}
LEARNERS = {  # learner -> its own settings (ppo: as its job tests fix them)
    "ppo": {"learning_rate": 0.03, "ent_coef": 0.01},
    "ppo-jax": {},  # its evaluation at task 0's end delivers a soup (mean return 10)
}
EXT = {"ppo": "pt", "ppo-jax": "npz"}
CALLS_KEPT = 4  # policy calls of each evaluation recorded


def _recording(recorded, on_eval=None):
    """``Evaluator.evaluate`` that keeps the first calls of its policy at every step:
    ``recorded[step] = [(obs, task_ids, actions), ...]``; ``on_eval(step)`` first."""
    evaluate = Evaluator.evaluate

    def spy(self, total_step, policy):
        if on_eval is not None:
            on_eval(int(total_step))
        calls = recorded.setdefault(int(total_step), [])

        def watched(obs, task_ids, *rest):
            actions = policy(obs, task_ids, *rest)
            if len(calls) < CALLS_KEPT:
                calls.append((np.array(obs), np.array(task_ids), np.array(actions)))
            return actions

        watched.needs_previous_action_reward = getattr(
            policy, "needs_previous_action_reward", False
        )
        return evaluate(self, total_step, watched)

    return spy


def _run(run_dir, learner, kill_at=None, resume=False, on_eval=None, **extra):
    """A tiny MEAL-2 run of ``learner`` into ``run_dir``; returns what its evaluator's
    policy did. ``kill_at``: killed (as by kill -9) at the first training step at or
    after it (torch) or right after the first checkpoint at or after it (ppo-jax);
    ``on_eval(step)``: called at every evaluation."""
    recorded: dict[int, list] = {}
    overrides = {**TINY, **LEARNERS[learner], **extra}
    kwargs = dict(suite="MEAL-2", method="ft", learner=learner, preset="small", seed=0,
                  num_envs=4, run_dir=run_dir, overrides=overrides)  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Evaluator, "evaluate", _recording(recorded, on_eval))
        if kill_at is None:
            dying = contextlib.nullcontext()
        elif learner == "ppo":
            dying = torch_run_dies_at(kill_at)
        else:
            dying = jax_run_dies_after_checkpoint(kill_at)
        with dying:
            run_main_job(resume=resume, **kwargs)
    return recorded


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninterrupted tiny run per learner: ``{learner: (run_dir, recorded)}``."""
    out = {}
    for learner in LEARNERS:
        run_dir = tmp_path_factory.mktemp(f"run-{learner}")
        out[learner] = (run_dir, _run(run_dir, learner))
    return out


def test_keep_task_policies_is_on_for_meal_and_off_elsewhere():
    def keep(suite, **overrides):
        spec = resolve_job(suite=suite, method="ft", learner=None, preset="small",
                           num_envs=None, overrides=overrides)  # fmt: skip
        return spec.options.keep_task_policies

    assert keep("MEAL-2") is True and keep("Diagnostic") is False
    assert keep("MEAL-2", keep_task_policies=False) is False
    assert keep("Diagnostic", keep_task_policies=True) is True
    with pytest.raises(InputError, match="keep_task_policies"):
        keep("MEAL-2", keep_task_policies="sometimes")


@pytest.mark.slow  # two MEAL runs, one compiles the JAX learner
@pytest.mark.parametrize("learner", list(LEARNERS))
def test_a_meal_run_keeps_each_tasks_policy_as_plain_data(runs, learner):
    run_dir, _ = runs[learner]
    files = task_policy_files(run_dir)
    assert [p.name for p in files.values()] == [f"task-00{i}.{EXT[learner]}" for i in (0, 1)]
    # the checkpoint retention (newest two) went on past them: they are never deleted
    others = sorted(p.name for p in (run_dir / "checkpoint").iterdir() if p not in files.values())
    assert others == (
        ["step-000000000896.pt", "step-000000000896.sha256",
         "step-000000001024.pt", "step-000000001024.sha256"]
        if learner == "ppo"
        else ["jax_state.npz", "jax_state.prev.npz"]
    )  # fmt: skip
    for segment, path in files.items():
        if learner == "ppo":
            state = th.load(path, weights_only=True)  # no pickle of an object in it
            meta = {k: v for k, v in state.items() if k != "policy"}
            assert all(isinstance(v, th.Tensor) for v in state["policy"].values())
            assert not any("optimizer" in k for k in state["policy"])
        else:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                assert all(k.startswith("params/") for k in data.files if k != "meta")
        assert meta["segment"] == meta["task_id"] == segment
        assert meta["total_step"] == 512 * (segment + 1) and meta["cycle"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("learner", list(LEARNERS))
def test_a_loaded_task_policy_acts_as_the_runs_evaluation_policy_at_that_end(runs, learner):
    """On the observations the evaluator's policy saw at a task's end, the loaded policy
    of that end chooses the same greedy actions; the other end's policy (one task more
    or less of training) differs somewhere, so the comparison can tell them apart."""
    run_dir, recorded = runs[learner]
    spec = tp.run_spec(run_dir)
    assert spec.learner == learner
    files = task_policy_files(run_dir)
    policies = {k: tp.load_task_policy(path, spec) for k, path in files.items()}
    differs = False
    for segment, end in ((0, 512), (1, 1024)):
        calls = recorded[end]
        assert len(calls) == CALLS_KEPT
        for obs, task_ids, actions in calls:
            np.testing.assert_array_equal(policies[segment](obs, task_ids), actions)
            differs |= not np.array_equal(policies[1 - segment](obs, task_ids), actions)
    assert differs
    # the directory does as well as the spec
    obs, task_ids, actions = recorded[512][0]
    np.testing.assert_array_equal(tp.load_task_policy(files[0], run_dir)(obs, task_ids), actions)


@pytest.mark.slow
@pytest.mark.parametrize("learner", list(LEARNERS))
def test_cross_play_of_a_task_policy_with_itself_replays_the_runs_evaluation(runs, learner):
    """Both agents on the loaded policy of a task's end, in the envs the evaluator played
    at that end (its seeds, its episodes), deliver the soups ``eval.csv`` holds for every
    kitchen: policy, observations and kitchens are the run's own."""
    run_dir, _ = runs[learner]
    spec = tp.run_spec(run_dir)
    evals = read_eval(run_dir)
    soups = []
    for segment, path in task_policy_files(run_dir).items():
        policy = tp.load_task_policy(path, spec)
        end = spec.schedule[segment].end_step
        for task in (0, 1):
            seed = task_seed(spec_seed(run_dir) + EVAL_SEED_OFFSET, end, 2 * task)
            got = cross_play(spec.meal, task, [policy, policy], episodes=2, seed=seed)
            row = evals[(evals.total_step == end) & (evals.task_id == task)]
            assert got * 20 == row.mean_return.item(), (segment, task)
            soups.append(got)
    if learner == "ppo-jax":  # the comparison sees soups, not only zeros
        assert max(soups) > 0


def spec_seed(run_dir):
    return int(json.loads((run_dir / "metadata.json").read_text())["seed"])


@pytest.mark.slow
@pytest.mark.parametrize("learner", list(LEARNERS))
def test_the_coordination_matrix_of_a_real_run(runs, learner, tmp_path):
    """2 x 2 for MEAL-2, stored beside the run; each diagonal cell is ``cross_play`` with
    both agents on that task's policy over the kitchen's bound; ``cl-suites report
    --coordination`` computes it and the report draws and summarises it."""
    run_dir, _ = runs[learner]
    m = tp.coordination_matrix_of_run(run_dir, episodes=4)
    assert m.shape == (2, 2) and np.isfinite(m).all() and (m >= 0).all()
    np.testing.assert_array_equal(meal.read_coordination_matrix(run_dir), m)
    spec = tp.run_spec(run_dir)
    suite = spec.meal
    for i, path in task_policy_files(run_dir).items():
        policy = tp.load_task_policy(path, spec)
        soups = cross_play(suite, i, [policy, policy], episodes=4)
        bound = suite.score_normalizers()[i] / meal.REWARD_SCALE
        assert m[i, i] == soups / bound
    (run_dir / meal.COORDINATION_FILE).unlink()
    out = tmp_path / "report"
    code = main(["report", str(run_dir), "--coordination", "--coordination-episodes", "4",
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    np.testing.assert_array_equal(meal.read_coordination_matrix(run_dir), m)  # same cells
    assert (out / "MEAL-2" / "ft_coordination.png").is_file()
    assert "coord. F" in (out / "summary_meal.csv").read_text().splitlines()[0]
    assert "coordination matrix n/a" not in (out / "notes.md").read_text()


@pytest.mark.slow  # a kill and a resume of each learner
@pytest.mark.parametrize("learner", list(LEARNERS))
def test_kill_and_resume_writes_the_same_task_policies(runs, learner, tmp_path):
    """Killed in task 1 (after the checkpoint at 640), resumed: both files equal the
    uninterrupted run's bit for bit. A file of a segment past the checkpoint (left by a
    run killed later than its last checkpoint) is removed by the resume and written again."""
    full, _ = runs[learner]
    cut = tmp_path / "cut"
    _run(cut, learner, kill_at=700 if learner == "ppo" else 640)
    assert [p.name for p in task_policy_files(cut).values()] == [f"task-000.{EXT[learner]}"]
    stale = cut / "checkpoint" / f"task-001.{EXT[learner]}"
    shutil.copy(task_policy_files(cut)[0], stale)  # task 0's policy under task 1's name
    seen = []
    _run(cut, learner, resume=True, on_eval=lambda step: seen.append((step, stale.exists())))
    assert seen[0] == (768, False)  # gone when the resumed run first evaluates
    a, b = task_policy_files(full), task_policy_files(cut)
    assert list(a) == list(b) == [0, 1]
    for segment in a:
        assert a[segment].read_bytes() == b[segment].read_bytes(), segment


def test_a_resume_removes_the_task_policies_past_its_checkpoint(tmp_path):
    class Seg:
        def __init__(self, end_step):
            self.end_step = end_step

    schedule = [Seg(512), Seg(1024)]
    (tmp_path / "checkpoint").mkdir()
    for name in ("task-000.pt", "task-001.pt", "task-002.pt", "step-000000000640.pt"):
        (tmp_path / "checkpoint" / name).write_bytes(b"x")
    removed = remove_task_policies_after(tmp_path, schedule, 640)
    assert sorted(p.name for p in removed) == ["task-001.pt", "task-002.pt"]
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [
        "step-000000000640.pt",
        "task-000.pt",
    ]
    assert [p.name for p in remove_task_policies_after(tmp_path, schedule, -1)] == ["task-000.pt"]


class Payload:
    def __reduce__(self):
        return (print, ("ran",))


def test_a_crafted_task_policy_file_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "task-000.pt"
    path.write_bytes(pickle.dumps({"format": "x", "policy": Payload()}, protocol=2))
    with pytest.raises(CheckpointError) as err:
        read_task_policy(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert "ran" not in capsys.readouterr().out
    th.save({"format": "another", "policy": {}}, path)
    with pytest.raises(CheckpointError, match="task-policy format 'another'"):
        read_task_policy(path)


def test_a_diagnostic_run_keeps_task_ends_inside_rollouts_when_asked(tmp_path, capsys):
    """Diagnostic's task ends (every 304 steps with the small preset) fall inside a
    rollout: each file is the policy its evaluation acted with at that step; with two
    cycles every segment keeps its own (``task-000`` .. ``task-005``)."""
    recorded: dict[int, list] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Evaluator, "evaluate", _recording(recorded))
        run_main_job(suite="Diagnostic", method="ft", learner="ppo", preset="small", seed=0,
                     num_envs=None, run_dir=tmp_path, resume=False,
                     overrides={"steps_per_task": 300, "cycles": 2, "report": False,
                                "keep_task_policies": True})  # fmt: skip
    files = task_policy_files(tmp_path)
    schedule = json.loads((tmp_path / "metadata.json").read_text())["schedule"]
    ends = [seg["end_step"] for seg in schedule]
    assert list(files) == list(range(6)) and ends == [304 * (k + 1) for k in range(6)]
    spec = tp.run_spec(tmp_path)
    for segment, path in files.items():
        state = read_task_policy(path)
        assert (state["total_step"], state["cycle"]) == (ends[segment], segment // 3)
        assert state["task_id"] == schedule[segment]["task_id"]
        policy = tp.load_task_policy(path, spec)
        for obs, task_ids, actions in recorded[ends[segment]]:
            np.testing.assert_array_equal(policy(obs, task_ids), actions)
    with pytest.raises(InputError, match="coordination matrix is MEAL's"):
        tp.coordination_matrix_of_run(tmp_path)
    capsys.readouterr()
    assert main(["report", str(tmp_path), "--coordination", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none of the runs is a MEAL run" in err[0]


def test_report_coordination_without_task_policies_is_one_line(tmp_path, capsys):
    from tests.metrics.test_meal_2026 import write_meal_run

    run = write_meal_run(tmp_path / "r")
    code = main(["report", str(run), "--coordination", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err
    assert "no per-task checkpoints" in lines[0] and "keep_task_policies" in " ".join(err.split())
    assert not (tmp_path / "out").exists()  # refused before the report
