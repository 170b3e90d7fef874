"""MiniHack15 exactly as CORA ran it (section 3.3 / appendix C.3, continual_rl@f2754bb)."""

from __future__ import annotations

import pickle
import sys
from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import cl_suites
from cl_suites.core.evaluation import Evaluator
from cl_suites.envs.minihack import (
    SharedActionSpace,
    TileRenderer,
    effective_character,
    make_minihack_env,
    task_action_names,
)
from cl_suites.suites.minihack15 import PAIRS, env_names

pytest.importorskip("minihack")

OBS_SPACE = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
TRAIN = [
    "Room-Random-5x5", "Room-Dark-5x5", "Room-Monster-5x5", "Room-Trap-5x5",
    "Room-Ultimate-5x5", "Corridor-R2", "Corridor-R3", "KeyRoom-S5", "KeyRoom-Dark-S5",
    "River-Narrow", "River-Monster", "River-Lava", "HideNSeek", "HideNSeek-Lava",
    "CorridorBattle",
]  # fmt: skip
TEST = [
    "Room-Random-15x15", "Room-Dark-15x15", "Room-Monster-15x15", "Room-Trap-15x15",
    "Room-Ultimate-15x15", "Corridor-R5", "Corridor-R5", "KeyRoom-S15", "KeyRoom-Dark-S15",
    "River", "River-MonsterLava", "River-MonsterLava", "HideNSeek-Big", "HideNSeek-Big",
    "CorridorBattle-Dark",
]  # fmt: skip
CAPS = {"Room-Random-5x5": 100, "Room-Random-15x15": 300, "Corridor-R2": 1000, "River": 350}
MOVES = ("N", "E", "S", "W", "NE", "SE", "SW", "NW")
# number of valid actions per task, in training order (make_minihack_task.py + MiniHack)
ACTION_COUNTS = [8, 8, 8, 8, 8, 11, 11, 10, 10, 8, 8, 8, 8, 8, 8]


def _nethack_names(env: gym.Env) -> tuple[str, ...]:
    return tuple(a.name for a in env.unwrapped.actions)


def _role(env: gym.Env) -> str:
    """The role NetHack actually plays: the monster name of the glyph under the agent."""
    import nle.nethack as nh

    core = env.unwrapped
    obs = core.last_observation
    blstats = obs[core._observation_keys.index("blstats")]
    glyph = obs[core._observation_keys.index("glyphs")][blstats[1], blstats[0]]
    return nh.permonst(nh.glyph_to_mon(glyph)).mname


@pytest.fixture(scope="module")
def envs():
    """One env per distinct id, reset with seed 0 (NLE construction is the slow part)."""
    built = {}
    for name in env_names():
        env = make_minihack_env(name)
        built[name] = (env, env.reset(seed=0))
    yield built
    for env, _ in built.values():
        env.close()


def test_paper_defaults():
    seq = cl_suites.make_sequence("CLSuite/MiniHack15-v0")
    assert [t.name for t in seq.tasks] == TRAIN
    assert [t.make_train.args[0] for t in seq.tasks] == TRAIN
    assert [t.make_test.args[0] for t in seq.tasks] == TEST
    assert all(t.splits == ("train", "test") for t in seq.tasks)
    assert {t.budget for t in seq.tasks} == {10_000_000}
    assert (seq.cycles, seq.eval_every, seq.eval_episodes) == (2, 1_000_000, 10)
    assert seq.observation_space == OBS_SPACE and seq.action_space == gym.spaces.Discrete(11)
    assert seq.metric_settings["smoothing_window"] == 20
    assert len(env_names()) == 27 and len(set(TRAIN + TEST)) == 27
    assert list(PAIRS) == list(zip(TRAIN, TEST, strict=True))
    assert {t.make_train.keywords["crop"] for t in seq.tasks} == {"code"}


def test_per_task_action_sets_and_masks():
    seq = cl_suites.make_sequence("MiniHack15")
    assert [len(t.valid_actions) for t in seq.tasks] == ACTION_COUNTS
    masks = seq.action_masks()
    assert masks.shape == (15, 11) and masks.dtype == bool
    for task_id, count in enumerate(ACTION_COUNTS):  # each task uses a prefix of the 11
        assert masks[task_id].tolist() == [True] * count + [False] * (11 - count)
    assert task_action_names("Corridor-R2") == (*MOVES, "OPEN", "KICK", "SEARCH")
    assert task_action_names("KeyRoom-Dark-S15") == (*MOVES, "PICKUP", "APPLY")
    assert task_action_names("CorridorBattle") == MOVES  # not a Corridor-R* task


