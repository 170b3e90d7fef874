"""Checkpoint files that load as data, with a checksum, and the previous one kept.

A checkpoint is a tree of dicts, lists, tuples, sets, ``str``, ``int``, ``float``,
``bool``, ``None``, ``bytes``, torch tensors and numpy arrays / scalars. It is written
with ``torch.save`` after numpy values are turned into tensors (tagged, so that
:func:`decode` gives them back as numpy with their dtype), so it loads with
``torch.load(weights_only=True)``: torch's restricted unpickler, which builds tensors
and plain containers and refuses every other global. A crafted file therefore cannot run
code when it is loaded; it is refused with a one-line :class:`CheckpointError`.

A checkpoint directory holds, per checkpoint (``STEP``: the run's step, 12 digits)::

    step-STEP.pt       the torch file
    step-STEP.sha256   "<sha256 hex>  step-STEP.pt" (the format of ``sha256sum -c``)

:func:`write_checkpoint` writes the ``.pt`` atomically while hashing what it writes,
reads the file back to check the hash (a disk that returns other bytes is caught here),
then writes the ``.sha256`` atomically. The directory keeps the newest ``keep`` (2)
checkpoints: before a write, all but the newest ``keep - 1`` are deleted, so the disk never
holds more than ``keep`` (plus the file being written), and the previous checkpoint stays
until the new one is verified. A kill at any moment leaves the previous checkpoint intact;
a ``.pt`` without its ``.sha256`` is an unfinished write and is never loaded.
:func:`load_latest` loads the newest checkpoint whose file matches its checksum and
refuses the others, one line each naming the file and the reason. When the only
checkpoints are unfinished writes (a kill inside the run's first checkpoint write), the
run has no checkpoint yet: they are set aside (``*.unfinished``) and the run starts again
from its first step, with one warning line. A checkpoint whose checksum file exists but
does not match is corrupt, not unfinished: with no good one before it, it is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch as th

from cl_suites.errors import RunFileError
from cl_suites.rundir.fsutil import (
    UNFINISHED_SUFFIX,
    atomic_write,
    set_aside_temporaries,
    write_text_atomic,
)

_ARRAY = "__cl_suites_ndarray__"
_SCALAR = "__cl_suites_npscalar__"
_TAGS = (_ARRAY, _SCALAR)
_NAME = re.compile(r"^step-(\d{12})\.pt$")
_PLAIN = (str, int, float, bool, complex, bytes, type(None))
_CHUNK = 1 << 20


class CheckpointError(RunFileError):
    """A checkpoint that cannot be used (corrupt, crafted, or of an unknown format); the
    message is one line naming the file."""


# -- tree <-> torch-loadable tree ------------------------------------------------------------
def encode(tree: Any, where: str = "checkpoint") -> Any:
    """``tree`` with every numpy array / scalar replaced by a tagged tensor.

    Raises ``TypeError`` naming the field (``where``, dotted) of a value that is not plain
    data (an object, a numpy array of Python objects, ...).
    """
    if isinstance(tree, (*_PLAIN, th.Tensor)):
        return tree
    if isinstance(tree, np.ndarray | np.generic):
        array = np.asarray(tree)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{where}: numpy {array.dtype} values cannot be stored in a checkpoint")
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        tag = _ARRAY if isinstance(tree, np.ndarray) else _SCALAR
        return {tag: th.from_numpy(np.ascontiguousarray(array).reshape(array.shape))}
    if isinstance(tree, dict):
        if len(tree) == 1 and next(iter(tree)) in _TAGS:
            raise TypeError(f"{where}: the key {next(iter(tree))!r} is reserved")
        out = {k: encode(v, f"{where}.{k}") for k, v in tree.items()}
        return type(tree)(out) if type(tree) is not dict else out  # OrderedDict stays one
    if isinstance(tree, list | tuple):
        items = [encode(v, f"{where}[{i}]") for i, v in enumerate(tree)]
        return items if isinstance(tree, list) else tuple(items)
    if isinstance(tree, set | frozenset):
        return tree
    raise TypeError(
        f"{where}: a {type(tree).__module__}.{type(tree).__qualname__} cannot be stored in a "
        "checkpoint (only tensors, numpy arrays, containers and plain values)"
    )


def decode(tree: Any) -> Any:
    """Undo :func:`encode`: tagged tensors become numpy arrays / scalars again."""
    if isinstance(tree, dict):
        if len(tree) == 1:
            ((key, value),) = tree.items()
            if key == _ARRAY and isinstance(value, th.Tensor):
                return value.numpy()
            if key == _SCALAR and isinstance(value, th.Tensor):
                return value.numpy()[()]
        out = {k: decode(v) for k, v in tree.items()}
        return type(tree)(out) if type(tree) is not dict else out
    if isinstance(tree, list):
        return [decode(v) for v in tree]
    if isinstance(tree, tuple):
        return tuple(decode(v) for v in tree)
    return tree


# -- files ------------------------------------------------------------------------------------
def checkpoint_file(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step-{int(step):012d}.pt"


def checksum_file(path: Path) -> Path:
    return path.with_suffix(".sha256")


def checkpoint_files(directory: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the ``.pt`` files in ``directory``, newest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found, reverse=True)


class _HashingFile:
    """Passes writes on to ``f`` and hashes them. Remembers a Ctrl-C / SIGTERM raised
    during a write (``interrupt``): torch re-raises it as a ``RuntimeError``."""

    def __init__(self, f: IO[bytes]):
        self._f, self.sha256 = f, hashlib.sha256()
        self.interrupt: BaseException | None = None

    def write(self, data: Any) -> int:
        try:
            self.sha256.update(data)
            return self._f.write(data)
        except (KeyboardInterrupt, SystemExit) as e:
            self.interrupt = e
            raise

    def flush(self) -> None:
        self._f.flush()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_checkpoint(
    directory: str | Path, step: int, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write ``state`` as the checkpoint at ``step`` (see the module docstring); returns its
    path. Older checkpoints beyond the newest ``keep`` go only once the new one is verified.
    Disk errors raise ``RunDiskError`` (the previous checkpoint is intact)."""
    path = checkpoint_file(directory, step)
    tree = encode(state)
    hashing: list[_HashingFile] = []

    def write(f: IO[bytes]) -> None:
        hashing.append(_HashingFile(f))
        try:
            th.save(tree, hashing[-1])
        except RuntimeError:
            if hashing[-1].interrupt is not None:  # a kill, not a torch error
                raise hashing[-1].interrupt from None
            raise

    sidecar = checksum_file(path)
    others = [old for s, old in checkpoint_files(directory) if s != int(step)]
    _remove(others[keep - 1 :])  # the newest keep - 1 stay until this one is verified
    _remove([sidecar])  # a checkpoint at the same step is being replaced
    atomic_write(path, write)
    digest = hashing[-1].sha256.hexdigest()
    on_disk = file_sha256(path)
    if on_disk != digest:
        path.unlink()
        raise OSError(f"checkpoint {path} reads back other bytes than were written")
    write_text_atomic(sidecar, f"{digest}  {path.name}\n")
    _remove([old for _, old in checkpoint_files(directory)[keep:]])
    return path


