"""Overcooked's non-stationarity knobs on padded kitchens, as MEAL plays them unpadded.

The engine pads every kitchen (walls, centred) to the sequence's largest grid; MEAL
(``TTomilin/MEAL@057f862 meal/env/overcooked/generation/sequence_loader.py:130-159``) wraps
each unpadded kitchen. Three knobs read the grid, and here read the real kitchen inside
the padding so that a task plays as MEAL's does for the same keys and actions:

* :func:`waiter`, :func:`agent_restrictions`: the designated roles of a task
  (complementary restrictions);
* :class:`KitchenSlipperyTiles`: meal-bench's ``SlipperyTiles`` whose per-episode slippery
  mask is drawn over the real kitchen's cells, not the padded grid's;
* :func:`kitchen_view_mask`: which cells of a partial-observability view lie in the real
  kitchen (MEAL's out-of-grid cells read as zeros; padded cells must too).
"""

from __future__ import annotations

import random
from typing import Any

from meal.wrappers.slippery_tiles import SlipperyTiles, SlipperyTileState

from cl_suites.errors import require

jax = require("jax", extra="meal")
jnp = jax.numpy

SLIPPERY_FRACTION = 0.25
"""Share of a kitchen's walkable cells drawn slippery per episode (meal-bench's value)."""


def waiter(seed: int) -> int:
    """Which of the two cooks is the waiter (cannot pick up onions; the other, the chef,
    cannot pick up plates) in a task whose restriction seed is ``seed`` (MEAL: run seed +
    task index): a coin of Python's ``random.Random(seed)``."""
    return random.Random(seed).randint(0, 1)


def agent_restrictions(waiter: int) -> dict[str, bool]:
    """The designated roles with agent ``waiter`` the waiter, keyed as meal-bench's
    ``Overcooked(agent_restrictions=...)`` reads them."""
    chef = 1 - waiter
    return {
        f"agent_{waiter}_cannot_pick_onions": True,
        f"agent_{waiter}_cannot_pick_plates": False,
        f"agent_{chef}_cannot_pick_onions": False,
        f"agent_{chef}_cannot_pick_plates": True,
    }


class KitchenSlipperyTiles(SlipperyTiles):
    """``SlipperyTiles`` over a padded kitchen: the slippery draw covers the real kitchen.

    Args:
        env: the (wrapped) padded-kitchen env.
        slip_prob: probability that an armed agent's action becomes a random move.
        kitchen: ``(top, left, height, width)`` of the real kitchen in the padded grid,
            in cells.
    """

    def __init__(self, env: Any, slip_prob: float, kitchen: tuple[int, int, int, int]):
        super().__init__(env, slip_prob)
        self.kitchen = kitchen

    def reset(self, key: Any) -> tuple[Any, SlipperyTileState]:
        """Reset the env with the first half of ``key``; draw each real-kitchen cell
        slippery with probability :data:`SLIPPERY_FRACTION` (one Bernoulli per cell, row
        major, from the second half), keeping walkable cells only: walls and serving
        cells never slip."""
        key, env_key = jax.random.split(key)
        obs, env_state = self._env.reset(env_key)
        base = self.unwrap_env_state(env_state)
        top, left, h, w = self.kitchen
        _, slip_key = jax.random.split(key)
        drawn = jax.random.bernoulli(slip_key, SLIPPERY_FRACTION, (h * w,)).reshape(h, w)
        grid = jnp.zeros((self.height, self.width), dtype=bool)
        grid = grid.at[top : top + h, left : left + w].set(drawn)
        goals = jnp.zeros_like(base.wall_map).at[base.goal_pos[:, 1], base.goal_pos[:, 0]]
        walkable = ~base.wall_map & ~goals.set(base.goal_mask)
        state = SlipperyTileState(
            env_state=env_state,
            slippery_mask=grid & walkable,
            will_slip_next=jnp.zeros((self.num_agents,), dtype=bool),
            last_pos=base.agent_pos,
        )
        return obs, state


def base_state(env_state: Any) -> Any:
    """The meal-bench ``State`` inside the wrappers' states (``.env_state`` chains)."""
    while hasattr(env_state, "env_state"):
        env_state = env_state.env_state
    return env_state


def kitchen_view_mask(env: Any, env_state: Any, mask: Any) -> Any:
    """``(n, view_h, view_w, 1)`` uint8: 1 where agent ``i``'s view window (``env``, a
    meal-bench ``OvercookedPO``, at the agent's cell and facing) lies in the real kitchen,
    ``mask`` ``(H, W)`` the padded grid's kitchen mask."""
    env_state = base_state(env_state)
    grid = mask[:, :, None]
    views = [
        env._extract_agent_view(grid, env_state.agent_pos[i], env_state.agent_dir_idx[i])
        for i in range(env_state.agent_pos.shape[0])
    ]
    return jnp.stack(views)
