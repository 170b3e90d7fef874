"""Atari6 (CORA section 3.1, appendix C.8): six Atari games through ale-py.

SpaceInvaders, Krull, BeamRider, Hero, StarGunner, MsPacman, each trained for 50M agent
steps per cycle, 5 cycles (the paper ran 2), evaluated every 250k agent steps on 10
episodes. No test split.

Units: every budget and cadence counts **agent steps**, not emulator frames; one agent
step is 4 emulator frames (frame skip 4), so the 50M-step default is 200M frames per task
and cycle. Set ``steps_per_task=12_500_000`` for "50M frames".

Observations ``uint8 (4, 84, 84)`` (stack of 4 grayscale frames, channels first),
actions ``Discrete(18)`` (full action space) for every game; see ``cl_suites.envs.atari``
for the preprocessing. Training episodes end at a life loss; the reported
``info["task_episode"]`` returns are whole games in unclipped game points. Evaluation plays
whole games in the same stack, as CORA does: after every lost life NOOP, FIRE and UP are
pressed (every game is fire-reset: its full action set has FIRE).
"""

from __future__ import annotations

import importlib.util
from functools import partial

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.envs.atari import (
    ACTION_SPACE,
    MAX_EPISODE_STEPS,
    NOOP_MAX,
    OBSERVATION_SPACE,
    ale_env_id,
    make_atari_env,
)

PREPROCESSED = (
    "Atari6 already preprocesses as CORA did (up to 30 no-op frames at reset, frame skip 4 "
    "with a max-pool, 84x84 grayscale, a 4-frame stack, a lost life ends the training "
    "episode, FIRE pressed after every reset; see cl_suites.envs.atari), so gymnasium's "
    "AtariPreprocessing and the Atari wrappers of SB3 / CleanRL would preprocess twice. Use "
    "its uint8 (4, 84, 84) observations as they are (clip rewards in the learner); to "
    "change the stack, pass the suite's options (noop_max, max_episode_steps, "
    "repeat_action_probability)"
)
"""What a sequence env of Atari6 says when asked for ``ale`` or ``get_action_meanings``."""

GAMES: tuple[str, ...] = ("SpaceInvaders", "Krull", "BeamRider", "Hero", "StarGunner", "MsPacman")


def build(
    *,
    steps_per_task: int = 50_000_000,
    cycles: int = 5,
    eval_every: int = 250_000,
    eval_episodes: int = 10,
    games: tuple[str, ...] = GAMES,
    max_episode_steps: int = MAX_EPISODE_STEPS,
    noop_max: int = NOOP_MAX,
    repeat_action_probability: float = 0.0,
) -> TaskSequence:
    """The Atari6 sequence with CORA's defaults (every count in agent steps; 1 agent step
    = 4 emulator frames).

    Args:
        steps_per_task: training budget of each game per cycle, in agent steps.
        cycles: passes over the games.
        eval_every: evaluation cadence in agent steps.
        eval_episodes: whole games per task at each evaluation.
        games: ale-py game names in training order (checked against the installed ale-py
            when it is installed; without it, building the env raises ``ImportError``
            naming the ``atari`` extra).
        max_episode_steps: cap of one game in agent steps.
        noop_max: most no-op emulator frames at reset.
        repeat_action_probability: sticky actions (CORA: 0, deterministic games).
    """
    if importlib.util.find_spec("ale_py") is not None:  # schedules list without ale-py
        for game in games:
            ale_env_id(game)  # raises early, naming the game and the installed ale-py
    options = {
        "max_episode_steps": max_episode_steps,
        "noop_max": noop_max,
        "repeat_action_probability": repeat_action_probability,
    }
    tasks = tuple(
        TaskSpec(
            name=game,
            budget=steps_per_task,
            make_train=partial(make_atari_env, game, training=True, **options),
            make_train_eval=partial(make_atari_env, game, training=False, **options),
            records_episodes=True,
        )
        for game in games
    )
    return TaskSequence(
        name="Atari6",
        tasks=tasks,
        observation_space=OBSERVATION_SPACE,
        action_space=ACTION_SPACE,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        extra="atari",
        required_modules=("ale_py", "cv2"),
        metric_settings={"smoothing_window": 20, "return_clip_min": None},
        preprocessing=PREPROCESSED,
    )
