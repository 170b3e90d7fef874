"""Atari games through ale-py with the DQN-era ("v4 NoFrameskip") stack CORA trained and
evaluated in (``continual_rl@f2754bb`` ``make_atari_task.py``, ``utils/env_wrappers.py``).

One env step is one **agent step** = 4 emulator frames (frame skip 4). Budgets, caps and
cadences in cl-suites count agent steps, never frames.

The stack, innermost first (gymnasium's wrappers wherever their semantics match CORA's):

1. ``ALE/<Game>-v5`` made with ``frameskip=1``, ``repeat_action_probability=0`` (no sticky
   actions), ``full_action_space=True`` (``Discrete(18)``), RAM observations (the cheapest:
   the screens are read from the emulator below);
2. ``MaxPoolFrameSkip``: up to 30 no-op frames at reset, frame skip 4 with a max-pool of
   the last two frames' RGB screens; then ``GrayscaleResize``: OpenCV's RGB-to-gray, 84x84
   with ``cv2.INTER_AREA``. The order is CORA's (``MaxAndSkipEnv`` pools RGB screens,
   ``WarpFrame`` then converts): pooling gray screens, as gymnasium's grayscale
   ``AtariPreprocessing`` does, changes up to 0.2% of the pixels of a frame by up to 42
   gray levels (MsPacman; ``benchmarks/parity/parity_cora.py``);
3. ``gymnasium.wrappers.TimeLimit``: 10,000 agent steps per game;
4. ``gymnasium.wrappers.RecordEpisodeStatistics``: ``info["episode"]`` at the end of each
   whole game (all lives), with the game's unclipped return; its length ``"l"`` counts
   agent steps including the automatic NOOP/FIRE/UP presses after each life loss;
5. ``EpisodicLife`` (the semantics of stable-baselines3's ``EpisodicLifeEnv``, plus: a
   seeded reset always starts a new game): a life loss ends the *training* episode; the
   next ``reset()`` takes one NOOP step and the same game goes on;
6. ``FireReset`` (the semantics of stable-baselines3's ``FireResetEnv``) when FIRE is in
   the game's action set, which with the full action space is every game (CORA's check):
   FIRE then UP after every reset, so after every lost life the agent sees NOOP, FIRE, UP
   pressed for it;
7. ``gymnasium.wrappers.FrameStackObservation``: the last 4 frames;
8. evaluation only, ``WholeGames``: CORA evaluates in this same stack and counts whole
   games, so a lost life is not an episode end: the stack below is reset (NOOP, FIRE,
   UP, a fresh frame stack) and the game goes on. An agent that never fires still loses
   its lives and ends the game (BeamRider waits for FIRE after a lost life).

Steps 5 and 6 are written here rather than imported from
``stable_baselines3.common.atari_wrappers``: that module imports torch, which would make
the ``atari`` extra (an env, no learner) depend on torch and cost every async worker
process about 220 MB and 2.6x the start-up time (measured: 10.9 s vs 4.1 s to build and
reset ``make_vec("Atari6", 2, "async")``).

Observations are ``uint8`` arrays of shape ``(4, 84, 84)`` (stack, height, width; the
channels-first layout that stable-baselines3's ``CnnPolicy`` accepts as is); actions are
``Discrete(18)``. Rewards are not clipped (learners clip them).
"""

from __future__ import annotations

import re
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from cl_suites.errors import require

FRAME_SKIP = 4
"""Emulator frames per agent step."""
SCREEN_SIZE = 84
STACK_SIZE = 4
NOOP_MAX = 30
MAX_EPISODE_STEPS = 10_000
"""Cap of one game in agent steps (= 40,000 emulator frames)."""
NUM_ACTIONS = 18

