"""Which movement rule the kitchens use (``dynamics``).

meal-bench 0.3.1's Overcooked blocks an agent that steps onto the cell of another agent
that is itself moving (its "circular movement" rule), so one cook cannot follow the other
through a corridor. MEAL's paper-time environment (``TTomilin/MEAL@7d81858
jax_marl/environments/overcooked/overcooked.py:504-537``) blocks only two agents stepping
onto the same cell and two agents swapping cells; following is allowed. ``"paper"``
(default) is that rule on meal-bench's engine; ``"meal-bench"`` keeps meal-bench's.
"""

from __future__ import annotations

import functools
from typing import Any

DYNAMICS: tuple[str, ...] = ("paper", "meal-bench")


def _paper_resolve_collisions(self: Any, current: Any, proposed: Any) -> Any:
    """New ``(n, 2)`` positions: an agent keeps ``current`` when another agent proposes
    the same cell, or when the two would swap cells; every other proposal stands."""
    import jax.numpy as jnp

    n = current.shape[0]
    others = ~jnp.eye(n, dtype=bool)
    same_cell = (proposed[:, None, :] == proposed[None, :, :]).all(-1) & others
    swap = (
        (proposed[:, None, :] == current[None, :, :]).all(-1)
        & (proposed[None, :, :] == current[:, None, :]).all(-1)
        & others
    )
    blocked = same_cell.any(-1) | swap.any(-1)
    return jnp.where(blocked[:, None], current, proposed).astype(jnp.uint32)


@functools.cache
def overcooked_class(dynamics: str, partial_observability: bool) -> type:
    """meal-bench's ``Overcooked`` / ``OvercookedPO``, with the paper-time movement rule
    when ``dynamics == "paper"``."""
    from meal.env.overcooked import Overcooked, OvercookedPO

    base = OvercookedPO if partial_observability else Overcooked
    if dynamics == "meal-bench":
        return base
    return type(
        f"Paper{base.__name__}", (base,), {"_resolve_collisions": _paper_resolve_collisions}
    )
