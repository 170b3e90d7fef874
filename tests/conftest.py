"""Settings for the whole test session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def pytest_configure(config) -> None:
    # Models built outside the job keep SB3's default logger, which makes an empty
    # SB3-<date> folder in the temp directory at every learn(): one folder for them all.
    os.environ.setdefault("SB3_LOGDIR", str(Path(tempfile.gettempdir()) / "cl-suites-tests-sb3"))
