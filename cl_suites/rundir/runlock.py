"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/.lock``.

The lock is an advisory ``fcntl.flock`` held on an open descriptor, so the kernel drops it
the moment the holding process ends, however it ends (``kill -9`` included): a lock file
left behind by a dead process is *stale* and the next writer takes it over with a message.
The file records who holds the lock (``{"pid", "host", "started"}``) so that a second
writer is refused with one line naming them. Within one process a second exclusive
holder is refused too; ``RunDirLock(run_dir, reentrant=True)`` (what ``truncate_logs``
uses) joins a lock the process already holds. The last holder removes the file.

``flock`` is per host on most network file systems; two machines writing to one run
directory on NFS are not guaranteed to see each other's lock.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_suites.errors import RunDirError
from cl_suites.rundir.fsutil import RunDiskError, disk_error

LOCK_FILE = ".lock"
_UNTOUCHED = "nothing in it was changed; make it writable or choose another --run-dir"
logger = logging.getLogger(__name__)


class RunDirLockedError(RunDirError, RuntimeError):
    """Another live process holds the run directory's lock (the message names it)."""

    def __init__(self, run_dir: Path, holder: dict[str, Any]):
        self.run_dir, self.holder = run_dir, holder
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        since = f", since {holder['started']}" if holder.get("started") else ""
        super().__init__(
            f"{run_dir} is in use by another writer (pid {pid} on host {host}{since}); "
            "wait for that run to end or stop it, or choose another --run-dir"
        )


@dataclass
class _Held:
    fd: int
    count: int


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        holder = json.loads(raw.decode()) if raw.strip() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {"pid": "unknown", "host": "unknown"}
    return holder if isinstance(holder, dict) else {"pid": "unknown", "host": "unknown"}


class RunDirLock:
    """Exclusive lock on a run directory (created if missing).

    Args:
        run_dir: the run directory.
        reentrant: join the lock if this process already holds it (else refuse).

    Use as a context manager or with :meth:`acquire` / :meth:`release`::

        with RunDirLock("runs/ppo-s0"):
            ...  # the only writer of runs/ppo-s0

    Raises:
        RunDirLockedError: another live process holds the lock (the message names its pid
            and host).
        RunDiskError: the directory cannot be created or written.
    """

    def __init__(self, run_dir: str | os.PathLike[str], reentrant: bool = False):
        self.run_dir = Path(run_dir)
        self.reentrant = reentrant
        self.path = self.run_dir / LOCK_FILE
        self._key: str | None = None

    @property
    def held(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._key is not None

    def acquire(self) -> RunDirLock:
        if self._key is not None:
            return self
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise (disk_error(e, self.path, hint=_UNTOUCHED) or e) from e
        key = os.path.realpath(self.run_dir)
        with _HELD_GUARD:
            if key in _HELD and not self.reentrant:
                raise RunDirLockedError(self.run_dir, _read_holder(_HELD[key].fd))
            if key in _HELD:
                _HELD[key].count += 1
            else:
                _HELD[key] = _Held(self._lock_file(), 1)
        self._key = key
        return self

    def _lock_file(self) -> int:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise (disk_error(e, self.path, hint=_UNTOUCHED) or e) from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunDirLockedError(self.run_dir, holder) from None
            # the previous holder may have removed the file between our open and flock
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        stale = _read_holder(fd)
        if stale:
            logger.warning(
                "taking over the stale lock of %s: its writer (pid %s on host %s, since %s) "
                "is gone",
                self.run_dir,
                stale.get("pid", "?"),
                stale.get("host", "?"),
                stale.get("started", "?"),
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        except OSError as e:
            os.close(fd)
            raise (disk_error(e, self.path, hint=_UNTOUCHED) or e) from e
        return fd

    def release(self) -> None:
        """Give the lock up (the last holder in this process removes the lock file)."""
        key, self._key = self._key, None
        if key is None:
            return
        with _HELD_GUARD:
            held = _HELD[key]
            held.count -= 1
            if held.count == 0:
                del _HELD[key]
                with contextlib.suppress(OSError):
                    self.path.unlink()  # before closing: a waiter re-checks the inode
                os.close(held.fd)

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # a forgotten release must not keep the directory locked
        with contextlib.suppress(Exception):
            self.release()


def live_writer(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The holder (``{"pid", "host", "started"}``) of ``run_dir``'s lock while its process
    lives, else ``None``; takes no lock (a reader must never stop a writer from starting).

    The last holder removes the lock file, so a file left behind is either held or stale
    (its writer was killed): on this host the holder's pid tells which; a holder on another
    host cannot be checked from here and is returned as live.
    """
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        holder = _read_holder(fd)
    finally:
        os.close(fd)
    if holder.get("host") != socket.gethostname():
        return holder if holder.get("host") not in (None, "unknown") else None
    try:
        os.kill(int(holder["pid"]), 0)
    except PermissionError:  # alive, another user's
        return holder
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return holder


__all__ = ["LOCK_FILE", "RunDirLock", "RunDirLockedError", "RunDiskError", "live_writer"]
