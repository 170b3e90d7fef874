"""Checkpoints that load as data, survive corruption and kills (issue 24 items 1, 3, 6).

* a crafted checkpoint (its own pickle, or a crafted task env inside a valid checkpoint)
  runs nothing and is refused;
* a truncated, zero-filled or bit-flipped checkpoint is set aside with one line naming it,
  and the run resumes from the previous good one, ending bit-identical to an
  uninterrupted run;
* SIGTERM / SIGINT at fixed moments (inside an evaluation, inside a checkpoint write,
  between a checkpoint and its checksum, during training), then ``--resume``: no eval row
  lost or duplicated, the same episodes.
"""

from __future__ import annotations

import collections
import os
import pickle
import random
import signal

import numpy as np
import pandas as pd
import pytest
import torch as th

from cl_suites.cli import main
from cl_suites.core.env_state import UnsafeEnvStateError, load_env_state, pickled_globals
from cl_suites.core.evaluation import EvalBatch
from cl_suites.job.main_job import run_main_job
from cl_suites.job.torch import checkpoint
from cl_suites.rundir import checkpoint_files
from cl_suites.rundir.checkpoint_files import (
    CheckpointError,
    decode,
    encode,
    write_checkpoint,
)
from cl_suites.rundir.checkpoint_files import (
    checkpoint_files as list_checkpoints,
)
from cl_suites.rundir.runlog import read_episodes, read_eval
from tests.helpers.kill_drills import kill_run_at

th.set_num_threads(1)

JOB = dict(suite="Diagnostic", method="ewc", learner="ppo", preset="small", seed=3, num_envs=None)
OVERRIDES = {
    "n_tasks": 2,
    "show_task": False,
    "steps_per_task": 600,
    "eval_every": 300,
    "checkpoint_every": 200,  # checkpoints at rollout starts 256, 512, 768, ...
    "report": False,
}
CLI = [
    "run", "--suite", "Diagnostic", "--method", "ewc", "--preset", "small", "--seed", "3",
    "--set", "n_tasks=2", "--set", "show_task=false", "--steps-per-task", "600",
    "--eval-every", "300", "--set", "checkpoint_every=200", "--set", "report=false",
]  # fmt: skip