def _remove(paths: list[Path]) -> None:
    """Delete checkpoint files (``.pt`` and ``.sha256``)."""
    for path in paths:
        for p in (path, checksum_file(path)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The state in the checkpoint ``path`` after checking it against its ``.sha256``;
    :class:`CheckpointError` (one line naming the file and what is wrong) otherwise."""
    sidecar = checksum_file(path)
    try:
        expected = sidecar.read_text(encoding="ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        raise CheckpointError(
            f"checkpoint {path} has no readable checksum file {sidecar.name} (an unfinished write)"
        ) from None
    try:
        actual = file_sha256(path)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} cannot be read: {e.strerror or e}") from None
    if actual != expected:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: its SHA-256 does not match {sidecar.name}"
        )
    try:
        tree = th.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # the checksum matched: a crafted or foreign file
        reason = " ".join(str(e).split())[:200]
        raise CheckpointError(
            f"checkpoint {path} is refused: it holds something other than tensors and plain "
            f"data ({type(e).__name__}: {reason})"
        ) from None
    if not isinstance(tree, dict):
        raise CheckpointError(f"checkpoint {path} is refused: it does not hold a dict")
    return decode(tree)


REFUSED_SUFFIX = ".refused"


def _set_aside(path: Path, suffix: str = REFUSED_SUFFIX) -> None:
    """Rename a refused checkpoint (and its checksum) to ``*.refused`` (or ``suffix``):
    kept for a look, never loaded again, and not counted among the checkpoints a new save
    keeps."""
    for p in (path, checksum_file(path)):
        with contextlib.suppress(OSError):
            p.rename(p.with_name(p.name + suffix))


def load_latest(
    directory: str | Path, warn: Callable[[str], None]
) -> tuple[dict[str, Any], Path] | None:
    """The newest good checkpoint in ``directory`` and its path; ``None`` when there is
    none: nothing was written, or only unfinished writes (a ``.pt`` without its
    ``.sha256``, or a temporary file of a killed write), which are set aside
    (``*.unfinished``) with one ``warn`` line saying the run starts again from its first
    step. Each other checkpoint skipped is set aside (``*.refused``) and reported through
    ``warn`` in one line naming it, the reason and the checkpoint resumed from. Raises
    :class:`CheckpointError` when a checkpoint with a checksum file is refused and no
    earlier one is good."""
    bad: list[str] = []
    refused: list[str] = []
    temporaries = set_aside_temporaries(directory)
    for step, path in checkpoint_files(directory):
        if not checksum_file(path).exists():
            bad.append(
                f"checkpoint {path} has no checksum file {checksum_file(path).name} "
                "(an unfinished write)"
            )
            _set_aside(path, UNFINISHED_SUFFIX)
            continue
        try:
            state = read_checkpoint(path)
        except CheckpointError as e:
            bad.append(str(e))
            refused.append(str(e))
            _set_aside(path)
            continue
        for reason in bad:
            warn(f"{reason}; resuming from the previous good checkpoint {path.name} (step {step})")
        return state, path
    if refused:
        raise CheckpointError(
            f"{refused[0]}; no earlier good checkpoint in {directory}"
            + (f" ({len(bad)} checkpoints refused)" if len(bad) > 1 else "")
        )
    if bad or temporaries:
        what = bad[0] if bad else f"{temporaries[0].name} is an unfinished checkpoint write"
        warn(
            f"{what} and there is no earlier checkpoint: the run starts again from its first "
            f"step (set aside as *{UNFINISHED_SUFFIX})"
        )
    return None
