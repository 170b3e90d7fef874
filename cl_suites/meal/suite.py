"""A MEAL sequence as data: its kitchens, options and schedule (``TaskSequence``).

Units: MEAL counts **env steps**: one joint action of all agents is one step (so
``steps_per_task=10_000_000`` means 10M joint actions, as in the paper), never agent-steps
summed over agents. A batched env with ``M`` envs counts ``M`` steps per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.core.task import TaskSequence, TaskSpec, check_positive_int
from cl_suites.errors import BadValueError, UnknownOptionError, UnknownSuiteError, require
from cl_suites.meal.dynamics import DYNAMICS
from cl_suites.meal.layouts import (
    DIFFICULTIES,
    GENERATORS,
    MAX_AGENTS,
    PRESET_DIFFICULTIES,
    REWARD_PER_SOUP,
    STRATEGIES,
    MealLayout,
    allowed_difficulties,
    build_layouts,
    check_choice,
    preset_names,
)
from cl_suites.suites.ids import parse_suite_id

NUM_ACTIONS = 6
"""meal-bench's actions: up, down, right, left, stay, interact."""
PAPER_STEPS_PER_TASK = 10_000_000
PAPER_EVAL_EVERY = 100 * 16 * 128
"""MEAL evaluates every 100 PPO updates of 16 envs x 128 steps = 204,800 env steps
(paper, appendix B.2 table 4)."""
PAPER_EVAL_EPISODES = 10
"""Evaluation episodes per task (paper, section 5 and table 4)."""
MAX_LAYOUT_SEED = 2**31 - 1
PAPER_SHAPING_HORIZON = None
"""Shaping anneals over half of each task's budget (``steps_per_task // 2``): what produced
MEAL's reported results by its authors' answer (TTomilin/MEAL#10, point 3; the paper-time
code's ``steps_per_task / 2``), not the 2.5M of the paper's hyperparameter table."""
OBS_PADDINGS = ("zeros", "walls")


def parse_meal_id(id_or_n: str | int) -> int:
    """The number of tasks of ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"`` or ``20`` (ids are
    parsed by ``cl_suites.suites.ids.parse_suite_id``); ``UnknownSuiteError`` (a
    ``ValueError``) otherwise."""
    if isinstance(id_or_n, (int, np.integer)) and not isinstance(id_or_n, bool):
        n = int(id_or_n)
        if n < 1:
            raise UnknownSuiteError(f"a MEAL sequence needs N >= 1 tasks, got {n}")
        return n
    try:
        name = parse_suite_id(id_or_n)
    except UnknownSuiteError:
        name = ""
    if not name.startswith("MEAL-"):
        raise UnknownSuiteError(
            f"{id_or_n!r} is not a MEAL id; use 'CLSuite/MEAL-<N>-v0', 'MEAL-<N>' or N (int >= 1)"
        )
    return int(name.removeprefix("MEAL-"))


def _single_agent_refused(name: str, **_: Any) -> gym.Env:
    raise TypeError(
        f"MEAL task {name!r} is a multi-agent PettingZoo environment; build it with "
        "cl_suites.make_parallel(...) (or cl_suites.meal.make_batched / make_sb3_vec_env)"
    )


def check_layout_seed(layout_seed: object, num_tasks: int) -> int:
    """``layout_seed`` as an int, or a ``ValueError`` naming the valid range: generated
    kitchens use seeds ``layout_seed .. layout_seed + num_tasks - 1``, which must stay in
    ``0..2**31 - 1``."""
    top = MAX_LAYOUT_SEED - (num_tasks - 1)
    if (
        isinstance(layout_seed, bool)
        or not isinstance(layout_seed, (int, np.integer))
        or not 0 <= layout_seed <= top
    ):
        raise BadValueError(
            f"layout_seed {layout_seed!r} is out of range; valid: an int in 0..{top} "
            f"(kitchen i uses layout_seed + i, for {num_tasks} task(s))"
        )
    return int(layout_seed)


def suite_option_names() -> tuple[str, ...]:
    """The keyword arguments ``build_suite`` / ``make_parallel`` accept."""
    import inspect

    params = inspect.signature(build_suite).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


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


