"""Overcooked's knobs: the streams pinned beside MEAL 057f862, their behaviour, bad input.

The pins (``tests/golden/meal_knobs_reference.json``) come from
``benchmarks/parity/meal_knobs_reference.py``, which plays MEAL's envs beside ours; here
ours are replayed without MEAL.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("meal")
pytest.importorskip("jax")

from benchmarks.parity import meal_knobs_cases as cases
from cl_suites.errors import BadValueError, UnknownOptionError
from cl_suites.meal import build_suite
from cl_suites.meal.engine import MealEngine
from cl_suites.meal.knobs import base_state

GOLDEN = Path(__file__).parents[2] / "tests" / "golden" / "meal_knobs_reference.json"
MEAL_057 = {"generator": "meal-bench", "dynamics": "meal-bench", "obs_padding": "zeros"}


def test_every_knob_is_pinned_and_agreed_with_meal():
    pins = json.loads(GOLDEN.read_text())
    assert set(pins) == set(cases.CASES)
    for name, pin in pins.items():
        assert pin["options"] == cases.options(name), name
        assert pin["sensitive"] is not False, f"{name}: the pin does not depend on the knob"
        for task, row in enumerate(pin["meal"]):
            known = cases.KNOWN_DIFFERENCES.get(name, {}).get(task, ())
            for field in ("obs", "rewards", "dones"):
                assert (row[field] is True) == (field not in known), (name, task, field, row)


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_knob_streams_match_the_pins(name):
    pinned = json.loads(GOLDEN.read_text())[name]["streams"]
    ours = cases.play_ours(name)
    for task, (got, want) in enumerate(zip(ours, pinned, strict=True)):
        assert got["obs"] == want["obs"], (name, task)
        np.testing.assert_allclose(got["rewards"], want["rewards"], atol=1e-5, err_msg=name)
        assert got["dones"] == want["dones"], (name, task)


def _sticky_engine(p: float, num_envs: int):
    suite = build_suite(1, layout_seed=5, sticky_actions=True, repeat_action_prob=p, **MEAL_057)
    engine = MealEngine(suite)
    return engine, engine.reset(np.zeros(num_envs, dtype=int), engine.env_keys(0, num_envs))[0]


def _applied(engine, state) -> np.ndarray:
    """``(M, n)``: the actions the last step applied (``StickyActionsState.last_action``)."""
    return np.stack([np.asarray(state.env_state.last_action[a]) for a in engine.agents], 1)


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_sticky_actions_repeat_the_previous_action_with_its_probability(p):
    """Agents play right, then left: the second step applies the first step's action
    again with probability ``p``, else left; one coin per env and step, shared by the
    agents, as MEAL's ``StickyActions`` (one key for every agent)."""
    engine, state = _sticky_engine(p, num_envs=4096)
    state = engine.step(state, np.full((4096, 2), 2), 0.0)[0]
    first = _applied(engine, state)
    state = engine.step(state, np.full((4096, 2), 3), 0.0)[0]
    applied = _applied(engine, state)
    repeated = applied != 3
    assert np.all(applied[repeated] == first[repeated])
    assert abs(repeated.mean() - p) < 0.03, repeated.mean()
    assert np.all(repeated[:, 0] == repeated[:, 1])


def test_sticky_actions_first_step_repeats_up():
    """MEAL's ``StickyActions`` starts each episode with action 0 (up) as the previous."""
    engine, state = _sticky_engine(1.0, num_envs=8)
    state = engine.step(state, np.full((8, 2), 4), 0.0)[0]
    assert np.all(_applied(engine, state) == 0)


def test_slippery_tiles_are_drawn_per_episode_on_the_real_kitchen():
    """A quarter of the real kitchen's walkable cells, never a padded one; another draw
    per episode (reset key)."""
    suite = build_suite(3, layout_seed=3, strategy="curriculum", slippery_tiles=True, **MEAL_057)
    engine = MealEngine(suite)
    state, _ = engine.reset(np.zeros(256, dtype=int), engine.env_keys(0, 256))
    slippery = np.asarray(state.env_state.slippery_mask)  # (256, 11, 11): task 0 is 7 x 7
    base = base_state(state.env_state)
    walkable = ~np.asarray(base.wall_map)
    assert slippery.shape[1:] == suite.grid_shape == (11, 11)
    outside = np.ones((11, 11), dtype=bool)
    outside[2:9, 2:9] = False
    assert not slippery[:, outside].any()
    assert not (slippery & ~walkable).any()
    share = slippery.sum() / walkable.sum()
    assert abs(share - 0.25) < 0.03, share
    again, _ = engine.reset(np.zeros(256, dtype=int), engine.env_keys(1, 256))
    assert (np.asarray(again.env_state.slippery_mask) != slippery).any()


