"""A cached virtual environment with DARPA's ``l2metrics`` 3.1.0, the L2M reference tool.

l2metrics needs ``numpy<2`` and pandas 1.5-2.2, which the project's environment does not
have, so it lives in its own venv at ``<repo>/.venv-l2metrics/`` (git-ignored). The venv is
built once (``python -m venv`` + ``pip install``; a warm pip cache makes it quick) and
reused while its marker file records the same requirements. Builds are serialised with a
file lock, so parallel test workers share one venv.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-l2metrics"
REQUIREMENTS = (
    "l2metrics==3.1.0",
    "numpy==1.26.*",
    "pandas>=1.5,<2.3",
    "scipy==1.11.*",
    "pyarrow<20",  # l2metrics saves a feather file; pyarrow >= 20 needs numpy 2
)
MARKER = VENV / ".cl-suites-requirements"
BUILD_TIMEOUT_S = 1200


def _base_python() -> str | None:
    """A Python the requirements have wheels for (3.9-3.12): this one, else one on PATH."""
    if (3, 9) <= sys.version_info[:2] <= (3, 12):
        return sys.executable
    for name in ("python3.12", "python3.11", "python3.10"):
        found = shutil.which(name)
        if found:
            return found
    return None


def l2metrics_python() -> tuple[Path | None, str]:
    """The venv's interpreter, building the venv when needed.

    Returns:
        ``(python, "")`` when the venv is ready, else ``(None, reason)`` with the reason the
        venv could not be built (for ``pytest.skip``).
    """
    python = VENV / "bin" / "python"
    wanted = "\n".join(REQUIREMENTS)
    with open(REPO / ".venv-l2metrics.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if MARKER.is_file() and MARKER.read_text() == wanted and python.exists():
            return python, ""
        base = _base_python()
        if base is None:
            return None, "no Python 3.9-3.12 interpreter to build the l2metrics venv with"
        shutil.rmtree(VENV, ignore_errors=True)
        steps = (
            [base, "-m", "venv", str(VENV)],
            [str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        )
        for cmd in steps:
            try:
                done = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                shutil.rmtree(VENV, ignore_errors=True)
                return None, f"cannot build the l2metrics venv ({' '.join(cmd[:4])}): {e}"
            if done.returncode != 0:
                shutil.rmtree(VENV, ignore_errors=True)
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return None, f"cannot build the l2metrics venv: {' | '.join(tail)}"
        MARKER.write_text(wanted)
        return python, ""
