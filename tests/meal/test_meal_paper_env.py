"""MEAL's paper-time environment on meal-bench's engine (issue 20 item 4, env side): the
paper's kitchen generator, wall padding and movement rule. No MEAL checkout needed: the
expected kitchens are MEAL 7d81858's ``generate_random_layout`` output for the seeds
(``benchmarks/parity/parity_meal.py env`` compares the whole env with MEAL's own)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("meal")

import jax.numpy as jnp
from meal.env.overcooked.layouts.presets import layout_grid_to_dict

from cl_suites.meal import build_suite
from cl_suites.meal.dynamics import _paper_resolve_collisions, overcooked_class
from cl_suites.meal.engine import MealEngine
from cl_suites.meal.layouts import build_layouts

# MEAL 7d81858 jax_marl/environments/overcooked/env_generator.py generate_random_layout(
# num_agents=2, height_rng=(6, 7), width_rng=(6, 7), wall_density=0.15, seed=s)
MEAL_EASY_KITCHENS = {
    1: "WWWWWWW\nWAA   W\nW   P W\nW B  PW\nW     W\nWO X  W\nWWWWWWW",
    2: "WWWWWW\nWA P W\nWAO  W\nW   XW\nWOBPWW\nWWWWWW",
}
KEYS = ("wall_idx", "agent_idx", "goal_idx", "plate_pile_idx", "onion_pile_idx", "pot_idx")


def test_paper_generator_gives_meals_kitchens_for_the_seed():
    ours = build_layouts(2, strategy="generate", difficulty="easy", seed=1)
    for task, seed in zip(ours, (1, 2), strict=True):
        theirs = layout_grid_to_dict(MEAL_EASY_KITCHENS[seed])
        assert (task.height, task.width) == (theirs["height"], theirs["width"])
        for key in KEYS:
            assert np.asarray(task.layout[key]).tolist() == np.asarray(theirs[key]).tolist()
    sizes = {
        (t.height, t.width)
        for t in build_layouts(10, strategy="generate", difficulty="easy", seed=0)
    }
    assert sizes <= {(6, 6), (6, 7), (7, 6), (7, 7)} and len(sizes) > 1  # paper: 6..7
    bench = build_layouts(2, strategy="generate", difficulty="easy", seed=1, generator="meal-bench")
    assert {(t.height, t.width) for t in bench} == {(7, 7)}  # meal-bench's fixed easy grid
    with pytest.raises(ValueError, match="generator 'x' is unknown"):
        build_layouts(1, generator="x")
    with pytest.raises(ValueError, match="difficulty \\(paper generator\\) 'extreme'"):
        build_layouts(1, difficulty="extreme")


def test_smaller_kitchens_are_padded_with_walls():
    suite = build_suite(2, difficulty="easy", layout_seed=1)  # 7x7 then 6x6
    assert suite.options["obs_padding"] == "walls" and suite.obs_shape == (7, 7, 26)
    engine = MealEngine(suite)
    _, obs = engine.reset(np.array([1]), engine.env_keys(0, 1))
    obs = np.asarray(obs)[0, 0]  # agent_0's (7, 7, 26) view of the 6x6 kitchen
    # centred as MEAL (top = left = 1 // 2 = 0): the last row and column are padding
    pad = np.zeros((7, 7), bool)
    pad[6, :] = pad[:, 6] = True
    assert obs[pad][:, 11].tolist() == [1] * 13  # channel 11: counters/walls
    assert obs[pad][:, [c for c in range(26) if c != 11]].sum() == 0
    zeros = build_suite(2, difficulty="easy", layout_seed=1, obs_padding="zeros")
    engine = MealEngine(zeros)
    _, obs = engine.reset(np.array([1]), engine.env_keys(0, 1))
    assert np.asarray(obs)[0, 0][pad].sum() == 0


def test_paper_movement_lets_an_agent_follow_another():
    paper = overcooked_class("paper", False)
    bench = overcooked_class("meal-bench", False)
    current = jnp.array([[1, 1], [2, 1]], dtype=jnp.uint32)

    def moves(cls, proposed):
        out = cls._resolve_collisions(None, current, jnp.array(proposed, dtype=jnp.uint32))
        return np.asarray(out).tolist()

    follow = [[2, 1], [3, 1]]  # agent 0 steps onto the cell agent 1 leaves
    assert moves(paper, follow) == follow
    assert moves(bench, follow) == [[1, 1], [3, 1]]  # meal-bench blocks the follower
    swap = [[2, 1], [1, 1]]
    assert moves(paper, swap) == [[1, 1], [2, 1]]
    same = [[1, 2], [1, 2]]
    assert moves(paper, same) == [[1, 1], [2, 1]]
    assert paper._resolve_collisions is _paper_resolve_collisions
    assert build_suite(1, layout_seed=1).options["dynamics"] == "paper"
    with pytest.raises(ValueError, match="dynamics 'x' is unknown"):
        build_suite(1, dynamics="x")
