"""Atari6 exactly as CORA section 3.1 / appendix C.8 defines it, through gym.make and make_vec."""

from __future__ import annotations

import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.evaluation import Evaluator
from cl_suites.envs.atari import (
    EpisodicLife,
    FireReset,
    GrayscaleResize,
    MaxPoolFrameSkip,
    WholeGames,
    available_games,
    has_fire,
    make_atari_env,
)
from cl_suites.suites.atari6 import GAMES

pytest.importorskip("ale_py")

OBS_SPACE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = [env]
    while isinstance(chain[-1], gym.Wrapper):
        chain.append(chain[-1].env)
    return chain


def _find(env: gym.Env, kind: type) -> gym.Env | None:
    return next((w for w in _wrappers(env) if isinstance(w, kind)), None)


def test_paper_defaults():
    seq = cl_suites.make_sequence("CLSuite/Atari6-v0")
    assert GAMES == ("SpaceInvaders", "Krull", "BeamRider", "Hero", "StarGunner", "MsPacman")
    assert [t.name for t in seq.tasks] == list(GAMES)
    assert {t.budget for t in seq.tasks} == {50_000_000}
    assert (seq.cycles, seq.eval_every, seq.eval_episodes) == (5, 250_000, 10)
    assert seq.observation_space == OBS_SPACE
    assert seq.action_space == gym.spaces.Discrete(18)
    assert all(t.splits == ("train",) and t.records_episodes for t in seq.tasks)
    assert seq.tasks[0].make_train.keywords["training"] is True
    assert seq.tasks[0].make_train_eval.keywords["training"] is False
    assert seq.metric_settings["smoothing_window"] == 20
    assert seq.schedule()[-1].end_step == 6 * 5 * 50_000_000


@pytest.mark.parametrize("game", GAMES)
def test_each_game_constructs_and_steps_with_the_v4_era_settings(game):
    env = make_atari_env(game)
    ale = env.unwrapped.ale
    assert env.observation_space == OBS_SPACE and env.action_space == gym.spaces.Discrete(18)
    assert env.unwrapped._frameskip == 1
    assert ale.getFloat("repeat_action_probability") == 0.0
    preprocessing = _find(env, MaxPoolFrameSkip)
    assert (preprocessing.frame_skip, preprocessing.noop_max) == (4, 30)
    # CORA's order: pool the RGB screens, then gray and 84x84
    assert preprocessing.observation_space.shape == (210, 160, 3)
    assert _find(env, GrayscaleResize).size == 84
    assert _find(env, gym.wrappers.TimeLimit)._max_episode_steps == 10_000
    assert _find(env, EpisodicLife) is not None
    # CORA's check is "FIRE" in the action meanings: with the full action space, every
    # game is fire-reset (MsPacman included)
    assert _find(env, FireReset) is not None and has_fire(env)
    assert env.unwrapped.get_action_meanings()[:3] == ["NOOP", "FIRE", "UP"]
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.max() > 0
    frames = ale.getEpisodeFrameNumber()
    obs, _, terminated, truncated, _ = env.step(17)
    assert ale.getEpisodeFrameNumber() == frames + 4  # one agent step = 4 frames
    assert obs.shape == (4, 84, 84) and not (terminated or truncated)
    evaluation = make_atari_env(game, training=False)  # CORA's training stack, whole games
    assert isinstance(evaluation, WholeGames)
    assert _find(evaluation, EpisodicLife) is not None
    assert _find(evaluation, FireReset) is not None
    assert evaluation.observation_space == OBS_SPACE
    env.close()
    evaluation.close()


class _Screens(gym.Wrapper):
    """Keeps every RGB screen the game returns."""

    def __init__(self, env):
        super().__init__(env)
        self.screens = []

    def step(self, action):
        out = self.env.step(action)
        self.screens.append(out[0])
        return out


