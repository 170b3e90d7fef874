"""Ctrl-C and SIGTERM as one kind of stop, and the state a run's status files say after
it: ``finished``, ``interrupted`` (Ctrl-C, SIGTERM: the run can be resumed) or ``failed``
(an error), each with its reason (:func:`outcome_of`)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

SIGTERM_REASON = "terminated by SIGTERM"
"""The message of the ``KeyboardInterrupt`` that SIGTERM raises (a cluster scheduler,
``kill``), where Ctrl-C's would be, so that both stop a run the same way."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C inside the block (a ``KeyboardInterrupt`` with the message
    :data:`SIGTERM_REASON`); outside the main thread, where no handler can be installed,
    nothing changes."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(SIGTERM_REASON)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interruption_reason(e: KeyboardInterrupt) -> str:
    """What stopped the run: ``"terminated by SIGTERM"``, ``"interrupted by Ctrl-C
    (SIGINT)"``, or the message the interrupt was raised with."""
    text = " ".join(str(e).split())
    return text or "interrupted by Ctrl-C (SIGINT)"


def outcome_of(error: BaseException | None) -> tuple[str, str | None]:
    """``(state, reason)`` of a run that ended with ``error`` (``None``: it ended
    normally): ``("finished", None)``, ``("interrupted", what stopped it)`` for Ctrl-C or
    SIGTERM, ``("failed", "TypeName: message")`` for any other error."""
    if error is None:
        return "finished", None
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", interruption_reason(error)
    message = " ".join(str(error).split())
    return "failed", f"{type(error).__name__}: {message}" if message else type(error).__name__
