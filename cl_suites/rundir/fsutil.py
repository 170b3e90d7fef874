"""Writing run files so that a full disk or a read-only directory is a message, not a crash.

Two ways to write, each leaving the previous content intact when the disk fails:

* :func:`atomic_write` replaces a whole file (checkpoints, metadata, progress): the new
  content goes to a temporary file in the same directory, is flushed and fsynced, and only
  then renamed over the old file. If anything fails, the temporary file is removed and
  the old file is untouched.
* :func:`append_text` appends a block of complete lines (CSV rows) with one ``os.write``
  on an ``O_APPEND`` descriptor; if the disk fills up half-way, the file is cut back to
  its size before the call, so no torn line is left behind.

Both turn ``ENOSPC`` / ``EDQUOT`` (disk full), ``EROFS`` / ``EACCES`` / ``EPERM`` (not
writable) and ``EFBIG`` (file-size limit) into :class:`RunDiskError`, whose message is one
line: what happened, where, and that the last good checkpoint is intact and ``--resume``
continues the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cl_suites.errors import CLSuitesError

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_WRITABLE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_UMASK = os.umask(0o022)
os.umask(_UMASK)
_NEW_FILE_MODE = 0o666 & ~_UMASK
RESUME_HINT = "the last good checkpoint is intact; fix this and rerun with --resume to continue"


class RunDiskError(CLSuitesError, RuntimeError):
    """A run file could not be written (disk full, directory not writable, size limit).

    Attributes:
        path: the file (or directory) that could not be written.
        reason: ``"disk full"``, ``"not writable"`` or ``"file too large"``.
        needed: bytes the write needed (when known), ``free``: bytes free on that device.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        reason: str,
        *,
        needed: int | None = None,
        free: int | None = None,
        detail: str = "",
        hint: str = RESUME_HINT,
    ):
        self.path, self.reason, self.needed, self.free = Path(path), reason, needed, free
        if reason == "disk full":
            sizes = []
            if needed is not None:
                sizes.append(f"{format_bytes(needed)} needed")
            if free is not None:
                sizes.append(f"{format_bytes(free)} free")
            what = f"disk full at {self.path}" + (f" ({', '.join(sizes)})" if sizes else "")
        elif reason == "not writable":
            what = f"directory not writable: {_existing_dir(self.path)} ({detail or 'read-only'})"
        else:
            what = f"cannot write {self.path}: {detail or reason}"
        super().__init__(f"{what}; {hint}" if hint else what)


def format_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _existing_dir(path: Path) -> Path:
    """The nearest existing directory at or above ``path``'s parent."""
    p = path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free on the device holding ``path`` (its nearest existing parent), or None."""
    try:
        return shutil.disk_usage(_existing_dir(Path(path))).free
    except OSError:
        return None


def disk_error(
    exc: OSError,
    path: str | os.PathLike[str],
    needed: int | None = None,
    hint: str = RESUME_HINT,
) -> RunDiskError | None:
    """The :class:`RunDiskError` for an ``OSError`` from writing ``path``, or ``None`` when
    the error is not about the disk (then re-raise the original). ``hint`` ends the
    message (default: the last good checkpoint is intact, ``--resume`` continues)."""
    if exc.errno in DISK_FULL_ERRNOS:
        return RunDiskError(path, "disk full", needed=needed, free=free_bytes(path), hint=hint)
    if exc.errno in NOT_WRITABLE_ERRNOS:
        return RunDiskError(path, "not writable", detail=exc.strerror or "", hint=hint)
    if exc.errno == errno.EFBIG:
        detail = "the file-size limit was reached"
        return RunDiskError(path, "file too large", detail=detail, hint=hint)
    return None


class _CountingFile:
    """A binary file wrapper that counts bytes and remembers the first ``OSError`` of a
    write (libraries such as torch re-raise it as a ``RuntimeError``)."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self.attempted = 0
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        self.attempted += memoryview(data).nbytes
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self._f.flush()

    def __getattr__(self, name: str) -> Any:  # seek, tell, fileno, ... of the real file
        return getattr(self._f, name)


def atomic_write(path: str | os.PathLike[str], write_fn: Callable[[IO[bytes]], Any]) -> None:
    """Replace ``path`` by what ``write_fn(file)`` writes into a binary file, atomically.

    ``write_fn`` gets a binary file object (``th.save(state, f)``, ``f.write(b"...")``).
    The content goes to a temporary file next to ``path``, is fsynced, and replaces
    ``path`` with ``os.replace``; on any failure (including Ctrl-C) the temporary file is
    removed and the previous ``path`` is intact. Disk errors raise :class:`RunDiskError`
    (one line: disk full at PATH with the bytes needed and free, or directory not
    writable), other errors propagate unchanged.
    """
    path = Path(path)
    # a failed write needs at least what it tried to write, and usually what the file held
    old = path.stat() if path.exists() else None
    previous = old.st_size if old is not None else 0
    tmp: Path | None = None
    counting: _CountingFile | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        os.fchmod(fd, old.st_mode & 0o777 if old is not None else _NEW_FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            counting = _CountingFile(f)
            write_fn(counting)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        cause = e if isinstance(e, OSError) else (counting.error if counting else None)
        if cause is not None and not isinstance(e, (KeyboardInterrupt, SystemExit)):
            needed = max(counting.attempted if counting else 0, previous) or None
            err = disk_error(cause, path, needed)
            if err is not None:
                raise err from e
        raise


UNFINISHED_SUFFIX = ".unfinished"
"""Suffix of a file an interrupted write left behind, once set aside (never read again)."""


def set_aside_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Rename the temporary files that :func:`atomic_write` calls killed mid-write left in
    ``directory`` (``.NAME.XXXX.tmp``; a kill -9 gives it no chance to remove them) to
    ``... .tmp.unfinished``: kept for a look, never read. Returns the new paths."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    moved = []
    for tmp in sorted(directory.glob(".*.tmp")):
        target = tmp.with_name(tmp.name + UNFINISHED_SUFFIX)
        with contextlib.suppress(OSError):
            tmp.rename(target)
            moved.append(target)
    return moved


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write` for a text file (UTF-8, newlines written as given)."""
    atomic_write(path, lambda f: f.write(text.encode()))


def append_text(fd: int, path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` (complete lines) to the file open as ``fd`` (``O_APPEND``) in one
    ``os.write``, fsynced. If the write fails part-way, the file is cut back to its size
    before the call, so a reader never sees a torn line; disk errors raise
    :class:`RunDiskError`."""
    data = text.encode()
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:  # a regular file takes it in one call unless the disk fills up
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        err = disk_error(e, path, len(data))
        if err is not None:
            raise err from e
        raise


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def directory_entries(run_dir: Path) -> set[str] | None:
    """The names in ``run_dir`` (``None``: it does not exist)."""
    return {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else None


def remove_unstarted(run_dir: Path, before: set[str] | None) -> None:
    """Remove what a fresh run that failed before its first step wrote into ``run_dir``
    (``before``: the names that were there, ``None``: the directory did not exist), so
    that the same command can simply be run again; never anything that was there."""
    if not run_dir.is_dir():
        return
    if before is None:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for path in run_dir.iterdir():
        if path.name not in before:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
