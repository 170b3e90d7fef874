"""Goal images: what the scene looks like when each subgoal of a demonstration is done.

They are rendered once per demonstration by replaying its plan from the initial state
(the frame after the last low-level action of each subgoal) and cached on disk as
``<cache dir>/<data folder>/<demo id>/goal_images_r<render size>_<size>.npy`` (uint8,
shape ``(num_subgoals, size, size, 3)``). Cache dir: ``goal_image_cache_dir=``, else
``$CL_SUITES_CHORES_CACHE``, else ``$XDG_CACHE_HOME/cl_suites/chores`` (default
``~/.cache/cl_suites/chores``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.envs.chores.actions import ActionRunner
from cl_suites.envs.chores.data import Demonstration
from cl_suites.envs.chores.rewards import WorldState
from cl_suites.envs.chores.scene import init_scene, resize_frame

CACHE_ENV_VAR = "CL_SUITES_CHORES_CACHE"


def goal_image_cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where goal images are cached (see the module docstring)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "cl_suites" / "chores"


def cache_path(cache_dir: Path, folder: str, demo_id: str, size: int, render_size: int) -> Path:
    """Cache file of a demonstration's goal images (``render_size``: simulator frame side)."""
    return cache_dir / folder / demo_id / f"goal_images_r{render_size}_{size}.npy"


def render_goal_images(controller: Any, demo: Demonstration, size: int) -> np.ndarray:
    """Replay ``demo``'s plan on ``controller``; one ``(size, size, 3)`` image per subgoal.

    A subgoal without low-level actions keeps the previous subgoal's image.
    """
    event = init_scene(controller, demo)
    images = np.zeros((demo.num_subgoals, size, size, 3), dtype=np.uint8)
    done = [False] * demo.num_subgoals
    last = resize_frame(event.frame, size)
    runner = ActionRunner(controller, WorldState())
    lows = demo.low_actions
    for i, low in enumerate(lows):
        runner.run(low.name, low.object_id)
        ends_subgoal = i + 1 == len(lows) or lows[i + 1].high_idx != low.high_idx
        if ends_subgoal and 0 <= low.high_idx < demo.num_subgoals:
            images[low.high_idx] = resize_frame(controller.last_event.frame, size)
            done[low.high_idx] = True
    for k in range(demo.num_subgoals):
        if done[k]:
            last = images[k]
        else:
            images[k] = last
    return images


def load_or_render(
    controller_getter: Any,
    demo: Demonstration,
    folder: str,
    cache_dir: Path,
    size: int,
    render_size: int,
) -> np.ndarray:
    """The cached goal images of ``demo``, rendering (and caching) them when absent.

    ``controller_getter()`` is only called when rendering is needed.
    """
    path = cache_path(cache_dir, folder, demo.demo_id, size, render_size)
    if path.is_file():
        images = np.load(path)
        if images.shape == (demo.num_subgoals, size, size, 3) and images.dtype == np.uint8:
            return images
    images = render_goal_images(controller_getter(), demo, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npy", delete=False) as f:
        np.save(f, images)
    os.replace(f.name, path)  # atomic: concurrent envs never read a partial file
    return images
