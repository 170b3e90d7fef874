"""Runs that survive anything: one writer per run directory, torn writes, full disks."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch as th

from cl_suites.rundir import fsutil
from cl_suites.rundir.fsutil import RunDiskError, append_text, atomic_write
from cl_suites.rundir.runlock import LOCK_FILE, RunDirLock, RunDirLockedError
from cl_suites.rundir.runlog import (
    EVAL_COLUMNS,
    RunLog,
    read_episodes,
    read_eval,
    repair_table,
    truncate_logs,
)
from tests.helpers import REPO

th.set_num_threads(1)
ROOT = str(REPO)


def eval_row(step: int, task: int = 0, value: float = 1.0) -> dict:
    return {
        "total_step": step,
        "task_id": task,
        "task_name": f"t{task}",
        "split": "train",
        "mean_return": value,
        "std_return": 0.0,
        "episodes": 2,
        "wall_time": 0.5,
    }


@pytest.fixture
def holder(tmp_path):
    """A second process that holds ``tmp_path / "run"``'s RunLog until killed."""
    run = tmp_path / "run"
    code = textwrap.dedent(
        f"""
        import sys, time
        from cl_suites.rundir.runlog import RunLog
        log = RunLog({str(run)!r}, {{"suite": "Toy"}})
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"ready"
    yield run, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over(holder, caplog):
    run, proc = holder
    with pytest.raises(RunDirLockedError) as refused:
        RunLog(run, resume=True)
    message = str(refused.value)
    assert "\n" not in message
    assert f"pid {proc.pid} on host {socket.gethostname()}" in message
    proc.send_signal(signal.SIGKILL)  # kill -9: no cleanup, the lock file stays
    proc.wait()
    assert (run / LOCK_FILE).exists()
    with caplog.at_level(logging.WARNING), RunLog(run, resume=True) as log:
        log.log_eval([eval_row(0)])
    assert f"taking over the stale lock of {run}" in caplog.text
    assert f"pid {proc.pid}" in caplog.text
    assert not (run / LOCK_FILE).exists()  # released on close
    assert read_eval(run).total_step.tolist() == [0]


def test_one_writer_per_process_too_but_truncate_logs_joins_the_held_lock(tmp_path):
    with RunLog(tmp_path, {"suite": "Toy"}) as log:
        with pytest.raises(RunDirLockedError, match=f"pid {os.getpid()}"):
            RunLog(tmp_path, resume=True)
        log.log_eval([eval_row(0), eval_row(10)])
        assert truncate_logs(tmp_path, 5)["eval.csv"] == 1
        log.log_eval([eval_row(10, value=2.0)])
    assert read_eval(tmp_path).mean_return.tolist() == [1.0, 2.0]
    with RunDirLock(tmp_path):  # free again
        pass


def test_torn_and_unparsable_rows_are_dropped_on_resume_with_a_note(tmp_path, caplog):
    run = tmp_path / "run"
    with RunLog(run, {"suite": "Toy"}) as log:
        log.log_eval([eval_row(0), eval_row(2000)])
        log.log_episodes(
            [{"total_step": 5, "task_id": 0, "episode_return": 1, "episode_length": 5}]
        )
    with (run / "eval.csv").open("a", newline="") as f:  # a crash mid-row, and garbage
        f.write("oops,not,a,row\n3000,0,t0,train,1.0,0.0,2\n4000,0,t0,tr")
    with caplog.at_level(logging.WARNING):
        dropped = truncate_logs(run, 4000)
    assert dropped == {
        "eval.csv": 3,
        "episodes.csv": 0,
        "plasticity.csv": 0,
        "remedy.csv": 0,
        "heterogeneity.csv": 0,
        "episode_soups.csv": 0,
        "packnet.csv": 0,
        "resources.csv": 0,
    }
    assert "torn last line" in caplog.text and "'4000,0,t0,tr'" in caplog.text
    assert "2 unparsable row(s)" in caplog.text and "line 4: 'oops,not,a,row'" in caplog.text
    with RunLog(run, resume=True) as log:  # the real 4000 row is written again
        log.log_eval([eval_row(4000, value=3.0)])
    frame = read_eval(run)
    assert frame.total_step.tolist() == [0, 2000, 4000]
    assert frame.mean_return.tolist() == [1.0, 1.0, 3.0]
    assert b"\r" not in (run / "eval.csv").read_bytes()  # one line-ending convention


def test_runlog_resume_alone_drops_a_torn_tail_and_keeps_the_files_line_endings(tmp_path):
    header = ",".join(EVAL_COLUMNS)
    (tmp_path / "metadata.json").write_text('{"suite": "Toy"}')
    (tmp_path / "eval.csv").write_bytes(
        f"{header}\r\n0,0,t0,train,1.0,0.0,2,0.5\r\n44".encode()  # an older CRLF file
    )
    with RunLog(tmp_path, resume=True) as log:
        log.log_eval([eval_row(4000)])
    data = (tmp_path / "eval.csv").read_bytes()
    assert data.count(b"\r\n") == data.count(b"\n") == 3
    assert read_eval(tmp_path).total_step.tolist() == [0, 4000]


def test_repair_refuses_a_table_with_other_columns(tmp_path):
    (tmp_path / "eval.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="has columns"):
        repair_table(tmp_path / "eval.csv", EVAL_COLUMNS)


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_batch_of_rows_is_one_write_and_is_cut_back_when_the_disk_fills(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    calls = []
    real_write = os.write

    def counting(fd_, data):
        calls.append(len(data))
        return real_write(fd_, data)

    monkeypatch.setattr(fsutil.os, "write", counting)
    append_text(fd, path, "a,1\n" * 5000)  # 20 kB: larger than any write buffer
    assert calls == [20000]

    def half_then_full(fd_, data):  # the disk fills up in the middle of a row
        if len(data) > 5:
            return real_write(fd_, bytes(data[:5]))
        _enospc()

    monkeypatch.setattr(fsutil.os, "write", half_then_full)
    with pytest.raises(RunDiskError, match=r"^disk full at .*t\.csv \(12 B needed"):
        append_text(fd, path, "b,2\nc,3\nd,4\n")
    os.close(fd)
    assert path.read_text() == "a,1\n" * 5000  # no torn row left behind


class _FullDisk:
    """A file on a disk with ``room`` bytes left: writes past it fail with ENOSPC."""

    def __init__(self, f, room: int):
        self._f, self.room = f, room

    def write(self, data) -> int:
        data = bytes(data)
        if len(data) > self.room:
            self._f.write(data[: self.room])
            self.room = 0
            _enospc()
        self.room -= len(data)
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def fill_disk(monkeypatch, name: str, room: int = 1000, skip: int = 0) -> None:
    """Temp files of ``atomic_write`` for ``name`` get a disk with ``room`` bytes left,
    after ``skip`` successful writes of it."""
    real = os.fdopen
    seen = []

    def fdopen(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        if f".{name}." in os.readlink(f"/proc/self/fd/{fd}"):
            seen.append(fd)
            if len(seen) > skip:
                return _FullDisk(f, room)
        return f

    monkeypatch.setattr(fsutil.os, "fdopen", fdopen)


def test_atomic_write_keeps_the_previous_file_and_explains_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint" / "state.pt"
    atomic_write(path, lambda f: th.save({"step": 1, "w": th.zeros(1000)}, f))
    fill_disk(monkeypatch, "state.pt", room=1000)
    with pytest.raises(RunDiskError) as e:  # torch re-raises ENOSPC as a RuntimeError inside
        atomic_write(path, lambda f: th.save({"step": 2, "w": th.zeros(1000)}, f))
    message = str(e.value)
    assert message.startswith(f"disk full at {path} (") and "KiB needed" in message
    assert "the last good checkpoint is intact" in message and "--resume" in message
    assert "\n" not in message
    assert th.load(path)["step"] == 1  # the previous checkpoint is intact
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.pt"]  # no temp file


def test_unwritable_directory_is_one_line(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(tmp_path)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(RunDiskError) as e:
        RunLog(tmp_path / "run", {"suite": "Toy"})
    assert str(e.value).startswith(f"directory not writable: {tmp_path / 'run'} (Read-only")


def _run(tmp_path, name, **extra):
    from cl_suites.job.main_job import run_main_job

    overrides = {
        "n_tasks": 2,
        "steps_per_task": 512,
        "eval_every": 256,
        "eval_episodes": 2,
        "checkpoint_every": 256,
        "progress": False,
        "report": False,
        **extra.pop("overrides", {}),
    }
    return run_main_job(
        suite="Diagnostic",
        method="ewc",
        learner="ppo",
        preset="small",
        seed=1,
        num_envs=None,
        run_dir=tmp_path / name,
        overrides=overrides,
        **{"resume": False, **extra},
    )


def test_disk_full_during_a_checkpoint_then_resume_completes_identically(tmp_path, monkeypatch):
    from cl_suites.job.torch.checkpoint import latest_checkpoint, load_checkpoint

    full = _run(tmp_path, "full")
    fill_disk(monkeypatch, "pt", skip=1)  # the second checkpoint hits a full disk
    with pytest.raises(RunDiskError, match=r"disk full at .*step-000000000512\.pt .*--resume"):
        _run(tmp_path, "cut")
    cut = tmp_path / "cut"
    assert load_checkpoint(latest_checkpoint(cut))["num_timesteps"] == 256  # the first one
    assert not (cut / LOCK_FILE).exists()
    monkeypatch.undo()
    _run(tmp_path, "cut", resume=True)
    a, b = read_eval(full).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(read_episodes(full), read_episodes(cut))
