"""Entry points: build sequences, single envs and vector envs from a suite id."""

from __future__ import annotations

import sys
from typing import Any

from cl_suites.core import vector
from cl_suites.core.sequence_env import SequenceEnv
from cl_suites.core.task import Segment, TaskSequence
from cl_suites.core.vector import VectorizationMode
from cl_suites.sb3 import sb3_view
from cl_suites.suites import find_suite


class SequenceVectorEnv(vector.SequenceVectorEnv):
    """``num_envs`` copies of a task sequence that switch task together, one call away
    from stable-baselines3 (:meth:`to_sb3`).

    What ``make_vec`` and ``gymnasium.make_vec("CLSuite/<suite>-v0", num_envs=N)``
    return, ``cl_suites.SequenceVectorEnv``: the env machinery's
    :class:`cl_suites.core.vector.SequenceVectorEnv` (its docstring has the budget,
    autoreset, infos, checkpoints and arguments) with :meth:`to_sb3` added here, above
    the env machinery, which imports no SB3.
    """

    def to_sb3(self) -> Any:
        """This env as a stable-baselines3 ``VecEnv``: ``cl_suites.SB3VecEnv(self)`` (SB3
        takes no gymnasium ``VectorEnv``; needs the ``baselines`` extra)."""
        return sb3_view(self)


def make_sequence(id: str, **kwargs: Any) -> TaskSequence:
    """The ``TaskSequence`` of suite ``id``; ``kwargs`` override paper defaults
    (``steps_per_task``, ``cycles``, ``eval_every``, ``eval_episodes`` and suite options).
    An unknown keyword raises ``TypeError`` listing the suite's options."""
    return find_suite(id).build(**kwargs)


def make_env(suite: str, render_mode: str | None = None, **kwargs: Any) -> SequenceEnv:
    """Entry point behind ``gym.make("CLSuite/<suite>-v0", **kwargs)``."""
    _refuse_gymnasium_per_env_vectorization(suite)
    return SequenceEnv(make_sequence(suite, **kwargs), render_mode=render_mode)


def make_vec(
    id: str,
    num_envs: int = 1,
    *,
    vectorization_mode: VectorizationMode = "sync",
    render_mode: str | None = None,
    **kwargs: Any,
) -> SequenceVectorEnv:
    """A gymnasium ``VectorEnv`` of ``num_envs`` sub-envs that switch task together.

    The budget counts globally (``num_envs`` agent steps per vector step). Procgen uses its
    native batched backend; other simulators are batched with gymnasium's
    ``SyncVectorEnv`` (``vectorization_mode="sync"``) or ``AsyncVectorEnv`` (``"async"``,
    one process per sub-env). ``gymnasium.make_vec("CLSuite/<suite>-v0", num_envs=N)``
    builds the same env (sync mode). Wrap the result in ``cl_suites.SB3VecEnv`` for SB3.
    """
    return SequenceVectorEnv(
        make_sequence(id, **kwargs), num_envs, vectorization_mode, render_mode=render_mode
    )


def make_vec_entry(suite: str, num_envs: int = 1, **kwargs: Any) -> SequenceVectorEnv:
    """Entry point behind ``gymnasium.make_vec("CLSuite/<suite>-v0", num_envs=N, **kwargs)``
    (the ids' ``vector_entry_point``): ``make_vec(suite, num_envs, **kwargs)``."""
    return make_vec(suite, num_envs, **kwargs)


def schedule(id: str, num_envs: int = 1, **kwargs: Any) -> tuple[Segment, ...]:
    """The schedule of suite ``id`` (which task trains over which agent-step range)."""
    return make_sequence(id, **kwargs).schedule(num_envs)


def _refuse_gymnasium_per_env_vectorization(suite: str) -> None:
    """``gymnasium.make_vec(id, vectorization_mode="sync"|"async")`` batches N copies of
    the single env: N independent sequences, each with the whole budget, switching on
    their own. That is never what a continual run wants, so it is refused here (the only
    place that can see it: gymnasium builds each copy through ``make``)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return
        if (
            frame.f_code.co_name == "create_single_env"
            and frame.f_globals.get("__name__") == "gymnasium.envs.registration"
        ):
            raise ValueError(
                f"gymnasium.make_vec(..., vectorization_mode='sync'/'async') would build "
                f"independent {suite} sequences, each with the whole budget; use "
                f'gymnasium.make_vec("CLSuite/{suite}-v0", num_envs=N) (one global budget, '
                f"all sub-envs switch together) or cl_suites.make_vec({suite!r}, N, "
                "vectorization_mode='async') for worker processes"
            )
        frame = frame.f_back
