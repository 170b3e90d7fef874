"""Pictures of MEAL kitchens, drawn with meal-bench's own Overcooked sprites.

meal-bench's visualiser (``meal.visualization``: ``to_drawable_state`` and the pygame
``StateVisualizer``) turns an Overcooked state into an RGB frame: counters, onion and
dish piles, pots with their cooking state, the serving window, chefs with hats in their
agent colour and what they hold. The kitchens here are the engine's, padded (with
counters) to the largest kitchen of the sequence, so every frame of a sequence has the
same size, as videos need. pygame draws off-screen (SDL's dummy video driver).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from cl_suites.errors import require

TILE_PIXELS = 32
"""Side of one kitchen cell in the frame, in pixels."""
RENDER_FPS = 10
"""Frames per second of MEAL videos (meal-bench's visualiser default); one frame per env step."""


def load_pygame() -> Any:
    """pygame, headless (SDL's dummy drivers), imported without its deprecation noise."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    with warnings.catch_warnings():  # pygame imports the deprecated pkg_resources
        warnings.simplefilter("ignore", UserWarning)
        return require("pygame", extra="meal")


class KitchenRenderer:
    """Draws Overcooked states as ``uint8 (H * TILE_PIXELS, W * TILE_PIXELS, 3)`` frames.

    Args:
        num_agents: agents in the kitchen.
        tile_pixels: side of one cell in pixels.
    """

    def __init__(self, num_agents: int, tile_pixels: int = TILE_PIXELS):
        self.pygame = load_pygame()
        from meal.visualization.rendering.state_visualizer import StateVisualizer

        self.num_agents = num_agents
        self.visualizer = StateVisualizer(tile_size=tile_pixels)

    def frame(self, env_state: Any) -> np.ndarray:
        """The frame of one (unbatched) meal-bench state, or of a wrapper state holding one
        in ``.env_state`` (sticky actions, slippery tiles)."""
        from meal.visualization.adapters import to_drawable_state
        from meal.visualization.bridge_stateviz import render_drawable_with_stateviz

        drawable = to_drawable_state(env_state, num_agents=self.num_agents)
        surface = render_drawable_with_stateviz(drawable, self.visualizer)
        pixels = self.pygame.surfarray.pixels3d(surface)  # (W, H, 3), a view of the surface
        return np.ascontiguousarray(pixels.transpose(1, 0, 2))

    def frames(self, batch_env_state: Any, indices: Any = None) -> list[np.ndarray]:
        """Frames of envs ``indices`` (default: all) of a batched (vmapped) state."""
        import jax

        host = jax.device_get(batch_env_state)
        count = len(jax.tree.leaves(host)[0])
        chosen = range(count) if indices is None else indices
        return [self.frame(jax.tree.map(lambda leaf, i=i: leaf[i], host)) for i in chosen]
