"""Goal images: what the scene looks like when each subgoal of a demonstration is done.

CORA's env shows, for the current subgoal, the demonstration's last recorded frame of that
subgoal (``raw_images/<image>.png`` of the last ``images`` entry with its ``high_idx``).
When the data holds those frames they are used (resized to ``size`` with
``cv2.INTER_LINEAR``). Every demonstration is also replayed once per simulator build and
render settings, at env construction: the replay checks that the plan still runs on the
installed ai2thor (``DemonstrationReplayError`` naming the trajectory and the failing
call otherwise) and renders the frame after each subgoal's last low-level action, which
is the goal image when the data has none. The rendered images are cached as

    <cache dir>/<build id>/<quality>-r<render size>-s<size>/<data folder>/<demo id>/goal_images.npy

(uint8, ``(num_subgoals, size, size, 3)``); a cached file also marks the demonstration
as replayed on that build. Cache dir: ``goal_image_cache_dir=``, else
``$CL_SUITES_CHORES_CACHE``, else ``$XDG_CACHE_HOME/cl_suites/chores`` (default
``~/.cache/cl_suites/chores``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.envs.chores.actions import ActionRunner
from cl_suites.envs.chores.data import Demonstration
from cl_suites.envs.chores.errors import DemonstrationReplayError
from cl_suites.envs.chores.rewards import WorldState
from cl_suites.envs.chores.scene import describe, init_scene, resize_frame

CACHE_ENV_VAR = "CL_SUITES_CHORES_CACHE"


def goal_image_cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where goal images are cached (see the module docstring)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "cl_suites" / "chores"


def cache_path(
    cache_dir: Path,
    build_id: str,
    quality: str,
    render_size: int,
    size: int,
    folder: str,
    demo_id: str,
) -> Path:
    """Cache file of a demonstration's rendered goal images for one build and settings."""
    settings = re.sub(r"[^A-Za-z0-9]+", "_", quality) + f"-r{render_size}-s{size}"
    safe_build = re.sub(r"[^A-Za-z0-9._-]+", "_", build_id)
    return cache_dir / safe_build / settings / folder / demo_id / "goal_images.npy"


def render_goal_images(controller: Any, demo: Demonstration, size: int) -> np.ndarray:
    """Replay ``demo``'s plan on ``controller``; one ``(size, size, 3)`` image per subgoal
    (the frame after its last low-level action; a subgoal without any keeps the previous
    subgoal's image). Every call must succeed (``DemonstrationReplayError`` otherwise)."""
    event = init_scene(controller, demo)
    images = np.zeros((demo.num_subgoals, size, size, 3), dtype=np.uint8)
    done = [False] * demo.num_subgoals
    last = resize_frame(event.frame, size)
    runner = ActionRunner(controller, WorldState())
    lows = demo.low_actions
    for i, low in enumerate(lows):
        outcome, failed = runner.run(low.name, low.object_id)
        if failed or not outcome.success:
            message = outcome.metadata.get("errorMessage") or "not executable"
            raise DemonstrationReplayError(
                f"{describe(demo)}: plan step {i} {low.name}(objectId={low.object_id!r}) "
                f"failed: {message}"
            )
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


def load_stored_goal_images(demo: Demonstration, size: int) -> np.ndarray | None:
    """The demonstration's recorded goal frames (``Demonstration.stored_goal_images``),
    resized to ``(num_subgoals, size, size, 3)``, or ``None`` when the data lacks them."""
    paths = demo.stored_goal_images()
    if paths is None:
        return None
    from PIL import Image

    frames = []
    for path in paths:
        with Image.open(path) as image:
            frames.append(resize_frame(np.asarray(image.convert("RGB")), size))
    return np.stack(frames)


def replayed_goal_images(
    controller_getter: Callable[[], Any], demo: Demonstration, path: Path, size: int
) -> np.ndarray:
    """The cached replay of ``demo`` at ``path``, replaying (and caching) it when absent.

    ``controller_getter()`` is only called when a replay is needed.
    """
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
