"""Errors raised when CHORES cannot be set up: simulator build, demonstration data, replay.

All are ``ChoresSetupError`` (a ``FileNotFoundError``: something CHORES needs is missing
or unusable), raised when an env is constructed, with what failed and how to fix it.
"""

from __future__ import annotations

from cl_suites.errors import SimulatorSetupError


class ChoresSetupError(SimulatorSetupError):
    """Something CHORES needs (simulator build, demonstrations) is missing or unusable."""


class ThorBuildNotFoundError(ChoresSetupError):
    """No local AI2-THOR Unity build was found (cl-suites never downloads one)."""


class AlfredDataNotFoundError(ChoresSetupError):
    """The ALFRED-format CHORES demonstrations are not where cl-suites looked, or a
    ``traj_data.json`` cannot be read."""


class DemonstrationReplayError(ChoresSetupError):
    """A demonstration does not replay on the installed simulator: a scene-setup call
    (``SetObjectStates``, ``SetObjectPoses``, ``TeleportFull``), a step of its plan or
    ``GetReachablePositions`` failed. The message names the trajectory, scene and call."""
