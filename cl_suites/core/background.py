"""One call at a time in a background thread, its error re-raised where it is awaited.

Used by the learner's update beside the next rollout (``baselines_sb3.policy_lag``) and
by evaluations beside training (``cl_suites.core.evaluation.Evaluator.submit``). The
thread gets the caller's torch intra-op thread count: the count is per thread (OpenMP),
and a new thread would otherwise start with one per core, whose spinning workers take the
cores from the caller.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any


class BackgroundCall:
    """Runs ``fn()`` in a daemon thread named ``name``; :meth:`wait` joins it and re-raises
    what it raised."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        """True from :meth:`start` until :meth:`wait` has returned."""
        return self._thread is not None

    @property
    def running(self) -> bool:
        """True while the call itself runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, fn: Callable[[], Any]) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: a call is already in flight")
        torch = sys.modules.get("torch")
        threads = None if torch is None else torch.get_num_threads()

        def run() -> None:
            try:
                if threads is not None:
                    torch.set_num_threads(threads)
                fn()
            except BaseException as e:  # re-raised by wait()
                self._error = e

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Wait for the call in flight (if any); re-raise its error."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
