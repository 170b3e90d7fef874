"""A MEAL sequence's options, declared once: :class:`MealOptions`.

Each field carries its type, its default and a one-line doc; ``__post_init__`` checks
every value (a bad one raises an error naming it and the valid ones) before any kitchen
is generated or JAX function compiled. ``build_suite`` takes the object, or its fields as
keywords (``build_suite(4, difficulty="hard")``, ``make_parallel(..., **options)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from cl_suites.core.task import check_positive_int
from cl_suites.errors import BadValueError, UnknownOptionError
from cl_suites.meal.dynamics import DYNAMICS
from cl_suites.meal.layouts import (
    DIFFICULTIES,
    GENERATORS,
    MAX_AGENTS,
    PRESET_DIFFICULTIES,
    STRATEGIES,
    allowed_difficulties,
    check_choice,
    preset_names,
)

PAPER_STEPS_PER_TASK = 10_000_000
PAPER_EVAL_EVERY = 100 * 16 * 128
"""MEAL evaluates every 100 PPO updates of 16 envs x 128 steps = 204,800 env steps
(paper, appendix B.2 table 4)."""
PAPER_EVAL_EPISODES = 10
"""Evaluation episodes per task (paper, section 5 and table 4)."""
MAX_LAYOUT_SEED = 2**31 - 1
PROBABILITIES = ("repeat_action_prob", "slipping_prob")
"""The probability options: ``None`` (the ``difficulty``'s) or a number in [0, 1]."""
PROBABILITY_KNOBS = {"repeat_action_prob": "sticky_actions", "slipping_prob": "slippery_tiles"}
"""Each probability option and the knob it belongs to."""
PAPER_SHAPING_HORIZON = None
"""Shaping anneals over half of each task's budget (``steps_per_task // 2``): what produced
MEAL's reported results by its authors' answer (TTomilin/MEAL#10, point 3; the paper-time
code's ``steps_per_task / 2``), not the 2.5M of the paper's hyperparameter table."""
OBS_PADDINGS = ("zeros", "walls")
FLAGS = (
    "sparse_rewards",
    "individual_rewards",
    "partial_observability",
    "sticky_actions",
    "slippery_tiles",
    "random_pot_size",
    "random_cook_time",
    "random_reset",
    "separated_agents",
    "complementary_restrictions",
)
"""The options that are True or False."""


def _option(default: Any, doc: str) -> Any:
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclasses.dataclass(frozen=True)
class MealOptions:
    """The options of a MEAL sequence (all but its number of tasks), checked on creation."""

    difficulty: str | None = _option(
        "easy",
        '``"easy"``, ``"medium"`` or ``"hard"`` (default ``"easy"``); the paper generator: '
        '6-7, 8-9, 10-11 cells a side, 15/25/35% walls; only generator ``"meal-bench"`` '
        'also takes ``"extreme"`` (7, 9, 11, 13 cells, 15-45% walls).',
    )
    strategy: str = _option(
        "generate",
        '``"generate"`` (default; task ``i`` generated with seed ``layout_seed + i``), '
        '``"curriculum"`` (generated, easy -> medium -> hard thirds), ``"ordered"`` / '
        '``"random"`` (handmade presets of ``difficulty`` or ``layout_names``).',
    )
    layout_seed: int | None = _option(
        None,
        "seed of the kitchens (default 0; ``seed`` is its old name). Dynamics are seeded "
        "by ``reset(seed=)``. ``cl-suites run`` takes it from the run seed unless given.",
    )
    num_agents: int = _option(2, "1..5 (default 2).")
    layout_names: Sequence[str] | None = _option(
        None, 'handmade kitchens by name (``strategy`` ``"ordered"`` / ``"random"``).'
    )
    steps_per_task: int = _option(
        PAPER_STEPS_PER_TASK, "budget per task in env steps (default 10M, the paper's)."
    )
    cycles: int = _option(1, "plays of the whole sequence (MEAL's ``repeat_sequence``; default 1).")
    eval_every: int = _option(
        PAPER_EVAL_EVERY,
        "evaluation cadence in env steps (default 204,800 = 100 PPO updates of 16 x 128).",
    )
    eval_episodes: int = _option(PAPER_EVAL_EPISODES, "evaluation episodes per task (default 10).")
    episode_len: int = _option(400, "steps per episode (400).")
    sparse_rewards: bool = _option(
        False, "delivery reward only (default False: dense shaping annealed)."
    )
    individual_rewards: bool = _option(
        False,
        "each agent gets its own delivery reward (default: the team's delivery reward, as "
        "MEAL). Shaping is always the agent's own.",
    )
    shaping_horizon: int | None = _option(
        PAPER_SHAPING_HORIZON,
        "env steps of each task over which shaping anneals 1 -> 0 (default ``None``: half "
        "of ``steps_per_task``, 5M at the paper's 10M, as MEAL#10 point 3).",
    )
    partial_observability: bool = _option(
        False, "meal-bench's option (the view size from ``difficulty``)."
    )
    sticky_actions: bool = _option(
        False,
        "each agent's action is replaced by its previous one with ``repeat_action_prob`` "
        "(MEAL's ``StickyActions``; default False).",
    )
    repeat_action_prob: float | None = _option(
        None,
        "sticky actions' probability in [0, 1] (default ``None``: the ``difficulty``'s, "
        "easy 0.1, medium 0.2, hard 0.3, extreme 0.4).",
    )
    slippery_tiles: bool = _option(
        False,
        "a quarter of the walkable cells, drawn per episode, slip: an agent that stepped onto "
        "one moves at random next step with ``slipping_prob`` (MEAL's ``SlipperyTiles``).",
    )
    slipping_prob: float | None = _option(
        None,
        "slippery tiles' probability in [0, 1] (default ``None``: the ``difficulty``'s, "
        "easy 0.35, medium 0.5, hard 0.65, extreme 0.8).",
    )
    random_pot_size: bool = _option(
        False, "meal-bench's option (the probability from ``difficulty``)."
    )
    random_cook_time: bool = _option(
        False, "meal-bench's option (the probability from ``difficulty``)."
    )
    random_reset: bool = _option(
        False,
        "every episode starts with random agent positions, inventories and pot states "
        "(meal-bench's ``random_reset``; default False as meal-bench; MEAL's paper-time "
        "training code used True, and so does ``cl-suites run``).",
    )
    separated_agents: bool = _option(
        False, "generator only accepts kitchens whose agents are separated."
    )
    complementary_restrictions: bool = _option(
        False,
        "designated roles, 2 agents only: per task one agent cannot pick up onions (waiter), "
        "the other plates (chef), drawn from seed ``layout_seed + task`` (MEAL's option).",
    )
    obs_padding: str = _option(
        "walls",
        "``\"walls\"`` (default: the paper's text and MEAL's paper-time code, padded cells "
        'read as counters) or ``"zeros"`` (meal-bench\'s ``PadObsToMax``).',
    )
    generator: str = _option(
        "paper",
        "``\"paper\"`` (default: the paper's generator, the kitchens MEAL's paper-time code "
        'generates for a seed; easy/medium/hard) or ``"meal-bench"`` (meal-bench '
        "0.3.1's later generator: fixed grid size per level).",
    )
    dynamics: str = _option(
        "paper",
        '``"paper"`` (default: MEAL\'s paper-time movement rule, one agent may follow '
        'another) or ``"meal-bench"`` (meal-bench 0.3.1\'s: it may not).',
    )
    max_attempts: int = _option(2000, "tries of the generator per kitchen before it gives up.")
    seed: int | None = _option(None, "the old name of ``layout_seed``, kept for older code.")

    @classmethod
    def from_keywords(cls, **keywords: Any) -> MealOptions:
        """The options given as keywords; ``UnknownOptionError`` naming any other name."""
        unknown = set(keywords) - set(option_names())
        if unknown:
            raise UnknownOptionError(
                f"unknown MEAL option(s) {sorted(unknown)}; valid: {', '.join(option_names())}"
            )
        return cls(**keywords)

    def __post_init__(self) -> None:
        if self.seed is not None and self.layout_seed is not None and self.seed != self.layout_seed:
            raise BadValueError(
                f"seed={self.seed!r} and layout_seed={self.layout_seed!r} disagree; pass only "
                "layout_seed (seed is its old name)"
            )
        check_choice("strategy", self.strategy, STRATEGIES)
        check_choice("obs_padding", self.obs_padding, OBS_PADDINGS)
        check_choice("generator", self.generator, GENERATORS)
        check_choice("dynamics", self.dynamics, DYNAMICS)
        self._check_kitchens()
        for name in ("steps_per_task", "cycles", "eval_every", "eval_episodes", "episode_len"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("shaping_horizon", self.resolved_shaping_horizon)
        self._check_counts()
        for name in FLAGS:
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise BadValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        self._check_knobs()
        if self.sparse_rewards and self.individual_rewards:
            raise BadValueError(
                "sparse_rewards and individual_rewards cannot both be set (as in MEAL)"
            )

    def _check_kitchens(self) -> None:
        """``difficulty`` against the strategy and generator; ``layout_names``."""
        difficulty, strategy, generator = self.difficulty, self.strategy, self.generator
        if difficulty is not None:
            allowed = allowed_difficulties(strategy, generator)
            if difficulty not in allowed:
                raise BadValueError(
                    f"difficulty {difficulty!r} is unknown with strategy {strategy!r} and "
                    f"generator {generator!r}; use one of {allowed} (generator 'meal-bench' "
                    f"also takes 'extreme'; the handmade presets: {PRESET_DIFFICULTIES})"
                )
        elif strategy == "generate":
            raise BadValueError(
                f"difficulty None needs a preset strategy; with strategy 'generate' use one of "
                f"{DIFFICULTIES}"
            )
        names = self.layout_names
        if names is not None:
            if isinstance(names, str) or not all(isinstance(x, str) for x in names):
                raise BadValueError(
                    f"layout_names must be a list of preset names, got {names!r}; "
                    f"available: {sorted(preset_names())}"
                )
            unknown = [x for x in names if x not in preset_names()]
            if unknown or not names:
                raise BadValueError(
                    f"unknown preset layout(s) {unknown or list(names)}; "
                    f"available: {sorted(preset_names())}"
                )

    def _check_counts(self) -> None:
        """``num_agents`` in MEAL's range; ``max_attempts`` a non-negative int."""
        num_agents, max_attempts = self.num_agents, self.max_attempts
        if isinstance(num_agents, bool) or not isinstance(num_agents, (int, np.integer)):
            raise BadValueError(
                f"num_agents must be in 1..{MAX_AGENTS} (an int), got {num_agents!r}"
            )
        if not 1 <= num_agents <= MAX_AGENTS:
            raise BadValueError(
                f"num_agents must be in 1..{MAX_AGENTS} (MEAL's range), got {num_agents}"
            )
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, (int, np.integer))
            or max_attempts < 0
        ):
            raise BadValueError(f"max_attempts must be a non-negative int, got {max_attempts!r}")

    def _check_knobs(self) -> None:
        """The probabilities in [0, 1] and with their knob on; roles with 2 agents."""
        for name, knob in PROBABILITY_KNOBS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.integer, np.floating))
                or not 0.0 <= float(value) <= 1.0
            ):
                raise BadValueError(
                    f"{name}={value!r} is not a probability; allowed: a number in [0, 1], or "
                    "None for the difficulty's"
                )
            if not getattr(self, knob):
                raise BadValueError(
                    f"{name}={value!r} needs {knob}=True (allowed with {knob}=False: None)"
                )
        if self.complementary_restrictions and self.num_agents != 2:
            raise BadValueError(
                f"complementary_restrictions needs num_agents=2 (one chef, one waiter), got "
                f"num_agents={self.num_agents}; allowed: num_agents=2, or "
                "complementary_restrictions=False"
            )

    def probability(self, name: str) -> float:
        """``repeat_action_prob`` or ``slipping_prob``: the given value, else the
        ``difficulty``'s (``"easy"`` when ``difficulty`` is None)."""
        from meal.env.overcooked import get_difficulty_params

        value = getattr(self, name)
        if value is not None:
            return float(value)
        return float(get_difficulty_params(self.difficulty or "easy")[name])

    @property
    def resolved_shaping_horizon(self) -> Any:
        """``shaping_horizon``, or half of ``steps_per_task`` for ``None``."""
        if self.shaping_horizon is None and isinstance(self.steps_per_task, (int, np.integer)):
            return max(1, int(self.steps_per_task) // 2)
        return self.shaping_horizon

    def kitchen_seed(self, num_tasks: int) -> int:
        """The kitchens' seed (``layout_seed``, else its old name ``seed``, else 0), or a
        ``BadValueError`` naming the valid range: generated kitchens use seeds
        ``layout_seed .. layout_seed + num_tasks - 1``, which must stay in ``0..2**31 - 1``."""
        layout_seed = self.layout_seed if self.layout_seed is not None else self.seed or 0
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

    def engine_options(self, layout_seed: int) -> dict[str, Any]:
        """The options the engine reads (``MealSuite.options``; in the run metadata)."""
        return {
            "difficulty": self.difficulty,
            "strategy": self.strategy,
            "layout_seed": int(layout_seed),
            **{name: bool(getattr(self, name)) for name in FLAGS[:2]},
            "shaping_horizon": int(self.resolved_shaping_horizon),
            **{name: bool(getattr(self, name)) for name in FLAGS[2:8]},
            "complementary_restrictions": bool(self.complementary_restrictions),
            **{name: self.probability(name) for name in PROBABILITIES},
            "obs_padding": self.obs_padding,
            "generator": self.generator,
            "dynamics": self.dynamics,
            "stochasticity_level": self.difficulty or "easy",
        }


def option_names() -> tuple[str, ...]:
    """The names of MEAL's options (the keywords ``build_suite`` / ``make_parallel`` take)."""
    return tuple(f.name for f in dataclasses.fields(MealOptions))


def option_docs() -> dict[str, str]:
    """``{option: its one-line doc}``."""
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(MealOptions)}
