"""MEAL: sequence ParallelEnv, batched/SB3 fast path and evaluation (meal-bench engine).

JAX compiles are slow on a small CPU: every test shares the module-scoped suite/engine
(two handmade kitchens of different sizes) so each shape is compiled once.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("meal")
pytest.importorskip("pettingzoo")

import itertools

import jax
from pettingzoo.test import parallel_api_test, parallel_seed_test

from cl_suites.core.task import task_seed
from cl_suites.meal import (
    LayoutGenerationError,
    build_suite,
    parse_meal_id,
)
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.engine import MealEngine
from cl_suites.meal.layouts import build_layouts, generate
from cl_suites.meal.parallel_env import MealParallelEnv

U, D, R, L, S, I = 0, 1, 2, 3, 4, 5  # noqa: E741
# agent_0 on cramped_room: three onions into the pot, a plate, wait for the soup, deliver.
ONION_TRIP = [L, L, I, R, U, I]
DELIVERY_SCRIPT = (
    [L, I, R, U, I] + ONION_TRIP + ONION_TRIP + [D, L, D, I, R, U, U] + [I] * 15 + [D, R, D, I]
)
BUDGET = 450


@pytest.fixture(scope="module")
def suite():
    return build_suite(
        "CLSuite/MEAL-2-v0",
        strategy="ordered",
        layout_names=["cramped_room", "asymm_advantages"],
        steps_per_task=BUDGET,
        cycles=2,
        eval_episodes=2,
        eval_every=BUDGET,
        shaping_horizon=2_500_000,  # shaping barely annealed over the scripted episodes
    )


@pytest.fixture(scope="module")
def engine(suite):
    return MealEngine(suite)


@pytest.fixture(scope="module")
def penv(suite, engine):
    return MealParallelEnv(suite, engine=engine)


def play_script(env, script):
    """Play ``script`` for agent_0 (others stay); returns the list of step outputs."""
    out = []
    for a in script:
        out.append(env.step({"agent_0": a, "agent_1": S}))
    return out


# -- ids, validation, layouts (no compilation) ------------------------------------------
def test_ids_and_bad_input():
    assert (
        parse_meal_id("CLSuite/MEAL-20-v0") == parse_meal_id("MEAL-20") == parse_meal_id(20) == 20
    )
    with pytest.raises(ValueError, match="N >= 1"):
        parse_meal_id(0)
    with pytest.raises(ValueError, match="not a MEAL id"):
        parse_meal_id("Procgen6")
    with pytest.raises(ValueError, match="difficulty 'nightmare'"):
        build_suite(2, difficulty="nightmare")
    with pytest.raises(ValueError, match="unknown preset layout"):
        build_suite(2, strategy="ordered", layout_names=["cramped_room", "no_such_kitchen"])
    with pytest.raises(ValueError, match="strategy 'spiral'"):
        build_suite(2, strategy="spiral")
    with pytest.raises(ValueError, match=r"num_agents must be in 1\.\.5"):
        build_suite(2, num_agents=6)
    with pytest.raises(ValueError, match="4 free cells, fewer than num_agents=5"):
        build_layouts(1, strategy="ordered", layout_names=["smallest_kitchen"], num_agents=5)
    with pytest.raises(LayoutGenerationError, match="seed 123"):
        generate("easy", 123, 2, max_attempts=0)
    for n in (10, 20, 50, 100):
        assert f"CLSuite/MEAL-{n}-v0" in gym.registry
    with pytest.raises(TypeError, match="make_parallel"):
        gym.make("CLSuite/MEAL-20-v0")


def test_the_options_are_one_checked_object():
    """``MealOptions`` declares MEAL's options once: building it checks them (the messages
    of ``build_suite``), ``build_suite_from`` takes it, and ``build_suite``'s keywords, as
    the job layer and the CLI read them, are its fields."""
    import inspect

    from cl_suites.meal import MealOptions, build_suite_from
    from cl_suites.meal.options import option_names

    options = MealOptions(difficulty="hard", layout_seed=3, num_agents=3)
    built = build_suite_from(2, options)
    assert built.options == build_suite(2, difficulty="hard", layout_seed=3, num_agents=3).options
    assert built.num_agents == 3
    with pytest.raises(ValueError, match=r"num_agents must be in 1\.\.5"):
        MealOptions(num_agents=6)
    with pytest.raises(TypeError, match="unknown MEAL option"):
        MealOptions.from_keywords(difficulty="easy", colour="red")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.difficulty = "easy"  # type: ignore[misc]
    parameters = inspect.signature(build_suite).parameters
    assert tuple(parameters)[1:-1] == option_names()
    assert parameters["steps_per_task"].default == MealOptions().steps_per_task


def test_shaping_anneals_over_half_the_task_budget_by_default():
    """MEAL#10 point 3: the reported results annealed shaping over ``steps_per_task / 2``
    (the paper-time code's rule), not the hyperparameter table's 2.5M; a given horizon
    stays."""
    assert build_suite(1, steps_per_task=1_000).options["shaping_horizon"] == 500
    assert build_suite(1).options["shaping_horizon"] == 5_000_000
    assert build_suite(1, shaping_horizon=7).options["shaping_horizon"] == 7


def test_generated_layouts_are_seeded_like_meal_bench(capsys):
    import meal

    kw = {"strategy": "generate", "difficulty": "easy", "generator": "meal-bench"}
    ours = build_layouts(3, seed=11, **kw)
    again = build_layouts(3, seed=11, **kw)
    other = build_layouts(3, seed=12, **kw)
    assert capsys.readouterr().out == ""  # generator retries are silenced
    theirs = meal.make_sequence(sequence_length=3, strategy="generate", seed=11, difficulty="easy")
    assert [t.name for t in ours] == ["easy_gen_0", "easy_gen_1", "easy_gen_2"]
    assert [t.seed for t in ours] == [11, 12, 13]
    for a, b, env in zip(ours, again, theirs, strict=False):
        for key in ("wall_idx", "agent_idx", "goal_idx", "pot_idx", "onion_pile_idx"):
            np.testing.assert_array_equal(a.layout[key], b.layout[key])
            np.testing.assert_array_equal(a.layout[key], env.layout[key])
    assert ours[1].layout["wall_idx"].tolist() == other[0].layout["wall_idx"].tolist()
    assert ours[0].layout["wall_idx"].tolist() != other[0].layout["wall_idx"].tolist()


def test_preset_strategies():
    ordered = build_layouts(3, strategy="ordered", difficulty="medium")
    assert [t.name for t in ordered] == ["coord_ring", "efficiency_test", "split_work"]
    rnd = build_layouts(20, strategy="random", difficulty="hard", seed=3)
    names = [t.name for t in rnd]
    assert names == [
        t.name for t in build_layouts(20, strategy="random", difficulty="hard", seed=3)
    ]
    assert all(a != b for a, b in itertools.pairwise(names))  # no back-to-back repeats
    curriculum = build_layouts(4, strategy="curriculum", seed=0)
    assert [t.difficulty for t in curriculum] == ["easy", "easy", "medium", "hard"]
    with pytest.raises(ValueError, match="at most 4 tasks"):
        build_layouts(5, strategy="ordered", difficulty="hard")
    with pytest.raises(ValueError, match="no handmade presets"):
        build_layouts(2, strategy="ordered", difficulty="extreme")


# -- ParallelEnv ------------------------------------------------------------------------
def test_spaces_padding_and_schedule(suite, penv):
    assert suite.obs_shape == (5, 9, 26)  # asymm_advantages is 5x9, cramped_room 4x5
    assert penv.observation_space("agent_1").shape == (5, 9, 26)
    assert penv.action_space("agent_0").n == 6
    assert [(s.task_name, s.start_step, s.end_step) for s in penv.schedule()] == [
        ("cramped_room", 0, 450),
        ("asymm_advantages", 450, 900),
        ("cramped_room", 900, 1350),
        ("asymm_advantages", 1350, 1800),
    ]
    switches = []
    unsubscribe = penv.on_task_switch(switches.append)
    obs, infos = penv.reset(seed=3)
    assert infos["agent_0"]["task_switched"] is True and infos["agent_1"]["task_id"] == 0
    # cramped_room (4x5) sits centred in the 5x9 grid: rows 0..3, columns 2..6; the padding
    # reads as walls (MEAL's paper and paper-time code)
    walls = obs["agent_0"][:, :, 11]
    assert walls[4].all() and walls[:, :2].all() and walls[:, 7:].all()
    assert walls[0, 2:7].tolist() == [1, 1, 0, 1, 1]  # top wall with the pot
    stay = {"agent_0": S, "agent_1": S}
    ends = []
    for step in range(1, BUDGET + 1):
        _, _, terms, truncs, infos = penv.step(stay)
        assert not any(terms.values())
        if truncs["agent_0"]:
            info = infos["agent_0"]
            ends.append((step, info["task_episode"]["l"], info["total_step"]))
            assert "episode" not in infos["agent_1"]  # left to the standard wrappers
            assert penv.agents == []
            _, infos = penv.reset()
            assert infos["agent_0"]["task_switched"] is (step == BUDGET)
    assert ends == [(400, 400, 400), (450, 50, 450)]
    assert infos["agent_0"]["task_id"] == 1 and infos["agent_0"]["task_name"] == "asymm_advantages"
    assert [(s.previous.task_id, s.current.task_id, s.total_step) for s in switches] == [
        (0, 1, 450)
    ]
    unsubscribe()


def test_scripted_delivery_normalized_score(suite, penv):
    penv.reset(seed=0)
    outs = play_script(penv, DELIVERY_SCRIPT)
    soups = [o[4]["agent_0"]["soups"] for o in outs]
    assert sum(soups) == 1 and soups[-1] == 1  # the last action delivers
    info = outs[-1][4]["agent_1"]
    bound = suite.layouts[0].max_soups
    assert bound == 8  # meal-bench's calculate_max_soup(cramped_room, 400)
    assert info["episode_soups"] == 1
    assert info["score"] == 1 / bound
    # the team's delivery reward, 20 for both agents, + each agent's own shaping (MEAL's
    # trainer): 3 per onion and 5 for the soup for agent_0, who cooked (meal-bench's
    # plate reward rule does not fire here), annealed from 1; nothing for agent_1
    assert outs[-1][1]["agent_0"] == outs[-1][1]["agent_1"] == pytest.approx(20.0)
    assert sum(o[1]["agent_0"] for o in outs) == pytest.approx(20.0 + 3 * 3 + 5, abs=1e-3)
    assert sum(o[1]["agent_1"] for o in outs) == pytest.approx(20.0)
    # finish the episode: the episode record carries the normalised score
    while penv.agents:
        last = penv.step({"agent_0": S, "agent_1": S})
    assert last[4]["agent_0"]["task_episode"]["soups"] == 1
    assert last[4]["agent_0"]["task_episode"]["score"] == 1 / 8


def test_matches_meal_bench_pad_obs_to_max(suite):
    """With ``obs_padding="zeros"``: padded kitchen + mask == meal-bench's own Overcooked +
    PadObsToMax, step by step; each agent's reward is the team's delivery reward plus its
    own shaping."""
    from meal.env import Overcooked
    from meal.wrappers.observation import PadObsToMax

    ref = PadObsToMax(Overcooked(layout_name="cramped_room", max_steps=400), 5, 9)
    zeros = dataclasses.replace(suite, options={**suite.options, "obs_padding": "zeros"})
    engine = MealEngine(zeros)
    env = MealBatchedEnv(zeros, 1, engine=engine)
    obs, _ = env.reset(seed=5)
    key = engine.env_keys(task_seed(5, 0, 0), 1)[0]
    _, sub = jax.random.split(key)
    ref_obs, state = jax.jit(ref.reset)(sub)
    step = jax.jit(ref.step_env)
    for t, a in enumerate(DELIVERY_SCRIPT):
        np.testing.assert_array_equal(
            obs[0, 0], np.asarray(ref_obs["agent_0"]), err_msg=f"step {t}"
        )
        np.testing.assert_array_equal(obs[0, 1], np.asarray(ref_obs["agent_1"]))
        obs, rewards, *_ = env.step(np.array([[a, S]]))
        ref_obs, state, rew, _, info = step(sub, state, {"agent_0": a, "agent_1": S})
        ref_obs = ref._pad_obs_dict(ref_obs)
        team = float(rew["agent_0"] + rew["agent_1"])
        coef = 1 - (t * 1) / suite.options["shaping_horizon"]
        for i, agent in enumerate(("agent_0", "agent_1")):
            shaped = float(info["shaped_reward"][agent])
            assert rewards[0, i] == pytest.approx(team + coef * shaped)


def test_same_seed_same_rollout(penv):
    def rollout(seed):
        obs, _ = penv.reset(seed=seed)
        rng = np.random.default_rng(0)
        frames = [obs["agent_0"].copy()]
        for _ in range(30):
            obs, rew, *_ = penv.step({a: int(rng.integers(6)) for a in penv.agents})
            frames.append(np.concatenate([obs["agent_0"].ravel(), [rew["agent_0"]]]))
        return frames

    a, b = rollout(9), rollout(9)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=False))
    starts = {rollout(s)[0][:, :, 2:6].tobytes() for s in range(6)}  # initial orientations
    assert len(starts) > 1


def test_pettingzoo_api_and_seed(suite, engine, penv):
    parallel_api_test(penv, num_cycles=500)
    parallel_seed_test(lambda: MealParallelEnv(suite, engine=engine), num_cycles=50)


def test_bad_actions(penv):
    penv.reset(seed=0)
    with pytest.raises(ValueError, match=r"missing \['agent_1'\]"):
        penv.step({"agent_0": 1})
    with pytest.raises(ValueError, match="not in its action space"):
        penv.step({"agent_0": 6, "agent_1": 0})
    with pytest.raises(ValueError, match="unknown"):
        penv.step({"agent_0": 1, "agent_1": 0, "agent_7": 0})


# -- fast path --------------------------------------------------------------------------
def test_batched_and_sb3_agree_with_parallel_env(suite, engine, penv):
    from cl_suites.sb3.meal import MealSB3VecEnv

    m = 3
    vec = MealSB3VecEnv(MealBatchedEnv(suite, m, engine=engine))
    assert vec.num_envs == m * 2 and vec.observation_space.shape == (5, 9, 26)
    switches = []
    vec.on_task_switch(switches.append)
    vec.seed(4)
    flat = vec.reset()
    obs, _ = penv.reset(seed=4)
    rng = np.random.default_rng(1)
    per_env = BUDGET // m  # the budget is shared by the m envs
    for t in range(per_env):
        np.testing.assert_array_equal(flat[0], obs["agent_0"], err_msg=f"step {t}")
        np.testing.assert_array_equal(flat[1], obs["agent_1"])
        acts = rng.integers(6, size=(m, 2))
        vec.step_async(acts.reshape(-1))
        flat, rewards, dones, infos = vec.step_wait()
        obs, rew, _, truncs, _pinfo = penv.step(
            {"agent_0": int(acts[0, 0]), "agent_1": int(acts[0, 1])}
        )
        assert rewards[0] == pytest.approx(rew["agent_0"]) and rewards[1] == pytest.approx(
            rew["agent_1"]
        )
        if t + 1 < per_env:
            assert infos[0]["task_step"] == (t + 1) * m and not dones.any()
    # the switch step: every slot truncated with its terminal obs, episode and new task id
    assert dones.all() and not truncs["agent_0"]
    assert [s.total_step for s in switches] == [BUDGET]
    assert all(i["task_switched"] and i["task_id"] == 1 for i in infos)
    assert all(i["episode"]["l"] == per_env and i["episode"]["task_id"] == 0 for i in infos)
    np.testing.assert_array_equal(infos[0]["terminal_observation"], obs["agent_0"])
    assert infos[3]["TimeLimit.truncated"] is True
    assert vec.cursor.segment.task_name == "asymm_advantages"
    assert vec.task_ids().tolist() == [1] * 6
    assert vec.get_attr("step_unit") == ["env steps"] * 6  # not SB3's slots (agents)


def test_evaluator_logs_sparse_returns(suite, engine, tmp_path):
    from cl_suites.meal.evaluation import meal_evaluator
    from cl_suites.rundir.runlog import RunLog, read_eval

    counter = {"t": 0}

    def scripted(obs, task_ids):  # agent_0 of task-0 envs plays the delivery script
        t = counter["t"]
        counter["t"] += 1
        actions = np.full(len(obs), S)
        if t < len(DELIVERY_SCRIPT):
            actions[(task_ids == 0) & (np.arange(len(obs)) % 2 == 0)] = DELIVERY_SCRIPT[t]
        return actions

    with RunLog(tmp_path / "run", {"score_normalizers": suite.score_normalizers()}) as log:
        evaluator = meal_evaluator(suite, seed=0, run_log=log, engine=engine)
        assert evaluator.maybe_evaluate(0, scripted)
        assert evaluator.maybe_evaluate(10, scripted) == []
    frame = read_eval(tmp_path / "run")
    assert frame["task_name"].tolist() == ["cramped_room", "asymm_advantages"]
    assert frame["mean_return"].tolist() == [20.0, 0.0]
    assert frame["episodes"].tolist() == [2, 2]
    assert suite.score_normalizers() == {0: 160.0, 1: 180.0}


def test_cross_play_gives_each_agent_its_own_policy(suite, engine):
    """One cell of MEAL's coordination matrix: agent 0 with one policy, agent 1 with
    another, on one kitchen; soups per episode."""
    from cl_suites.meal.evaluation import cross_play

    def script():
        counter = {"t": 0}

        def policy(obs, task_ids):
            t = counter["t"]
            counter["t"] += 1
            act = DELIVERY_SCRIPT[t] if t < len(DELIVERY_SCRIPT) else S
            return np.full(len(obs), act)

        return policy

    def stay(obs, task_ids):
        assert (task_ids == 0).all() and len(obs) == 3  # its agent's rows of the 3 envs
        return np.full(len(obs), S)

    assert cross_play(suite, 0, [script(), stay], episodes=3, engine=engine) == 1.0
    assert cross_play(suite, 0, [stay, stay], episodes=3, engine=engine) == 0.0
    with pytest.raises(ValueError, match="one policy per agent"):
        cross_play(suite, 0, [stay], engine=engine)


def test_a_runs_coordination_matrix_from_its_task_checkpoints(suite, engine, tmp_path, monkeypatch):
    """M[i, j]: agent 0 with task i's policy, agent 1 with task j's, on kitchen i, over
    kitchen i's bound; stored beside the run; a run without them is refused in one line."""
    import functools

    from cl_suites.meal import evaluation
    from cl_suites.metrics import meal as M
    from cl_suites.metrics.runs import MetricsInputError

    monkeypatch.setattr(
        evaluation, "cross_play", functools.partial(evaluation.cross_play, engine=engine)
    )
    with pytest.raises(MetricsInputError, match="no per-task checkpoints"):
        M.run_coordination_matrix(tmp_path, suite, lambda p: None)
    (tmp_path / "checkpoint").mkdir()
    for i in range(2):
        (tmp_path / "checkpoint" / f"task-{i:03d}.npz").write_bytes(b"")

    def load(path):  # task 0's "policy" delivers one soup on cramped_room, task 1's stays
        if path.name.startswith("task-000"):
            counter = {"t": 0}

            def script(obs, task_ids):
                t = counter["t"] % suite.episode_len
                counter["t"] += 1
                act = DELIVERY_SCRIPT[t] if t < len(DELIVERY_SCRIPT) else S
                return np.full(len(obs), act)

            return script
        return lambda obs, task_ids: np.full(len(obs), S)

    m = M.run_coordination_matrix(tmp_path, suite, load, episodes=2)
    assert m[0, 1] == pytest.approx(1 / 8)  # cramped_room: bound 160 = 8 soups
    assert m[1, 1] == 0.0
    np.testing.assert_array_equal(M.read_coordination_matrix(tmp_path), m)


# MEAL@7d81858's estimate_max_soup (jax_marl/environments/overcooked/upper_bound.py:103),
# run on the kitchens of our paper generator (2 agents, 400 steps) with a 7d81858 checkout
# imported through benchmarks/meal_reference.import_meal: 0 on medium seed 173 and hard
# seeds 9, 28, 53, 60, 71, 80, 169 (of seeds 0-199 per difficulty; none on easy), and 20
# x our bound on the 592 other kitchens (e.g. 160 on hard seed 0). Recorded here so that
# CI needs no MEAL checkout.
MEAL_7D81858_ESTIMATE = {("hard", 9): 0, ("medium", 173): 0, ("hard", 0): 160}
HARD_9 = [
    "WWWWWWWWWW", "WWWW....WW", "W.WWAW...W", "WA.WWW...W", "W.OX.....W", "WWW..P...W",
    "W.....P..W", "WW.WX..W.W", "WWBWW....W", "WWWWW..W.W", "WWWWWWWWWW",
]  # fmt: skip


def _grid(layout) -> list[str]:
    h, w = int(layout["height"]), int(layout["width"])
    grid = [["."] * w for _ in range(h)]
    for key, ch in (("wall_idx", "W"), ("goal_idx", "X"), ("plate_pile_idx", "B"),
                    ("onion_pile_idx", "O"), ("pot_idx", "P"), ("agent_idx", "A")):  # fmt: skip
        for i in np.asarray(layout[key]).tolist():
            grid[i // w][i % w] = ch
    return ["".join(row) for row in grid]


@pytest.mark.parametrize(("difficulty", "seed"), list(MEAL_7D81858_ESTIMATE))
def test_the_bound_is_meals_and_zero_where_one_agent_cannot_make_a_soup(difficulty, seed):
    """Issue 29 item 4: the normaliser is MEAL's single-agent bound, also where it is 0
    (the onions of hard seed 9 lie in a corner the pots cannot be reached from: a soup
    needs a hand-off over a counter). Was: an optimistic bound with the inner counters
    made walkable (7 soups on hard seed 9)."""
    from cl_suites.meal.layouts import REWARD_PER_SOUP, max_soups

    layout = generate(difficulty, seed, 2, generator="paper")
    if (difficulty, seed) == ("hard", 9):
        assert _grid(layout) == HARD_9  # the kitchen MEAL's estimator was run on
    bound = max_soups(layout, 400, 2)
    assert REWARD_PER_SOUP * bound == MEAL_7D81858_ESTIMATE[(difficulty, seed)]


def test_a_task_without_a_bound_is_kept_and_named_in_the_metadata():
    suite = build_suite(1, difficulty="hard", layout_seed=9, episode_len=400)
    assert suite.layouts[0].max_soups == 0 and suite.layouts[0].normalizer is None
    assert suite.score_normalizers() == {0: None}
    (layout,) = suite.run_metadata()["layouts"]
    assert "MEAL's single-agent max-soup bound is 0" in layout["no_bound"]
    venv = MealBatchedEnv(suite, num_envs=1)
    venv.reset(seed=0)
    _, _, _, _, info = venv.step(np.zeros((1, 2), dtype=np.int64))
    assert np.isnan(info["score"]).all()  # undefined, as MEAL's soups / 0
