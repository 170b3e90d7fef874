"""MEAL's replay methods on the JAX IPPO learner (``baselines_jax.cl``: ``agem``,
``er-ace``): the projection by hand, the circular memory, nothing changes before a past
task has data, tiny ``JaxIPPO`` runs over two tasks (memory, statistics, vmapped seeds,
resume), the memory guard, and the pins of MEAL 057f862's own functions
(``benchmarks/parity/meal_cl_reference.py``)."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from baselines_jax import IPPOConfig, JaxIPPO
from baselines_jax import cl as cl_lib
from baselines_jax.cl import memory as M
from baselines_jax.cl.agem import AGEM, project
from baselines_jax.cl.er_ace import ERACE
from baselines_jax.ppo import Transition
from benchmarks.parity import meal_cl_cases as C
from cl_suites.meal.suite import build_suite
from tests.helpers import TESTS

TINY = IPPOConfig(
    num_envs=2,
    num_steps=8,
    num_minibatches=2,
    update_epochs=2,
    hidden_sizes=(16, 16),
    cl_method="agem",
    agem_memory_size=40,  # 20 rows per task of MEAL-2
    agem_sample_size=8,  # 8 rows stored per update, 4 per task per gradient
)


# -- pure functions ---------------------------------------------------------------------------
def _vec(tree) -> np.ndarray:
    return np.asarray(tree["w"])


def test_projection_by_hand():
    """g . g_mem < 0: g - (g.g_mem / |g_mem|^2) g_mem, orthogonal to g_mem; >= 0: g as is;
    then the clip at norm 40."""
    g, g_mem = {"w": jnp.array([1.0, 0.0])}, {"w": jnp.array([-1.0, 1.0])}
    out, stats = project(g, g_mem)
    np.testing.assert_allclose(_vec(out), [0.5, 0.5], atol=1e-7)  # alpha = -1/2
    assert float(jnp.vdot(out["w"], g_mem["w"])) == pytest.approx(0.0, abs=1e-7)
    assert float(stats["is_proj"]) == 1.0 and float(stats["dot_g"]) == -1.0
    assert float(stats["alpha"]) == pytest.approx(-0.5)
    assert float(stats["final_grad_norm"]) == pytest.approx(np.sqrt(0.5))
    for g_mem in ({"w": jnp.array([1.0, 0.0])}, {"w": jnp.array([0.0, 3.0])}):  # dot >0, =0
        same = {"w": jnp.array([1.0, 0.0])} if g_mem["w"][0] else {"w": jnp.array([2.0, 0.0])}
        out, stats = project(same, g_mem)
        np.testing.assert_array_equal(_vec(out), _vec(same))
        assert float(stats["is_proj"]) == 0.0
    out, stats = project({"w": jnp.array([60.0, 80.0])}, {"w": jnp.array([1.0, 0.0])})
    np.testing.assert_allclose(_vec(out), [24.0, 32.0], rtol=1e-6)  # norm 100 -> 40
    assert float(stats["projected_grad_norm"]) == pytest.approx(100.0)
    assert float(stats["final_grad_norm"]) == pytest.approx(40.0)


def _rollout(t_steps: int, n: int, dim: int, start: int) -> tuple[Transition, jax.Array]:
    """A rollout whose (step, actor) pair ``i`` carries ``start + i`` in every field."""
    ids = jnp.arange(start, start + t_steps * n).reshape(t_steps, n)
    f = ids.astype(jnp.float32)
    traj = Transition(
        done=jnp.zeros_like(f), action=ids.astype(jnp.int32), value=f + 0.5, reward=f,
        log_prob=-f, obs=jnp.broadcast_to(ids[..., None], (t_steps, n, dim)).astype(jnp.uint8),
    )  # fmt: skip
    return traj, f


def test_memory_writes_circularly_into_the_task_slot():
    mem = M.init(memory_size=11, num_tasks=2, obs_dim=3)  # 5 rows per task, 1 unused
    assert mem.obs.shape == (2, 5, 3) and mem.obs.dtype == jnp.uint8
    keys = [jax.random.PRNGKey(i) for i in range(3)]
    history = []
    for i, key in enumerate(keys):
        traj, f = _rollout(2, 4, 3, start=10 * (i + 1))
        mem = M.store(mem, traj, f * 2, f * 3, jnp.int32(1), 3, key)
        idx = jax.random.randint(jax.random.split(key)[1], (3,), 0, 8)  # MEAL's draw
        history.extend(np.asarray(traj.action).ravel()[np.asarray(idx)].tolist())
        assert int(mem.ptrs[1]) == (3 * (i + 1)) % 5
        assert int(mem.sizes[1]) == min(3 * (i + 1), 5)
    # 9 rows written into 5: row r holds the last write to it (writes r, r+5, ...)
    expect = [history[max(j for j in range(9) if j % 5 == r)] for r in range(5)]
    np.testing.assert_array_equal(mem.actions[1], expect)
    np.testing.assert_array_equal(mem.obs[1, :, 0], expect)
    np.testing.assert_allclose(mem.advantages[1], np.array(expect) * 2.0)
    np.testing.assert_allclose(mem.targets[1], np.array(expect) * 3.0)
    np.testing.assert_allclose(mem.values[1], np.array(expect) + 0.5)
    np.testing.assert_allclose(mem.log_probs[1], -np.array(expect, np.float32))
    assert int(mem.sizes[0]) == int(mem.ptrs[0]) == 0 and not np.asarray(mem.obs[0]).any()
    rows = M.sample_slot(mem, 0, 4, jax.random.PRNGKey(9))  # empty slot: row 0 (zeros)
    assert not np.asarray(rows.obs).any() and int(rows.sizes) == 0
    with pytest.raises(TypeError, match="float32"):
        traj, f = _rollout(2, 4, 3, 0)
        M.store(mem, traj._replace(obs=traj.obs.astype(jnp.float32)), f, f, 0, 3, keys[0])
    with pytest.raises(ValueError, match="agem_memory_size=1 leaves no row"):
        M.init(1, 2, 3)


def _method(cls, **kw):
    cfg = dataclasses.replace(C.CONFIG, cl_method="agem" if cls is AGEM else "er-ace", **kw)
    net = C.network()
    return cls(cfg, net, net.init(jax.random.PRNGKey(0), jnp.zeros((1, C.OBS_DIM))), C.NUM_TASKS)


@pytest.mark.parametrize("cls", [AGEM, ERACE])
def test_first_task_leaves_the_gradient_untouched(cls):
    """Only the current task's slot has data: no past data, the gradient passes unchanged
    (AGEM's statistics zero, ER-ACE's past samples 0); with task 0 in the past, it changes."""
    method = _method(cls)
    assert method.obs_dim == C.OBS_DIM and method.samples_per_task == 4
    mem = method.init_state(None)
    traj, adv, tgt = C.rollout(0)
    mem = M.store(mem, jax.tree.map(jnp.asarray, traj), adv, tgt, jnp.int32(0), 12, C.store_key(0))
    g = C.ppo_gradient()
    transform = jax.jit(method.transform_grads)
    out, stats = transform(g, C.params(), mem, jnp.int32(0), C.STEP_KEY)
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(g), strict=True):
        np.testing.assert_array_equal(x, y)
    assert set(stats) == set(method.metric_names)
    assert all(float(v) == 0.0 for v in stats.values())
    if cls is ERACE:
        out, stats = transform(g, C.params(), mem, jnp.int32(1), C.STEP_KEY)
        assert not np.allclose(C.flat(out), C.flat(g))
        assert float(stats["er_ace/total_past_samples"]) == 12.0
    else:  # one of g, -g points against task 0's memory gradient: that one is projected
        projected = []
        for sign in (1.0, -1.0):
            g_s = jax.tree.map(lambda x, s=sign: s * x, g)
            out, stats = transform(g_s, C.params(), mem, jnp.int32(1), C.STEP_KEY)
            changed = not np.allclose(C.flat(out), C.flat(g_s))
            assert changed == (float(stats["agem/is_proj"]) == 1.0)
            assert float(stats["agem/memory_fullness_pct"]) == pytest.approx(100 * 12 / 48)
            projected.append(changed)
        assert sorted(projected) == [False, True]
    with pytest.raises(ValueError, match="needs a key"):
        method.transform_grads(g, C.params(), mem, jnp.int32(1), None)


def test_registry_defaults_and_memory_guard():
    """The registry names both methods; MEAL 057f862's defaults (``base.py:61-63``); the
    guard's bytes and its one-line refusal, also from ``JaxIPPO`` before anything is
    built."""
    default = IPPOConfig()
    assert (default.agem_memory_size, default.agem_sample_size) == (100_000, 1024)
    assert default.er_ace_coef == 1.0
    assert cl_lib.METHODS["agem"] == "baselines_jax.cl.agem:AGEM"
    assert cl_lib.METHODS["er-ace"] == "baselines_jax.cl.er_ace:ERACE"
    cfg = dataclasses.replace(TINY, agem_memory_size=1000)
    # 2 tasks x 500 rows x (1274 uint8 + 5 float32/int32) + 8 bytes per task, x 3 seeds
    assert M.memory_bytes(cfg, 2, 1274, 3) == 3 * (1000 * (1274 + 20) + 16)
    assert M.memory_bytes(dataclasses.replace(cfg, cl_method="ewc"), 2, 1274, 3) == 0
    assert M.check_memory(cfg, 2, 1274, 3, limit=10**9) == 3 * (1000 * 1294 + 16)
    with pytest.raises(ValueError, match=r"agem_memory_size=1000: .* 3,882,048 bytes") as e:
        M.check_memory(cfg, 2, 1274, 3, limit=10**6)
    assert "\n" not in str(e.value) and "1,000,000 bytes" in str(e.value)
    suite = build_suite("MEAL-2", steps_per_task=2 * 8 * 4, seed=0)
    with pytest.raises(ValueError, match="agem_memory_size=10000000000000"):
        JaxIPPO(suite, dataclasses.replace(TINY, agem_memory_size=10**13), [0])


def test_reference_pins():
    """Ours equals MEAL 057f862's own functions on the cases of
    ``benchmarks/parity/meal_cl_cases.py`` (memory and samples bit for bit, gradients and
    updates to float32 tolerance; ``meal_cl_reference.py --write`` wrote the pins)."""
    pins = json.loads((TESTS / "golden" / "meal_cl_reference.json").read_text())
    assert pins["meal"] == "TTomilin/MEAL@057f862"
    for section in ("agem", "er-ace"):
        for case in C.SECTIONS[section]:
            entry = pins["cases"][case]
            assert entry["section"] == section
            mine = C.our_values(case)
            assert C.within(case, mine, entry["meal"]), (case, C.compare(mine, entry["meal"]))
    agem = pins["cases"]
    assert agem["agem_projection_active"]["meal"]["agem/is_proj"] == 1.0
    assert agem["agem_projection_inactive"]["meal"]["agem/is_proj"] == 0.0
    assert agem["agem_projection_clipped"]["meal"]["agem/final_grad_norm"] == pytest.approx(40.0)


# -- the learner ------------------------------------------------------------------------------
def _seed(tree, i):
    return jax.tree.map(lambda x: np.asarray(x)[i], tree)


def _run(learner: JaxIPPO):
    """Two updates of task 0 (one per call), its end, one update of task 1; returns the
    states after task 0's end and after task 1's update, and the metrics of both tasks."""
    state = learner.init_state()
    state, m0 = learner.train(state, 0, 1)
    state, m1 = learner.train(state, 0, 1)
    ended = learner.end_task(state, 0, 1)
    after, m2 = learner.train(ended, 1, 1)
    return ended, after, (m0, m1, m2)


@pytest.fixture(scope="module")
def agem_runs():
    suite = build_suite("MEAL-2", steps_per_task=2 * 8 * 4, seed=0)
    pair, single = JaxIPPO(suite, TINY, [3, 5]), JaxIPPO(suite, TINY, [5])
    return pair, _run(pair), single, _run(single)


def test_agem_fills_task_zeros_slot_and_projects_on_task_one(agem_runs):
    pair, (ended, after, (m0, _, m2)), *_ = agem_runs
    assert pair.cl_metrics == tuple(f"cl/{n}" for n in AGEM.metric_names)
    assert np.asarray(ended.cl.sizes).tolist() == [[16, 0], [16, 0]]  # 2 updates x 8 rows
    assert np.asarray(ended.cl.ptrs).tolist() == [[16, 0], [16, 0]]
    assert np.asarray(after.cl.sizes).tolist() == [[16, 8], [16, 8]]
    assert np.asarray(ended.cl.obs)[:, 0, :16].any() and not np.asarray(ended.cl.obs)[:, 1].any()
    for name in pair.cl_metrics:
        assert np.asarray(m2[name]).shape == (1, 2), name
        assert not np.asarray(m0[name]).any(), name  # task 0: no past task, no projection
    assert np.asarray(m2["cl/agem/memory_fullness_pct"]).tolist() == [[40.0, 40.0]]
    assert (np.asarray(m2["cl/agem/mem_grad_norm"]) > 0).all()
    assert (np.asarray(m2["cl/agem/mem_total_loss"]) > 0).all()
    is_proj = np.asarray(m2["cl/agem/is_proj"])  # the fraction of minibatches projected
    assert ((is_proj >= 0) & (is_proj <= 1)).all()
    assert np.asarray(m2["reg_loss"]).tolist() == [[0.0, 0.0]]


def test_agem_vmapped_seeds_equal_single_seed_runs(agem_runs):
    _, (ended, after, metrics), _, (s_ended, s_after, s_metrics) = agem_runs
    for a, b in ((ended, s_ended), (after, s_after)):
        for x, y in zip(jax.tree.leaves(_seed(a, 1)), jax.tree.leaves(_seed(b, 0)), strict=True):
            np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(_seed(after.cl.obs, 1), _seed(s_after.cl.obs, 0))
    for name in ("cl/agem/dot_g", "cl/agem/mem_total_loss"):
        np.testing.assert_allclose(
            np.asarray(metrics[2][name])[:, 1], np.asarray(s_metrics[2][name])[:, 0], rtol=1e-4
        )


def _resume_equals_not_stopping(learner: JaxIPPO, ended, task: int):
    back = learner.load_state_dict(learner.state_dict(ended))
    on, m_on = learner.train(ended, task, 1)
    resumed, m_res = learner.train(back, task, 1)
    for x, y in zip(jax.tree.leaves(on), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(x, y)
    for name in learner.cl_metrics:
        np.testing.assert_array_equal(m_on[name], m_res[name])


def test_agem_state_dict_round_trip_continues_bit_for_bit(agem_runs):
    pair, (ended, *_), *_ = agem_runs
    assert any(k.startswith(".cl.obs") for k in pair.state_dict(ended))
    _resume_equals_not_stopping(pair, ended, 1)


def test_er_ace_over_two_tasks():
    suite = build_suite("MEAL-2", steps_per_task=2 * 8 * 4, seed=0)
    learner = JaxIPPO(suite, dataclasses.replace(TINY, cl_method="er-ace"), [3, 5])
    assert learner.cl_metrics == ("cl/er_ace/total_past_samples",)
    state, m0 = learner.train(learner.init_state(), 0, 1)
    assert np.asarray(m0["cl/er_ace/total_past_samples"]).tolist() == [[0.0, 0.0]]
    ended = learner.end_task(state, 0, 1)
    assert np.asarray(ended.cl.sizes).tolist() == [[8, 0], [8, 0]]
    after, m1 = learner.train(ended, 1, 1)
    assert np.asarray(m1["cl/er_ace/total_past_samples"]).tolist() == [[8.0, 8.0]]
    assert np.asarray(after.cl.sizes).tolist() == [[8, 8], [8, 8]]
    _resume_equals_not_stopping(learner, ended, 1)
