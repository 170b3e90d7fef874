"""MEAL kitchens: which layouts a sequence plays, their padding and their soup bounds.

Layouts come from ``meal-bench`` (the MEAL paper's own generator and presets); this module
only chooses them, pads them to one grid size and computes the paper's normaliser.

* ``strategy="generate"``: task ``i`` is a fresh kitchen at the given difficulty, seeded
  with ``seed + i``. ``generator="paper"`` (default) is the MEAL paper's generator
  (appendix A.2; size drawn per attempt from the level's range, e.g. 6..7 for easy, two
  pots, one or two of each other station), which reproduces the kitchens of MEAL's
  paper-time trainer for the same seed; ``generator="meal-bench"`` is meal-bench 0.3.1's
  later generator (fixed 7x7 easy grid, one of each station), exactly as
  ``meal.make_sequence`` does.
* ``strategy="curriculum"``: generated kitchens, the first third easy, then medium, then hard.
* ``strategy="ordered"`` / ``"random"``: the handmade presets of the difficulty (or
  ``layout_names``), in catalogue order or sampled with ``random.Random(seed)`` (no
  back-to-back repeats when the sequence is longer than the pool).
"""

from __future__ import annotations

import contextlib
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cl_suites.errors import CLSuitesError

DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard", "extreme")
STRATEGIES: tuple[str, ...] = ("generate", "ordered", "random", "curriculum")
GENERATORS: tuple[str, ...] = ("paper", "meal-bench")
PAPER_LEVELS: dict[str, tuple[tuple[int, int], float]] = {
    "easy": ((6, 7), 0.15),
    "medium": ((8, 9), 0.25),
    "hard": ((10, 11), 0.35),
}
"""The paper's levels (section 4.3): (min, max) of height and width, obstacle density."""
PRESET_DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")


def allowed_difficulties(strategy: str, generator: str) -> tuple[str, ...]:
    """The difficulties a sequence of ``strategy`` takes with ``generator``: the paper
    generator's levels (easy, medium, hard), meal-bench's (also extreme), or the handmade
    presets' for ``"ordered"`` / ``"random"``. ``"curriculum"`` fixes its levels itself;
    there ``difficulty`` only sets meal-bench's options (any of ``DIFFICULTIES``)."""
    if strategy in ("ordered", "random"):
        return PRESET_DIFFICULTIES
    if strategy == "generate" and generator == "paper":
        return tuple(PAPER_LEVELS)
    return DIFFICULTIES


MAX_AGENTS = 5
REWARD_PER_SOUP = 20.0
"""meal-bench's delivery reward (``DELIVERY_REWARD``): sparse return = 20 x soups."""

_LAYOUT_KEYS = ("wall_idx", "agent_idx", "goal_idx", "plate_pile_idx", "onion_pile_idx", "pot_idx")


class LayoutGenerationError(CLSuitesError, RuntimeError):
    """meal-bench's generator found no solvable kitchen within its attempts."""


@dataclass(frozen=True)
class MealLayout:
    """One task's kitchen.

    Attributes:
        name: task name (preset name, or ``"<difficulty>_gen_<i>"`` for generated ones).
        layout: meal-bench layout dict (flat indices into ``height x width``), unpadded.
        difficulty: difficulty it was drawn at (``None`` for presets given by name).
        seed: generator seed (``None`` for presets).
        max_soups: single-agent max-soup bound over one episode (MEAL appendix A.1); 0
            where one agent cannot make a soup alone (the kitchen then has no bound).
    """

    name: str
    layout: object
    difficulty: str | None
    seed: int | None
    max_soups: int

    @property
    def height(self) -> int:
        return int(self.layout["height"])

    @property
    def width(self) -> int:
        return int(self.layout["width"])

    @property
    def normalizer(self) -> float | None:
        """Sparse return of a bound-matching episode: ``REWARD_PER_SOUP * max_soups``;
        ``None`` where the kitchen has no bound (``no_bound`` says why)."""
        return REWARD_PER_SOUP * self.max_soups if self.max_soups > 0 else None

    def no_bound(self, episode_len: int) -> str | None:
        """Why the kitchen has no score bound (``None`` when it has one)."""
        if self.max_soups > 0:
            return None
        return (
            f"no score bound: MEAL's single-agent max-soup bound is 0 (one agent cannot "
            f"make and deliver a soup alone within {episode_len} steps in this kitchen), so "
            "MEAL's normalised score is undefined"
        )

    def free_cells(self) -> int:
        """Walkable cells (floor and spawn tiles)."""
        return self.height * self.width - len(set(np.asarray(self.layout["wall_idx"]).tolist()))


def check_choice(name: str, value: object, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} {value!r} is unknown; use one of {tuple(allowed)}")
    return str(value)


def preset_names(difficulty: str | None = None) -> tuple[str, ...]:
    """meal-bench's handmade layouts of ``difficulty`` (all of them when ``None``)."""
    from meal.env.overcooked.layouts.presets import difficulty_layouts, overcooked_layouts

    if difficulty is None:
        return tuple(overcooked_layouts)
    check_choice("preset difficulty", difficulty, PRESET_DIFFICULTIES)
    return tuple(difficulty_layouts[difficulty])


