"""A MEAL sequence as data: its kitchens, options and schedule (``TaskSequence``).

Units: MEAL counts **env steps**: one joint action of all agents is one step (so
``steps_per_task=10_000_000`` means 10M joint actions, as in the paper), never agent-steps
summed over agents. A batched env with ``M`` envs counts ``M`` steps per call.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.errors import UnknownSuiteError, require
from cl_suites.meal.layouts import REWARD_PER_SOUP, MealLayout, build_layouts
from cl_suites.meal.options import MealOptions, option_docs
from cl_suites.suites.ids import meal_name

NUM_ACTIONS = 6
"""meal-bench's actions: up, down, right, left, stay, interact."""


def parse_meal_id(id_or_n: str | int) -> int:
    """The number of tasks of ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"`` or ``20`` (ids are
    read by ``cl_suites.suites.ids.meal_name``); ``UnknownSuiteError`` (a ``ValueError``)
    otherwise."""
    if isinstance(id_or_n, (int, np.integer)) and not isinstance(id_or_n, bool):
        n = int(id_or_n)
        if n < 1:
            raise UnknownSuiteError(f"a MEAL sequence needs N >= 1 tasks, got {n}")
        return n
    try:
        name = meal_name(id_or_n)
    except UnknownSuiteError:
        name = None
    if name is None:
        raise UnknownSuiteError(
            f"{id_or_n!r} is not a MEAL id; use 'CLSuite/MEAL-<N>-v0', 'MEAL-<N>' or N (int >= 1)"
        )
    return int(name.removeprefix("MEAL-"))


def _single_agent_refused(name: str, **_: Any) -> gym.Env:
    raise TypeError(
        f"MEAL task {name!r} is a multi-agent PettingZoo environment; build it with "
        "cl_suites.make_parallel(...) (or cl_suites.meal.make_batched / make_sb3_vec_env)"
    )


def _not_single_agent(name: str):
    return partial(_single_agent_refused, name)  # picklable, unlike a closure


