"""CPU-bound processes beside a measurement: ``busy_processes(n)`` starts ``n`` Python
processes that each spin one core (``while True: pass``) and kills them on exit. Shared by
``bench_contention.py`` and ``bench_meal.py --busy``."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` spinning processes for the duration of the ``with`` block (none for 0)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()
