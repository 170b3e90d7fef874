"""The sequence envs with the tools researchers already use (issue 12 items 2-4, issue 13
item 5 env cases): gymnasium.make_vec, RecordEpisodeStatistics, SB3 attribute access and
plain model.learn, per-instance spaces, bad input refused early."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.task import SequenceDoneError
from cl_suites.core.vector import SequenceVectorEnv


def test_gymnasium_make_vec_is_one_sequence_with_a_global_budget():
    venv = gym.make_vec("CLSuite/Diagnostic-v0", num_envs=4, steps_per_task=30, n_tasks=3)
    assert isinstance(venv, SequenceVectorEnv) and venv.num_envs == 4
    assert [(s.start_step, s.end_step) for s in venv.schedule()] == [(0, 32), (32, 64), (64, 96)]
    _, infos = venv.reset(seed=0)
    switches, steps = [], 0
    while not infos["sequence_done"][0]:
        _, _, _, truncated, infos = venv.step(np.zeros(4, dtype=np.int64))
        steps += 1
        if infos["task_switched"].any():
            assert infos["task_switched"].all() and truncated.all()  # all sub-envs at once
            switches.append((int(infos["total_step"][0]), int(infos["task_id"][0])))
    assert switches == [(32, 1), (64, 2)] and steps * 4 == 96  # one budget, not 4 x 90
    # gymnasium's own per-env batching would give 4 independent sequences: refused
    for mode in ("sync", "async"):
        with pytest.raises(ValueError, match="independent Diagnostic sequences"):
            gym.make_vec("CLSuite/Diagnostic-v0", num_envs=2, vectorization_mode=mode)


def test_record_episode_statistics_wraps_the_single_env():
    env = gym.wrappers.RecordEpisodeStatistics(
        gym.make("CLSuite/Diagnostic-v0", steps_per_task=25, n_tasks=2)
    )
    _, info = env.reset(seed=0)
    pairs = []
    while not info["sequence_done"]:
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            ours = info["task_episode"]
            pairs.append((info["episode"]["r"], info["episode"]["l"], ours["r"], ours["l"]))
            if not info["sequence_done"]:
                _, info = env.reset()
    # episodes of 10 steps, the third cut at the switch after 5: both agree on each one
    assert [p[1] for p in pairs] == [10, 10, 5, 10, 10, 5]
    assert all(r == our_r and n == our_n for r, n, our_r, our_n in pairs)


def _our_games(infos: dict, n: int) -> np.ndarray:
    """Per sub-env, 1 where our task_episode reports a finished game this step."""
    return infos["_task_episode"] if "_task_episode" in infos else np.zeros(n, dtype=bool)


@pytest.mark.parametrize(
    ("suite", "kwargs"),
    [
        ("Diagnostic", {"steps_per_task": 45, "n_tasks": 3}),  # 10-step games, cut by switches
        ("Procgen6", {"steps_per_task": 240}),  # random play: games cut by every switch
    ],
)
def test_gymnasium_record_episode_statistics_counts_every_game_of_the_sequence(suite, kwargs):
    """Issue 29 item 1: gymnasium's own RecordEpisodeStatistics, vector and single, wraps
    our envs over whole sequences; it counts every game ours report, the ones a task switch
    cuts (truncated=True) included, and the env leaves "episode" to it."""
    if suite == "Procgen6":
        pytest.importorskip("procgen")
    n = 3
    venv = gym.wrappers.vector.RecordEpisodeStatistics(cl_suites.make_vec(suite, n, **kwargs))
    _, infos = venv.reset(seed=0)
    games = cut = 0
    while not infos["sequence_done"][0]:
        _, _, _, truncated, infos = venv.step(venv.action_space.sample())
        ours = _our_games(infos, n)
        theirs = infos.get("_episode", np.zeros(n, dtype=bool))
        np.testing.assert_array_equal(theirs, ours)  # the same games, at the same steps
        games += int(ours.sum())
        if infos["task_switched"][0] or infos["sequence_done"][0]:
            assert truncated.all() and ours.all()  # every running game is cut
            cut += n
    assert venv.episode_count == games and cut == n * len(venv.env.schedule())
    assert games > cut  # some games ended on their own too
    # the single env, through gym.make: counts, returns and lengths all agree
    env = gym.wrappers.RecordEpisodeStatistics(gym.make(f"CLSuite/{suite}-v0", **kwargs))
    env.action_space.seed(0)
    _, info = env.reset(seed=0)
    pairs = []
    while not info["sequence_done"]:
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert ("episode" in info) == (terminated or truncated) == ("task_episode" in info)
        if "episode" in info:
            ours = info["task_episode"]
            pairs.append((info["episode"]["r"], info["episode"]["l"], ours["r"], ours["l"]))
            if not info["sequence_done"]:
                _, info = env.reset()
    assert env.episode_count == len(pairs)
    assert all(r == our_r and length == our_l for r, length, our_r, our_l in pairs)
    if suite == "Diagnostic":  # 10-step games, the fifth of each task cut after 5
        assert [p[1] for p in pairs] == [10, 10, 10, 10, 5] * 3


def test_vector_reward_normalisation_and_statistics_stack_on_the_vector_env():
    venv = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.wrappers.vector.NormalizeReward(
            cl_suites.make_vec("Diagnostic", 2, steps_per_task=40, n_tasks=2)
        )
    )
    _, infos = venv.reset(seed=0)
    while not infos["sequence_done"][0]:
        _, _, _, _, infos = venv.step(venv.action_space.sample())
    assert venv.episode_count == 8  # 2 sub-envs x (2 games of 10 steps) x 2 tasks


def test_sb3_vec_monitor_over_the_sb3_adapter_counts_the_same_games(sb3):
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import VecMonitor

    venv = cl_suites.make_vec("Diagnostic", 2, steps_per_task=45, n_tasks=2).to_sb3()
    assert venv.env_is_wrapped(Monitor) == [True, True]  # the adapter writes Monitor's infos
    with pytest.warns(UserWarning, match="already wrapped with a `Monitor`"):
        monitored = VecMonitor(venv)
    monitored.reset()
    games = []
    for _ in range(46):  # the schedule: [0, 46), [46, 92)
        _, _, dones, infos = monitored.step(np.zeros(2, dtype=np.int64))
        games += [(int(info["episode"]["l"]), float(info["episode"]["r"])) for info in infos
                  if "episode" in info]  # fmt: skip
        assert len([i for i in infos if "episode" in i]) == int(dones.sum())
    assert monitored.episode_count == len(games) == 2 * (2 + 1) * 2  # two 10s and a cut 3


def test_sb3_get_attr_and_friends():
    pytest.importorskip("stable_baselines3")
    vector_env = cl_suites.make_vec("Diagnostic", 3, steps_per_task=6, n_tasks=2)
    venv = cl_suites.SB3VecEnv(vector_env)
    venv.reset()
    assert venv.get_attr("task_id") == [0, 0, 0]
    assert venv.get_attr("task_name", indices=[2]) == ["cue-identity"]
    assert venv.get_attr("shift") == [0, 0, 0]  # an attribute of each sub-env's task env
    venv.step(np.zeros(3, dtype=np.int64))
    venv.step(np.zeros(3, dtype=np.int64))
    assert venv.get_attr("task_id") == [1, 1, 1] and venv.get_attr("shift") == [1, 1, 1]
    assert venv.get_attr("total_steps") == [12] * 3 and venv.get_attr("render_mode") == [None] * 3
    venv.set_attr("episode_length", 4)  # per sub-env, through SyncVectorEnv.set_attr
    assert venv.get_attr("episode_length") == [4, 4, 4]
    assert len(venv.env_method("schedule")[0]) == 2
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        venv.get_attr("nonexistent")


def test_spaces_are_per_env_instance():
    a, b = gym.make("CLSuite/Procgen6-v0"), gym.make("CLSuite/Procgen6-v0")
    assert a.action_space == b.action_space and a.action_space is not b.action_space
    assert a.observation_space is not b.observation_space
    b.action_space.seed(7)
    first = [b.action_space.sample() for _ in range(20)]
    b.action_space.seed(7)
    a.action_space.seed(123)  # seeding one env's space leaves the other's stream alone
    assert [b.action_space.sample() for _ in range(20)] == first
    va, vb = cl_suites.make_vec("Diagnostic", 2), cl_suites.make_vec("Diagnostic", 2)
    assert va.single_action_space is not vb.single_action_space
    assert va.single_action_space is not va.sequence.action_space


def test_vector_env_refuses_float_actions_like_the_single_env():
    env = cl_suites.make_env("Diagnostic")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="takes integer actions"):
        env.step(1.0)
    venv = cl_suites.make_vec("Diagnostic", 2)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="float64.*takes integer actions"):
        venv.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="takes integer actions"):
        venv.step([True, False])
    venv.step([0, 1])  # plain ints are fine


def test_bad_seeds_are_refused_with_the_value():
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        cl_suites.make_vec("Diagnostic", 2).reset(seed=-1)
    with pytest.raises(gym.error.Error, match="greater or equal to zero, actual value: -1"):
        gym.make("CLSuite/Diagnostic-v0").reset(seed=-1)  # gymnasium's own check
    from cl_suites.envs.procgen import ProcgenVectorEnv

    with pytest.raises(ValueError, match="procgen seed must be below 2\\*\\*31"):
        ProcgenVectorEnv("climber", 2).reset(seed=2**40)  # gym3 would assert


def test_action_masks_of_the_sequence_are_in_every_info():
    from tests.helpers.toy_envs import toy_sequence

    sequence = toy_sequence(num_tasks=2, budget=4, cycles=1)
    masks = np.array([[True, True, False], [False, True, True]])
    object.__setattr__(sequence, "action_masks", lambda: masks)  # interface 1 (C1's method)
    env = cl_suites.SequenceEnv(sequence)
    _, info = env.reset(seed=0)
    assert info["action_mask"].tolist() == [True, True, False]
    venv = SequenceVectorEnv(sequence, 2)
    _, infos = venv.reset(seed=0)
    assert infos["action_mask"].tolist() == [[True, True, False]] * 2
    _, _, _, _, infos = venv.step(np.ones(2, dtype=np.int64))
    _, _, _, _, infos = venv.step(np.ones(2, dtype=np.int64))  # the switch to task 1
    assert infos["task_id"].tolist() == [1, 1]
    assert infos["action_mask"].tolist() == [[False, True, True]] * 2


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(
        TypeError, match="no option 'step_per_task' \\(did you mean 'steps_per_task'"
    ):
        gym.make("CLSuite/Procgen6-v0", step_per_task=10)
    with pytest.raises(TypeError, match="its options are: steps_per_task, cycles, .*n_actions"):
        cl_suites.make_vec("Diagnostic", 2, colour="red")
    with pytest.raises(TypeError, match="CLSuite/Atari6-v0 has no option 'frame_skip'"):
        gym.make_vec("CLSuite/Atari6-v0", num_envs=2, frame_skip=4)


@pytest.fixture(scope="module")
def sb3():
    sb3 = pytest.importorskip("stable_baselines3")
    import torch

    torch.set_num_threads(1)
    return sb3


def test_plain_sb3_ppo_learns_to_the_end_of_the_sequence(sb3):
    from stable_baselines3 import PPO

    vector_env = cl_suites.make_vec("Diagnostic", 4, steps_per_task=2_500, n_tasks=2)
    venv = cl_suites.SB3VecEnv(vector_env)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=64,
        batch_size=128,
        learning_rate=3e-3,
        gamma=0.0,  # a contextual bandit
        ent_coef=0.02,
        policy_kwargs={"net_arch": [32]},
        seed=0,
    )
    stop = cl_suites.StopTrainingOnSequenceEnd(verbose=0)
    # 5,000 steps is not a multiple of the 256-step rollout; 10,000 is more than the sequence
    model.learn(total_timesteps=10_000, callback=stop)
    assert stop.stopped_at == model.num_timesteps == 5_000 == vector_env.total_steps
    assert {ep["task_id"] for ep in model.ep_info_buffer} == {1}  # SB3's episode log works
    evaluator = cl_suites.Evaluator(vector_env.sequence, seed=0, episodes=10)
    returns = {
        r["task_id"]: r["mean_return"]
        for r in evaluator.evaluate(0, lambda obs, _: model.predict(obs, deterministic=True)[0])
    }
    assert returns[1] >= 4.0  # the last task is learned (chance: -3.3 over 10 steps)
    with pytest.raises(SequenceDoneError, match="StopTrainingOnSequenceEnd"):
        venv.step(np.zeros(4, dtype=np.int64))


def test_without_the_callback_sb3_gets_a_clear_message(sb3):
    from stable_baselines3 import PPO

    venv = cl_suites.SB3VecEnv(cl_suites.make_vec("Diagnostic", 2, steps_per_task=50))
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    with pytest.raises(
        SequenceDoneError, match=r"ended at agent step 150.*StopTrainingOnSequenceEnd"
    ):
        model.learn(total_timesteps=1_000)


def test_sb3_make_vec_env_over_gym_make_stops_at_the_end(sb3):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("CLSuite/Diagnostic-v0", n_envs=1, env_kwargs={"steps_per_task": 60})
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    stop = cl_suites.StopTrainingOnSequenceEnd(verbose=0)
    model.learn(total_timesteps=1_000, callback=stop)  # the last step's autoreset is harmless
    assert model.num_timesteps == stop.stopped_at == 180
    assert venv.get_attr("task_id") == [2] and venv.get_attr("sequence_done") == [True]


def _sequence_env_factory(**kwargs):
    return lambda: gym.make("CLSuite/Diagnostic-v0", **kwargs)


def test_stepping_several_sequence_envs_in_lockstep_warns():
    # CleanRL's pattern: N copies of the single env, each with the whole budget
    venv = gym.vector.SyncVectorEnv([_sequence_env_factory(steps_per_task=50)] * 4)
    venv.reset(seed=0)
    with pytest.warns(UserWarning, match="stepped in turn.*N times its budget") as caught:
        for _ in range(3):
            venv.step(np.zeros(4, dtype=np.int64))
    message = str(caught[0].message)
    assert 'gymnasium.make_vec("CLSuite/Diagnostic-v0", num_envs=N)' in message
    # one sequence env, or envs played one after the other, do not warn
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        single = gym.vector.SyncVectorEnv([_sequence_env_factory(steps_per_task=50)])
        single.reset(seed=0)
        for _ in range(5):
            single.step(np.zeros(1, dtype=np.int64))
        a, b = (gym.make("CLSuite/Diagnostic-v0") for _ in range(2))
        for env in (a, b, a):
            env.reset(seed=0)
            for _ in range(5):
                env.step(0)


def test_sb3_make_vec_env_of_several_sequence_envs_warns(sb3):
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("CLSuite/Diagnostic-v0", n_envs=2, env_kwargs={"steps_per_task": 60})
    venv.reset()
    with pytest.warns(UserWarning, match="several Diagnostic sequence envs are stepped in turn"):
        for _ in range(2):
            venv.step(np.zeros(2, dtype=np.int64))


def test_autoreset_modes_count_agent_steps_and_vector_steps():
    """The budget counts agent steps in every autoreset mode. gymnasium's default,
    NEXT_STEP, spends one vector step on the reset after every episode end (the sub-env
    is reset and plays no agent step), so 12,000 agent steps of 10-step episodes take
    13,200 vector steps; SAME_STEP resets within the step that ended the episode."""
    from gymnasium.vector import AutoresetMode

    def run(mode):
        venv = gym.vector.SyncVectorEnv(
            [_sequence_env_factory(steps_per_task=6_000, n_tasks=2)], autoreset_mode=mode
        )
        _, infos = venv.reset(seed=0)
        vector_steps = episodes = 0
        while not infos["sequence_done"][0]:
            _, _, _, _, infos = venv.step(np.zeros(1, dtype=np.int64))
            vector_steps += 1
            # SAME_STEP: the ended episode's info is the final_info
            ended = infos.get("final_info", infos) if mode == AutoresetMode.SAME_STEP else infos
            episodes += int(ended.get("_task_episode", [False])[0])
        return venv, vector_steps, episodes, int(infos["total_step"][0])

    venv, vector_steps, episodes, agent_steps = run(AutoresetMode.NEXT_STEP)
    assert (agent_steps, episodes) == (12_000, 1_200)
    assert vector_steps == agent_steps + episodes - 1  # no reset after the last episode
    venv.step(np.zeros(1, dtype=np.int64))  # the 13,200th: the reset, no agent step
    assert vector_steps + 1 == 13_200
    with pytest.raises(SequenceDoneError):
        venv.step(np.zeros(1, dtype=np.int64))
    _, vector_steps, episodes, agent_steps = run(AutoresetMode.SAME_STEP)
    assert vector_steps == agent_steps == 12_000 and episodes == 1_200
    venv = gym.make_vec("CLSuite/Diagnostic-v0", num_envs=4, steps_per_task=6_000, n_tasks=2)
    _, infos = venv.reset(seed=0)
    vector_steps = 0
    while not infos["sequence_done"][0]:
        _, _, _, _, infos = venv.step(np.zeros(4, dtype=np.int64))
        vector_steps += 1
    assert vector_steps * 4 == infos["total_step"][0] == 12_000  # N agent steps a step


def test_a_gymnasium_vector_env_goes_to_sb3_through_to_sb3(sb3, capsys):
    from stable_baselines3 import PPO

    venv = gym.make_vec("CLSuite/Diagnostic-v0", num_envs=2, steps_per_task=64)
    with pytest.raises(ValueError, match="not a Gymnasium environment"):  # SB3's own message
        PPO("MlpPolicy", venv)
    model = PPO("MlpPolicy", venv.to_sb3(), n_steps=32, batch_size=64, n_epochs=1, seed=0)
    stop = cl_suites.StopTrainingOnSequenceEnd()
    model.learn(total_timesteps=1_000, callback=stop)
    assert stop.stopped_at == stop.total_step == model.num_timesteps == 192
    out = capsys.readouterr().out
    assert "The task sequence is done at 192 agent steps: training stops." in out
