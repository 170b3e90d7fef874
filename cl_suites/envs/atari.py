"""Atari games through ale-py with the DQN-era ("v4 NoFrameskip") preprocessing CORA used.

One env step is one **agent step** = 4 emulator frames (frame skip 4). Budgets, caps and
cadences in cl-suites count agent steps, never frames.

The stack, innermost first (gymnasium / ale-py wrappers where they exist):

1. ``ALE/<Game>-v5`` made with ``frameskip=1``, ``repeat_action_probability=0`` (no sticky
   actions), ``full_action_space=True`` (``Discrete(18)``), grayscale screen;
2. ``gymnasium.wrappers.AtariPreprocessing``: up to 30 no-op starts, frame skip 4 with a
   max-pool over the last two frames, 84x84 grayscale (``cv2.INTER_AREA``);
3. ``gymnasium.wrappers.TimeLimit``: 10,000 agent steps per game;
4. ``gymnasium.wrappers.RecordEpisodeStatistics``: ``info["episode"]`` at the end of each
   whole game (all lives), with the game's unclipped return; its length ``"l"`` counts
   agent steps including the automatic FIRE presses and post-life-loss no-ops;
5. ``EpisodicLife`` (training only): a life loss ends the training episode, the next
   ``reset()`` continues the same game;
6. ``FireReset`` for games whose minimal action set has FIRE: press FIRE after every
   (life) reset;
7. ``gymnasium.wrappers.FrameStackObservation``: the last 4 frames.

Observations are ``uint8`` arrays of shape ``(4, 84, 84)`` (stack, height, width; the
channels-first layout that stable-baselines3's ``CnnPolicy`` accepts as is); actions are
``Discrete(18)``. Rewards are not clipped (learners clip them).
"""

from __future__ import annotations

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

_NOOP, _FIRE = 0, 1  # indices in the full (18-action) ALE action set


def _ale_py():
    ale_py = require("ale_py", extra="atari")
    gym.register_envs(ale_py)
    return ale_py


def ale_env_id(game: str) -> str:
    """The ale-py id of ``game`` (``"SpaceInvaders"`` -> ``"ALE/SpaceInvaders-v5"``).

    Raises ``ValueError`` naming the game and the installed ale-py version when the
    installed ale-py does not provide it.
    """
    ale_py = _ale_py()
    env_id = f"ALE/{game}-v5"
    if env_id not in gym.registry:
        raise ValueError(
            f"Atari game {game!r} (id {env_id!r}) does not exist in the installed "
            f"ale-py {ale_py.__version__}; use a game name such as 'SpaceInvaders'"
        )
    return env_id


def has_fire(env: gym.Env) -> bool:
    """True when FIRE is in the game's minimal action set (the game needs FIRE to start)."""
    ale_py = _ale_py()
    return ale_py.Action.FIRE in env.unwrapped.ale.getMinimalActionSet()


class EpisodicLife(gym.Wrapper):
    """End the *training* episode at a life loss; the game itself goes on.

    A life loss returns ``terminated=True``; the following ``reset()`` then takes one
    no-op step instead of restarting the game, so the agent plays every life. Only a
    real game over (or the game's time limit) restarts the game. Episode statistics
    recorded below this wrapper (``RecordEpisodeStatistics``) therefore cover whole
    games. gymnasium 1.x has no such wrapper (``AtariPreprocessing(terminal_on_life_loss=
    True)`` restarts the game at every life loss).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(_NOOP)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then UP, as in the DQN-era wrappers) after every reset.

    Use it only for games that need FIRE to start (see ``has_fire``). The two steps are
    agent steps of the inner env (4 frames each); they are not counted in the sequence
    budget, like the no-op starts.
    """

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (_FIRE, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


def make_atari_env(
    game: str,
    *,
    training: bool = True,
    max_episode_steps: int = MAX_EPISODE_STEPS,
    noop_max: int = NOOP_MAX,
    repeat_action_probability: float = 0.0,
) -> gym.Env:
    """One preprocessed Atari game (see the module docstring for the wrapper stack).

    Args:
        game: ale-py game name, e.g. ``"SpaceInvaders"``.
        training: True adds ``EpisodicLife`` (a life loss ends the training episode);
            False gives the evaluation env, whose episodes are whole games.
        max_episode_steps: cap of one game in agent steps (1 agent step = 4 frames).
        noop_max: most no-op *emulator frames* at reset (their number is drawn in
            ``[1, noop_max]`` from the env's seeded RNG, as in the DQN-era wrappers).
        repeat_action_probability: sticky actions (CORA: 0).

    Returns:
        An env with observations ``uint8 (4, 84, 84)`` and ``Discrete(18)`` actions;
        ``info["episode"] = {"r", "l", "t"}`` at the end of each whole game.
    """
    env = gym.make(
        ale_env_id(game),
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=True,
        obs_type="grayscale",
        disable_env_checker=True,
    )
    fire = has_fire(env)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE
    )
    env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if training:
        env = EpisodicLife(env)
    if fire:
        env = FireReset(env)
    return gym.wrappers.FrameStackObservation(env, STACK_SIZE)