def generate(
    difficulty: str, seed: int, num_agents: int, generator: str = "paper", **kwargs
) -> object:
    """One generated kitchen (``generator`` as the module docstring says; retry prints
    silenced)."""
    from meal.env.overcooked import generate_layout

    check_choice("generator", generator, GENERATORS)
    if generator == "paper":
        check_choice("difficulty (paper generator)", difficulty, tuple(PAPER_LEVELS))
        if kwargs.get("separated_agents"):
            raise ValueError("separated_agents needs generator='meal-bench'")
    else:
        check_choice("difficulty", difficulty, DIFFICULTIES)
    attempts = kwargs.get("max_attempts", 2000)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if generator == "paper":
                layout = _generate_paper(difficulty, seed, num_agents, attempts)
            else:
                _, layout = generate_layout(
                    num_agents=num_agents, difficulty=difficulty, seed=seed, **kwargs
                )
    except RuntimeError as e:
        raise LayoutGenerationError(
            f"meal-bench found no solvable {difficulty} kitchen for {num_agents} agent(s) with "
            f"seed {seed} in {attempts} attempts; try another seed, difficulty or agent count"
        ) from e
    return layout


def _generate_paper(difficulty: str, seed: int, num_agents: int, max_attempts: int) -> object:
    """The paper's generator (appendix A.2), with meal-bench's tile placement, reachability
    clean-up and validator. Per attempt: height and width drawn from the level's range, an
    outer wall, then one or two goals, two pots, one or two onion piles and one or two
    plate piles (in that order), walls up to the level's obstacle density, the agents; the
    unreachable stations removed, pots topped up to two, and the grid kept if the validator
    finds a cook-deliver cycle for the agents. Draws from ``random.Random(seed)`` in that
    order, so a seed gives the kitchen MEAL's paper-time code gives for it.
    """
    from meal.env.overcooked.common import AGENT, FLOOR, GOAL, ONION_PILE, PLATE_PILE, POT, WALL
    from meal.env.overcooked.generation.layout_generator import (
        place_tiles,
        remove_unreachable_items,
    )
    from meal.env.overcooked.generation.layout_validator import UNPASSABLE_TILES, evaluate_grid
    from meal.env.overcooked.layouts.presets import layout_grid_to_dict

    (low, high), density = PAPER_LEVELS[difficulty]
    rng = random.Random(seed)
    for _ in range(max_attempts):
        height, width = rng.randint(low, high), rng.randint(low, high)
        border = ({0, height - 1}, {0, width - 1})
        grid = [
            [WALL if i in border[0] or j in border[1] else FLOOR for j in range(width)]
            for i in range(height)
        ]
        placed = True
        for station in (GOAL, POT, ONION_PILE, PLATE_PILE):
            count = 2 if station == POT else rng.randint(1, 2)
            if not place_tiles(grid, station, count, rng):
                placed = False
                break
        if not placed:
            continue
        inner = [grid[i][j] for i in range(1, height - 1) for j in range(1, width - 1)]
        blocked = sum(cell in UNPASSABLE_TILES for cell in inner)
        walls = max(0, round(density * len(inner)) - blocked)
        if not place_tiles(grid, WALL, walls, rng) or not place_tiles(grid, AGENT, num_agents, rng):
            continue
        remove_unreachable_items(grid)
        pots = sum(cell == POT for row in grid for cell in row)
        if pots < 2 and not place_tiles(grid, POT, 2 - pots, rng):
            continue
        text = "\n".join("".join(row) for row in grid)
        if evaluate_grid(text, num_agents=num_agents)[0]:
            return layout_grid_to_dict(text)
    raise RuntimeError(f"no solvable kitchen in {max_attempts} attempts")


def max_soups(layout: object, episode_len: int, num_agents: int) -> int:
    """MEAL's single-agent max-soup bound (meal-bench ``calculate_max_soup``; the same
    number as ``estimate_max_soup`` of MEAL's paper-time code divided by the 20 points of a
    soup, ``TTomilin/MEAL@7d81858 jax_marl/environments/overcooked/upper_bound.py:103``).

    0 where one agent cannot make a soup alone (walls split the kitchen so that a soup
    needs a hand-off over a counter, e.g. ``forced_coord``, some ``hard`` kitchens): the
    task then has no bound and its normalised score is undefined, as in MEAL's paper and
    paper-time code (``docs/fidelity.md``, "MEAL score normaliser").
    """
    key = (
        int(layout["height"]),
        int(layout["width"]),
        *(tuple(np.asarray(layout[k]).tolist()) for k in _LAYOUT_KEYS if k != "agent_idx"),
    )
    key = (key, episode_len, num_agents)
    if key not in _BOUNDS:
        from meal.env.overcooked.max_soup_calculator import calculate_max_soup

        _BOUNDS[key] = int(calculate_max_soup(layout, episode_len, n_agents=num_agents))
    return _BOUNDS[key]


_BOUNDS: dict[tuple, int] = {}


