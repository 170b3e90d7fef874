"""Checkpoints of a ``ppo-jax`` run: plain numpy arrays and JSON, one file, written atomically.

``RUN_DIR/checkpoint/jax_state.npz`` holds the learner's state of the run's seed as flat
arrays (``JaxIPPO.state_dict``: parameters, optimizer and CL state, env state, PRNG keys,
counters; names prefixed ``learner/``) and one ``meta`` entry, the UTF-8 bytes of a JSON
object: format, the run's step at the checkpoint (env steps), the evaluator's state,
``finished``. It is read with ``allow_pickle=False``: no object in it is ever unpickled.

The file replaces the previous one atomically (temporary file + rename, disk errors as a
one-line ``RunDiskError``); the previous checkpoint is kept as ``jax_state.prev.npz``. The
zip's CRC-32 of every member is the checksum: a file that fails it is named in a warning
and the run resumes from the other checkpoint (:func:`common_checkpoint`). A
run of several seeds in one program writes one file per seed's run directory, one after
the other; a kill between two of them leaves seeds at two consecutive checkpoints, and
:func:`common_checkpoint` picks the newest step every seed has. A kill inside the first
checkpoint write leaves no step every seed has (a temporary file of the write, or the
files of the seeds written before the kill): those files are set aside
(``*.unfinished``) with one warning line and the runs start again from their first step.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.rundir.fsutil import UNFINISHED_SUFFIX, atomic_write, set_aside_temporaries

FORMAT = "ppo-jax-1"
CHECKPOINT_DIR = "checkpoint"
CURRENT, PREVIOUS = "jax_state.npz", "jax_state.prev.npz"
_PREFIX = "learner/"


def jax_checkpoint_path(run_dir: str | os.PathLike[str], previous: bool = False) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / (PREVIOUS if previous else CURRENT)


def save_jax_checkpoint(
    run_dir: str | os.PathLike[str], arrays: dict[str, np.ndarray], meta: dict[str, Any]
) -> None:
    """Write seed's ``arrays`` (name -> array) and ``meta`` (JSON-ready; needs
    ``total_step``) as the run's checkpoint; the old one becomes the previous one."""
    path = jax_checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {_PREFIX + k: np.asarray(v) for k, v in arrays.items()}
    blob = json.dumps({"format": FORMAT, **meta}).encode()
    payload["meta"] = np.frombuffer(blob, dtype=np.uint8)
    if path.exists():
        os.replace(path, jax_checkpoint_path(run_dir, previous=True))
    atomic_write(path, lambda f: np.savez(f, **payload))


def load_jax_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` of a checkpoint file (``ValueError`` if it is not one)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            arrays = {k[len(_PREFIX) :]: data[k] for k in data.files if k.startswith(_PREFIX)}
    except (OSError, ValueError, KeyError, json.JSONDecodeError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path} is not a readable ppo-jax checkpoint ({e})") from e
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} has checkpoint format {meta.get('format')!r}, not {FORMAT!r}")
    return arrays, meta


def read_meta(path: Path) -> dict[str, Any]:
    """The ``meta`` object of a checkpoint file (its arrays are not read)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return json.loads(bytes(data["meta"]).decode())
    except (OSError, ValueError, KeyError, json.JSONDecodeError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path} is not a readable ppo-jax checkpoint ({e})") from e


def _steps(run_dir: Path) -> dict[int, Path]:
    """``{step: file}`` of the run's checkpoints that read back whole. Every array is read,
    so the zip's CRC-32 of each member is checked: a truncated, zero-filled or bit-flipped
    file is named in one warning line and skipped (the run resumes from the other one)."""
    found = {}
    for previous in (True, False):
        path = jax_checkpoint_path(run_dir, previous)
        if not path.exists():
            continue
        try:
            _, meta = load_jax_checkpoint(path)
        except ValueError as e:
            print(f"warning: {e}; not resuming from it", file=sys.stderr, flush=True)
            continue
        found[int(meta["total_step"])] = path
    return found


def common_checkpoint(run_dirs: Sequence[Path]) -> list[Path] | None:
    """The checkpoint file of each run directory at the newest step all of them have
    (``None`` when they share none: the runs start over; files of an unfinished first
    checkpoint are then set aside, see the module docstring)."""
    left = [t for d in run_dirs for t in set_aside_temporaries(Path(d) / CHECKPOINT_DIR)]
    found = [_steps(Path(d)) for d in run_dirs]
    shared = set.intersection(*(set(f) for f in found)) if found else set()
    if not shared:
        partial = [path for f in found for path in f.values()]
        for path in partial:
            path.rename(path.with_name(path.name + UNFINISHED_SUFFIX))
        if left or partial:
            what = (
                f"{left[0].name} is an unfinished checkpoint write"
                if left
                else f"{partial[0]} is a checkpoint the other seeds' runs do not have"
            )
            print(
                f"warning: {what} and there is no earlier checkpoint every run has: the runs "
                f"start again from their first step (set aside as *{UNFINISHED_SUFFIX})",
                file=sys.stderr,
                flush=True,
            )
        return None
    step = max(shared)
    return [f[step] for f in found]
