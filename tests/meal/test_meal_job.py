"""MEAL through the one main job: seeds, evaluation as MEAL's, exact resume, EWC vs FT.

Every run here shares one tiny configuration (MEAL-2, two generated easy kitchens, 4 envs
x 2 agents, 512 env steps per task, 100-step episodes), so the JAX kernels compile once
per process (``shared_engine``).
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch as th

pytest.importorskip("meal")

from baselines_sb3 import callbacks
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.job.torch import checkpoint
from cl_suites.rundir.runlog import (
    read_episode_soups,
    read_episodes,
    read_eval,
    read_heterogeneity,
    read_metadata,
)
from tests.helpers.kill_drills import kill_inside_first_checkpoint
from tests.helpers.thread_recording import record_threads

th.set_num_threads(1)

JOB = dict(suite="MEAL-2", learner="ppo", preset="small", seed=0, num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 128,
    "report": False,
    "learning_rate": 0.03,  # fixed here so that preset changes keep FT's drift visible
    "ent_coef": 0.01,
}


def _run(tmp_path_factory, name, method="ft", kill_at=None, **extra):
    """A MEAL-2 run; every checkpoint is also kept as ``kept-<step>.pt``."""
    run_dir = tmp_path_factory.mktemp(name)
    save = checkpoint.save_checkpoint

    def keep_copies(directory, model, method_, venv, evaluator, extra_=None):
        path = save(directory, model, method_, venv, evaluator, extra_)
        shutil.copy(path, path.with_name(f"kept-{venv.cursor.total_step}.pt"))
        return path

    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if kill_at is not None and self.total_step >= kill_at:
            raise KeyboardInterrupt("simulated kill")
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint, "save_checkpoint", keep_copies)
        mp.setattr(callbacks.ContinualEvalCallback, "_on_step", killer)
        kwargs = dict(method=method, run_dir=run_dir, overrides={**OVERRIDES, **extra}, **JOB)
        if kill_at is None:
            run_main_job(resume=False, **kwargs)
        else:
            with pytest.raises(KeyboardInterrupt):
                run_main_job(resume=False, **kwargs)
    return run_dir


@pytest.fixture(scope="module")
def ft_run(tmp_path_factory):
    return _run(tmp_path_factory, "ft")


def test_run_seed_seeds_the_kitchens_and_layout_seed_fixes_them():
    def walls(seed, **overrides):
        spec = resolve_job(
            suite="MEAL-2",
            method="ft",
            learner="ppo",
            preset="small",
            num_envs=4,
            overrides=overrides,
            seed=seed,
        )
        return [np.asarray(t.layout["wall_idx"]).tolist() for t in spec.meal.layouts]

    assert walls(1) == walls(1)
    assert walls(1) != walls(2)  # MEAL's seeds train on different generated sequences
    assert walls(1, layout_seed=7) == walls(2, layout_seed=7) == walls(7)
    with pytest.raises(ValueError, match="layout_seed"):
        resolve_job(
            suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
            overrides={"seed": 3}, seed=0,
        )  # fmt: skip


def test_meal_authors_preset_is_the_authors_reproduction_protocol():
    """``--preset meal-authors``: the protocol MEAL's authors say produced their results
    (TTomilin/MEAL#10 points 1-3; the later trainer's defaults that their reproduction
    script keeps): 2048 envs x 400 steps, 122 whole updates of the 1e8 budget, evaluation
    every 5 updates with 10 episodes, shaping over 5e7, lr 1e-3 annealed and Adam reset per
    task; the same on ``ppo-jax``; refused off MEAL in one line naming the presets."""
    kwargs = dict(method="ewc", preset="meal-authors", num_envs=None, overrides={}, seed=1)
    spec = resolve_job(suite="MEAL-20", learner="ppo", **kwargs)
    update = 2048 * 400
    assert spec.num_envs == 2048 and spec.hp["learner"]["n_steps"] == 400
    assert [t.budget for t in spec.sequence.tasks] == [122 * update] * 20
    assert (spec.sequence.eval_every, spec.sequence.eval_episodes) == (5 * update, 10)
    assert spec.meal.options["shaping_horizon"] == 50_000_000
    lr = spec.hp["learner"]
    assert (lr["learning_rate"], lr["gae_lambda"], lr["max_grad_norm"]) == (1e-3, 0.95, 1.0)
    assert lr["n_minibatches"] == 16 and lr["n_epochs"] == 8
    assert lr["lr_schedule"] == "linear-per-task" and lr["reset_optimizer_at_switch"]
    jax = resolve_job(suite="MEAL-2", learner=None, **kwargs).hp["learner"]
    assert (jax["num_envs"], jax["num_steps"], jax["num_minibatches"]) == (2048, 400, 16)
    assert jax["anneal_lr"] and jax["learning_rate"] == 1e-3
    message = (
        "preset 'meal-authors' is for the MEAL suites (MEAL-<N>) only; presets for Procgen6: "
        "paper, small"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_job(suite="Procgen6", learner=None, **kwargs)
    with pytest.raises(ValueError, match="unknown preset 'authors'; valid: paper, small, meal"):
        resolve_job(suite="MEAL-2", learner=None, **{**kwargs, "preset": "authors"})


def test_meal_paper_defaults_budget_and_cadence():
    """Whole PPO updates per task (MEAL's num_updates = 1e7 // 128 // 16 = 4882), evaluation
    every 100 updates of each task with 10 episodes, no step-0 evaluation."""
    spec = resolve_job(
        suite="CLSuite/MEAL-2-v0", method="ewc", learner="ppo", preset="paper", num_envs=None,
        overrides={}, seed=4,
    )  # fmt: skip
    assert spec.num_envs == 16 and spec.hp["learner"]["n_steps"] == 128
    assert [t.budget for t in spec.sequence.tasks] == [4882 * 2048] * 2
    assert (spec.sequence.eval_every, spec.sequence.eval_episodes) == (100 * 2048, 10)
    assert not spec.options.eval_at_start and spec.options.eval_per_task
    assert spec.suite_kwargs["layout_seed"] == 4 and spec.suite.id == "CLSuite/MEAL-2-v0"
    # half the task's budget: MEAL#10 point 3 (the authors: what produced the results, not
    # the table's 2.5M) and the paper-time code's steps_per_task / 2
    assert spec.meal.options["shaping_horizon"] == 5_000_000
    assert spec.meal.options["random_reset"] is True  # MEAL's paper-time training code
    assert spec.hp["learner"]["n_minibatches"] == 8  # minibatches of 16 x 2 x 128 // 8 rows
    config = json.loads(json.dumps(spec.config()))  # what --print-config shows
    assert config["suite"] == "CLSuite/MEAL-2-v0" and config["suite_kwargs"]["layout_seed"] == 4
    with pytest.raises(ValueError, match="less than one PPO update of 2048"):
        resolve_job(
            suite="MEAL-2", method="ft", learner="ppo", preset="paper", num_envs=None,
            overrides={"steps_per_task": 2000}, seed=0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="method for MEAL 'pnc'"):
        resolve_job(
            suite="MEAL-2", method="pnc", learner="ppo", preset="paper", num_envs=None,
            overrides={}, seed=0,
        )  # fmt: skip


def test_meal_evaluation_is_meals(ft_run):
    """Greedy evaluation every N steps of each task, no step-0 evaluation, sparse returns."""
    frame = read_eval(ft_run)
    assert sorted(set(frame.total_step)) == [256, 512, 768, 1024]
    assert (frame.split == "train").all() and (frame.episodes == 2).all()
    assert (frame.mean_return % 20 == 0).all()  # 20 per delivered soup
    meta = read_metadata(ft_run)
    assert meta["evaluation"] == {
        "at_start": False, "per_task": True, "deterministic": True, "max_episode_steps": None,
        "task_ends": True, "cadence_note": None,
    }  # fmt: skip
    assert meta["step_unit"].startswith("env steps") and meta["num_agents"] == 2
    assert set(meta["score_normalizers"]) == {"0", "1"}
    assert meta["env_kwargs"]["layout_seed"] == 0
    episodes = read_episodes(ft_run)  # one row per env: 100-step episodes, cut at switches
    assert sorted(episodes.episode_length.unique()) == [28, 100]
    assert len(episodes) == 2 * 2 * 4
    soups = read_episode_soups(ft_run)  # MEAL's training signal, for forward transfer
    cols = ["total_step", "task_id", "episode_length"]
    assert soups[cols].equals(episodes[cols]) and (soups.soups >= 0).all()
    het = read_heterogeneity(ft_run)  # the role-heterogeneity index of every evaluation
    assert het[["total_step", "task_id"]].equals(frame[["total_step", "task_id"]])
    assert het.heterogeneity.between(0, 1).all() and (het.envs == 2).all()


def test_meal_runs_start_episodes_at_random_states(ft_run):
    """As MEAL's paper-time code (random_reset=True): random agent positions, inventories
    and pot states at every reset; a fixed start with ``random_reset=False``."""
    from cl_suites.job.torch.train import training_env

    def starts(**overrides):
        spec = resolve_job(
            suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
            overrides={**OVERRIDES, **overrides}, seed=0,
        )  # fmt: skip
        env = training_env(spec)[0]
        env.reset(seed=0)
        return {np.asarray(env._state.env_state.agent_pos)[i].tobytes() for i in range(4)}

    assert len(starts()) == 4
    assert len(starts(random_reset=False)) == 1


def test_meal_runs_treat_full_episodes_as_terminal(ft_run):
    """MEAL's training code treats its 400-step done as terminal (no bootstrap); an episode
    cut by a task switch is still a truncation (bootstrapped)."""
    from cl_suites.job.torch.train import training_env

    spec = resolve_job(
        suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
        overrides=dict(OVERRIDES), seed=0,
    )  # fmt: skip
    from baselines_sb3.factory import wrap_env

    _, sb3_env, _ = training_env(spec)
    sb3_env.seed(0)
    vec, _ = wrap_env(sb3_env, spec.sequence, spec.hp, multi_head=True, task_id_input=True)
    vec.reset()
    ends = []
    for _ in range(128):  # 512 env steps of task 0 over 4 envs; episodes of 100 steps
        _, _, dones, infos = vec.step(np.zeros(vec.num_envs, dtype=np.int64))
        if dones.any():
            ends.append((infos[0]["episode"]["l"], {i["TimeLimit.truncated"] for i in infos}))
    assert ends == [(100, {False}), (28, {True})]


def test_meal_resume_after_kill_reproduces_the_uninterrupted_run(ft_run, tmp_path_factory):
    cut = _run(tmp_path_factory, "ft-cut", kill_at=700)  # checkpoint at 640, mid task 1
    assert read_eval(cut).total_step.max() == 512
    kwargs = dict(method="ft", run_dir=cut, overrides=dict(OVERRIDES), **JOB)
    run_main_job(resume=True, **kwargs)
    a, b = read_eval(ft_run).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert len(b) == len(a) and not b.duplicated(["total_step", "task_id"]).any()
    assert a.equals(b)
    assert read_episodes(ft_run).equals(read_episodes(cut))
    assert read_episode_soups(ft_run).equals(read_episode_soups(cut))
    assert read_heterogeneity(ft_run).equals(read_heterogeneity(cut))
    full = checkpoint.load_checkpoint(checkpoint.latest_checkpoint(ft_run))
    again = checkpoint.load_checkpoint(checkpoint.latest_checkpoint(cut))
    for key, value in full["policy"].items():
        assert th.equal(value, again["policy"][key]), key


def test_meal_kill_inside_the_first_checkpoint_write_resumes_from_the_start(ft_run, tmp_path):
    """Issue 29 item 3, MEAL with the torch learner: killed between the first checkpoint's
    ``.pt`` and its ``.sha256``, the run starts again from its first step on ``--resume``
    and ends with the uninterrupted run's rows."""
    cut = tmp_path / "cut"
    job = {**JOB, "method": "ft"}
    unfinished = kill_inside_first_checkpoint(cut, job, OVERRIDES)
    assert unfinished.parent == checkpoint.checkpoint_dir(cut)
    run_main_job(run_dir=cut, resume=True, overrides=dict(OVERRIDES), **job)
    assert unfinished.with_name(unfinished.name + ".unfinished").exists()
    a, b = read_eval(ft_run).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert a.equals(b)
    assert read_episodes(ft_run).equals(read_episodes(cut))


def _task0_drift(run_dir) -> float:
    """Mean KL(pi_end_of_task0 || pi_final) of the task-0 head over task-0 observations."""
    from baselines_sb3.policies import OBS_KEY, TASK_KEY
    from cl_suites.job.torch.train import training_env

    spec = resolve_job(
        suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
        overrides=dict(OVERRIDES), seed=0,
    )  # fmt: skip
    _, _, source = training_env(spec)
    batch = source.start_rollout(0, 8, seed=123)
    obs = []
    rng = np.random.default_rng(0)
    for _ in range(50):
        rows, _ = batch.policy_rows()
        obs.append(np.array(rows))
        batch.step(rng.integers(6, size=len(rows)))
    obs = th.as_tensor(np.concatenate(obs))

    def log_probs(state_file):
        state = th.load(run_dir / "checkpoint" / state_file, weights_only=True)
        spec_model = _policy_from(spec, state["policy"])
        with th.no_grad():
            x = {OBS_KEY: obs, TASK_KEY: th.zeros(len(obs), dtype=th.long)}
            return spec_model.get_distribution(x).distribution.logits.log_softmax(-1)

    before, after = log_probs("kept-512.pt"), log_probs(checkpoint.latest_checkpoint(run_dir))
    return float((before.exp() * (before - after)).sum(-1).mean())


def _policy_from(spec, weights):
    from baselines_sb3.cl import make_method
    from baselines_sb3.factory import build_model, wrap_env
    from cl_suites.job.torch.train import training_env

    _, sb3_env, _ = training_env(spec)
    env, _ = wrap_env(sb3_env, spec.sequence, spec.hp, multi_head=True, task_id_input=True)
    model = build_model(
        "ppo", env, spec.sequence, spec.hp, make_method("ft"), method="ft", seed=0,
        multi_head=True, task_id_input=True,
    )  # fmt: skip
    model.policy.load_state_dict(weights)
    model.policy.set_training_mode(False)
    return model.policy


def test_ewc_keeps_task0_closer_than_ft(ft_run, tmp_path_factory):
    """EWC (MEAL's lambda) changes the task-0 policy far less than FT while training task 1.

    A CI budget delivers no soups (sparse returns are 0 for both), so task 0 is judged by
    how far its greedy-policy distribution moves on task-0 states after the switch.
    """
    ewc_run = _run(tmp_path_factory, "ewc", method="ewc", lam=1e11)
    ft, ewc = _task0_drift(ft_run), _task0_drift(ewc_run)
    assert ft > 0.05, ft  # FT really moves the task-0 policy (measured: 0.16)
    assert ewc < 0.25 * ft, (ewc, ft)  # measured: 6e-4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, r"num_agents must be in 1\.\.5 .*got 0"),
        ({"num_agents": "2"}, r"num_agents must be in 1\.\.5 .*'2'"),
        ({"difficulty": "nightmare"}, r"difficulty 'nightmare' is unknown.*'easy'"),
        ({"strategy": "ordered", "layout_names": ["x", "y"]}, r"\['x', 'y'\].*cramped_room"),
        ({"strategy": "ordered", "layout_names": "x"}, r"layout_names must be a list.*available"),
        ({"layout_seed": -1}, r"layout_seed -1 is out of range; valid: an int in 0\.\.2147483646"),
        ({"layout_seed": 2**31}, r"layout_seed 2147483648 is out of range"),
        ({"num_agent": 2}, r"unknown MEAL option\(s\) \['num_agent'\]; valid: .*num_agents"),
        ({"seed": 1, "layout_seed": 2}, r"seed=1 and layout_seed=2 disagree"),
    ],
)  # fmt: skip
def test_bad_meal_options_fail_before_any_compile(kwargs, message, monkeypatch):
    import cl_suites
    from cl_suites.meal import engine

    def no_compile(*args, **kw):
        raise AssertionError("a MealEngine was built")

    monkeypatch.setattr(engine.MealEngine, "__init__", no_compile)
    with pytest.raises(ValueError, match=message):
        cl_suites.make_parallel("MEAL-2", **kwargs)