def test_frames_pool_the_rgb_screens_then_turn_gray_as_cora():
    """CORA (continual_rl@f2754bb utils/env_wrappers.py MaxAndSkipEnv, WarpFrame): the max
    of the last two RGB screens of a skip, then cv2's RGB-to-gray and an INTER_AREA resize.
    Pooling gray screens (gymnasium's grayscale AtariPreprocessing) gives other frames."""
    import cv2

    raw = gym.make(
        "ALE/MsPacman-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        full_action_space=True,
        obs_type="rgb",  # the test keeps every screen; make_atari_env needs none
    )
    screens = _Screens(raw)
    env = GrayscaleResize(MaxPoolFrameSkip(screens, noop_max=0, frame_skip=4))
    env.reset(seed=0)
    pooled_gray_differs = 0
    for t in range(60):
        obs, *_ = env.step(t % 9)
        a, b = screens.screens[-2], screens.screens[-1]
        cora = cv2.resize(
            cv2.cvtColor(np.maximum(a, b), cv2.COLOR_RGB2GRAY),
            (84, 84),
            interpolation=cv2.INTER_AREA,
        )
        assert np.array_equal(obs, cora)
        gray = np.maximum(cv2.cvtColor(a, cv2.COLOR_RGB2GRAY), cv2.cvtColor(b, cv2.COLOR_RGB2GRAY))
        pooled_gray_differs += not np.array_equal(
            obs, cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA)
        )
    assert pooled_gray_differs > 0
    env.close()


def test_frame_skip_wants_the_game_unskipped():
    skipped = gym.make("ALE/MsPacman-v5", frameskip=4, obs_type="ram")
    with pytest.raises(ValueError, match="frameskip=1"):
        MaxPoolFrameSkip(skipped)
    skipped.close()


def test_noop_starts_vary_the_first_frame_with_the_seed():
    env = make_atari_env("MsPacman", training=False)
    starts, firsts = [], []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        # no-op frames, then FIRE and UP (one agent step = 4 frames each)
        starts.append(env.unwrapped.ale.getEpisodeFrameNumber() - 2 * 4)
        firsts.append(obs.tobytes())
    assert all(1 <= n <= 30 for n in starts)
    assert len(set(starts)) == 6 and len(set(firsts)) == 6
    again, _ = env.reset(seed=0)
    assert again.tobytes() == firsts[0]


def test_same_seed_same_frames_different_seed_differs():
    def frames(seed):
        env = cl_suites.make_env("Atari6", steps_per_task=100, cycles=1)
        out = [env.reset(seed=seed)[0]]
        for t in range(40):
            obs, _, terminated, truncated, _ = env.step(t % 18)
            out.append(obs)
            if terminated or truncated:
                out.append(env.reset()[0])
        env.close()
        return np.stack(out)

    a, b, c = frames(7), frames(7), frames(8)
    assert a.shape == (41, 4, 84, 84)
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or not np.array_equal(a, c)


def test_logged_return_is_the_whole_game_in_unclipped_points():
    # SpaceInvaders: 3 lives, rewards 5..30 points per alien
    env = gym.make("CLSuite/Atari6-v0", steps_per_task=100_000, cycles=1)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    rewards, life_losses, steps = [], 0, 0
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(18)))
        rewards.append(reward)
        steps += 1
        if "task_episode" in info:
            break
        if terminated or truncated:
            life_losses += 1
            env.reset()
    assert terminated and life_losses == 2 and env.unwrapped._env.unwrapped.ale.lives() == 0
    assert max(rewards) > 1  # not clipped
    assert info["task_episode"]["r"] == pytest.approx(sum(rewards))
    assert info["task_episode"]["l"] >= steps  # plus the automatic FIRE presses after each life
    env.close()


def test_a_game_cut_by_a_task_switch_reports_all_its_lives():
    env = gym.make("CLSuite/Atari6-v0", steps_per_task=300, cycles=1)
    rng = np.random.default_rng(0)  # same game as above: first life lost at step 218
    env.reset(seed=0)
    actions = rng.integers(18, size=300)
    rewards, life_losses = [], 0
    for action in actions:
        _, reward, terminated, truncated, info = env.step(int(action))
        rewards.append(reward)
        if (terminated or truncated) and not info["sequence_done"] and "task_episode" not in info:
            life_losses += 1
            env.reset()
    assert truncated and info["task_step"] == 300 and life_losses == 1
    # the game's length counts as a finished game's does: 300 agent steps plus the
    # automatic presses, FIRE and UP at the start, NOOP, FIRE and UP after the lost life
    assert info["task_episode"]["l"] == 305 and info["task_episode"]["r"] == pytest.approx(
        sum(rewards)
    )
    assert sum(rewards) == 50.0  # 50 points in the first life, none since
    env.close()
    # the vector env logs the same cut game at the switch (issue 23 item 2); "episode" is
    # left to gymnasium's RecordEpisodeStatistics (issue 29 item 1)
    venv = cl_suites.make_vec("Atari6", 1, steps_per_task=300, games=("SpaceInvaders",))
    venv.reset(seed=0)
    for t, action in enumerate(actions):
        _, _, _, truncated, infos = venv.step(np.array([action]))
        if t == 217:  # the lost life ends a training episode, not the game
            assert truncated[0] == 0 and "task_episode" not in infos
    assert truncated[0] and infos["_task_episode"][0] and "episode" not in infos
    game = infos["task_episode"]
    assert game["l"][0] == 305 and game["r"][0] == 50.0
    assert game["task_id"][0] == 0 and game["t"][0] > 0
    venv.close()