OBSERVATION_SPACE = gym.spaces.Box(0, 255, (STACK_SIZE, SCREEN_SIZE, SCREEN_SIZE), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(NUM_ACTIONS)


def _ale_py():
    ale_py = require("ale_py", extra="atari")
    gym.register_envs(ale_py)
    return ale_py


def available_games() -> tuple[str, ...]:
    """The game names the installed ale-py provides (``ALE/<name>-v5`` ids), sorted."""
    _ale_py()
    return tuple(sorted(m.group(1) for k in gym.registry if (m := _ALE_ID.fullmatch(k))))


_ALE_ID = re.compile(r"ALE/(\w+)-v5")


def ale_env_id(game: str) -> str:
    """The ale-py id of ``game`` (``"SpaceInvaders"`` -> ``"ALE/SpaceInvaders-v5"``).

    Raises ``ValueError`` naming the game, the installed ale-py version and the games it
    provides when ``game`` is not one of them.
    """
    ale_py = _ale_py()
    env_id = f"ALE/{game}-v5"
    if env_id not in gym.registry:
        raise ValueError(
            f"Atari game {game!r} (id {env_id!r}) does not exist in the installed "
            f"ale-py {ale_py.__version__}; use one of: {', '.join(available_games())}"
        )
    return env_id


def has_fire(env: gym.Env) -> bool:
    """True when FIRE is in the env's action set (CORA's fire-reset check); with the full
    action space that is every game."""
    return "FIRE" in env.unwrapped.get_action_meanings()


class MaxPoolFrameSkip(gym.Wrapper):
    """Up to ``noop_max`` no-op frames at reset, then each step repeats the action for
    ``frame_skip`` frames, sums the rewards and returns the max of the last two frames'
    RGB screens: CORA's ``NoopResetEnv`` + ``MaxAndSkipEnv`` (the semantics of gymnasium's
    ``AtariPreprocessing`` with ``grayscale_obs=False``, without resizing), reading the
    screens from the ALE so that the game below needs no per-frame image observation.

    The number of no-op frames is drawn in ``[1, noop_max]`` from the game's seeded RNG. A
    step that ends the episode within the skip returns the pool of the screens read so far
    (as CORA's and gymnasium's wrappers; the learner never sees that observation).
    Observations: ``uint8 (210, 160, 3)``.
    """

    def __init__(self, env: gym.Env, noop_max: int = NOOP_MAX, frame_skip: int = FRAME_SKIP):
        super().__init__(env)
        if getattr(env.unwrapped, "_frameskip", None) != 1:
            raise ValueError("MaxPoolFrameSkip needs the game made with frameskip=1")
        if noop_max > 0 and env.unwrapped.get_action_meanings()[0] != "NOOP":
            raise ValueError("no-op starts need action 0 to be NOOP")
        self.noop_max, self.frame_skip = int(noop_max), int(frame_skip)
        height, width = env.unwrapped.ale.getScreenDims()
        self._screens = np.zeros((2, height, width, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        _, info = self.env.reset(seed=seed, options=options)
        game = self.env.unwrapped
        noops = game.np_random.integers(1, self.noop_max + 1) if self.noop_max > 0 else 0
        for _ in range(noops):
            _, _, terminated, truncated, step_info = self.env.step(0)
            info.update(step_info)
            if terminated or truncated:
                _, info = self.env.reset(seed=seed, options=options)
        game.ale.getScreenRGB(self._screens[0])
        self._screens[1].fill(0)
        return self._screens[0].copy(), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        total, terminated, truncated, info = 0.0, False, False, {}
        ale = self.env.unwrapped.ale
        for t in range(self.frame_skip):
            _, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
            if t == self.frame_skip - 2:
                ale.getScreenRGB(self._screens[1])
            elif t == self.frame_skip - 1:
                ale.getScreenRGB(self._screens[0])
        return np.maximum(self._screens[0], self._screens[1]), total, terminated, truncated, info


class GrayscaleResize(gym.ObservationWrapper):
    """RGB frames to ``uint8 (84, 84)`` gray: ``cv2.cvtColor(..., COLOR_RGB2GRAY)`` (the
    ALE's own grayscale screen is the same), then ``cv2.resize`` with ``INTER_AREA``."""

    def __init__(self, env: gym.Env, size: int = SCREEN_SIZE):
        super().__init__(env)
        require("cv2", extra="atari")  # fails here when missing; not kept (envs are pickled)
        self.size = int(size)
        self.observation_space = gym.spaces.Box(0, 255, (self.size, self.size), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        import cv2

        gray = cv2.cvtColor(observation, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (self.size, self.size), interpolation=cv2.INTER_AREA)


class EpisodicLife(gym.Wrapper):
    """A life loss ends the training episode; the game goes on at the next ``reset()``.

    ``reset()`` after a life loss takes one NOOP step instead of starting a new game (a
    new game starts only after a real game over, or on a seeded reset, which must replay
    exactly). ``was_real_done`` tells whether the last episode end was a game over.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.was_real_done = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:  # a life lost, the game not over (bonus lives raise it)
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.was_real_done or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the NOOP ended the game
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE then UP after every reset (games that wait for FIRE to start a round)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if meanings[1:3] != ["FIRE", "UP"]:
            raise ValueError(f"FireReset needs actions 1, 2 = FIRE, UP; got {meanings[:3]}")

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def _find(env: gym.Env, kind: type) -> gym.Env | None:
    while True:
        if isinstance(env, kind):
            return env
        if not isinstance(env, gym.Wrapper):
            return None
        env = env.env


class WholeGames(gym.Wrapper):
    """Evaluation in the training stack: an episode is a whole game.

    A life-loss "termination" from the episodic-life wrapper below is hidden: the stack is
    reset at once (the episodic-life NOOP, FIRE and UP, a fresh frame stack: what a CORA
    actor's env does after every lost life) and the step returns that observation with
    ``terminated=False``. Only a real game over or the step cap ends the episode. If the
    game ends during those automatic presses (its next game has then started), the step
    reports ``terminated=True``.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._life = _find(env, EpisodicLife)
        self._stats = _find(env, gym.wrappers.RecordEpisodeStatistics)
        if self._life is None or self._stats is None:
            raise ValueError("WholeGames needs EpisodicLife and RecordEpisodeStatistics below")

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and not truncated and not self._life.was_real_done:
            games = self._stats.episode_count
            obs, _ = self.env.reset()
            terminated = self._stats.episode_count > games
        return obs, reward, terminated, truncated, info


def make_atari_env(
    game: str,
    *,
    training: bool = True,
    max_episode_steps: int = MAX_EPISODE_STEPS,
    noop_max: int = NOOP_MAX,
    repeat_action_probability: float = 0.0,
    render_mode: str | None = None,
) -> gym.Env:
    """One preprocessed Atari game (see the module docstring for the wrapper stack).

    Args:
        game: ale-py game name, e.g. ``"SpaceInvaders"``.
        training: True gives the training env (a life loss ends the training episode);
            False the evaluation env, the same stack whose episodes are whole games.
        max_episode_steps: cap of one game in agent steps (1 agent step = 4 frames).
        noop_max: most no-op *emulator frames* at reset (their number is drawn in
            ``[1, noop_max]`` from the env's seeded RNG, as in the DQN-era wrappers).
        repeat_action_probability: sticky actions (CORA: 0).
        render_mode: ``None`` or ``"rgb_array"`` (ALE's RGB screen, ``(210, 160, 3)``).

    Returns:
        An env with observations ``uint8 (4, 84, 84)`` and ``Discrete(18)`` actions;
        ``info["episode"] = {"r", "l", "t"}`` at the end of each whole game.
    """
    env = gym.make(
        ale_env_id(game),
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=True,
        obs_type="ram",  # the screens are read by MaxPoolFrameSkip
        render_mode=render_mode,
        disable_env_checker=True,
    )
    fire = has_fire(env)
    env = GrayscaleResize(MaxPoolFrameSkip(env, noop_max=noop_max, frame_skip=FRAME_SKIP))
    env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = EpisodicLife(env)
    if fire:
        env = FireReset(env)
    env = gym.wrappers.FrameStackObservation(env, STACK_SIZE)
    return env if training else WholeGames(env)
