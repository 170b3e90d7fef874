"""Test hook of the Ray cluster of ``tests/sweep`` (on its processes' ``PYTHONPATH``):
pauses a run at a known point, so a test can stop it there instead of racing a kill.

Inert unless ``CL_SUITES_TEST_PAUSE_DIR`` is set and that directory holds a file
``request`` naming a run directory (its last path component). Then the first checksum
file of a checkpoint that run writes (``checkpoint/step-*.sha256``) is not written: the
process writes ``paused`` (its pid) next to ``request``, blocks SIGTERM and SIGINT and
sleeps until it is killed, leaving the checkpoint's ``.pt`` without its ``.sha256``, as a
kill -9 between the two writes would.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

_PAUSE_DIR = os.environ.get("CL_SUITES_TEST_PAUSE_DIR")
_TARGET = "cl_suites.rundir.checkpoint_files"


def _pause_before_checksums(module) -> None:
    original = module.write_text_atomic

    def write_text_atomic(path, text):
        request = Path(_PAUSE_DIR) / "request"
        path = Path(path)
        if (
            path.suffix == ".sha256"
            and request.exists()
            and request.read_text().strip() in path.parts
        ):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            (Path(_PAUSE_DIR) / "paused").write_text(f"{os.getpid()} {path}\n")
            while True:
                time.sleep(3600)
        return original(path, text)

    module.write_text_atomic = write_text_atomic


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the checkpoint module right after it is first imported."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _pause_before_checksums(module)

        spec.loader.exec_module = exec_module
        return spec


if _PAUSE_DIR:
    sys.meta_path.insert(0, _Finder())