def test_all_27_envs_play_cora_settings(envs):
    for name, (env, (first, info)) in envs.items():
        core = env.unwrapped
        assert env.spec.id == f"MiniHack-{name}-v0"
        assert env.observation_space == OBS_SPACE and env.action_space == gym.spaces.Discrete(11)
        assert _nethack_names(env) == task_action_names(name), name
        assert info["action_mask"].sum() == len(task_action_names(name))
        assert (core.reward_win, core.reward_lose, core.penalty_step) == (1, 0, -0.001)
        assert (core.penalty_time, core.penalty_mode) == (0.0, "constant")
        assert (core.obs_crop_h, core.obs_crop_w) == (9, 9)  # CORA's code sets no crop
        assert core.spec.kwargs["fix_moon_phase"] is True  # no system-clock effects
        assert first.shape == (84, 84, 3) and first.dtype == np.uint8
        obs, reward, _, _, info = env.step(0)
        assert obs.shape == (84, 84, 3) and "masked_action" not in info
        assert reward in (0.0, -0.001) or name.startswith(("Room-Trap", "Room-Ultimate", "River"))


def test_keyroom_autopickup_is_off_elsewhere_on(envs):
    for name, (env, _) in envs.items():
        options = env.unwrapped.nethack.options
        assert ("!autopickup" in options) == name.startswith("KeyRoom"), name


def test_the_character_each_task_actually_plays(envs):
    # CORA asks for a monk everywhere; MiniHack's KeyRoom reads "charachter" (typo) and
    # keeps its rogue, CorridorBattle forces a knight
    expected = {"KeyRoom": "rogue", "CorridorBattle": "knight"}
    for name, (env, _) in envs.items():
        family = next((k for k in expected if name.startswith(k)), None)
        assert _role(env) == expected.get(family, "monk"), name
        assert env.unwrapped.character == effective_character(name), name


