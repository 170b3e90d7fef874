"""Settings for the whole test session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def pytest_configure(config) -> None:
    # Models built outside the job keep SB3's default logger, which makes an empty
    # SB3-<date> folder in the temp directory at every learn(): one folder for them all.
    os.environ.setdefault("SB3_LOGDIR", str(Path(tempfile.gettempdir()) / "cl-suites-tests-sb3"))


# -- time per area -------------------------------------------------------------------------
_AREA_SECONDS: dict[str, float] = {}
_AREA_TESTS: dict[str, int] = {}


def _area(nodeid: str) -> str:
    """``tests/<area>/test_x.py::test`` -> ``<area>`` (the folders of tests/README.md)."""
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def pytest_runtest_logreport(report) -> None:
    """Sum setup + call + teardown seconds per area (on the controller under xdist too)."""
    area = _area(report.nodeid)
    _AREA_SECONDS[area] = _AREA_SECONDS.get(area, 0.0) + report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _AREA_TESTS[area] = _AREA_TESTS.get(area, 0) + 1


def pytest_terminal_summary(terminalreporter) -> None:
    """A table of test seconds per area, slowest first (summed over workers, so under
    ``-n 2`` the total is about twice the wall time)."""
    if not _AREA_SECONDS:
        return
    terminalreporter.section("test seconds per area")
    for area, seconds in sorted(_AREA_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(
            f"{area:<12} {seconds:8.1f} s  {_AREA_TESTS.get(area, 0):5d} tests"
        )
    terminalreporter.write_line(f"{'total':<12} {sum(_AREA_SECONDS.values()):8.1f} s")
