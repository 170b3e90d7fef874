"""Registers every catalog suite with gymnasium (done on ``import cl_suites``).

``gymnasium.make(id)`` gives the single ``SequenceEnv``; ``gymnasium.make_vec(id,
num_envs=N)`` goes through the ``vector_entry_point``: one ``SequenceVectorEnv`` whose N
sub-envs share one global budget and switch task together (as ``cl_suites.make_vec``).
"""

from __future__ import annotations

import gymnasium as gym

from cl_suites.suites import SUITES


def register_all() -> None:
    for suite in SUITES.values():
        if suite.api == "gymnasium" and suite.id not in gym.registry:
            gym.register(
                id=suite.id,
                entry_point="cl_suites.api:make_env",
                vector_entry_point="cl_suites.api:make_vec_entry",
                kwargs={"suite": suite.name},
                disable_env_checker=False,
            )