def test_code_crop_is_cora_pixel_crop_padded_and_resized_with_inter_area(envs):
    import cv2

    for name in ("Room-Random-5x5", "KeyRoom-S15", "River"):
        env = envs[name][0]
        first, _ = env.reset(seed=1)
        raw = env.unwrapped._get_observation(env.unwrapped.last_observation)["pixel_crop"]
        assert raw.shape == (144, 144, 3) and raw.any()
        padded = np.pad(raw, [(2, 2), (2, 2), (0, 0)])
        expected = cv2.resize(padded, (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(first, expected)


def test_tile_renderer_draws_minihack_glyph_mappers_images_bit_for_bit(envs):
    from minihack.tiles.glyph_mapper import GlyphMapper
    from nle.nethack import MAX_GLYPH

    theirs, ours = GlyphMapper(), TileRenderer.shared()
    rng = np.random.default_rng(0)
    grids = [rng.integers(0, MAX_GLYPH, size=shape) for shape in [(9, 9), (5, 5), (21, 79)]]
    grids.append(np.arange(MAX_GLYPH).reshape(-1, 1))  # every glyph once
    for name in ("Room-Random-5x5", "KeyRoom-S15", "River", "CorridorBattle"):
        core = envs[name][0].unwrapped
        grids += [core.last_observation[core._observation_keys.index("glyphs")]]
        assert core._glyph_mapper is ours  # the crop after every step and the level render
    for glyphs in grids:
        expected = theirs.to_rgb(glyphs)
        assert ours.to_rgb(glyphs).dtype == expected.dtype == np.uint8
        np.testing.assert_array_equal(ours.to_rgb(glyphs), expected)


def test_paper_crop_is_the_80x80_crop_padded_to_84():
    env = make_minihack_env("Room-Random-5x5", crop="paper")
    first, _ = env.reset(seed=0)
    assert (env.unwrapped.obs_crop_h, env.unwrapped.obs_crop_w) == (5, 5)
    raw = env.unwrapped._get_observation(env.unwrapped.last_observation)["pixel_crop"]
    assert raw.shape == (80, 80, 3) and raw.any()
    assert not first[:2].any() and not first[-2:].any()
    assert not first[:, :2].any() and not first[:, -2:].any()
    np.testing.assert_array_equal(first[2:82, 2:82], raw)
    env.close()
    seq = cl_suites.make_sequence("MiniHack15", crop="paper")
    assert seq.tasks[0].make_test.keywords["crop"] == "paper"
    with pytest.raises(ValueError, match=r"crop 'small' is unknown.*'code', 'paper'"):
        cl_suites.make_sequence("MiniHack15", crop="small")


def test_a_masked_action_is_a_wasted_turn_that_never_reaches_nethack():
    env = make_minihack_env("Room-Random-5x5", max_episode_steps=5)
    first, _ = env.reset(seed=0)
    nle_steps = env.unwrapped._steps
    for t in range(1, 6):
        obs, reward, terminated, truncated, info = env.step(10)  # SEARCH: Corridor only
        assert obs is first and reward == -0.001 and info["masked_action"]
        assert not info["action_mask"][10] and not terminated
        assert truncated == (t == 5)  # masked turns count towards the episode cap
    assert env.unwrapped._steps == nle_steps  # NetHack never saw them
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(2)  # S: a real move
    assert "masked_action" not in info and not truncated and env.unwrapped._steps == 1
    with pytest.raises(ValueError, match=r"action -1 is not in the action space Discrete\(11\)"):
        env.step(-1)
    with pytest.raises(ValueError, match="more than the shared 8"):
        SharedActionSpace(make_minihack_env("Corridor-R2").env.env, 8, -0.001)


def test_sequence_vector_and_sb3_envs_report_the_current_tasks_mask():
    kwargs = {"steps_per_task": 6, "cycles": 1, "pairs": [0, 5, 7]}
    env = cl_suites.make_env("MiniHack15", **kwargs)
    _, info = env.reset(seed=0)
    seen = {info["task_name"]: info["action_mask"].sum()}
    env.action_space.seed(0)
    while not info["sequence_done"]:
        action = env.action_space.sample(mask=info["action_mask"].astype(np.int8))
        assert info["action_mask"][action]  # masked sampling only draws valid actions
        _, _, terminated, truncated, info = env.step(action)
        assert "masked_action" not in info
        seen[info["task_name"]] = info["action_mask"].sum()
        if (terminated or truncated) and not info["sequence_done"]:
            _, info = env.reset()
    assert seen == {"Room-Random-5x5": 8, "Corridor-R2": 11, "KeyRoom-S5": 10}
    env.close()

    from cl_suites import SB3VecEnv

    venv = cl_suites.make_vec("MiniHack15", num_envs=2, **kwargs)
    sb3 = SB3VecEnv(venv)
    sb3.seed(0)
    sb3.reset()
    assert [int(info["action_mask"].sum()) for info in sb3.reset_infos] == [8, 8]
    masks = []
    for _ in range(9):
        _, _, _, infos = sb3.step(np.zeros(2, dtype=np.int64))
        masks.append([int(info["action_mask"].sum()) for info in infos])
    # the switch step already reports the next task's mask (its first observations)
    assert masks == [[8, 8]] * 2 + [[11, 11]] * 3 + [[10, 10]] * 3 + [[10, 10]]
    _, vinfo = venv.reset(seed=0)
    assert vinfo["action_mask"].shape == (2, 11) and vinfo["action_mask"].sum() == 16
    sb3.close()


def _scripted_keyroom(env: gym.Env, seed: int, max_turns: int = 40) -> tuple[float, bool]:
    """Pick up the key, walk next to the locked door, APPLY, go through, take the stairs."""
    import nle.nethack as nh

    index = {name: i for i, name in enumerate(task_action_names("KeyRoom-S5"))}
    moves = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
    moves |= {"NE": (-1, 1), "SE": (1, 1), "SW": (1, -1), "NW": (-1, -1)}
    doorways, walkable = {12, 13, 14}, {12, 13, 14, 19, 20, 21, 22, 23, 24}  # cmap indices
    closed_doors, stairs_down, stone = {15, 16}, 24, 0
    core = env.unwrapped
    env.reset(seed=seed)
    total, done, visited = 0.0, False, set()

    def kind(glyph):
        if nh.glyph_is_cmap(glyph):
            return nh.glyph_to_cmap(glyph)
        return "obj" if nh.glyph_is_object(glyph) else None

    def view():
        obs = core.last_observation
        blstats = obs[core._observation_keys.index("blstats")]
        glyphs = obs[core._observation_keys.index("glyphs")]
        return np.vectorize(kind, otypes=[object])(glyphs), (int(blstats[1]), int(blstats[0]))

    def path_to(kinds, start, targets):
        prev, queue = {start: None}, deque([start])
        while queue:
            cell = queue.popleft()
            if cell in targets:
                path = []
                while prev[cell] is not None:
                    cell, move = prev[cell]
                    path.append(move)
                return path[::-1]
            for move, (dr, dc) in moves.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                if nxt in prev or not (0 <= nxt[0] < 21 and 0 <= nxt[1] < 79):
                    continue
                k = kinds[nxt]
                diagonal_door = dr and dc and (kinds[cell] in doorways or k in doorways)
                if (k in walkable or k == "obj") and not diagonal_door:
                    prev[nxt] = (cell, move)
                    queue.append(nxt)
        return []

    def act(name):
        nonlocal total, done
        _, reward, terminated, truncated, info = env.step(index[name])
        assert "masked_action" not in info
        total += reward
        done = terminated or truncated

    def cells(kinds, wanted):
        return {(int(r), int(c)) for r, c in np.argwhere(np.isin(kinds, list(wanted)))}

    has_key = False
    for _ in range(max_turns):
        if done:
            break
        kinds, here = view()
        if not has_key:
            for move in path_to(kinds, here, cells(kinds, {"obj"})):
                act(move)
            act("PICKUP")
            has_key = True
            continue
        route = path_to(kinds, here, cells(kinds, {stairs_down}))
        if route:
            for move in route:
                act(move)
            continue
        doors = sorted(cells(kinds, closed_doors))
        if doors:
            (dr, dc) = door = doors[0]
            beside = {(dr + r, dc + c) for r, c in ((1, 0), (-1, 0), (0, 1), (0, -1))}
            for move in path_to(kinds, here, beside):
                act(move)
            act("APPLY")  # MiniHack applies the key towards the adjacent locked door
            _, here = view()
            step = {v: k for k, v in moves.items()}[(door[0] - here[0], door[1] - here[1])]
            act(step)  # into the doorway
            act(step)  # into the small room
            continue
        visited.add(here)  # explore: walk to an unvisited cell next to unseen stone
        frontier = {
            cell
            for cell in cells(kinds, walkable) - visited
            if any(kinds[cell[0] + r, cell[1] + c] == stone for r, c in moves.values())
        }
        for move in path_to(kinds, here, frontier):
            act(move)
    return total, done


def test_keyroom_is_solved_by_a_scripted_agent_with_pickup_and_apply():
    env = make_minihack_env("KeyRoom-S5")
    for seed in range(3):
        total, done = _scripted_keyroom(env, seed)
        assert done and 0.98 < total <= 1.0, (seed, total)  # reward_win minus a few -0.001
    env.close()


def test_same_seed_same_frames_different_seed_differs():
    def frames(seed):
        env = cl_suites.make_env("MiniHack15", steps_per_task=60, cycles=1)
        out = [env.reset(seed=seed)[0]]
        for t in range(60):
            obs, _, terminated, truncated, _ = env.step(t % 8)
            out.append(obs)
            if (terminated or truncated) and t < 59:
                out.append(env.reset()[0])
        env.close()
        return out

    a, b, c = frames(3), frames(3), frames(4)
    assert len(a) >= 61
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) != len(c) or not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_each_env_keeps_its_own_episode_cap(envs):
    for name, cap in CAPS.items():
        assert envs[name][0].unwrapped._max_episode_steps == cap
    env = envs["Corridor-R2"][0]  # walking north into the wall never ends the episode
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, terminated, truncated, info = env.step(0)
        steps += 1
        if terminated or truncated:
            break
    assert (steps, terminated, truncated) == (1000, False, True)
    assert info["end_status"] == env.unwrapped.StepStatus.ABORTED


def test_sequence_plays_all_15_tasks_in_order_through_switches():
    env = gym.make("CLSuite/MiniHack15-v0", steps_per_task=5, cycles=1)
    obs, info = env.reset(seed=0)
    names = [info["task_name"]]
    while True:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (84, 84, 3)
        if info["sequence_done"]:
            break
        if terminated or truncated:
            obs, info = env.reset()
            if info["task_switched"]:
                names.append(info["task_name"])
    assert names == TRAIN and info["total_step"] == 75
    env.close()


def test_async_vector_path_and_evaluator_with_test_splits():
    kwargs = {"steps_per_task": 20, "cycles": 1, "pairs": PAIRS[5:7]}
    venv = cl_suites.make_vec("MiniHack15", num_envs=2, vectorization_mode="async", **kwargs)
    obs, info = venv.reset(seed=0)
    assert obs.shape == (2, 84, 84, 3) and list(info["task_name"]) == ["Corridor-R2"] * 2
    for _ in range(10):
        obs, _, _, truncated, info = venv.step(np.array([0, 1]))
    assert truncated.all() and list(info["task_name"]) == ["Corridor-R3"] * 2
    assert info["task_switched"].all() and info["total_step"][0] == 20
    venv.close()
    seq = cl_suites.make_sequence("MiniHack15", eval_episodes=2, max_episode_steps=10, **kwargs)
    evaluator = Evaluator(seq, seed=0)
    records = evaluator.evaluate(0, lambda o, ids: np.zeros(len(o), dtype=np.int64))
    evaluator.close()
    assert [(r["task_name"], r["split"], r["episodes"]) for r in records] == [
        ("Corridor-R2", "train", 2),
        ("Corridor-R2", "test", 2),
        ("Corridor-R3", "train", 2),
        ("Corridor-R3", "test", 2),
    ]
    # 10 steps north, mostly into a wall: -0.001 per step that does not advance game time
    returns = np.array([r["mean_return"] for r in records])
    assert ((returns >= -0.01 - 1e-9) & (returns < 0)).all()
    np.testing.assert_allclose(returns * 2000, np.round(returns * 2000), atol=1e-9)


def test_render_rgb_array_shows_the_whole_level():
    env = make_minihack_env("Room-Random-5x5", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert env.render_mode == "rgb_array"
    assert frame.shape == (21 * 16, 79 * 16, 3) and frame.dtype == np.uint8 and frame.any()
    assert make_minihack_env("Room-Random-5x5").render() is None
    # the suite's factories take the keyword (interface 3)
    test_env = cl_suites.make_sequence("MiniHack15").tasks[7].make_test(render_mode="rgb_array")
    test_env.reset(seed=0)
    assert test_env.render().shape == (21 * 16, 79 * 16, 3)
    with pytest.raises(ValueError, match="render_mode 'human' is not supported"):
        make_minihack_env("Room-Random-5x5", render_mode="human")


def test_factories_pickle():
    task = cl_suites.make_sequence("MiniHack15").tasks[6]
    factory = pickle.loads(pickle.dumps(task.make_test))
    assert factory.args == ("Corridor-R5",) and factory().observation_space == OBS_SPACE


def test_pairs_by_index_and_bad_pairs_list_the_pairs():
    seq = cl_suites.make_sequence("MiniHack15", pairs=[7, 14])
    assert [t.name for t in seq.tasks] == ["KeyRoom-S5", "CorridorBattle"]
    with pytest.raises(ValueError, match=r"no pair 99; the 15 pairs are 0: Room-Random-5x5"):
        cl_suites.make_sequence("MiniHack15", pairs=[99])
    with pytest.raises(ValueError, match=r"14: CorridorBattle -> CorridorBattle-Dark"):
        cl_suites.make_sequence("MiniHack15", pairs=["Room-Random-5x5"])
    with pytest.raises(ValueError, match="mixes action sets"):
        cl_suites.make_sequence("MiniHack15", pairs=[("KeyRoom-S5", "Room-Random-15x15")])


def test_unknown_id_names_the_id_and_the_minihack_version():
    from importlib.metadata import version

    with pytest.raises(
        ValueError, match=rf"'MiniHack-Room-Nope-v0'.*minihack {version('minihack')}"
    ):
        cl_suites.make_sequence("MiniHack15", pairs=(("Room-Random-5x5", "Room-Nope"),))


def test_missing_minihack_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minihack", None)
    seq = cl_suites.make_sequence("MiniHack15")  # schedules list without the simulator
    assert len(seq.schedule()) == 30
    with pytest.raises(ImportError, match=r"cl-suites\[minihack\]"):
        cl_suites.make_env("MiniHack15")
    with pytest.raises(ImportError, match=r"cl-suites\[minihack\]"):
        make_minihack_env("Room-Random-5x5")