def _pickups(restricted: bool, steps: int = 150, num_envs: int = 128) -> tuple[np.ndarray, list]:
    """Per agent: onions and plates picked up (inventory empty -> it) in random play of
    MEAL-2's first task; and each task's waiter."""
    from meal.env.overcooked.common import OBJECT_TO_INDEX

    from cl_suites.meal.knobs import waiter

    suite = build_suite(2, layout_seed=7, complementary_restrictions=restricted, **MEAL_057)
    engine = MealEngine(suite)
    rng = np.random.default_rng(0)
    counts = np.zeros((2, 2), dtype=int)  # (agent, onion/plate)
    for task in range(2):
        state, _ = engine.reset(np.full(num_envs, task), engine.env_keys(task, num_envs))
        inv = np.asarray(base_state(state.env_state).agent_inv)
        for _ in range(steps):
            state = engine.step(state, rng.integers(6, size=(num_envs, 2)), 0.0)[0]
            new = np.asarray(base_state(state.env_state).agent_inv)
            empty = inv == OBJECT_TO_INDEX["empty"]
            role = waiter(7 + task) if restricted else 0
            order = [role, 1 - role]  # rows: the waiter, then the chef
            for k, item in enumerate(("onion", "plate")):
                picked = (empty & (new == OBJECT_TO_INDEX[item])).sum(0)
                counts[:, k] += picked[order]
            inv = new
    return counts, [waiter(7 + t) for t in range(2)]


def test_designated_roles_waiter_never_picks_onions_chef_never_plates():
    counts, waiters = _pickups(True)
    assert waiters == [1, 0]  # roles differ by task: the switch reads the task id
    assert counts[0, 0] == 0 and counts[1, 1] == 0, counts
    assert counts[1, 0] > 0 and counts[0, 1] > 0, counts
    free, _ = _pickups(False)
    assert free[:, 0].min() > 0 and free[:, 1].min() > 0, free


def test_partial_views_read_zeros_off_the_real_kitchen():
    """Padded to the sequence's largest grid, a view equals meal-bench's view of the
    unpadded kitchen (cells off the kitchen read as zeros): hard views (3 ahead, 1 behind)
    reach past a 7 x 7 kitchen's outer wall into the padding of an 11 x 11 grid."""
    import jax
    from meal.env.overcooked import OvercookedPO

    options = {"strategy": "curriculum", "difficulty": "hard", "partial_observability": True}
    suite = build_suite(3, layout_seed=3, **options, **MEAL_057)
    engine = MealEngine(suite)
    keys = engine.env_keys(0, 64)
    _, obs = engine.reset(np.zeros(64, dtype=int), keys)
    layout = suite.layouts[0]
    plain = OvercookedPO(layout=layout.layout, num_agents=2, max_steps=400, difficulty="hard")
    subs = jax.vmap(lambda k: jax.random.split(k)[1])(keys)
    their_obs, _ = jax.vmap(plain.reset)(subs)
    theirs = np.stack([np.asarray(their_obs[a]) for a in engine.agents], 1)
    assert np.asarray(obs).shape == theirs.shape
    np.testing.assert_array_equal(np.asarray(obs), theirs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sticky_action": True}, "unknown MEAL option(s) ['sticky_action']; valid: "),
        (
            {"sticky_actions": True, "repeat_action_prob": 1.5},
            "repeat_action_prob=1.5 is not a probability; allowed: a number in [0, 1]",
        ),
        (
            {"slippery_tiles": True, "slipping_prob": -0.1},
            "slipping_prob=-0.1 is not a probability; allowed: a number in [0, 1]",
        ),
        ({"slipping_prob": 0.5}, "slipping_prob=0.5 needs slippery_tiles=True"),
        (
            {"complementary_restrictions": True, "num_agents": 3},
            "complementary_restrictions needs num_agents=2 (one chef, one waiter), got "
            "num_agents=3",
        ),
    ],
)
def test_a_bad_knob_is_refused_in_one_line_before_anything_is_built(options, message, monkeypatch):
    from cl_suites.meal import layouts

    def refuse(*args, **kwargs):
        raise AssertionError("a kitchen was generated")

    monkeypatch.setattr(layouts, "generate", refuse)
    with pytest.raises((BadValueError, UnknownOptionError)) as err:
        build_suite(2, **options)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
