"""Modules the tests share: test doubles, toy envs, kill drills, recorders; and where things are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's root (holds ``cl_suites/``, ``docs/``, ``benchmarks/``, ``examples/``)."""
TESTS = REPO / "tests"
"""The test suite's root (``fixtures/`` and ``golden/`` data live here)."""
