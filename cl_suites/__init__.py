"""cl-suites: continual reinforcement-learning benchmarks one ``gym.make`` away.

Importing the package registers every ``CLSuite/*`` id with gymnasium.
"""

from __future__ import annotations

from cl_suites.api import SequenceVectorEnv, make_env, make_sequence, make_vec, schedule
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import (
    Schedule,
    Segment,
    SequenceDoneError,
    TaskSequence,
    TaskSpec,
    TaskSwitch,
)
from cl_suites.errors import silence_legacy_gym_banner
from cl_suites.recorder import Recorder
from cl_suites.registration import register_all
from cl_suites.rundir.runlog import RunLog, read_episodes, read_eval, read_metadata
from cl_suites.suites import SUITES, find_suite

__version__ = "0.1.0"

__all__ = [
    "SUITES",
    "Evaluator",
    "Recorder",
    "RunLog",
    "Schedule",
    "Segment",
    "SequenceDoneError",
    "SequenceEnv",
    "SequenceVectorEnv",
    "TaskSequence",
    "TaskSpec",
    "TaskSwitch",
    "find_suite",
    "make_env",
    "make_parallel",
    "make_sequence",
    "make_vec",
    "read_episodes",
    "read_eval",
    "read_metadata",
    "schedule",
]

silence_legacy_gym_banner()  # procgen2 installs the legacy gym, which prints on import
register_all()

try:  # MEAL needs the "meal" extra (jax, meal-bench, pettingzoo); imported lazily inside
    from cl_suites.meal import make_parallel
except ImportError:  # pragma: no cover - depends on the installed extras

    def make_parallel(*args, **kwargs):
        """Build a MEAL sequence (needs the "meal" extra)."""
        from cl_suites.errors import require

        require("meal", extra="meal")


def __getattr__(name: str):
    if name in ("SB3VecEnv", "StopTrainingOnSequenceEnd"):  # need stable-baselines3
        from cl_suites.sb3 import adapter

        return getattr(adapter, name)
    raise AttributeError(f"module 'cl_suites' has no attribute {name!r}")