def _no_repeat_sample(pool: Sequence[str], k: int, rng: random.Random) -> list[str]:
    if k <= len(pool):
        return rng.sample(list(pool), k)
    out: list[str] = []
    for _ in range(k):
        candidates = [name for name in pool if not out or name != out[-1]] or list(pool)
        out.append(rng.choice(candidates))
    return out


def build_layouts(
    num_tasks: int,
    *,
    strategy: str = "generate",
    difficulty: str | None = "easy",
    seed: int = 0,
    num_agents: int = 2,
    episode_len: int = 400,
    layout_names: Sequence[str] | None = None,
    separated_agents: bool = False,
    max_attempts: int = 2000,
    generator: str = "paper",
) -> tuple[MealLayout, ...]:
    """The kitchens of a MEAL sequence of ``num_tasks`` tasks, in training order.

    Raises ``ValueError`` for an unknown strategy, difficulty or preset name, a sequence
    longer than the preset pool with ``"ordered"``, or more agents than a kitchen has free
    cells (a kitchen with a zero soup bound is kept: it has no score bound, see
    :func:`max_soups`); ``LayoutGenerationError`` (naming the seed)
    when the generator gives up.
    """
    from meal.env.overcooked.layouts.presets import overcooked_layouts

    check_choice("strategy", strategy, STRATEGIES)
    check_choice("generator", generator, GENERATORS)
    if not 1 <= num_agents <= MAX_AGENTS:
        raise ValueError(f"num_agents must be in 1..{MAX_AGENTS} (MEAL's range), got {num_agents}")
    chosen: list[tuple[str, object, str | None, int | None]] = []
    if strategy in ("generate", "curriculum"):
        if layout_names is not None:
            raise ValueError(
                f"layout_names only applies to the preset strategies, not {strategy!r}"
            )
        if strategy == "generate":
            difficulty = check_choice("difficulty", difficulty, DIFFICULTIES)
            levels = [difficulty] * num_tasks
        else:
            per, extra = divmod(num_tasks, 3)
            counts = (per + (extra > 0), per + (extra > 1), per)
            levels = [d for d, c in zip(PRESET_DIFFICULTIES, counts, strict=True) for _ in range(c)]
        for i, level in enumerate(levels):
            layout = generate(
                level,
                seed + i,
                num_agents,
                generator=generator,
                separated_agents=separated_agents,
                max_attempts=max_attempts,
            )
            chosen.append((f"{level}_gen_{i}", layout, level, seed + i))
    else:
        if layout_names is not None:
            pool = list(layout_names)
            unknown = [n for n in pool if n not in overcooked_layouts]
            if unknown or not pool:
                raise ValueError(
                    f"unknown preset layout(s) {unknown or pool}; "
                    f"available: {sorted(overcooked_layouts)}"
                )
        else:
            if difficulty not in PRESET_DIFFICULTIES:
                raise ValueError(
                    f"difficulty {difficulty!r} has no handmade presets; use one of "
                    f"{PRESET_DIFFICULTIES} or strategy='generate'"
                )
            pool = list(preset_names(difficulty))
        if strategy == "ordered":
            if num_tasks > len(pool):
                raise ValueError(
                    f"strategy 'ordered' needs at most {len(pool)} tasks (the preset pool), "
                    f"got {num_tasks}; use strategy='random' to repeat presets"
                )
            names = pool[:num_tasks]
        else:
            names = _no_repeat_sample(pool, num_tasks, random.Random(seed))
        chosen = [(n, overcooked_layouts[n], difficulty, None) for n in names]
    out = []
    for name, layout, level, layout_seed in chosen:
        bound = max_soups(layout, episode_len, num_agents)
        task = MealLayout(name, layout, level, layout_seed, bound)
        if num_agents > task.free_cells():
            raise ValueError(
                f"layout {name!r} has {task.free_cells()} free cells, fewer than "
                f"num_agents={num_agents}"
            )
        out.append(task)
    return tuple(out)


def padded(task: MealLayout, height: int, width: int) -> tuple[dict, np.ndarray]:
    """``task``'s kitchen centred in a ``height x width`` grid whose extra cells are walls,
    and the ``(height, width)`` uint8 mask of the real kitchen.

    The offsets are those of meal-bench's ``PadObsToMax`` (``top = dh // 2``,
    ``left = dw // 2``), so masking a padded kitchen's observation with the mask gives
    exactly ``PadObsToMax``'s zero-padded observation.
    """
    import jax.numpy as jnp
    from flax.core.frozen_dict import FrozenDict

    h, w = task.height, task.width
    top, left = (height - h) // 2, (width - w) // 2

    def remap(idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        return (idx // w + top) * width + (idx % w + left)

    mask = np.zeros((height, width), dtype=np.uint8)
    mask[top : top + h, left : left + w] = 1
    layout = {key: remap(task.layout[key]) for key in _LAYOUT_KEYS if key in task.layout}
    outside = np.flatnonzero(mask.ravel() == 0)
    layout["wall_idx"] = np.concatenate([layout["wall_idx"], outside])
    layout = {k: jnp.asarray(v, dtype=jnp.int32) for k, v in layout.items()}
    layout.update(height=height, width=width)
    return FrozenDict(layout), mask