def test_meal_episode_source_and_videos(ft_run, tmp_path):
    """The Fisher's fresh episodes (every agent's observations, task id key included) and
    evaluation videos of the kitchens (meal-bench's visualizer)."""
    from baselines_sb3.callbacks import make_episode_source
    from cl_suites.core.video import VideoRecorder
    from cl_suites.meal.evaluation import meal_evaluator

    spec = resolve_job(
        suite="MEAL-2", method="ft", learner="ppo", preset="small", num_envs=4,
        overrides=dict(OVERRIDES), seed=0,
    )  # fmt: skip
    state = checkpoint.load_checkpoint(checkpoint.latest_checkpoint(ft_run))
    policy = _policy_from(spec, state["policy"])
    model = type("Model", (), {"policy": policy})()
    recorder = VideoRecorder(tmp_path, [0], max_frames=3)
    evaluator = meal_evaluator(spec.meal, seed=0, episodes=2, video=recorder)
    source = make_episode_source(evaluator, model, lambda: 1024)
    batch = source(1, 5, 20)  # MEAL: 5 episodes x 500 steps; 20 steps here
    assert (batch.num_steps, batch.num_agents) == (5 * 20, 2)
    assert batch.observations["obs"].shape == (5 * 20 * 2, *spec.meal.obs_shape)
    assert (batch.observations["task_id"] == 1).all() and batch.alive.all()
    records = evaluator.evaluate(0, lambda obs, ids: np.full(len(obs), 4))  # everyone stays
    assert [r["mean_return"] for r in records] == [0.0, 0.0]
    names = sorted(p.name for p in (tmp_path / "videos").glob("*.mp4"))
    assert names == [f"eval-step000000000-task{t:02d}-train.mp4" for t in (0, 1)]


@pytest.mark.parametrize("option", [None, 2])
def test_updates_use_update_threads_and_acting_torch_threads(tmp_path_factory, option):
    """MEAL acts with 1 torch thread (``TORCH_THREADS``) and updates with as many unless
    ``update_threads`` says otherwise (here 2); the process gets its count back."""
    with pytest.MonkeyPatch.context() as mp:
        seen = record_threads(mp)
        extra = {} if option is None else {"update_threads": option}
        th.set_num_threads(2)  # torch's own count on a 2-core machine
        try:
            _run(tmp_path_factory, "threads", steps_per_task=256, **extra)
            after = th.get_num_threads()
        finally:
            th.set_num_threads(1)
    assert {phase for phase, _ in seen} == {"update", "collect"}
    assert {n for phase, n in seen if phase == "update"} == {option or 1}
    assert {n for phase, n in seen if phase == "collect"} == {1}  # MEAL's torch_threads
    assert after == 2
