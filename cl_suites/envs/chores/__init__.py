"""CHORES (CORA section 3.4): household task sequences on AI2-THOR with ALFRED demonstrations.

Importing this package does not import ai2thor; the simulator and the demonstration
data are only needed when an env is constructed.
"""

from cl_suites.envs.chores.actions import ACTIONS
from cl_suites.envs.chores.data import DATA_ENV_VAR
from cl_suites.envs.chores.env import ACTION_SPACE, OBSERVATION_SPACE, ChoresEnv
from cl_suites.envs.chores.errors import (
    AlfredDataNotFoundError,
    ChoresSetupError,
    DemonstrationReplayError,
    ThorBuildNotFoundError,
)
from cl_suites.envs.chores.goal_images import CACHE_ENV_VAR
from cl_suites.envs.chores.tasks import SEQUENCE_NAMES, ChoresTask, sequence_tasks
from cl_suites.envs.chores.thor import BUILD_ENV_VAR, resolve_thor_build, thor_controller_factory

__all__ = [
    "ACTIONS",
    "ACTION_SPACE",
    "BUILD_ENV_VAR",
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "OBSERVATION_SPACE",
    "SEQUENCE_NAMES",
    "AlfredDataNotFoundError",
    "ChoresEnv",
    "ChoresSetupError",
    "ChoresTask",
    "DemonstrationReplayError",
    "ThorBuildNotFoundError",
    "resolve_thor_build",
    "sequence_tasks",
    "thor_controller_factory",
]
