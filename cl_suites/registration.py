"""Registers every catalog suite with gymnasium (done on ``import cl_suites``).

``gymnasium.make(id)`` gives the single ``SequenceEnv``; ``gymnasium.make_vec(id,
num_envs=N)`` goes through the ``vector_entry_point``: one ``SequenceVectorEnv`` whose N
sub-envs share one global budget and switch task together (as ``cl_suites.make_vec``).

MEAL's ids ``CLSuite/MEAL-<N>-v0`` are registered too, for ``N`` in ``MEAL_SIZES``, with or
without the ``meal`` extra: MEAL is a PettingZoo env, so ``gymnasium.make`` on one raises a
``TypeError`` that points to ``cl_suites.make_parallel`` (which takes any ``N >= 1``)
instead of gymnasium's "doesn't exist. Did you mean ..." for an id not registered.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cl_suites.suites import SUITES

MEAL_SIZES = range(1, 101)
"""The ``N`` of the ``CLSuite/MEAL-<N>-v0`` ids registered with gymnasium (the MEAL paper's
sequences are at most 100 tasks long; ``make_parallel`` takes any ``N``)."""


def register_all() -> None:
    """Register the catalog's gymnasium suites and MEAL's ids (idempotent)."""
    for suite in SUITES.values():
        if suite.api == "gymnasium" and suite.id not in gym.registry:
            gym.register(
                id=suite.id,
                entry_point="cl_suites.api:make_env",
                vector_entry_point="cl_suites.api:make_vec_entry",
                kwargs={"suite": suite.name},
                disable_env_checker=False,
            )
    for n in MEAL_SIZES:
        env_id = f"CLSuite/MEAL-{n}-v0"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="cl_suites.registration:meal_entry_point",
                kwargs={"num_tasks": n},
                disable_env_checker=True,
            )


def meal_entry_point(num_tasks: int, **kwargs: Any) -> Any:
    """``gymnasium.make("CLSuite/MEAL-<N>-v0")``: a ``TypeError`` naming the call to use."""
    raise TypeError(
        f"MEAL is a multi-agent (PettingZoo) benchmark and cannot be built with gym.make; use "
        f'cl_suites.make_parallel("CLSuite/MEAL-{num_tasks}-v0", difficulty="easy", '
        "layout_seed=0) (any number of tasks; or cl_suites.meal.make_sb3_vec_env for "
        'stable-baselines3; needs pip install "cl-suites[meal]")'
    )
