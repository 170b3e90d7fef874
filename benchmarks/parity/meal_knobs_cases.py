"""The knob cases of the Overcooked parity, and our side of each: a short pinned stream.

Each case is one of MEAL-N's Overcooked knobs, switched on over the options MEAL's
current code plays (``TTomilin/MEAL@057f862``: meal-bench's generator and movement rule,
zero padding; ``COMMON``). A stream is one episode of ``STEPS`` steps of ``NUM_ENVS``
envs on every task of the case: the reset and every step's observations (a digest of
their bytes), rewards and episode ends, with keys ``engine.env_keys(seed * 100 + task)``
and the actions of :func:`actions` (uniform over the 6 moves, NumPy's PCG64).

``benchmarks/parity/meal_knobs_reference.py`` plays MEAL's envs beside these streams and
pins them in ``tests/golden/meal_knobs_reference.json``;
``tests/meal/test_meal_knobs.py::test_knob_streams_match_the_pins`` replays ours against
the pins without MEAL.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

SEED = 3
"""Run seed of every case: MEAL's ``--seed`` (kitchens and roles), ours ``layout_seed``."""
NUM_ENVS = 4
STEPS = 40
"""Steps of the episode (and its length: the last step ends it)."""
COEF = 0.7
"""Shaping weight of the stream's rewards (0 with sparse rewards)."""
COMMON: dict[str, Any] = {
    "generator": "meal-bench",
    "dynamics": "meal-bench",
    "obs_padding": "zeros",
    "difficulty": "easy",
    "episode_len": STEPS,
}
"""Our options that play MEAL 057f862's kitchens, movement rule and padding."""

CASES: dict[str, dict[str, Any]] = {
    "sticky_actions": {"tasks": 2, "on": {"sticky_actions": True}},
    "slippery_tiles": {
        "tasks": 3,
        "on": {"strategy": "curriculum", "slippery_tiles": True},
        "off": {"slippery_tiles": False},
    },
    "random_pot_size": {
        "tasks": 2,
        "on": {"random_pot_size": True, "random_reset": True},
        "off": {"random_pot_size": False},
    },
    "random_cook_time": {
        "tasks": 2,
        "on": {"random_cook_time": True, "random_reset": True},
        "off": {"random_cook_time": False},
    },
    "curriculum": {"tasks": 3, "on": {"strategy": "curriculum"}, "off": None},
    "separated_agents": {"tasks": 2, "on": {"separated_agents": True}},
    "shared_rewards": {"tasks": 2, "on": {"random_reset": True}, "off": None},
    "sparse_rewards": {
        "tasks": 2,
        "on": {"sparse_rewards": True, "random_reset": True},
        "off": {"sparse_rewards": False},
    },
    "individual_rewards": {
        "tasks": 2,
        "on": {"individual_rewards": True, "random_reset": True},
        "off": {"individual_rewards": False},
    },
    "partial_observability": {
        "tasks": 3,
        "on": {"strategy": "curriculum", "partial_observability": True},
        "off": {"partial_observability": False},
    },
    "complementary_restrictions": {
        "tasks": 2,
        "on": {"complementary_restrictions": True, "random_reset": True},
        "off": {"complementary_restrictions": False},
    },
}
"""``tasks``: MEAL-N; ``on``: the knob's options; ``off`` (default: every ``on`` option
False; ``None``: no such stream): the options of a stream the knob must change, so that
the pin is sensitive to the knob."""


def options(name: str, knob: bool = True) -> dict[str, Any]:
    """Our ``build_suite`` keywords of case ``name``, with its knob on or off."""
    case = CASES[name]
    off = case.get("off", {key: False for key in case["on"]})
    return {**COMMON, **case["on"], **({} if knob else off or {})}


def coef(name: str, knob: bool = True) -> float:
    """The shaping weight of case ``name``'s rewards (0 with sparse rewards, as
    ``MealBatchedEnv.shaping_coef``)."""
    return 0.0 if options(name, knob).get("sparse_rewards") else COEF


def actions(task: int) -> np.ndarray:
    """``(STEPS, NUM_ENVS, 2)`` int actions of ``task``'s stream."""
    return np.random.default_rng(1000 * SEED + task).integers(6, size=(STEPS, NUM_ENVS, 2))


def digest(obs: Any) -> str:
    """First 16 hex digits of the SHA-256 of ``(NUM_ENVS, n, H, W, C)`` uint8 observations."""
    data = np.ascontiguousarray(np.asarray(obs, dtype=np.uint8))
    return hashlib.sha256(data.tobytes()).hexdigest()[:16]


def play_ours(name: str, knob: bool = True) -> list[dict[str, Any]]:
    """Case ``name``'s stream on our engine: per task ``{"obs": [digest per step, the
    reset's first], "rewards": (STEPS, NUM_ENVS, 2) nested lists rounded to 1e-5,
    "dones": [per step: every env's episode over]}``."""
    from cl_suites.meal import build_suite
    from cl_suites.meal.engine import MealEngine

    suite = build_suite(CASES[name]["tasks"], layout_seed=SEED, **options(name, knob))
    engine = MealEngine(suite)
    streams = []
    for task in range(CASES[name]["tasks"]):
        keys = engine.env_keys(100 * SEED + task, NUM_ENVS)
        state, obs = engine.reset(np.full(NUM_ENVS, task), keys)
        digests, rewards = [digest(obs)], []
        for act in actions(task):
            state, obs, reward, _ = engine.step(state, act, coef(name, knob))
            digests.append(digest(obs))
            rewards.append(np.round(np.asarray(reward, dtype=np.float64), 5).tolist())
        dones = [t == suite.episode_len for t in range(1, STEPS + 1)]
        streams.append({"obs": digests, "rewards": rewards, "dones": dones})
    return streams


REWARD_CASES = ("shared_rewards", "sparse_rewards", "individual_rewards")
"""The cases whose MEAL rewards are its trainer's reward modes (``compute_reward``)."""

KNOWN_DIFFERENCES: dict[str, dict[int, tuple[str, ...]]] = {
    "shared_rewards": {1: ("rewards",)},
    "partial_observability": {1: ("obs",), 2: ("obs",)},
}
"""``{case: {task: fields}}`` where MEAL 057f862's stream differs from ours (the ledger,
``docs/fidelity.md``, says which side is wrong and why): its shared mode gives every agent
the team's shaping (task 0's episode has no shaping by the other agent), and under
``curriculum`` its medium and hard tasks' views are their level's, larger than ours."""
