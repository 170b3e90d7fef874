"""Env worker processes (``vectorization_mode="workers"``, issue 38): the same run as one
process, bit for bit, whatever the worker count; exact resume through the workers; a dead
or hung worker named within seconds; nothing left behind when the parent dies."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from cl_suites.api import make_sequence
from cl_suites.core.vector import SequenceVectorEnv
from cl_suites.core.workers import EnvWorkerError, WorkerVectorEnv, check_env_workers
from cl_suites.errors import BadValueError
from cl_suites.job.main_job import resolve_job, run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval
from tests.helpers import REPO
from tests.helpers.kill_drills import takes_ctrl_c
from tests.helpers.traces import same_trace

ROOT = REPO


def _play(env: SequenceVectorEnv, steps: int, seed: int = 3):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    trace = [obs.copy()]
    for _ in range(steps):
        actions = rng.integers(env.single_action_space.n, size=env.num_envs)
        obs, rewards, terminated, truncated, infos = env.step(actions)
        episode = infos.get("task_episode", {})
        trace += [obs.copy(), rewards, terminated, truncated, sorted(infos), episode.get("r")]
    return trace


@pytest.mark.parametrize(
    ("suite", "kwargs", "steps"),
    [
        ("Diagnostic", {"n_tasks": 2, "steps_per_task": 400}, 110),  # crosses a switch
        ("Atari6", {"games": ("Pong", "Breakout"), "steps_per_task": 240, "cycles": 1}, 70),
    ],
)
def test_workers_give_the_one_process_run_bit_for_bit(suite, kwargs, steps):
    pytest.importorskip("ale_py") if suite == "Atari6" else None
    runs = {}
    for mode, workers in (("sync", None), ("workers", 2), ("workers", 3)):
        env = SequenceVectorEnv(make_sequence(suite, **kwargs), 6, mode, env_workers=workers)
        try:
            runs[mode, workers] = _play(env, steps)
        finally:
            env.close()
    assert same_trace(runs["sync", None], runs["workers", 2])
    assert same_trace(runs["sync", None], runs["workers", 3])


def test_atari_workers_resume_bit_identically_mid_game():
    pytest.importorskip("ale_py")
    kwargs = {"games": ("Pong",), "steps_per_task": 10_000, "cycles": 1}
    rng = np.random.default_rng(1)
    actions = rng.integers(6, size=(60, 4))
    env = SequenceVectorEnv(make_sequence("Atari6", **kwargs), 4, "workers", env_workers=2)
    try:
        env.reset(seed=5)
        for a in actions[:30]:
            env.step(a)
        state = env.state_dict()
        assert isinstance(state["task_env"], list) and len(state["task_env"]) == 2
        expected = [env.step(a)[0] for a in actions[30:]]
    finally:
        env.close()
    resumed = SequenceVectorEnv(make_sequence("Atari6", **kwargs), 4, "workers", env_workers=2)
    try:
        assert resumed.load_state_dict(state) is None  # restored exactly
        got = [resumed.step(a)[0] for a in actions[30:]]
    finally:
        resumed.close()
    assert all(np.array_equal(x, y) for x, y in zip(expected, got, strict=True))


def _diagnostic_workers(num_envs: int = 4, workers: int = 2, timeout: float = 30.0):
    factory = make_sequence("Diagnostic").tasks[0].env_factory("train")
    return WorkerVectorEnv(factory, num_envs, workers, name="task 'probe'", timeout=timeout)


def test_a_dead_worker_is_named_within_seconds():
    env = _diagnostic_workers()
    env.reset(seed=0)
    os.kill(env._procs[1].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"env worker 1 \(sub-envs 2-3 of task 'probe'\) died"):
        env.step(np.zeros(4, dtype=np.int64))
    assert time.monotonic() - start < 5
    assert not env._procs  # every worker stopped


def test_a_hung_worker_is_detected():
    env = _diagnostic_workers()  # the default timeout while the workers start (a busy CI)
    env.reset(seed=0)
    env.timeout = 2.0
    pid = env._procs[0].pid
    os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing
    try:
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=r"env worker 0 .* sent nothing for 2 s \(hung\)"):
            env.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - start < 6
    finally:
        with contextlib.suppress(ProcessLookupError):  # stopped by the env already
            os.kill(pid, signal.SIGKILL)


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from cl_suites.api import make_sequence
    from cl_suites.core.workers import WorkerVectorEnv

    if __name__ == "__main__":
        factory = make_sequence("Diagnostic").tasks[0].env_factory("train")
        env = WorkerVectorEnv(factory, 4, 2)
        env.reset(seed=0)
        print(" ".join(str(p.pid) for p in env._procs), flush=True)
        time.sleep(60)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def _shared_memory_of(pids: list[int]) -> set[str]:
    """The ``/dev/shm`` names the processes ``pids`` map (named semaphores, shared arrays;
    unlinked ones included), read from ``/proc/<pid>/maps`` while they live. Tests on
    other xdist workers make their own entries, so what a kill leaves is judged on these
    names and on the heap files multiprocessing names after a pid (``pym-<pid>-``)."""
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if path.startswith("/dev/shm/"):
                    names.add(path.removeprefix("/dev/shm/").removesuffix(" (deleted)"))
    return names


def _left_in_dev_shm(pids: list[int], mapped: set[str]) -> set[str]:
    present = set(os.listdir("/dev/shm"))
    return (present & mapped) | {n for n in present for p in pids if n.startswith(f"pym-{p}-")}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_worker_or_shared_memory_is_left_when_the_parent_dies(sig, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(ORPHAN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    mapped = _shared_memory_of([parent.pid, *pids])
    assert mapped  # the observations' shared memory is there to be left behind
    parent.send_signal(sig)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
    assert not _left_in_dev_shm([parent.pid, *pids], mapped)


JOB = dict(suite="Atari6", method="ft", learner="vtrace", preset="small", seed=2, num_envs=4)
OVERRIDES = {
    "games": ("SpaceInvaders", "BeamRider"),
    "steps_per_task": 192,
    "cycles": 1,
    "eval_every": 96,
    "eval_episodes": 1,
    "eval_max_episode_steps": 30,
    "checkpoint_every": 64,
    "report": False,
    "policy_lag": 1,
}


def test_the_job_with_workers_and_lag_is_the_one_process_run(tmp_path):
    pytest.importorskip("ale_py")
    rows = {}
    for mode in ("sync", "workers"):
        overrides = {**OVERRIDES, "vectorization_mode": mode, "env_workers": 2}
        run_main_job(run_dir=tmp_path / mode, resume=False, overrides=overrides, **JOB)
        rows[mode] = (
            read_eval(tmp_path / mode).drop(columns="wall_time"),
            read_episodes(tmp_path / mode),
        )
    assert rows["sync"][0].equals(rows["workers"][0])
    assert rows["sync"][1].equals(rows["workers"][1])


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_bad_worker_counts_are_one_clear_error(bad):
    with pytest.raises(
        BadValueError, match=rf"env_workers must be an integer >= 1 or none, got {bad!r}"
    ):
        resolve_job(**JOB, overrides={**OVERRIDES, "env_workers": bad})
    with pytest.raises(BadValueError, match=r"vectorization_mode must be one of"):
        resolve_job(**JOB, overrides={**OVERRIDES, "vectorization_mode": "threads"})
    with pytest.raises(ValueError, match=rf"env_workers must be an integer >= 1, got {bad!r}"):
        check_env_workers(bad)


def test_more_workers_than_cores_is_a_warning_naming_the_count():
    from cl_suites.job.option_specs import job_size_warnings

    spec = resolve_job(
        **JOB, overrides={**OVERRIDES, "vectorization_mode": "workers", "env_workers": 999}
    )
    lines = [x for x in job_size_warnings(spec) if "env_workers" in x]
    assert len(lines) == 1 and "using 4 worker processes" in lines[0]


def _cli_run(run_dir: Path, *extra: str) -> list[str]:
    sets = {**{k: v for k, v in OVERRIDES.items() if k != "games"}, "steps_per_task": 4000,
            "checkpoint_every": 128, "vectorization_mode": "workers", "env_workers": 2}  # fmt: skip
    command = [sys.executable, "-m", "cl_suites", "run", "--suite", "Atari6", "--method", "ft",
               "--learner", "vtrace", "--preset", "small", "--seed", "2", "--num-envs", "4",
               "--run-dir", str(run_dir),
               "--set", 'games=["SpaceInvaders","BeamRider"]']  # fmt: skip
    for key, value in sets.items():
        command += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return command + list(extra)


def _descendants_once_training(proc: subprocess.Popen, run_dir: Path) -> list[int]:
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + 120
    while not list((run_dir / "checkpoint").glob("*.sha256")):
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_no_process_or_shared_memory(sig, tmp_path):
    pytest.importorskip("ale_py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(_cli_run(tmp_path / "run"), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=takes_ctrl_c)  # fmt: skip
    children = _descendants_once_training(proc, tmp_path / "run")
    assert len(children) >= 3  # the fork server and two workers
    mapped = _shared_memory_of([proc.pid, *children])
    assert mapped
    proc.send_signal(sig)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in children)
    assert not _left_in_dev_shm([proc.pid, *children], mapped)


def test_a_dead_worker_stops_the_run_with_one_line_and_it_resumes(tmp_path):
    pytest.importorskip("ale_py")
    psutil = pytest.importorskip("psutil")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_cli_run(run_dir), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    _descendants_once_training(proc, run_dir)
    server = next(p for p in psutil.Process(proc.pid).children() if p.children())
    os.kill(server.children()[0].pid, signal.SIGKILL)  # one env worker
    _, err = proc.communicate(timeout=60)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert proc.returncode != 0 and len(lines) == 1
    assert re.search(
        r"error: env worker \d \(sub-envs \d-\d of task '\w+' \(train\)\) died", lines[0]
    )
    assert "--resume" in lines[0]
    logged = len(read_eval(run_dir))
    done = subprocess.run(_cli_run(run_dir, "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(read_eval(run_dir)) > logged
    assert not read_eval(run_dir).duplicated(["total_step", "task_id", "split"]).any()