class _CreatesFile:
    """Unpickling this object opens (creates) ``path`` for writing."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _run(run_dir, resume=False):
    return run_main_job(run_dir=run_dir, resume=resume, overrides=dict(OVERRIDES), **JOB)


def _killed(run_dir, kill_at):
    kill_run_at(run_dir, JOB, OVERRIDES, kill_at)
    return run_dir


def _assert_same_run(a, b):
    ea, eb = read_eval(a).drop(columns="wall_time"), read_eval(b).drop(columns="wall_time")
    assert not eb.duplicated(["total_step", "task_id", "split"]).any()
    pd.testing.assert_frame_equal(ea, eb)
    pd.testing.assert_frame_equal(read_episodes(a), read_episodes(b))


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("full"))


# -- the format ------------------------------------------------------------------------------
def test_everything_a_checkpoint_holds_round_trips_through_the_safe_loader(tmp_path):
    rng = np.random.default_rng(5)
    state = {
        "numpy_rng": np.random.get_state(),  # ('MT19937', uint32 array, int, int, float)
        "python_rng": random.getstate(),  # (3, 625 ints, None)
        "generator": rng.bit_generator.state,  # PCG64: 128-bit ints
        "torch_rng": th.get_rng_state(),
        "policy": collections.OrderedDict(w=th.randn(3, 2), b=th.zeros(2)),
        "obs": {"image": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "id": np.eye(2)},
        "starts": np.array([True, False]),
        "scalars": (np.float32(1.5), np.int64(7), np.bool_(True)),
        "blob": b"\x00\x01",
        "nested": [None, 2**70, float("inf"), "text", {"k": (1, 2)}, {3, 4}],
        "uint16": np.array([1, 65535], dtype=np.uint16),
        "big_endian": np.array([1.0, 2.0], dtype=">f4"),
    }
    path = write_checkpoint(tmp_path, 5, state)
    raw = th.load(path, weights_only=True)  # torch's restricted unpickler takes it
    back = decode(raw)
    assert back["numpy_rng"][0] == "MT19937" and back["numpy_rng"][1].dtype == np.uint32
    np.random.set_state(back["numpy_rng"])
    random.setstate(back["python_rng"])
    rng.bit_generator.state = back["generator"]
    assert back["generator"] == state["generator"]
    assert back["python_rng"] == state["python_rng"]
    assert th.equal(back["torch_rng"], state["torch_rng"])
    assert isinstance(back["policy"], collections.OrderedDict)
    assert back["obs"]["image"].dtype == np.uint8 and np.array_equal(
        back["obs"]["image"], state["obs"]["image"]
    )
    assert back["scalars"] == state["scalars"] and type(back["scalars"][0]) is np.float32
    assert back["nested"] == state["nested"] and back["blob"] == b"\x00\x01"
    assert back["uint16"].dtype == np.uint16 and back["uint16"][1] == 65535
    assert np.array_equal(back["big_endian"], [1.0, 2.0])
    with pytest.raises(TypeError, match=r"checkpoint\.bad: a .*_CreatesFile cannot be stored"):
        encode({"bad": _CreatesFile(tmp_path / "x")})
    with pytest.raises(TypeError, match=r"numpy object values"):
        encode(np.array([object()]))


def test_a_crafted_env_state_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    env = collections.deque([1, 2])
    with pytest.raises(UnsafeEnvStateError, match=r"names io\.open, which is not part"):
        load_env_state(pickle.dumps([env, _CreatesFile(marker)]), env)
    assert not marker.exists()
    assert ("collections", "deque") in pickled_globals(pickle.dumps(env))


def test_the_previous_checkpoint_stays_until_the_new_one_is_verified(tmp_path, monkeypatch):
    for step in (1, 2, 3):
        write_checkpoint(tmp_path, step, {"x": np.full(4, step)})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"step-00000000000{s}.{e}" for s in (2, 3) for e in ("pt", "sha256")]
    seen = []
    original = checkpoint_files.atomic_write

    def spy(path, write):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))  # while step 4 is written
        original(path, write)

    monkeypatch.setattr(checkpoint_files, "atomic_write", spy)
    monkeypatch.setattr(checkpoint_files, "file_sha256", lambda path: "0" * 64)  # bad disk
    with pytest.raises(OSError, match="reads back other bytes than were written"):
        write_checkpoint(tmp_path, 4, {"x": np.full(4, 4)})
    assert seen == [["step-000000000003.pt", "step-000000000003.sha256"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == seen[0]  # 3 is intact, 4 is gone
    monkeypatch.undo()
    assert checkpoint_files.read_checkpoint(tmp_path / "step-000000000003.pt")["x"][0] == 3


# -- crafted checkpoints ----------------------------------------------------------------------
def _with_checksum(path):
    digest = checkpoint_files.file_sha256(path)
    path.with_suffix(".sha256").write_text(f"{digest}  {path.name}\n")


def test_a_crafted_checkpoint_runs_nothing_and_the_previous_one_is_used(full, tmp_path, capsys):
    cut = _killed(tmp_path / "cut", kill_at=700)
    (_, newest), (previous_step, previous) = list_checkpoints(cut / "checkpoint")[:2]
    marker = tmp_path / "pwned"
    th.save({"format": 3, "x": _CreatesFile(marker)}, newest)  # a valid torch file ...
    _with_checksum(newest)  # ... with a matching checksum
    capsys.readouterr()
    _run(cut, resume=True)
    assert not marker.exists()
    (line,) = _warnings(capsys)
    assert f"checkpoint {newest} is refused: it holds something other than tensors" in line
    assert (
        f"resuming from the previous good checkpoint {previous.name} (step {previous_step})" in line
    )
    assert (cut / "checkpoint" / f"{newest.name}.refused").exists()
    _assert_same_run(full, cut)


def test_a_crafted_task_env_inside_a_valid_checkpoint_is_refused(tmp_path, capsys):
    cut = _killed(tmp_path / "cut", kill_at=700)
    newest = checkpoint.latest_checkpoint(cut)
    state = checkpoint.load_checkpoint(newest)
    marker = tmp_path / "pwned"
    assert state["env"]["state"]["task_env"] is not None  # Diagnostic resumes exactly
    state["env"]["state"]["task_env"] = pickle.dumps(_CreatesFile(marker))
    newest.unlink()
    write_checkpoint(cut / "checkpoint", state["total_step"], state)
    code = main([*CLI, "--run-dir", str(cut), "--resume"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not marker.exists()
    assert err.count("\n") == 0 and err.startswith("error: checkpoint ")
    assert f"{newest} is refused: the saved task env names io.open" in err


def test_a_pickled_checkpoint_of_an_older_version_is_not_loaded(tmp_path):
    cut = _killed(tmp_path / "cut", kill_at=300)
    for path in (cut / "checkpoint").iterdir():
        path.unlink()
    marker = tmp_path / "pwned"
    th.save({"x": _CreatesFile(marker)}, cut / "checkpoint" / "state.pt")
    with pytest.raises(CheckpointError, match=r"state\.pt is a pickle of an older cl-suites"):
        _run(cut, resume=True)
    assert not marker.exists()


# -- corrupted checkpoints --------------------------------------------------------------------
def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero_fill(path):
    path.write_bytes(bytes(path.stat().st_size))


def _flip_a_weight_byte(path):
    data = bytearray(path.read_bytes())
    start = data.find(b"data/0")  # the first tensor's storage (a policy weight)
    assert start > 0
    data[start + 200] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [_truncate, _zero_fill, _flip_a_weight_byte])
def test_a_corrupt_checkpoint_is_named_and_the_previous_good_one_resumes(
    full, tmp_path, capsys, corrupt
):
    cut = _killed(tmp_path / "cut", kill_at=700)
    (_, newest), (previous_step, previous) = list_checkpoints(cut / "checkpoint")[:2]
    corrupt(newest)
    capsys.readouterr()
    _run(cut, resume=True)
    (line,) = _warnings(capsys)
    assert line == (
        f"warning: checkpoint {newest} is corrupt: its SHA-256 does not match "
        f"{newest.with_suffix('.sha256').name}; resuming from the previous good checkpoint "
        f"{previous.name} (step {previous_step})"
    )
    _assert_same_run(full, cut)


def test_no_good_checkpoint_is_one_line_and_resumes_nothing(tmp_path, capsys):
    cut = _killed(tmp_path / "cut", kill_at=700)
    for _, path in list_checkpoints(cut / "checkpoint"):
        _zero_fill(path)
    before = read_eval(cut)
    code = main([*CLI, "--run-dir", str(cut), "--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: checkpoint ")
    assert "is corrupt" in err[-1] and "no earlier good checkpoint in" in err[-1]
    pd.testing.assert_frame_equal(read_eval(cut), before)  # nothing was cut or written


def test_unfinished_writes_alone_mean_no_checkpoint_and_a_refused_one_stays_refused(tmp_path):
    """Issue 29 item 3: a ``.pt`` without its ``.sha256`` (and a temporary file of a killed
    write) with nothing before it: no checkpoint, set aside, one warning line. Behind a
    checkpoint whose checksum exists but does not match, the run is refused as before."""
    directory = tmp_path / "checkpoint"
    first = write_checkpoint(directory, 256, {"w": np.arange(3)})
    first.with_suffix(".sha256").unlink()  # killed between the two writes
    (directory / ".step-000000000512.pt.k1ll3d.tmp").write_bytes(b"PK\x03")  # kill -9
    warned = []
    assert checkpoint_files.load_latest(directory, warned.append) is None
    assert len(warned) == 1 and f"checkpoint {first} has no checksum file" in warned[0]
    assert "starts again from its first step" in warned[0]
    assert sorted(p.name for p in directory.iterdir()) == [
        ".step-000000000512.pt.k1ll3d.tmp.unfinished",
        "step-000000000256.pt.unfinished",
    ]
    assert checkpoint_files.load_latest(directory, warned.append) is None and len(warned) == 1
    # a corrupt checkpoint (checksum present, not matching) before an unfinished one
    other = tmp_path / "other"
    old = write_checkpoint(other, 128, {"w": np.arange(3)})
    old.write_bytes(old.read_bytes()[:-8])
    write_checkpoint(other, 256, {"w": np.arange(3)}).with_suffix(".sha256").unlink()
    with pytest.raises(CheckpointError, match="is corrupt.*no earlier good checkpoint"):
        checkpoint_files.load_latest(other, warned.append)


# -- kills at fixed moments (CLI: SIGTERM is handled as Ctrl-C) -------------------------------
def _signal_on_call(mp, owner, name, nth, sig, predicate=lambda *a, **k: True):
    """Send ``sig`` to this process on the ``nth`` call of ``owner.name`` for which
    ``predicate(*args)`` holds, before the call runs."""
    original = getattr(owner, name)
    calls = []

    def patched(*args, **kwargs):
        if predicate(*args, **kwargs):
            calls.append(1)
            if len(calls) == nth:
                os.kill(os.getpid(), sig)
        return original(*args, **kwargs)

    mp.setattr(owner, name, patched)


def _inside_eval(mp):  # the 45th step of an evaluation batch: inside the eval at step 300
    _signal_on_call(mp, EvalBatch, "step", 45, signal.SIGTERM)


def _inside_checkpoint_write(mp):  # the 3rd checkpoint, at its 5th write to the file
    from cl_suites.rundir import fsutil

    saves = []
    original = checkpoint_files.write_checkpoint

    def counting(*args, **kwargs):
        saves.append(1)
        return original(*args, **kwargs)

    mp.setattr(checkpoint, "write_checkpoint", counting)
    _signal_on_call(
        mp, fsutil._CountingFile, "write", 5, signal.SIGTERM,
        predicate=lambda *a: len(saves) == 3,
    )  # fmt: skip


def _between_checkpoint_and_checksum(mp):  # the 3rd checkpoint's file is written, not its sum
    _signal_on_call(
        mp, checkpoint_files, "write_text_atomic", 3, signal.SIGTERM,
        predicate=lambda path, text: str(path).endswith(".sha256"),
    )  # fmt: skip


def _between_first_checkpoint_and_checksum(mp):  # no checkpoint is finished yet (issue 29)
    _signal_on_call(
        mp, checkpoint_files, "write_text_atomic", 1, signal.SIGTERM,
        predicate=lambda path, text: str(path).endswith(".sha256"),
    )  # fmt: skip


def _sigint_in_training(mp):  # Ctrl-C at the 100th training step (agent step 800)
    from cl_suites.core.vector import SequenceVectorEnv

    _signal_on_call(mp, SequenceVectorEnv, "step", 100, signal.SIGINT)


@pytest.mark.parametrize(
    "kill",
    [
        _inside_eval,
        _inside_checkpoint_write,
        _between_checkpoint_and_checksum,
        _between_first_checkpoint_and_checksum,
        _sigint_in_training,
    ],
)
def test_killed_at_a_fixed_moment_then_resumed_loses_and_repeats_nothing(
    full, tmp_path, capsys, kill
):
    cut = tmp_path / "cut"
    # Ctrl-C as in a fresh process: an earlier test in this worker (Ray, JAX) may have
    # left its own SIGINT handler installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.MonkeyPatch.context() as mp:
            kill(mp)
            assert main([*CLI, "--run-dir", str(cut)]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "interrupted; the run in" in capsys.readouterr().err
    names = sorted(p.name for p in (cut / "checkpoint").iterdir())
    assert not [n for n in names if n.endswith(".tmp")]  # no temporary file left
    assert main([*CLI, "--run-dir", str(cut), "--resume"]) == 0
    _assert_same_run(full, cut)


@pytest.mark.parametrize("damage", ["truncate", "zero", "flip"])
def test_a_corrupt_ppo_jax_checkpoint_is_named_and_the_previous_one_resumes(
    tmp_path, capsys, damage
):
    from cl_suites.job.jax.checkpoint import (
        common_checkpoint,
        jax_checkpoint_path,
        save_jax_checkpoint,
    )

    weights = np.arange(4096, dtype=np.float32)
    save_jax_checkpoint(tmp_path, {"params": weights}, {"total_step": 256})
    save_jax_checkpoint(tmp_path, {"params": weights + 1}, {"total_step": 512})
    current = jax_checkpoint_path(tmp_path)
    assert common_checkpoint([tmp_path]) == [current]
    raw = bytearray(current.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "zero":
        raw = bytearray(len(raw))
    else:  # one bit inside the weights: only the zip's CRC-32 can tell
        raw[len(raw) // 2] ^= 0x10
    current.write_bytes(bytes(raw))
    assert common_checkpoint([tmp_path]) == [jax_checkpoint_path(tmp_path, previous=True)]
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and str(current) in warning[0] and "not resuming" in warning[0]
