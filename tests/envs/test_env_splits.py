"""Env workers with the sub-envs in blocks (``env_splits``, issue 50 item 2): a block
started ahead (``start_block``) and the rest stepped by ``step`` give the one-process run
bit for bit whatever the worker count; misuse and bad counts are one clear line."""

from __future__ import annotations

import numpy as np
import pytest

from cl_suites.api import make_sequence
from cl_suites.core.vector import SequenceVectorEnv
from cl_suites.core.workers import WorkerVectorEnv, check_env_splits, worker_blocks
from cl_suites.errors import BadValueError
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval
from tests.helpers.traces import same_trace


def _play(env: SequenceVectorEnv, steps: int) -> list:
    """Random actions, every block but the last started ahead; what the env returned."""
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    size = env.num_envs // env.env_splits
    trace = [obs.copy()]
    for _ in range(steps):
        actions = rng.integers(env.single_action_space.n, size=env.num_envs)
        for block in range(env.env_splits - 1):
            env.start_block(block, actions[block * size : (block + 1) * size])
        obs, rewards, terminated, truncated, infos = env.step(actions)
        episode = infos.get("task_episode", {})
        trace += [obs.copy(), rewards, terminated, truncated, sorted(infos), episode.get("r")]
        trace += [value for _, value in sorted(_numeric(infos).items())]
    return trace


def _numeric(infos: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """The per-sub-env numeric arrays of merged infos (nested dicts flattened; episodes'
    wall-clock seconds ``task_episode.t`` left out), which show a sub-env's info landing
    in another's slot."""
    out = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out.update(_numeric(value, f"{prefix}{key}."))
        elif isinstance(value, np.ndarray) and value.dtype != object:
            out[prefix + key] = value
    out.pop("task_episode.t", None)
    return out


@pytest.mark.parametrize(
    ("suite", "kwargs", "steps"),
    [
        ("Diagnostic", {"n_tasks": 2, "steps_per_task": 400}, 110),  # crosses a switch
        ("Atari6", {"games": ("Pong", "Breakout"), "steps_per_task": 240, "cycles": 1}, 70),
    ],
)
def test_blocks_started_ahead_give_the_one_process_run_for_any_worker_count(suite, kwargs, steps):
    pytest.importorskip("ale_py") if suite == "Atari6" else None
    runs = {}
    for mode, workers, splits in (("sync", None, 1), *(("workers", w, 2) for w in (1, 2, 3))):
        sequence = make_sequence(suite, **kwargs)
        env = SequenceVectorEnv(sequence, 6, mode, env_workers=workers, env_splits=splits)
        try:
            runs[workers] = _play(env, steps)
        finally:
            env.close()
    assert same_trace(runs[None], runs[1])
    assert same_trace(runs[None], runs[2])
    assert same_trace(runs[None], runs[3])


def test_each_worker_holds_a_share_of_every_block():
    assert worker_blocks(8, 2, 2) == [[(0, 2), (4, 6)], [(2, 4), (6, 8)]]
    assert worker_blocks(6, 3, 2) == [[(0, 1), (3, 4)], [(1, 2), (4, 5)], [(2, 3), (5, 6)]]
    assert worker_blocks(5, 2, 1) == [[(0, 2)], [(2, 5)]]  # no blocks: contiguous chunks


def _workers(splits: int = 2) -> WorkerVectorEnv:
    factory = make_sequence("Diagnostic").tasks[0].env_factory("train")
    return WorkerVectorEnv(factory, 4, 2, name="task 'probe'", splits=splits)


def test_blocks_start_in_order_and_step_takes_the_actions_they_started_with():
    env = _workers()
    try:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"block 1 started out of order \(0 of 2"):
            env.start_block(1, np.zeros(2, dtype=np.int64))
        env.start_block(0, np.array([1, 0]))
        with pytest.raises(RuntimeError, match=r"other actions for block 0"):
            env.step(np.array([0, 0, 1, 1]))
    finally:
        env.close()


@pytest.mark.parametrize("bad", [0, 4, 5, 2.0, True])
def test_a_split_count_the_envs_cannot_be_divided_into_is_one_line(bad):
    with pytest.raises(ValueError, match=rf"env_splits={bad!r} does not divide num_envs=6 .*"
                       r"use one of \[1, 2, 3, 6\]$"):  # fmt: skip
        check_env_splits(bad, 6)


JOB = dict(suite="Diagnostic", method="ft", learner="vtrace", preset="small", seed=5, num_envs=6)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 600,
    "eval_every": 300,
    "report": False,
    "policy_lag": 1,
}


def test_job_bad_splits_and_workers_are_refused_before_anything_is_built(tmp_path):
    with pytest.raises(BadValueError, match=r"^env_splits=4 does not divide num_envs=6 into "
                       r"equal blocks; use one of \[1, 2, 3, 6\]$"):  # fmt: skip
        resolve_job(**JOB, overrides={**OVERRIDES, "env_splits": 4})
    with pytest.raises(BadValueError, match=r"^env_workers=4 cannot each step a share of every "
                       r"block of 3 envs \(num_envs=6, env_splits=2\); use env_workers from 1 "
                       r"to 3$"):  # fmt: skip
        resolve_job(**JOB, overrides={**OVERRIDES, "env_splits": 2, "env_workers": 4})
    with pytest.raises(BadValueError, match=r"env_splits must be an integer >= 1, got 0"):
        resolve_job(**JOB, overrides={**OVERRIDES, "env_splits": 0})


def test_the_double_buffered_job_is_the_same_for_1_2_and_3_workers(tmp_path):
    rows = {}
    for workers in (1, 2, 3):
        overrides = {
            **OVERRIDES,
            "vectorization_mode": "workers",
            "env_workers": workers,
            "env_splits": 2,
        }
        run_dir = tmp_path / str(workers)
        run_main_job(run_dir=run_dir, resume=False, overrides=overrides, **JOB)
        rows[workers] = (read_eval(run_dir).drop(columns="wall_time"), read_episodes(run_dir))
    for workers in (2, 3):
        assert rows[1][0].equals(rows[workers][0])
        assert rows[1][1].equals(rows[workers][1])


def test_a_double_buffered_env_resumes_bit_identically():
    sequence = make_sequence("Diagnostic", n_tasks=1, steps_per_task=10_000)
    rng = np.random.default_rng(1)
    actions = rng.integers(sequence.action_space.n, size=(40, 6))

    def step(env: SequenceVectorEnv, a: np.ndarray):
        env.start_block(0, a[:3])
        return env.step(a)

    env = SequenceVectorEnv(sequence, 6, "workers", env_workers=2, env_splits=2)
    try:
        env.reset(seed=5)
        for a in actions[:20]:
            step(env, a)
        state = env.state_dict()
        expected = [step(env, a)[:4] for a in actions[20:]]
    finally:
        env.close()
    resumed = SequenceVectorEnv(sequence, 6, "workers", env_workers=2, env_splits=2)
    try:
        assert resumed.load_state_dict(state) is None  # restored exactly
        got = [step(resumed, a)[:4] for a in actions[20:]]
    finally:
        resumed.close()
    pairs = zip(expected, got, strict=True)
    assert all(np.array_equal(x, y) for a, b in pairs for x, y in zip(a, b, strict=True))
