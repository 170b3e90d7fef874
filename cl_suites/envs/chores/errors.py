"""Errors raised when the CHORES simulator build or demonstration data is missing."""

from __future__ import annotations


class ChoresSetupError(FileNotFoundError):
    """Something CHORES needs on disk (simulator build, demonstrations) is missing."""


class ThorBuildNotFoundError(ChoresSetupError):
    """No local AI2-THOR Unity build was found (cl-suites never downloads one)."""


class AlfredDataNotFoundError(ChoresSetupError):
    """The ALFRED-format CHORES demonstrations are not where cl-suites looked."""
