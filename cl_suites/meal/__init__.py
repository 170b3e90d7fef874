"""MEAL (Tomilin et al.): continual multi-agent Overcooked on meal-bench's JAX engine.

* ``make_parallel(id_or_n, **kwargs)``: the whole sequence as a PettingZoo ``ParallelEnv``.
* ``make_batched(id_or_n, num_envs, **kwargs)``: ``num_envs`` envs in one jitted call.
* ``make_sb3_vec_env(id_or_n, num_envs, **kwargs)``: SB3 ``VecEnv`` with one slot per
  agent per env (parameter sharing, IPPO).

All budgets, steps and cadences count **env steps** (one joint action of all agents).
``gym.make("CLSuite/MEAL-20-v0")`` raises a ``TypeError`` pointing here: gymnasium cannot
hold a PettingZoo env (``cl_suites.registration`` registers the ids).
"""

from __future__ import annotations

from typing import Any

from cl_suites.meal.layouts import (
    DIFFICULTIES,
    REWARD_PER_SOUP,
    STRATEGIES,
    LayoutGenerationError,
    MealLayout,
    preset_names,
)
from cl_suites.meal.options import MealOptions
from cl_suites.meal.runtime import meal_suite
from cl_suites.meal.suite import MealSuite, build_suite, build_suite_from, parse_meal_id

__all__ = [
    "DIFFICULTIES",
    "REWARD_PER_SOUP",
    "STRATEGIES",
    "LayoutGenerationError",
    "MealLayout",
    "MealOptions",
    "MealSuite",
    "build_suite",
    "build_suite_from",
    "make_batched",
    "make_parallel",
    "make_sb3_vec_env",
    "meal_suite",
    "parse_meal_id",
    "preset_names",
]


def make_parallel(id_or_n: str | int | MealSuite, **kwargs: Any):
    """``CLSuite/MEAL-{N}-v0`` as a PettingZoo ``ParallelEnv`` (``MealParallelEnv``).

    Args:
        id_or_n: ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"``, ``20`` or a built ``MealSuite``.
        render_mode: ``"rgb_array"``: ``render()`` draws the kitchen (meal-bench's sprites).
        **kwargs: the suite's options, documented in
            :class:`cl_suites.meal.MealOptions` (``difficulty``, ``layout_seed``,
            ``steps_per_task``, ...). Unknown keywords and out-of-range values raise an
            error naming the value and the valid ones, before any kitchen is generated
            or JAX function compiled.
    """
    from cl_suites.meal.parallel_env import MealParallelEnv

    render_mode = kwargs.pop("render_mode", None)
    suite = id_or_n if isinstance(id_or_n, MealSuite) else build_suite(id_or_n, **kwargs)
    return MealParallelEnv(suite, render_mode=render_mode)


def make_batched(
    id_or_n: str | int | MealSuite, num_envs: int, *, autoreset: bool = True, **kwargs: Any
):
    """``num_envs`` copies of a MEAL sequence in one jitted call (``MealBatchedEnv``)."""
    from cl_suites.meal.batched import MealBatchedEnv

    suite = id_or_n if isinstance(id_or_n, MealSuite) else build_suite(id_or_n, **kwargs)
    return MealBatchedEnv(suite, num_envs, autoreset=autoreset)


def make_sb3_vec_env(id_or_n: str | int | MealSuite, num_envs: int, **kwargs: Any):
    """SB3 ``VecEnv`` over ``num_envs`` MEAL envs: ``num_envs * num_agents`` slots
    (``cl_suites.sb3.meal.MealSB3VecEnv``, the SB3 room's view; needs the ``baselines``
    extra)."""
    from cl_suites.sb3.meal import MealSB3VecEnv

    suite = id_or_n if isinstance(id_or_n, MealSuite) else build_suite(id_or_n, **kwargs)
    return MealSB3VecEnv(make_batched(suite, num_envs))
