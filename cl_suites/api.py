"""Entry points: build sequences, single envs and vector envs from a suite id."""

from __future__ import annotations

from typing import Any

from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import Segment, TaskSequence
from cl_suites.core.vector import SequenceVectorEnv, VectorizationMode
from cl_suites.suites import find_suite


def make_sequence(id: str, **kwargs: Any) -> TaskSequence:
    """The ``TaskSequence`` of suite ``id``; ``kwargs`` override paper defaults
    (``steps_per_task``, ``cycles``, ``eval_every``, ``eval_episodes`` and suite options)."""
    return find_suite(id).build(**kwargs)


def make_env(suite: str, **kwargs: Any) -> SequenceEnv:
    """Entry point behind ``gym.make("CLSuite/<suite>-v0", **kwargs)``."""
    return SequenceEnv(make_sequence(suite, **kwargs))


def make_vec(
    id: str,
    num_envs: int = 1,
    *,
    vectorization_mode: VectorizationMode = "sync",
    **kwargs: Any,
) -> SequenceVectorEnv:
    """A gymnasium ``VectorEnv`` of ``num_envs`` sub-envs that switch task together.

    The budget counts globally (``num_envs`` agent steps per vector step). Procgen uses its
    native batched backend; other simulators are batched with gymnasium's
    ``SyncVectorEnv`` (``vectorization_mode="sync"``) or ``AsyncVectorEnv`` (``"async"``,
    one process per sub-env). Wrap the result in ``cl_suites.SB3VecEnv`` for SB3.
    """
    return SequenceVectorEnv(make_sequence(id, **kwargs), num_envs, vectorization_mode)


def schedule(id: str, num_envs: int = 1, **kwargs: Any) -> tuple[Segment, ...]:
    """The schedule of suite ``id`` (which task trains over which agent-step range)."""
    return make_sequence(id, **kwargs).schedule(num_envs)