def test_vector_path_replays_the_single_env_and_logs_whole_games():
    kwargs = {"steps_per_task": 5_000, "cycles": 1, "games": ("SpaceInvaders",)}
    env = cl_suites.make_env("Atari6", **kwargs)
    venv = cl_suites.make_vec("Atari6", 1, **kwargs)
    env.reset(seed=0)
    venv.reset(seed=0)
    single, vector = [], []
    for t, action in enumerate(np.random.default_rng(0).integers(18, size=1000)):
        obs, _, terminated, truncated, info = env.step(int(action))
        vobs, _, _, _, vinfo = venv.step(np.array([action]))
        if "task_episode" in info:
            single.append((t, info["task_episode"]["r"]))
        if vinfo.get("_task_episode", [False])[0]:
            vector.append((t, vinfo["task_episode"]["r"][0]))
        if terminated or truncated:
            env.reset()
        else:
            np.testing.assert_array_equal(obs, vobs[0])
    assert single == vector == [(577, 180.0), (927, 105.0)]
    env.close()
    venv.close()


def test_beamrider_eval_game_of_an_agent_that_never_fires_ends_before_the_cap():
    # BeamRider waits for FIRE after a lost life. CORA evaluates in its training stack,
    # which presses NOOP, FIRE, UP after every lost life, so a greedy agent that never
    # fires still loses its 3 lives: the game ends after 992 agent steps in CORA's stack.
    env = make_atari_env("BeamRider", training=False)
    env.reset(seed=0)
    lives, losses, steps, terminated, truncated = env.unwrapped.ale.lives(), 0, 0, False, False
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(0)  # NOOP, never FIRE
        steps += 1
        losses += env.unwrapped.ale.lives() < lives
        lives = env.unwrapped.ale.lives()
    assert (steps, terminated, truncated) == (992, True, False)
    assert losses == 3 and lives == 0 and info["episode"]["l"] == 1000  # + 8 automatic presses
    env.close()


def test_life_loss_in_training_ends_the_episode_and_reset_presses_noop_fire_up():
    env = make_atari_env("BeamRider", training=True)
    env.reset(seed=0)
    frames = env.unwrapped.ale.getEpisodeFrameNumber()
    for _ in range(10_000):
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            break
    assert terminated and env.unwrapped.ale.lives() == 2 and "episode" not in info
    lost_at = env.unwrapped.ale.getEpisodeFrameNumber()
    assert lost_at > frames
    env.reset()  # the same game goes on: NOOP, FIRE, UP = 3 agent steps = 12 frames
    assert env.unwrapped.ale.getEpisodeFrameNumber() == lost_at + 12
    assert env.unwrapped.ale.lives() == 2


def test_evaluation_env_plays_whole_games_and_the_cap_truncates():
    env = make_atari_env("MsPacman", training=False, max_episode_steps=50)
    env.reset(seed=0)
    for steps in range(1, 49):
        _, _, terminated, truncated, info = env.step(0)
        # the cap counts the FIRE and UP pressed at reset, as CORA's TimeLimit does
        assert not terminated and (truncated == (steps == 48))
    assert info["episode"]["l"] == 50
    assert env.unwrapped.ale.lives() == 3


