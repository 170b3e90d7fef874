"""Where a replay buffer keeps its observations: RAM or disk (the memory guard).

CORA keeps every replay buffer file-backed (CLEAR's reservoir, EWC's per-task Fisher
buffers, online EWC's and P&C's single buffer); its paper sizes are tens of GiB (CLEAR on
Procgen6: 60.1 GiB of observations; EWC on Atari6: 28 GB a task). Here a buffer's
``storage`` is one of:

* ``"auto"`` (the default): before the buffer is allocated its full size is compared with
  the memory this process may still use (``MemAvailable``, capped by the cgroup limit). A
  buffer that needs more than ``RAM_FRACTION`` of it keeps its observations on disk under
  its ``disk_dir`` (with a message); with no ``disk_dir``, or not enough free disk either,
  the method refuses before training with the sizes and the options to change
  (:class:`ReplayMemoryError`).
* ``"ram"``: in RAM, refused when it cannot fit.
* ``"disk"``: always on disk, as CORA (needs ``disk_dir``).

The job option ``replay_on_disk`` (true / false / auto) maps onto these
(:func:`replay_storage`). Storage changes nothing else: sampling and losses are the same.
"""

from __future__ import annotations

import logging
import os

from cl_suites.errors import CLSuitesError
from cl_suites.rundir.fsutil import format_bytes, free_bytes
from cl_suites.rundir.resources import available_memory

logger = logging.getLogger(__name__)

STORAGES: tuple[str, ...] = ("auto", "ram", "disk")
RAM_FRACTION = 0.75
"""``storage="auto"`` keeps a buffer in RAM when its arrays need at most this fraction of
the memory still available to the process."""


class ReplayMemoryError(CLSuitesError, MemoryError):
    """A replay buffer fits neither in memory nor on disk as configured (the message gives
    the sizes and the options to change)."""


def replay_storage(option: bool | str | None) -> str:
    """A buffer's ``storage`` from the job option ``replay_on_disk``:
    ``None``/``"auto"`` -> ``"auto"``, ``True`` -> ``"disk"``, ``False`` -> ``"ram"``."""
    if option is None or option == "auto":
        return "auto"
    if isinstance(option, bool):
        return "disk" if option else "ram"
    if option in STORAGES:
        return str(option)
    raise ValueError(f"replay_on_disk must be true, false or 'auto', got {option!r}")


def check_storage(storage: str, disk_dir: str | os.PathLike[str] | None, method: str) -> None:
    """Refuse an unknown ``storage`` or ``"disk"`` without a ``disk_dir`` (``method``
    names the method in the message)."""
    if storage not in STORAGES:
        raise ValueError(f"unknown storage {storage!r}; valid: {', '.join(STORAGES)}")
    if storage == "disk" and disk_dir is None:
        raise ValueError(f"{method} storage='disk' needs disk_dir")


def place_buffer(
    what: str,
    obs_bytes: int,
    other_bytes: int,
    *,
    storage: str,
    disk_dir: str | os.PathLike[str] | None,
    smaller: str,
    quiet: bool = False,
) -> bool:
    """Whether a buffer's observations go to disk (see the module docstring).

    Args:
        what: the buffer in words, for messages (``"CLEAR replay buffer of N transitions"``).
        obs_bytes / other_bytes: bytes of its observations (which may go to disk) and of
            the rest (always in RAM) when full.
        storage: ``"auto"``, ``"ram"`` or ``"disk"``.
        disk_dir: where observations go on disk (``None``: nowhere).
        smaller: the option that shrinks the buffer, in words (``"lower buffer_size
            (--set buffer_size=N)"``).
        quiet: no message when the buffer goes to disk (a dry run).

    Raises :class:`ReplayMemoryError` before anything is allocated when it fits nowhere.
    """
    if storage == "disk":
        return True
    free = available_memory()
    budget = None if free is None else int(free * RAM_FRACTION)
    if budget is None or obs_bytes + other_bytes <= budget:
        return False
    memory = (
        f"needs {format_bytes(obs_bytes + other_bytes)} of RAM "
        f"({format_bytes(obs_bytes)} of observations) but only {format_bytes(free)} of "
        f"memory is free (the buffer may use {RAM_FRACTION:.0%})"
    )
    if storage == "ram":
        raise ReplayMemoryError(
            f"{what} {memory}; {smaller}, or keep it on disk (--set replay_on_disk=true)"
        )
    if disk_dir is None:
        raise ReplayMemoryError(f"{what} {memory}; {smaller}, or pass disk_dir=DIR")
    disk_free = free_bytes(disk_dir)
    if other_bytes > budget or (disk_free is not None and obs_bytes > disk_free):
        disk = f"{format_bytes(disk_free)} free" if disk_free is not None else "unknown"
        raise ReplayMemoryError(
            f"{what} {memory}, and on disk its {format_bytes(obs_bytes)} of observations "
            f"do not fit either ({disk_dir}: {disk}); {smaller}"
        )
    if not quiet:
        logger.warning(
            "%s %s: keeping its observations on disk in %s (%s of %s free); "
            "--set replay_on_disk=false forces RAM",
            what,
            memory,
            disk_dir,
            format_bytes(obs_bytes),
            format_bytes(disk_free) if disk_free is not None else "?",
        )
    return True