def build_suite(
    id_or_n: str | int,
    *,
    difficulty: str | None = "easy",
    strategy: str = "generate",
    layout_seed: int | None = None,
    num_agents: int = 2,
    layout_names: Sequence[str] | None = None,
    steps_per_task: int = PAPER_STEPS_PER_TASK,
    cycles: int = 1,
    eval_every: int = PAPER_EVAL_EVERY,
    eval_episodes: int = PAPER_EVAL_EPISODES,
    episode_len: int = 400,
    sparse_rewards: bool = False,
    individual_rewards: bool = False,
    shaping_horizon: int | None = PAPER_SHAPING_HORIZON,
    partial_observability: bool = False,
    sticky_actions: bool = False,
    slippery_tiles: bool = False,
    random_pot_size: bool = False,
    random_cook_time: bool = False,
    random_reset: bool = False,
    separated_agents: bool = False,
    obs_padding: str = "walls",
    generator: str = "paper",
    dynamics: str = "paper",
    max_attempts: int = 2000,
    seed: int | None = None,
    **unknown: Any,
) -> MealSuite:
    """Build ``CLSuite/MEAL-{N}-v0``: its kitchens, agents and task sequence.

    Every argument is checked before any kitchen is generated or any JAX function
    compiled: a bad value raises an error naming it and the valid ones.

    Args:
        id_or_n: ``"CLSuite/MEAL-20-v0"``, ``"MEAL-20"`` or ``20``.
        difficulty: ``"easy"``, ``"medium"`` or ``"hard"`` (default ``"easy"``); the paper
            generator: 6-7, 8-9, 10-11 cells a side, 15/25/35% walls; only generator
            ``"meal-bench"`` also takes ``"extreme"`` (7, 9, 11, 13 cells, 15-45% walls).
        strategy: ``"generate"`` (default; task ``i`` generated with seed
            ``layout_seed + i``), ``"curriculum"`` (generated, easy -> medium -> hard
            thirds), ``"ordered"`` / ``"random"`` (handmade presets of ``difficulty`` or
            ``layout_names``).
        layout_seed: seed of the kitchens (default 0; ``seed`` is its old name). Dynamics
            are seeded by ``reset(seed=)``. ``cl-suites run`` takes it from the run seed
            unless given.
        num_agents: 1..5 (default 2).
        steps_per_task: budget per task in env steps (default 10M, the paper's).
        cycles: plays of the whole sequence (MEAL's ``repeat_sequence``; default 1).
        eval_every: evaluation cadence in env steps (default 204,800 = 100 PPO updates of
            16 x 128).
        eval_episodes: evaluation episodes per task (default 10).
        episode_len: steps per episode (400).
        sparse_rewards: delivery reward only (default False: dense shaping annealed).
        individual_rewards: each agent gets its own delivery reward (default: the team's
            delivery reward, as MEAL). Shaping is always the agent's own.
        shaping_horizon: env steps of each task over which shaping anneals 1 -> 0 (default
            ``None``: half of ``steps_per_task``, 5M at the paper's 10M, as MEAL#10 point 3).
        random_reset: every episode starts with random agent positions, inventories and
            pot states (meal-bench's ``random_reset``; default False as meal-bench; MEAL's
            paper-time training code used True, and so does ``cl-suites run``).
        partial_observability, sticky_actions, slippery_tiles, random_pot_size,
            random_cook_time: meal-bench's options (probabilities and view sizes from
            ``difficulty``).
        separated_agents: generator only accepts kitchens whose agents are separated.
        obs_padding: ``"walls"`` (default: the paper's text and MEAL's paper-time code,
            padded cells read as counters) or ``"zeros"`` (meal-bench's ``PadObsToMax``).
        generator: ``"paper"`` (default: the paper's generator, the kitchens MEAL's
            paper-time code generates for a seed; easy/medium/hard) or ``"meal-bench"``
            (meal-bench 0.3.1's later generator: fixed grid size per level).
        dynamics: ``"paper"`` (default: MEAL's paper-time movement rule, one agent may
            follow another) or ``"meal-bench"`` (meal-bench 0.3.1's: it may not).
        layout_names: handmade kitchens by name (``strategy`` ``"ordered"`` / ``"random"``).
        max_attempts: tries of the generator per kitchen before it gives up.
        seed: the old name of ``layout_seed``, kept for older code.
    """
    require("meal", extra="meal")
    require("jax", extra="meal")
    n = parse_meal_id(id_or_n)
    if unknown:
        raise UnknownOptionError(
            f"unknown MEAL option(s) {sorted(unknown)}; valid: {', '.join(suite_option_names())}"
        )
    if seed is not None and layout_seed is not None and seed != layout_seed:
        raise BadValueError(
            f"seed={seed!r} and layout_seed={layout_seed!r} disagree; pass only layout_seed "
            "(seed is its old name)"
        )
    layout_seed = check_layout_seed(layout_seed if layout_seed is not None else seed or 0, n)
    check_choice("strategy", strategy, STRATEGIES)
    check_choice("obs_padding", obs_padding, OBS_PADDINGS)
    check_choice("generator", generator, GENERATORS)
    check_choice("dynamics", dynamics, DYNAMICS)
    if difficulty is not None:
        allowed = allowed_difficulties(strategy, generator)
        if difficulty not in allowed:
            raise BadValueError(
                f"difficulty {difficulty!r} is unknown with strategy {strategy!r} and generator "
                f"{generator!r}; use one of {allowed} (generator 'meal-bench' also takes "
                f"'extreme'; the handmade presets: {PRESET_DIFFICULTIES})"
            )
    elif strategy == "generate":
        raise BadValueError(
            f"difficulty None needs a preset strategy; with strategy 'generate' use one of "
            f"{DIFFICULTIES}"
        )
    if layout_names is not None:
        if isinstance(layout_names, str) or not all(isinstance(x, str) for x in layout_names):
            raise BadValueError(
                f"layout_names must be a list of preset names, got {layout_names!r}; "
                f"available: {sorted(preset_names())}"
            )
        unknown_names = [x for x in layout_names if x not in preset_names()]
        if unknown_names or not layout_names:
            raise BadValueError(
                f"unknown preset layout(s) {unknown_names or list(layout_names)}; "
                f"available: {sorted(preset_names())}"
            )
    if shaping_horizon is None and isinstance(steps_per_task, (int, np.integer)):
        shaping_horizon = max(1, int(steps_per_task) // 2)
    for name, value in (
        ("steps_per_task", steps_per_task),
        ("cycles", cycles),
        ("eval_every", eval_every),
        ("eval_episodes", eval_episodes),
        ("episode_len", episode_len),
        ("shaping_horizon", shaping_horizon),
    ):
        check_positive_int(name, value)
    if isinstance(num_agents, bool) or not isinstance(num_agents, (int, np.integer)):
        raise BadValueError(f"num_agents must be in 1..{MAX_AGENTS} (an int), got {num_agents!r}")
    if not 1 <= num_agents <= MAX_AGENTS:
        raise BadValueError(
            f"num_agents must be in 1..{MAX_AGENTS} (MEAL's range), got {num_agents}"
        )
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, (int, np.integer)):
        raise BadValueError(f"max_attempts must be a non-negative int, got {max_attempts!r}")
    if max_attempts < 0:
        raise BadValueError(f"max_attempts must be a non-negative int, got {max_attempts!r}")
    flags = {
        "sparse_rewards": sparse_rewards,
        "individual_rewards": individual_rewards,
        "partial_observability": partial_observability,
        "sticky_actions": sticky_actions,
        "slippery_tiles": slippery_tiles,
        "random_pot_size": random_pot_size,
        "random_cook_time": random_cook_time,
        "random_reset": random_reset,
        "separated_agents": separated_agents,
    }
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise BadValueError(f"{name} must be True or False, got {value!r}")
    if sparse_rewards and individual_rewards:
        raise BadValueError("sparse_rewards and individual_rewards cannot both be set (as in MEAL)")
    layouts = build_layouts(
        n,
        strategy=strategy,
        difficulty=difficulty,
        seed=layout_seed,
        num_agents=int(num_agents),
        episode_len=episode_len,
        layout_names=layout_names,
        separated_agents=separated_agents,
        max_attempts=max_attempts,
        generator=generator,
    )
    channels = 18 + 4 * int(num_agents)
    level = difficulty or "easy"
    if partial_observability:
        from meal.env.overcooked import get_difficulty_params

        p = get_difficulty_params(level)
        obs_shape = (p["view_ahead"] + p["view_behind"] + 1, 2 * p["view_sides"] + 1, channels)
    else:
        obs_shape = (
            max(t.height for t in layouts),
            max(t.width for t in layouts),
            channels,
        )
    obs_space = gym.spaces.Box(0, 255, obs_shape, dtype=np.uint8)
    tasks = tuple(
        TaskSpec(name=t.name, make_train=_not_single_agent(t.name), budget=steps_per_task)
        for t in layouts
    )
    eval_source = _EvalSourceOf()
    sequence = TaskSequence(
        name=f"MEAL-{n}",
        tasks=tasks,
        observation_space=obs_space,
        action_space=gym.spaces.Discrete(NUM_ACTIONS),
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
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
    options = {
        "difficulty": difficulty,
        "strategy": strategy,
        "layout_seed": int(layout_seed),
        "sparse_rewards": bool(sparse_rewards),
        "individual_rewards": bool(individual_rewards),
        "shaping_horizon": int(shaping_horizon),
        "partial_observability": bool(partial_observability),
        "sticky_actions": bool(sticky_actions),
        "slippery_tiles": bool(slippery_tiles),
        "random_pot_size": bool(random_pot_size),
        "random_cook_time": bool(random_cook_time),
        "random_reset": bool(random_reset),
        "obs_padding": obs_padding,
        "generator": generator,
        "dynamics": dynamics,
        "stochasticity_level": level,
    }
    suite = MealSuite(sequence, layouts, int(num_agents), int(episode_len), obs_shape, options)
    eval_source.suite = suite
    return suite


class _EvalSourceOf:
    """A MEAL sequence's ``eval_source``: the eval source its catalog entry's runtime gives
    for its suite (``MealEvalSource``; the suite is set once built), so that
    ``Evaluator(sequence)`` plays the kitchens; picklable, as the sequence envs are."""

    suite: MealSuite | None = None

    def __call__(self) -> Any:
        from cl_suites.suites import find_suite  # the catalog's runtime: no import cycle

        assert self.suite is not None
        return find_suite(self.suite.sequence.name).runtime.eval_source(self.suite)
