"""MEAL's catalog entry (``cl_suites.suites.find_suite("MEAL-20")``) and its run-time pieces.

:func:`meal_suite` is the entry of ``MEAL-<N>``: the catalog names it in
``SUITE_TEMPLATES`` (``"cl_suites.meal.runtime:meal_suite"``) and imports this module
when a MEAL id is looked up, as it imports a suite's builder when the suite is built.

The main job, the recorder and ``cl-suites info`` build MEAL through its runtime
(:class:`MealRuntime`) like any suite (see ``cl_suites.suites.runtime``): the instance
is a ``MealSuite``, the training env MEAL's batched JAX engine (``MealBatchedEnv``),
evaluation MEAL's ``MealEvalSource`` (every kitchen in one jitted call). Steps are
**env steps** (one joint action of all agents).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cl_suites.core.task import Schedule, check_positive_int
from cl_suites.declarations import JAX_LEARNER, MEAL_METHODS
from cl_suites.suites import SuiteInfo
from cl_suites.suites.runtime import ENV_STEPS, EvalDefaults

if TYPE_CHECKING:
    from cl_suites.meal.suite import MealSuite


MEAL_RUN_SUITE: dict[str, Any] = {"random_reset": True}
"""Suite options of MEAL training runs (unless overridden): MEAL's paper-time training
code resets every episode to random agent positions, inventories and pot states (its
Overcooked's ``random_reset=True``, for training and evaluation envs alike)."""


class MealRuntime:
    """The runtime of ``MEAL-<num_tasks>`` (``cl_suites.suites.runtime.SuiteRuntime``)."""

    training_metadata: Mapping[str, Any] = MappingProxyType(
        {"multi_agent": "IPPO: one policy shared by every agent (parameter sharing)"}
    )
    steps_on_cpu = False

    def __init__(self, num_tasks: int):
        self.num_tasks = int(num_tasks)

    def instance(self, info: SuiteInfo, kwargs: dict[str, Any]) -> MealSuite:
        from cl_suites.meal.suite import build_suite

        return build_suite(self.num_tasks, **kwargs)

    def seeded_kwargs(self, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
        """The kitchens follow the run seed unless ``layout_seed`` fixes them (MEAL trains
        its seeds on different generated sequences)."""
        return {"layout_seed": int(seed), **kwargs}

    def run_instance(
        self, info: SuiteInfo, kwargs: dict[str, Any], *, seed: int, rollout: int
    ) -> tuple[MealSuite, dict[str, Any]]:
        """A training run's sequence: kitchens from the run seed, ``MEAL_RUN_SUITE``'s
        random resets, and budgets in whole PPO updates, as in MEAL's code (each task
        trains ``steps_per_task // rollout`` updates of ``rollout`` env steps)."""
        from cl_suites.errors import BadValueError
        from cl_suites.meal.options import PAPER_STEPS_PER_TASK

        if "seed" in kwargs:
            raise BadValueError(
                "MEAL's kitchens follow the run seed; to fix them whatever the run seed, pass "
                f"layout_seed (got seed={kwargs['seed']!r} as a suite option)"
            )
        kwargs = self.seeded_kwargs({**MEAL_RUN_SUITE, **kwargs}, seed)
        requested = check_positive_int(
            "steps_per_task", kwargs.get("steps_per_task", PAPER_STEPS_PER_TASK)
        )
        if requested < rollout:
            raise BadValueError(
                f"steps_per_task {requested} is less than one PPO update of {rollout} env "
                f"steps (n_steps x num_envs); use at least {rollout}"
            )
        kwargs["steps_per_task"] = requested // rollout * rollout
        if kwargs.get("shaping_horizon") is None:  # half the requested budget, as MEAL's
            kwargs["shaping_horizon"] = max(1, requested // 2)  # MEAL#10 point 3
        return self.instance(info, kwargs), kwargs

    def vector_env(
        self,
        instance: MealSuite,
        schedule: Schedule,
        vectorization_mode: str,
        rollout_steps: int | None = None,
        env_workers: int | None = None,
    ) -> tuple[Any, Any]:
        """MEAL's batched engine (``vectorization_mode`` and ``env_workers`` do not apply:
        one jitted call)
        and its eval source on the same engine; the shaping weight is held for each
        ``rollout_steps`` steps (one PPO update), as MEAL's trainer and ppo-jax hold it."""
        from cl_suites.meal.batched import MealBatchedEnv
        from cl_suites.meal.evaluation import MealEvalSource

        batched = MealBatchedEnv(instance, schedule=schedule, rollout_steps=rollout_steps or 1)
        return batched, MealEvalSource(instance, batched.engine)

    def eval_source(self, instance: MealSuite) -> Any:
        from cl_suites.meal.evaluation import MealEvalSource

        return MealEvalSource(instance)


def meal_suite(num_tasks: int) -> SuiteInfo:
    """The catalog entry of ``MEAL-<num_tasks>`` (``num_tasks >= 1``)."""
    return SuiteInfo(
        name=f"MEAL-{int(num_tasks)}",
        builder="cl_suites.meal.suite:build_suite",
        extra="meal",
        modules=("meal", "jax", "pettingzoo"),
        paper="MEAL (Tomilin et al.), sections 4-5",
        description="Overcooked kitchens in a row, one per task (PettingZoo; "
        "cl_suites.make_parallel)",
        api="pettingzoo",
        family="meal",
        step_unit=ENV_STEPS,
        evaluation=EvalDefaults(at_start=False, per_task=True),
        default_learner=JAX_LEARNER,
        methods=MEAL_METHODS,
        preset_name="MEAL",
        runtime=MealRuntime(num_tasks),
        task_policies=True,
    )
