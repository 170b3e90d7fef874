"""Gymnasium adapters over procgen's batched gym3 API (``ProcgenGym3Env``).

procgen is installed from the ``procgen2`` distribution (same build, with a cp311
wheel). Its gym3 envs autoreset: when an episode ends, the observation returned by that
step is already the first of the next episode (procgen does not expose the terminal
frame). Both adapters keep that behaviour and report the step as ``terminated``.

Observations are ``uint8`` RGB of shape ``(64, 64, 3)``; actions are ``Discrete(15)``.
One step is one agent step (procgen has no frame skip, so steps = frames).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from cl_suites.core.task import check_render_mode
from cl_suites.errors import require, silence_legacy_gym_banner

OBSERVATION_SPACE = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(15)
DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")
PROCGEN_GAMES: tuple[str, ...] = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
"""procgen's 16 games (``procgen.env.ENV_NAMES``), checked without importing procgen."""
RENDER_FPS = 15
"""procgen's own interactive frame rate; one frame per agent step."""


def _procgen():
    silence_legacy_gym_banner()  # procgen imports the legacy gym package
    return require("procgen.env", extra="procgen")


def check_games(games: Any) -> tuple[str, ...]:
    """``games`` as a tuple of procgen game names, or ``ValueError`` naming the unknown ones."""
    if isinstance(games, str) or not all(isinstance(g, str) for g in games):
        raise ValueError(f"games must be a sequence of procgen game names, got {games!r}")
    unknown = [g for g in games if g not in PROCGEN_GAMES]
    if unknown:
        raise ValueError(
            f"unknown procgen game(s) {unknown}; available: {', '.join(PROCGEN_GAMES)}"
        )
    return tuple(games)


def check_level_number(name: str, value: Any) -> int:
    """``value`` as an int in ``[0, 2**31)`` (procgen's C++ asserts on anything else and
    kills the process), or ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if value >= 2**31:
        raise ValueError(f"{name} must be below 2**31, got {value!r}")
    return int(value)


def check_options(options: dict[str, Any]) -> None:
    """Refuse ``ProcgenGym3Env`` options that procgen would reject with a C++ assert (which
    kills the process): negative level counts, an unknown distribution mode."""
    mode = options.get("distribution_mode", "hard")
    if mode not in DISTRIBUTION_MODES:
        raise ValueError(f"distribution_mode {mode!r} is unknown; use one of {DISTRIBUTION_MODES}")
    for name in ("num_levels", "start_level", "num_threads"):
        check_level_number(f"procgen's {name}", options.get(name, 0))
    if options.get("start_level", 0) + options.get("num_levels", 0) >= 2**31:
        raise ValueError("procgen's start_level + num_levels must be below 2**31")


def _check_game(env_name: str, options: dict[str, Any]) -> None:
    """Raise ``ValueError`` for a game or option the installed procgen would refuse."""
    procgen = _procgen()
    if env_name not in procgen.ENV_NAMES:
        raise ValueError(
            f"procgen game {env_name!r} does not exist in the installed procgen; "
            f"available: {sorted(procgen.ENV_NAMES)}"
        )
    check_options(options)


def default_num_threads(num_envs: int) -> int:
    """procgen worker threads for a batch of ``num_envs`` games.

    Measured on a 2-core machine (starpilot, easy): one game steps fastest on the calling
    thread (0 threads: 1.9x the rate with procgen's default of 4), small batches with 2
    threads, and batches of 32+ with 4.
    """
    if num_envs == 1:
        return 0
    return 2 if num_envs < 32 else 4


def _make_gym3(env_name: str, num: int, seed: int, options: dict[str, Any]):
    check_level_number("a procgen seed", seed)  # gym3 asserts on seeds outside int32
    options = {"num_threads": default_num_threads(num), **options}
    return _procgen().ProcgenGym3Env(num=num, env_name=env_name, rand_seed=seed, **options)


def close_gym3(game: Any) -> None:
    """Close a ``ProcgenGym3Env`` and free the library handle gym3 leaves behind.

    gym3 keeps one cffi ``FFI`` per process and every env's ``dlopen`` appends a library
    object to it that is never released (about 11 KB per env create/close). Dropping it
    after ``close`` makes create/close memory-neutral.
    """
    ffi, lib = game._ffi, game._c_lib
    game.close()
    if ffi is None or lib is None:
        return
    with ffi._lock:
        for i, loaded in enumerate(ffi._libraries):
            if loaded is lib:
                del ffi._libraries[i]
                del ffi._function_caches[i]
                break


class ProcgenEnv(gym.Env):
    """One procgen game as a gymnasium env.

    ``reset(seed=s)`` rebuilds the game with ``rand_seed=s`` (procgen cannot be
    reseeded in place). A ``reset()`` right after an episode end returns the first
    observation the game already produced; a ``reset()`` mid-episode rebuilds the game
    with a seed drawn from the env's RNG.

    Args:
        env_name: procgen game (e.g. ``"climber"``).
        render_mode: ``"rgb_array"``: ``render()`` returns procgen's 512x512 RGB frame.
        **options: ``ProcgenGym3Env`` options (``distribution_mode``, ``num_levels``,
            ``start_level``, ...).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS}

    def __init__(self, env_name: str, render_mode: str | None = None, **options: Any):
        _check_game(env_name, options)
        self.env_name = env_name
        self.render_mode = check_render_mode(render_mode)
        self.options = {**options, "render_mode": render_mode} if render_mode else options
        self.observation_space = copy.deepcopy(OBSERVATION_SPACE)
        self.action_space = copy.deepcopy(ACTION_SPACE)
        self._game = None
        self._obs: np.ndarray | None = None
        self._episode_over = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None or self._game is None or not self._episode_over:
            if self._game is not None:
                close_gym3(self._game)
            game_seed = seed if seed is not None else int(self.np_random.integers(2**31))
            self._game = _make_gym3(self.env_name, 1, game_seed, self.options)
            _, obs, _ = self._game.observe()
            self._obs = obs["rgb"][0]
        self._episode_over = False
        return self._obs, {}

    def step(self, action: Any):
        self._game.act(np.asarray([action], dtype=np.int32))
        reward, obs, first = self._game.observe()
        self._obs = obs["rgb"][0]
        self._episode_over = bool(first[0])
        info = self._game.get_info()[0] if self._episode_over else {}
        info.pop("rgb", None)  # the render frame (render_mode="rgb_array"): see render()
        return self._obs, float(reward[0]), self._episode_over, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode is None or self._game is None:
            return None
        return self._game.get_info()[0]["rgb"]

    def close(self) -> None:
        if self._game is not None:
            close_gym3(self._game)
            self._game = None