@dataclass(frozen=True)
class MealSuite:
    """Everything that defines a MEAL run except the run seed.

    Attributes:
        sequence: the ``TaskSequence`` (schedule, budgets in env steps, eval cadence);
            its tasks' gymnasium factories raise ``TypeError`` (MEAL is multi-agent).
        layouts: the kitchens, one per task, in task-id order.
        num_agents: agents per kitchen (1..5).
        episode_len: steps per episode (MEAL: 400).
        obs_shape: per-agent observation shape ``(H, W, C)``: the largest grid of the
            sequence (``C = 18 + 4 * num_agents``), or the view window with partial
            observability.
        options: engine options (rewards, shaping, stochasticity, observability).
    """

    sequence: TaskSequence
    layouts: tuple[MealLayout, ...]
    num_agents: int
    episode_len: int
    obs_shape: tuple[int, int, int]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(f"agent_{i}" for i in range(self.num_agents))

    @property
    def grid_shape(self) -> tuple[int, int]:
        """``(H, W)`` of the padded kitchens (largest layout of the sequence)."""
        return (
            max(t.height for t in self.layouts),
            max(t.width for t in self.layouts),
        )

    def score_normalizers(self) -> dict[int, float | None]:
        """``{task_id: REWARD_PER_SOUP * max_soups}`` for the run metadata; ``None`` for a
        kitchen without a bound (its ``layouts`` entry's ``no_bound`` says why, and the
        report gives its MEAL score as n/a)."""
        return {i: t.normalizer for i, t in enumerate(self.layouts)}

    def run_metadata(self) -> dict[str, Any]:
        """What a MEAL run's ``metadata.json`` adds to ``cl_suites.training.run_metadata``:
        ``num_agents``, the kitchens (``layouts``), the ``score_normalizers`` the MEAL
        metrics divide by, and the ``step_unit``."""
        description = self.describe()
        return {
            "num_agents": self.num_agents,
            "layouts": description["layouts"],
            "score_normalizers": self.score_normalizers(),
            "step_unit": "env steps (one joint action of all agents)",
        }

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (for run metadata)."""
        return {
            **self.sequence.describe(),
            "num_agents": self.num_agents,
            "episode_len": self.episode_len,
            "step_unit": "env step (one joint action of all agents)",
            "layouts": [
                {
                    "task_id": i,
                    "task_name": t.name,
                    "difficulty": t.difficulty,
                    "layout_seed": t.seed,
                    "height": t.height,
                    "width": t.width,
                    "max_soups": t.max_soups,
                    "no_bound": t.no_bound(self.episode_len),
                }
                for i, t in enumerate(self.layouts)
            ],
            "options": dict(self.options),
            "score_normalizers": self.score_normalizers(),
        }


def build_suite(id_or_n: str | int, **options: Any) -> MealSuite:
    """Build ``CLSuite/MEAL-{N}-v0`` from its options given as keywords
    (``build_suite(4, difficulty="hard")``): :func:`build_suite_from` with
    ``MealOptions(**options)``.

    Every option is checked before any kitchen is generated or any JAX function
    compiled: a bad value raises an error naming it and the valid ones.

    Args:
        id_or_n: ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"`` or ``20``.
    """
    require("meal", extra="meal")
    require("jax", extra="meal")
    parse_meal_id(id_or_n)
    return build_suite_from(id_or_n, MealOptions.from_keywords(**options))


def build_suite_from(id_or_n: str | int, options: MealOptions) -> MealSuite:
    """Build ``CLSuite/MEAL-{N}-v0`` (``id_or_n``: ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"``
    or ``20``) with ``options``: its kitchens, agents and task sequence."""
    require("meal", extra="meal")
    require("jax", extra="meal")
    n = parse_meal_id(id_or_n)
    layout_seed = options.kitchen_seed(n)
    num_agents = int(options.num_agents)
    layouts = build_layouts(
        n,
        strategy=options.strategy,
        difficulty=options.difficulty,
        seed=layout_seed,
        num_agents=num_agents,
        episode_len=options.episode_len,
        layout_names=options.layout_names,
        separated_agents=options.separated_agents,
        max_attempts=options.max_attempts,
        generator=options.generator,
    )
    obs_shape = _obs_shape(options, layouts)
    tasks = tuple(
        TaskSpec(name=t.name, make_train=_not_single_agent(t.name), budget=options.steps_per_task)
        for t in layouts
    )
    eval_source = _EvalSourceOf()
    sequence = TaskSequence(
        name=f"MEAL-{n}",
        tasks=tasks,
        observation_space=gym.spaces.Box(0, 255, obs_shape, dtype=np.uint8),
        action_space=gym.spaces.Discrete(NUM_ACTIONS),
        cycles=options.cycles,
        eval_every=options.eval_every,
        eval_episodes=options.eval_episodes,
        extra="meal",
        required_modules=("meal", "jax", "pettingzoo"),
        metric_settings={
            "smoothing_window": 1,
            "return_clip_min": None,
            "score": "soups / single-agent max-soup bound",
            "reward_per_soup": REWARD_PER_SOUP,
            "step_unit": "env step",
        },
        step_unit="env steps",
        eval_source=eval_source,
    )
    suite = MealSuite(
        sequence,
        layouts,
        num_agents,
        int(options.episode_len),
        obs_shape,
        options.engine_options(layout_seed),
    )
    eval_source.suite = suite
    return suite


def _keywords_of_options(build: Any) -> None:
    """Give ``build`` (``build_suite``) the signature and ``Args:`` entries of the keywords
    it takes, MEAL's options (``id_or_n, *, difficulty=..., ..., **unknown``): what the job
    layer and the CLI read from a suite builder. They are declared once, in
    :class:`MealOptions`."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    build.__signature__ = inspect.Signature(
        [
            inspect.Parameter("id_or_n", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *(
                inspect.Parameter(f.name, keyword, default=f.default)
                for f in dataclasses.fields(MealOptions)
            ),
            inspect.Parameter("unknown", inspect.Parameter.VAR_KEYWORD),
        ],
        return_annotation=MealSuite,
    )
    build.__doc__ = (build.__doc__ or "").rstrip() + "\n"
    build.__doc__ += "".join(f"        {name}: {doc}\n" for name, doc in option_docs().items())


_keywords_of_options(build_suite)


def _obs_shape(options: MealOptions, layouts: Sequence[MealLayout]) -> tuple[int, int, int]:
    """Per-agent observation ``(H, W, C)``: the largest kitchen of the sequence, or the view
    window with partial observability (its size from ``difficulty``)."""
    channels = 18 + 4 * int(options.num_agents)
    if options.partial_observability:
        from meal.env.overcooked import get_difficulty_params

        p = get_difficulty_params(options.difficulty or "easy")
        return (p["view_ahead"] + p["view_behind"] + 1, 2 * p["view_sides"] + 1, channels)
    return (max(t.height for t in layouts), max(t.width for t in layouts), channels)


class _EvalSourceOf:
    """A MEAL sequence's ``eval_source``: the eval source its catalog entry's runtime gives
    for its suite (``MealEvalSource``; the suite is set once built), so that
    ``Evaluator(sequence)`` plays the kitchens; picklable, as the sequence envs are."""

    suite: MealSuite | None = None

    def __call__(self) -> Any:
        from cl_suites.suites import find_suite  # the catalog's runtime: no import cycle

        assert self.suite is not None
        return find_suite(self.suite.sequence.name).runtime.eval_source(self.suite)