def test_sequence_plays_every_game_in_order_through_switches():
    env = gym.make("CLSuite/Atari6-v0", steps_per_task=15, cycles=1)
    obs, info = env.reset(seed=0)
    names = [info["task_name"]]
    while True:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        if info["sequence_done"]:
            break
        if terminated or truncated:
            obs, info = env.reset()
            if info["task_switched"]:
                names.append(info["task_name"])
    assert names == list(GAMES) and info["total_step"] == 90 and truncated
    env.close()


def test_async_vector_path_and_evaluator_through_a_switch():
    kwargs = {"steps_per_task": 20, "cycles": 1, "games": ("Hero", "MsPacman")}
    venv = cl_suites.make_vec("Atari6", num_envs=2, vectorization_mode="async", **kwargs)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert list(info["task_name"]) == ["Hero", "Hero"]
    for _ in range(10):
        obs, _, _, truncated, info = venv.step(np.array([0, 17]))
    assert truncated.all() and list(info["task_name"]) == ["MsPacman", "MsPacman"]
    assert info["task_switched"].all() and info["total_step"][0] == 20
    venv.close()
    seq = cl_suites.make_sequence("Atari6", eval_episodes=2, max_episode_steps=25, **kwargs)
    evaluator = Evaluator(seq, seed=0)
    records = evaluator.evaluate(0, lambda o, ids: np.zeros(len(o), dtype=np.int64))
    evaluator.close()
    assert [(r["task_name"], r["split"], r["episodes"]) for r in records] == [
        ("Hero", "train", 2),
        ("MsPacman", "train", 2),
    ]


def test_factories_pickle():
    task = cl_suites.make_sequence("Atari6").tasks[5]
    factory = pickle.loads(pickle.dumps(task.make_train))
    assert factory.args == ("MsPacman",) and factory().observation_space == OBS_SPACE


def test_unknown_game_names_the_game_the_ale_py_version_and_the_valid_games():
    import ale_py

    assert set(GAMES) <= set(available_games()) and "Pong" in available_games()
    with pytest.raises(
        ValueError, match=rf"'Pong2'.*ale-py {ale_py.__version__}; use one of: Adventure, .*Pong"
    ):
        cl_suites.make_sequence("Atari6", games=("SpaceInvaders", "Pong2"))


def test_render_rgb_array_is_the_ale_screen():
    env = make_atari_env("Hero", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert env.render_mode == "rgb_array"
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8 and frame.any()
    env.close()
    task = cl_suites.make_sequence("Atari6").tasks[2]  # the suite's factories take the keyword
    for factory in (task.make_train, task.make_train_eval):
        env = factory(render_mode="rgb_array")
        env.reset(seed=0)
        assert env.render().shape == (210, 160, 3)
        env.close()


def test_missing_ale_py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    seq = cl_suites.make_sequence("Atari6")  # schedules list without the simulator
    assert len(seq.schedule()) == 30
    with pytest.raises(ImportError, match=r"cl-suites\[atari\]"):
        cl_suites.make_env("Atari6")
    with pytest.raises(ImportError, match=r"cl-suites\[atari\]"):
        make_atari_env("SpaceInvaders")


def test_atari_preprocessing_wrappers_get_a_clear_message():
    env = gym.make("CLSuite/Atari6-v0", steps_per_task=100)
    # gymnasium's wrapper reads env.unwrapped._frameskip (with a default), then the
    # action meanings and the ALE; SB3's (and CleanRL's) Atari wrappers the same names
    with pytest.raises(ValueError, match="Atari6 already preprocesses as CORA did"):
        gym.wrappers.AtariPreprocessing(env)
    with pytest.raises(AttributeError, match="has no 'get_action_meanings': Atari6 already"):
        gym.wrappers.AtariPreprocessing(env, frame_skip=1)
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    with pytest.raises(AttributeError, match="uint8 \\(4, 84, 84\\) observations as they are"):
        AtariWrapper(env)
    with pytest.raises(AttributeError, match="'ale': Atari6 already preprocesses"):
        env.unwrapped.ale.lives()
    assert not hasattr(env.unwrapped, "ale")  # hasattr still answers False
    with pytest.raises(AttributeError, match="Procgen6's tasks are not raw ALE games"):
        gym.make("CLSuite/Procgen6-v0").unwrapped.get_action_meanings()
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        getattr(env.unwrapped, "nonexistent")  # noqa: B009
