"""How the command line ends: one line per error, an exit code by the error's class, the
library's log messages as notes and third-party warnings users cannot act on hidden."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings

from rich.markup import escape

from cl_suites.cli.output import err_console
from cl_suites.errors import (
    CLSuitesError,
    InputError,
    MissingSimulatorError,
    RunInterrupted,
    SimulatorSetupError,
)

DEBUG_ENV = "CL_SUITES_DEBUG"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
LIB_LOGGERS = ("cl_suites", "baselines_sb3")

THIRD_PARTY_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    (DeprecationWarning, "", r"gym(3)?(\.|$)"),  # legacy gym / gym3 under procgen2
    (UserWarning, "", r"gym(3)?(\.|$)"),
    (FutureWarning, r"random_state is deprecated", r"arch(\.|$)"),  # arch under rliable
    (RuntimeWarning, r"os\.fork\(\) was called", ""),  # JAX, when a worker process forks
    (UserWarning, r"The given NumPy array is not writable", ""),  # torch on JAX arrays
    (DeprecationWarning, "", r"pkg_resources(\.|$)"),
)
"""``(category, message regex, module regex)`` of warnings users cannot act on; each is
matched by its emitting module or its exact message, so warnings of cl-suites' own code
still show."""


def quiet_third_party_warnings() -> None:
    for category, message, module in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class _NoteHandler(logging.Handler):
    """Library log messages as ``note: ...`` lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(f"[yellow]note:[/yellow] {escape(record.getMessage())}")


def setup_log_messages() -> None:
    """Show the library's warnings (stale lock taken over, replay buffer moved to disk,
    torn log lines dropped) as ``note: ...`` lines on stderr."""
    for name in LIB_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(h, _NoteHandler) for h in log.handlers):
            log.addHandler(_NoteHandler())


EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (RunInterrupted, EXIT_INTERRUPTED),
    (InputError, EXIT_BAD_INPUT),
    (MissingSimulatorError, EXIT_BAD_INPUT),
    (SimulatorSetupError, EXIT_BAD_INPUT),
    (CLSuitesError, EXIT_FAILED),
    *((legacy, EXIT_BAD_INPUT) for legacy in (ValueError, KeyError, ImportError, FileExistsError)),
    (MemoryError, EXIT_FAILED),
    (OSError, EXIT_FAILED),
)
"""The exit code of an error, by class (the first row it is an instance of; never by its
message): the ``cl_suites.errors`` classes first, then the built-in types that library
code still raises for bad values (``ValueError`` and kin: bad input, as before the
hierarchy), then ``MemoryError`` and ``OSError`` (the command failed). Any other error
(``TypeError``, ``AttributeError``, ...: a bug, not bad input) exits ``EXIT_FAILED`` as
*unexpected*, with a hint to rerun with ``--debug``."""


def exit_code(e: BaseException) -> int | None:
    """``e``'s row of ``EXIT_CODES``, or ``None`` for an unexpected error."""
    return next((code for cls, code in EXIT_CODES if isinstance(e, cls)), None)


def _one_line(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args:
        text = str(e.args[0])
    elif isinstance(e, OSError) and e.strerror and e.filename:
        text = f"{e.strerror}: {e.filename}"
    else:
        text = str(e)
    return " ".join(text.split()) or type(e).__name__


def _close_progress_bars() -> None:
    """End progress bars an error left open, so the error starts on its own line."""
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is not None:
        for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
            with contextlib.suppress(Exception):
                bar.close()


def report_error(e: BaseException) -> int:
    """Print ``e`` as one line on stderr; the exit code (``EXIT_CODES``, by class)."""
    _close_progress_bars()
    code = exit_code(e)
    if code == EXIT_INTERRUPTED:
        text = _one_line(e) if isinstance(e, RunInterrupted) else "interrupted"
        err_console.print(f"[yellow]{escape(text)}[/yellow]")
        return code
    text = _one_line(e)
    if code is None:
        code = EXIT_FAILED
        text = (
            f"unexpected {type(e).__name__}: {text} (rerun with --debug or "
            f"{DEBUG_ENV}=1 for the traceback)"
        )
    elif isinstance(e, MemoryError) and not str(e):
        text = "out of memory (MemoryError); use a smaller preset, budget or buffer"
    err_console.print(f"[red]error:[/red] {escape(text)}")
    return code