class ProcgenVectorEnv(VectorEnv):
    """``num_envs`` copies of one procgen game in a single native ``ProcgenGym3Env``.

    Same-step autoreset (``AutoresetMode.SAME_STEP``). procgen does not expose terminal
    frames, so ``infos["final_obs"]`` is not provided; every episode end is a
    termination. ``reset(seed=s)`` rebuilds the batch with ``rand_seed=s``. With
    ``render_mode="rgb_array"``, ``render()`` returns one 512x512 RGB frame per game.
    """

    metadata: dict[str, Any] = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "render_modes": ["rgb_array"],
        "render_fps": RENDER_FPS,
    }

    def __init__(
        self, env_name: str, num_envs: int, render_mode: str | None = None, **options: Any
    ):
        _check_game(env_name, options)
        self.env_name = env_name
        self.render_mode = check_render_mode(render_mode)
        self.options = {**options, "render_mode": render_mode} if render_mode else options
        self.num_envs = num_envs
        self.single_observation_space = copy.deepcopy(OBSERVATION_SPACE)
        self.single_action_space = copy.deepcopy(ACTION_SPACE)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._game = None
        self._no_truncation = np.zeros(num_envs, dtype=bool)

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        if isinstance(seed, (list, tuple)):
            seed = seed[0]
        if self._game is not None:
            close_gym3(self._game)
        game_seed = int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        self._game = _make_gym3(self.env_name, self.num_envs, game_seed, self.options)
        _, obs, _ = self._game.observe()
        return obs["rgb"], {}

    def step(self, actions: np.ndarray):
        self._game.act(np.asarray(actions, dtype=np.int32))
        rewards, obs, first = self._game.observe()
        return obs["rgb"], rewards, first, self._no_truncation.copy(), {}

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode is None or self._game is None:
            return None
        return tuple(info["rgb"] for info in self._game.get_info())

    def close_extras(self, **kwargs: Any) -> None:
        if getattr(self, "_game", None) is not None:
            close_gym3(self._game)
            self._game = None
