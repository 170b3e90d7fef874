"""Kill a main-job run at a chosen step, as Ctrl-C would, or inside its first checkpoint
write, as kill -9 would (resume drills)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from baselines_sb3 import callbacks
from cl_suites.job.jax import checkpoint as jax_checkpoint
from cl_suites.job.jax import train as jax_job
from cl_suites.job.main_job import run_main_job
from cl_suites.rundir import checkpoint_files


def takes_ctrl_c() -> None:
    """``preexec_fn`` of a drill's child process: SIGINT back to its default, so that Python
    turns it into ``KeyboardInterrupt``. A shell's background job ignores SIGINT (a suite
    started with ``&``), an ignored signal stays ignored across ``exec``, and the child
    would then not see the drill's Ctrl-C at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def torch_run_dies_at(kill_at: int) -> Iterator[None]:
    """Inside the block a torch learner's run raises ``KeyboardInterrupt`` (as Ctrl-C) at
    its first evaluation-callback step at or after ``kill_at``; the block must raise it."""
    original = callbacks.ContinualEvalCallback._on_step

    def killer(self):
        out = original(self)
        if self.total_step >= kill_at:
            raise KeyboardInterrupt("simulated kill")
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(callbacks.ContinualEvalCallback, "_on_step", killer)
        with pytest.raises(KeyboardInterrupt):
            yield


@contextlib.contextmanager
def jax_run_dies_after_checkpoint(kill_at: int) -> Iterator[None]:
    """Inside the block a ``ppo-jax`` run raises ``KeyboardInterrupt`` right after the first
    checkpoint it saves at a step at or after ``kill_at`` (a kill between checkpoints
    resumes from that one); the block must raise it."""
    save = jax_job._Loop.save

    def save_then_die(self, finished=False):
        save(self, finished)
        if self.step >= kill_at:
            raise KeyboardInterrupt("simulated kill")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax_job._Loop, "save", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            yield


def jax_run(run_dir, job, overrides, seed, kill_at=None):
    """``run_main_job`` of a JAX learner's run into ``run_dir`` (``job``: suite, method,
    learner, preset, num_envs); with ``kill_at``, killed right after its first checkpoint
    at or after that step (:func:`jax_run_dies_after_checkpoint`). Returns ``run_dir``."""
    kwargs = dict(**job, seed=seed, run_dir=run_dir, overrides=dict(overrides))
    if kill_at is None:
        run_main_job(resume=False, **kwargs)
        return run_dir
    with jax_run_dies_after_checkpoint(kill_at):
        run_main_job(resume=False, **kwargs)
    return run_dir


def kill_run_at(run_dir, job, overrides, kill_at):
    """Run ``run_main_job`` into ``run_dir`` and kill it (``KeyboardInterrupt``, as Ctrl-C)
    at the first evaluation-callback step at or after ``kill_at``."""
    with torch_run_dies_at(kill_at):
        run_main_job(run_dir=run_dir, resume=False, overrides=dict(overrides), **job)


def kill_inside_first_checkpoint(run_dir, job, overrides, **kwargs) -> Path:
    """Run ``run_main_job`` into ``run_dir`` (``kwargs``: its other arguments, e.g.
    ``seeds``) and stop it inside its first checkpoint write, leaving what kill -9 there
    leaves: a torch run's ``checkpoint/step-*.pt`` without its ``.sha256``; a ``ppo-jax``
    run's half-written temporary file (``atomic_write`` gets no chance to remove it).
    Returns the unfinished file."""
    left: list[Path] = []

    def no_checksum(path, text):
        left.append(Path(path).with_suffix(".pt"))
        raise KeyboardInterrupt("simulated kill -9 between the checkpoint and its checksum")

    def half_written(path, write_fn):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.write(fd, b"PK\x03\x04" + bytes(1000))  # the start of a zip, then the kill
        os.close(fd)
        left.append(Path(name))
        raise KeyboardInterrupt("simulated kill -9 inside the checkpoint write")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint_files, "write_text_atomic", no_checksum)
        mp.setattr(jax_checkpoint, "atomic_write", half_written)
        with pytest.raises(KeyboardInterrupt):
            run_main_job(run_dir=run_dir, resume=False, overrides=dict(overrides), **job, **kwargs)
    assert len(left) == 1 and left[0].exists()
    return left[0]
