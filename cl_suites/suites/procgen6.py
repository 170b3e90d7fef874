"""Procgen6 (CORA section 3.2): six procgen games, easy mode, generalisation to unseen levels.

Train split: ``num_levels=200, start_level=0``; test split: ``num_levels=0`` (the full
level distribution). 64x64x3 RGB observations without frame stack, 15 actions.
Budgets count agent steps; procgen has no frame skip, so the paper's "5M frames per
task" is 5M agent steps.
"""

from __future__ import annotations

from functools import partial

from cl_suites.core.task import TaskSequence, TaskSpec
from cl_suites.envs.procgen import (
    ACTION_SPACE,
    OBSERVATION_SPACE,
    RENDER_FPS,
    ProcgenEnv,
    ProcgenVectorEnv,
    check_games,
    check_level_number,
    check_options,
)

GAMES: tuple[str, ...] = ("climber", "dodgeball", "ninja", "starpilot", "bigfish", "fruitbot")


def build(
    *,
    steps_per_task: int = 5_000_000,
    cycles: int = 5,
    eval_every: int = 250_000,
    eval_episodes: int = 10,
    distribution_mode: str = "easy",
    num_train_levels: int = 200,
    start_level: int = 0,
    num_test_levels: int = 0,
    games: tuple[str, ...] = GAMES,
    num_threads: int | None = None,
) -> TaskSequence:
    """The Procgen6 sequence with the paper's defaults (every count in agent steps).

    Args:
        steps_per_task: training budget of each task per cycle.
        cycles: number of passes over the six games.
        eval_every: evaluation cadence.
        eval_episodes: episodes per task and split at each evaluation.
        distribution_mode: procgen difficulty (the paper: ``"easy"``).
        num_train_levels: how many training levels, ``[start_level, start_level +
            num_train_levels)`` (the paper: 200).
        start_level: the first training level.
        num_test_levels: levels of the test split (0 = unlimited).
        games: the games in training order.
        num_threads: procgen worker threads per env batch (``None``: chosen from the
            batch size, see ``cl_suites.envs.procgen.default_num_threads``).

    Unknown games and options procgen would refuse (negative level counts, an unknown
    ``distribution_mode``) raise ``ValueError`` here, before any env is built.
    """
    games = check_games(games)
    for name, value in (
        ("num_train_levels", num_train_levels),
        ("start_level", start_level),
        ("num_test_levels", num_test_levels),
        ("num_threads", 0 if num_threads is None else num_threads),
    ):
        check_level_number(name, value)
    common = {"distribution_mode": distribution_mode}
    if num_threads is not None:
        common["num_threads"] = num_threads
    train = {**common, "num_levels": num_train_levels, "start_level": start_level}
    test = {**common, "num_levels": num_test_levels, "start_level": 0}
    for options in (train, test):
        check_options(options)
    tasks = tuple(
        TaskSpec(
            name=game,
            budget=steps_per_task,
            make_train=partial(ProcgenEnv, game, **train),
            make_test=partial(ProcgenEnv, game, **test),
            make_train_vec=partial(ProcgenVectorEnv, game, **train),
            make_test_vec=partial(ProcgenVectorEnv, game, **test),
        )
        for game in games
    )
    return TaskSequence(
        name="Procgen6",
        tasks=tasks,
        observation_space=OBSERVATION_SPACE,
        action_space=ACTION_SPACE,
        cycles=cycles,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        extra="procgen",
        required_modules=("procgen",),
        metric_settings={"smoothing_window": 20, "return_clip_min": None},
        render_fps=RENDER_FPS,
    )
