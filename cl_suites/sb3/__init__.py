"""The stable-baselines3 room: SB3's view of the sequence envs.

``adapter`` holds ``SB3VecEnv`` (SB3's ``VecEnv`` over a gymnasium vector env), the
``ForwardingVecEnv`` base that MEAL's view builds on, and the ``StopTrainingOnSequenceEnd``
callback; ``meal`` holds MEAL's view ``MealSB3VecEnv`` (one slot per agent). The room
sits beside the suites, above the env machinery of ``cl_suites.core``, which it wraps and
which never imports it (``cl_suites.SequenceVectorEnv.to_sb3``, defined above core in
``cl_suites.api``, calls :func:`sb3_view`), and imports no suite and no learner family.
Importing this package imports no SB3; its modules need the ``baselines`` extra.
"""

from __future__ import annotations

from typing import Any

from gymnasium.vector import VectorEnv


def sb3_view(env: VectorEnv) -> Any:
    """stable-baselines3's ``VecEnv`` over the gymnasium vector env ``env``:
    ``cl_suites.SB3VecEnv(env)``."""
    from cl_suites.sb3.adapter import SB3VecEnv

    return SB3VecEnv(env)
