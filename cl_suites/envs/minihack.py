"""MiniHack navigation tasks as CORA ran them: pixels only, one 11-action space, masked per task.

Each env is ``gym.make("MiniHack-<name>-v0", ...)`` with CORA's keywords
(``make_minihack_task.py``): ``observation_keys=("pixel_crop",)``, ``reward_win=1``,
``reward_lose=0``, ``penalty_step=-0.001``, ``penalty_time=0``, ``penalty_mode="constant"``,
``character="mon-hum-neu-mal"`` and each env's own episode cap. One step is one agent
step (NetHack has no frame skip).

**Actions.** CORA gives every task MiniHack's own action set and one policy with 11
outputs, of which each task uses the first ``k`` (``task_action_names``):

* Room, River, HideNSeek, CorridorBattle: the 8 compass directions (N, E, S, W, NE, SE,
  SW, NW);
* Corridor: the 8 directions + OPEN, KICK, SEARCH (11);
* KeyRoom: the 8 directions + PICKUP, APPLY (10), with autopickup off.

Every env here has the shared space ``Discrete(11)`` and reports ``info["action_mask"]``
(bool ``(11,)``). An action outside the task's set is never sent to NetHack: the step is
a wasted turn (the observation does not change, the reward is ``penalty_step``, as for a
move into a wall, and it counts towards the episode cap), ``info["masked_action"]`` is
True. A random agent samples valid actions with
``env.action_space.sample(mask=info["action_mask"].astype(np.int8))``.

**Characters.** CORA passes the monk to every task; MiniHack's KeyRoom reads the misspelt
keyword ``charachter`` and so keeps its rogue, and CorridorBattle forces the knight.
That is what CORA's runs played (``effective_character``), and what these envs play.

**Observation** (``crop=``), ``uint8 (84, 84, 3)`` (height, width, RGB):

* ``"code"`` (default, CORA's code): MiniHack's default 9x9-tile crop (144x144 pixels)
  zero-padded by 2 pixels per side and resized to 84x84 with ``cv2.INTER_AREA``
  (CORA's ``ImageTask``);
* ``"paper"`` (CORA appendix C.3): a 5x5-tile crop (80x80) zero-padded to 84x84.

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

CROPS: dict[str, int] = {"code": 9, "paper": 5}
"""``crop`` option -> tiles of the agent-centred crop (16 pixels per tile)."""
TILE_PIXELS = 16
PADDING = 2
"""Zero pixels added on every side of the crop (CORA's ``MiniHackObsWrapper``)."""
SCREEN_SIZE = 84
REWARD_WIN = 1.0
REWARD_LOSE = 0.0
PENALTY_STEP = -0.001
PENALTY_TIME = 0.0
CORA_CHARACTER = "mon-hum-neu-mal"
"""The character CORA passes to every task (see ``effective_character``)."""

MOVE_ACTIONS: tuple[str, ...] = ("N", "E", "S", "W", "NE", "SE", "SW", "NW")
"""``nle.nethack.CompassDirection`` names, in MiniHack's order."""
ACTION_SETS: dict[str, tuple[str, ...]] = {
    "navigation": MOVE_ACTIONS,
    "corridor": (*MOVE_ACTIONS, "OPEN", "KICK", "SEARCH"),
    "keyroom": (*MOVE_ACTIONS, "PICKUP", "APPLY"),
}
"""Action set of each task family (names of ``CompassDirection`` / ``Command`` members)."""
NUM_ACTIONS = max(len(names) for names in ACTION_SETS.values())
"""Size of the shared action space (11): the policy's output size in CORA."""

OBSERVATION_SPACE = gym.spaces.Box(0, 255, (SCREEN_SIZE, SCREEN_SIZE, 3), np.uint8)
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


def task_family(name: str) -> str:
    """``"corridor"`` (Corridor-R*), ``"keyroom"`` (KeyRoom*) or ``"navigation"`` (the rest,
    CorridorBattle included): the key of the task's action set in ``ACTION_SETS``."""
    if name.startswith("Corridor-"):
        return "corridor"
    if name.startswith("KeyRoom"):
        return "keyroom"
    return "navigation"


def task_action_names(name: str) -> tuple[str, ...]:
    """The NetHack actions of task ``name``, in the order of the shared space's indices."""
    return ACTION_SETS[task_family(name)]


def valid_actions(name: str) -> tuple[int, ...]:
    """The indices of the shared ``Discrete(11)`` space that task ``name`` accepts."""
    return tuple(range(len(task_action_names(name))))


def effective_character(name: str) -> str:
    """The character CORA's runs played in task ``name``: the monk CORA asks for, except
    KeyRoom (MiniHack reads the misspelt ``charachter`` keyword there, so its default
    rogue stays) and CorridorBattle (which always plays a knight)."""
    if name.startswith("KeyRoom"):
        return "rog-hum-cha-mal"
    if name.startswith("CorridorBattle"):
        return "kni-hum-law-fem"
    return CORA_CHARACTER


def nethack_actions(names: tuple[str, ...]) -> tuple[Any, ...]:
    """``CompassDirection`` / ``Command`` members for action ``names``."""
    _minihack()
    from nle.nethack import Command, CompassDirection

    return tuple(
        CompassDirection[n] if n in CompassDirection.__members__ else Command[n] for n in names
    )


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


class TileRenderer:
    """MiniHack's ``GlyphMapper.to_rgb`` (glyphs -> 16x16 RGB tiles, ``uint8 (H * 16, W * 16,
    3)``) as one array gather: the same tiles in the same places, so the same images bit for
    bit (``tests/envs/test_minihack15.py``). MiniHack's own mapper concatenates the tiles one
    by one in Python, which took 10% of a MiniHack training run's CPU time (the crop is
    rendered after every step); :func:`make_minihack_env` puts this one in its place."""

    _shared: TileRenderer | None = None

    def __init__(self) -> None:
        from minihack.tiles import glyph2tile
        from minihack.tiles.glyph_mapper import GlyphMapper

        tiles = GlyphMapper().tiles  # {tile id: uint8 (16, 16, 3)}
        self.glyph_tiles = np.stack([tiles[int(t)] for t in glyph2tile])
        """``uint8 (MAX_GLYPH, 16, 16, 3)``: each glyph's tile."""

    @classmethod
    def shared(cls) -> TileRenderer:
        """One renderer per process (its table is 1.5 MB)."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def to_rgb(self, glyphs: np.ndarray) -> np.ndarray:
        """``glyphs`` ``(H, W)`` -> ``uint8 (H * 16, W * 16, 3)``."""
        height, width = glyphs.shape
        tiles = self.glyph_tiles[glyphs]  # (H, W, 16, 16, 3)
        return tiles.transpose(0, 2, 1, 3, 4).reshape(height * TILE_PIXELS, width * TILE_PIXELS, 3)


class PaddedPixelCrop(gym.ObservationWrapper):
    """``obs["pixel_crop"]`` zero-padded by 2 pixels per side, then resized to 84x84 with
    ``cv2.INTER_AREA`` when it is not 84x84 already: ``uint8 (84, 84, 3)``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = OBSERVATION_SPACE
        crop = env.observation_space["pixel_crop"].shape[0] + 2 * PADDING
        self._resize = crop != SCREEN_SIZE
        self._padded = np.zeros((crop, crop, 3), dtype=np.uint8)
        if self._resize:
            self._cv2 = require("cv2", extra="minihack")

    def observation(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        padded = self._padded.copy()
        padded[PADDING:-PADDING, PADDING:-PADDING] = observation["pixel_crop"]
        if not self._resize:
            return padded
        size = (SCREEN_SIZE, SCREEN_SIZE)
        return self._cv2.resize(padded, size, interpolation=self._cv2.INTER_AREA)


def _episode_cap(env: gym.Env) -> int:
    """The episode cap in agent steps: NLE's ``max_episode_steps``, or a tighter
    ``TimeLimit`` (``gym.make(..., max_episode_steps=n)`` adds one)."""
    cap = int(env.unwrapped._max_episode_steps)
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            cap = min(cap, int(env._max_episode_steps))
        env = env.env
    return cap


class SharedActionSpace(gym.Wrapper):
    """The shared ``Discrete(num_actions)`` over a task that accepts its first ``k`` actions.

    An action ``>= k`` is not sent to NetHack: the step returns the last observation,
    ``masked_reward`` (the task's ``penalty_step``), ``terminated=False``, and
    ``info["masked_action"] = True``. Every step, masked or not, counts towards the
    episode cap (``max_episode_steps``: the MiniHack env's own, or the ``TimeLimit`` that
    ``gym.make(..., max_episode_steps=n)`` adds), which this wrapper enforces as
    ``truncated``. Every ``info`` holds ``action_mask`` (bool ``(num_actions,)``).
    """

    def __init__(self, env: gym.Env, num_actions: int, masked_reward: float):
        super().__init__(env)
        self.valid_count = int(env.action_space.n)
        if self.valid_count > num_actions:
            raise ValueError(
                f"{env.unwrapped} has {self.valid_count} actions, more than the shared "
                f"{num_actions}"
            )
        self.action_space = gym.spaces.Discrete(num_actions)
        self.action_mask = np.arange(num_actions) < self.valid_count
        self.masked_reward = float(masked_reward)
        self.max_episode_steps = _episode_cap(env)
        self._last_obs: Any = None
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._last_obs, self._steps = obs, 0
        return obs, {**info, "action_mask": self.action_mask}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in the action space {self.action_space}")
        self._steps += 1
        capped = self._steps >= self.max_episode_steps
        if int(action) < self.valid_count:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._last_obs = obs
            truncated = bool(truncated or (capped and not terminated))
            return obs, reward, terminated, truncated, {**info, "action_mask": self.action_mask}
        info = {"action_mask": self.action_mask, "masked_action": True}
        return self._last_obs, self.masked_reward, False, capped, info


class LevelRender(gym.Wrapper):
    """``render_mode="rgb_array"``: ``render()`` returns the whole level as RGB tiles,
    ``uint8 (21 * 16, 79 * 16, 3)`` (MiniHack's ``pixel`` view of the current glyphs).
    NLE's own render modes print to stdout, so the mode is not passed to NLE."""

    def __init__(self, env: gym.Env, render_mode: str | None):
        super().__init__(env)
        self._render_mode = render_mode

    @property
    def render_mode(self) -> str | None:
        return self._render_mode

    def render(self) -> np.ndarray | None:
        if self._render_mode is None:
            return None
        core = self.env.unwrapped
        glyphs = core.last_observation[core._observation_keys.index("glyphs")]
        return core._glyph_mapper.to_rgb(glyphs)


RENDER_MODES: tuple[str, ...] = ("rgb_array",)


def make_minihack_env(
    name: str,
    *,
    crop: str = "code",
    render_mode: str | None = None,
    **kwargs: Any,
) -> gym.Env:
    """One MiniHack navigation task with CORA's settings (see the module docstring).

    Args:
        name: task name without prefix and version, e.g. ``"Room-Random-5x5"``.
        crop: ``"code"`` (CORA's code: 9x9 tiles, padded, resized to 84) or ``"paper"``
            (5x5 tiles, 80x80 padded to 84).
        render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns the whole level).
        **kwargs: extra MiniHack options (override the defaults above, e.g.
            ``max_episode_steps``). ``character`` has no effect on KeyRoom and
            CorridorBattle (see ``effective_character``).

    Returns:
        An env with ``uint8 (84, 84, 3)`` observations and the shared ``Discrete(11)``
        action space (``info["action_mask"]`` says which actions this task accepts).
    """
    if crop not in CROPS:
        raise ValueError(f"crop {crop!r} is unknown; use one of {tuple(CROPS)}")
    if render_mode not in (None, *RENDER_MODES):
        raise ValueError(f"render_mode {render_mode!r} is not supported; use one of {RENDER_MODES}")
    env_id = minihack_env_id(name)
    options: dict[str, Any] = {
        "observation_keys": ("pixel_crop",),
        "obs_crop_h": CROPS[crop],
        "obs_crop_w": CROPS[crop],
        "actions": nethack_actions(task_action_names(name)),
        "reward_win": REWARD_WIN,
        "reward_lose": REWARD_LOSE,
        "penalty_step": PENALTY_STEP,
        "penalty_time": PENALTY_TIME,
        "penalty_mode": "constant",
        "character": CORA_CHARACTER,
        "savedir": None,
        "fix_moon_phase": True,
        **({"autopickup": False} if task_family(name) == "keyroom" else {}),
        **kwargs,
    }
    env = gym.make(env_id, disable_env_checker=True, **options)
    env.unwrapped._glyph_mapper = TileRenderer.shared()  # the crop and the level render
    env = PaddedPixelCrop(TruncateOnAbort(NetHackSeeding(env)))
    env = SharedActionSpace(env, NUM_ACTIONS, masked_reward=options["penalty_step"])
    return LevelRender(env, render_mode)
