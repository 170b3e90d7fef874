"""MiniHack navigation tasks as CORA plays them: pixels only, 8 compass actions.

Each env is ``gym.make("MiniHack-<name>-v0", ...)`` with

* ``observation_keys=("pixel_crop",)``, ``obs_crop_h = obs_crop_w = 5``: an RGB crop of
  5x5 tiles of 16x16 pixels around the agent, ``uint8 (80, 80, 3)``, zero-padded by 2
  pixels on every side to ``uint8 (84, 84, 3)`` (height, width, RGB);
* ``actions = nle.nethack.CompassDirection`` (N, E, S, W, NE, SE, SW, NW): ``Discrete(8)``;
* ``reward_win=1``, ``penalty_step=-0.001`` (MiniHack's defaults for the rest);
* each env's own episode cap (``max_episode_steps`` of its MiniHack class).

One step is one agent step (NetHack has no frame skip).

Two deliberate differences from a bare ``gym.make``, both in gymnasium's semantics:

* seeding: NLE's ``reset(seed=s)`` does not seed NetHack. ``NetHackSeeding`` seeds
  NetHack's core and display RNGs (``reseed=False``) before every reset from a generator
  seeded by ``reset(seed=s)``, and NLE's ``fix_moon_phase=True`` derives NetHack's
  date-dependent effects (moon phase, Friday 13th, night) from those seeds instead of the
  system clock, so the same seed replays the same levels and dynamics on any day;
* the episode cap: NLE reports reaching ``max_episode_steps`` as ``terminated`` with
  ``info["end_status"] == ABORTED``; ``TruncateOnAbort`` reports it as ``truncated``.
"""

from __future__ import annotations

import warnings
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from cl_suites.errors import require

CROP_TILES = 5
"""``obs_crop_h = obs_crop_w``: tiles of the agent-centred crop."""
CROP_PIXELS = 80
PADDED_PIXELS = 84
_PAD = (PADDED_PIXELS - CROP_PIXELS) // 2
REWARD_WIN = 1.0
PENALTY_STEP = -0.001
NUM_ACTIONS = 8

OBSERVATION_SPACE = gym.spaces.Box(0, 255, (PADDED_PIXELS, PADDED_PIXELS, 3), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(NUM_ACTIONS)


def _minihack():
    with warnings.catch_warnings():  # minihack imports the deprecated pkg_resources
        warnings.simplefilter("ignore", UserWarning)
        require("nle", extra="minihack")
        return require("minihack", extra="minihack")


def _version(module: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module.__name__)
    except PackageNotFoundError:  # pragma: no cover - editable installs without metadata
        return getattr(module, "__version__", "unknown")


def minihack_env_id(name: str) -> str:
    """The gymnasium id of MiniHack task ``name`` (``"Room-Random-5x5"`` ->
    ``"MiniHack-Room-Random-5x5-v0"``).

    Raises ``ValueError`` naming the id and the installed minihack version when the
    installed minihack does not register it.
    """
    minihack = _minihack()
    env_id = f"MiniHack-{name}-v0"
    if env_id not in gym.registry:
        raise ValueError(
            f"MiniHack env {env_id!r} does not exist in the installed minihack "
            f"{_version(minihack)}; names look like 'Room-Random-5x5'"
        )
    return env_id


def navigation_actions() -> tuple[Any, ...]:
    """The shared 8-action navigation set: ``tuple(nle.nethack.CompassDirection)``."""
    _minihack()
    from nle.nethack import CompassDirection

    return tuple(CompassDirection)


class NetHackSeeding(gym.Wrapper):
    """Seed NetHack itself before every reset, from a generator seeded by ``reset(seed=s)``.

    Without a seed the generator starts from OS entropy. Each reset draws fresh core and
    display seeds, so successive episodes differ but a seeded run replays exactly.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._seeds: np.random.Generator | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None or self._seeds is None:
            self._seeds = np.random.default_rng(seed)
        core, disp = (int(s) for s in self._seeds.integers(0, 2**63, size=2))
        self.env.unwrapped.seed(core, disp, reseed=False)
        return self.env.reset(seed=seed, options=options)


class TruncateOnAbort(gym.Wrapper):
    """Report NLE's episode cap (``end_status == ABORTED``) as ``truncated``, not ``terminated``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._aborted = env.unwrapped.StepStatus.ABORTED

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and info.get("end_status") == self._aborted:
            terminated, truncated = False, True
        return obs, reward, terminated, truncated, info


class PaddedPixelCrop(gym.ObservationWrapper):
    """``obs["pixel_crop"]`` ``(80, 80, 3)`` zero-padded to ``(84, 84, 3)``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = OBSERVATION_SPACE
        self._buffer = np.zeros(OBSERVATION_SPACE.shape, dtype=np.uint8)

    def observation(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        out = self._buffer.copy()
        out[_PAD : _PAD + CROP_PIXELS, _PAD : _PAD + CROP_PIXELS] = observation["pixel_crop"]
        return out


def make_minihack_env(name: str, **kwargs: Any) -> gym.Env:
    """One MiniHack navigation task with CORA's settings (see the module docstring).

    Args:
        name: task name without prefix and version, e.g. ``"Room-Random-5x5"``.
        **kwargs: extra MiniHack options (override the defaults above, e.g.
            ``max_episode_steps``).

    Returns:
        An env with ``uint8 (84, 84, 3)`` observations and ``Discrete(8)`` actions.
    """
    env_id = minihack_env_id(name)
    options = {
        "observation_keys": ("pixel_crop",),
        "obs_crop_h": CROP_TILES,
        "obs_crop_w": CROP_TILES,
        "actions": navigation_actions(),
        "reward_win": REWARD_WIN,
        "penalty_step": PENALTY_STEP,
        "fix_moon_phase": True,
        **kwargs,
    }
    env = gym.make(env_id, disable_env_checker=True, **options)
    return PaddedPixelCrop(TruncateOnAbort(NetHackSeeding(env)))
