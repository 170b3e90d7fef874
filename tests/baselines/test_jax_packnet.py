"""MEAL 057f862's PackNet as a CL method of ``ppo-jax`` (``baselines_jax.cl.packnet``):
MEAL's own code on the same parameters (the pins), the masks' invariants over a tiny
three-task run (disjoint, frozen weights exact, pruned weights zero, capacity spent task by
task), seeds vmapped equal to a single seed, evaluation with the eval masks, the job's
fine-tune phase with an exact resume, and bad input refused in one line."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from baselines_jax import IPPOConfig, JaxIPPO
from baselines_jax.cl.packnet import meal_layer_name
from baselines_jax.learner import actor_critic, check_method
from benchmarks.parity import meal_packnet_cases as C
from cl_suites.meal.suite import build_suite
from cl_suites.remedies import RemedyConfig
from tests.helpers import REPO
from tests.helpers.kill_drills import jax_run_dies_after_checkpoint

TINY = IPPOConfig(
    num_envs=2,
    num_steps=8,
    num_minibatches=2,
    update_epochs=2,
    hidden_sizes=(16, 16),
    cl_method="packnet",
    packnet_finetune_steps=2 * 8 * 2,  # 2 updates
)
TASKS = 3


def _seed(tree, i):
    return jax.tree.map(lambda x: np.asarray(x)[i], tree)


def test_reference_pins():
    """Ours equals MEAL 057f862's ``Packnet`` at every stage of the cases (masks bit for
    bit, parameters and gradients byte for byte; ``meal_packnet_reference.py`` wrote the
    pins from MEAL's code)."""
    pins = json.loads((REPO / "tests" / "golden" / "meal_packnet_reference.json").read_text())
    assert pins["meal"] == "TTomilin/MEAL@057f862"
    assert set(pins["cases"]) == set(C.CASES)
    for name, theirs in pins["cases"].items():
        ours = C.our_values(name)
        assert list(ours) == list(theirs), name
        for stage, want in theirs.items():
            got = ours[stage]
            assert got["leaves"].keys() == want["leaves"].keys(), (name, stage)
            for leaf, value in want["leaves"].items():
                assert got["leaves"][leaf] == pytest.approx(value, rel=1e-6, abs=1e-6), (
                    name, stage, leaf,
                )  # fmt: skip
            assert got["hash"] == want["hash"], (name, stage)


def test_network_is_meals_packnet_network():
    """PackNet's default network is MEAL 057f862's ``model/mlp_packnet.py``: on MEAL's
    initial parameters (pinned by ``meal_packnet_reference.py``) it has exactly MEAL's
    layers (one LayerNorm per trunk, after the first layer, eps 1e-6) and gives MEAL's
    log-probabilities and values byte for byte; the other methods' network (a norm after
    every layer) has other layers."""
    pins = json.loads((REPO / "tests" / "golden" / "meal_packnet_reference.json").read_text())
    assert set(pins["networks"]) == set(C.NETWORK_CASES)
    for name, pin in pins["networks"].items():
        case = C.NETWORK_CASES[name]
        assert C.network_config(case).architecture == "mlp-packnet"
        as_array = lambda x: np.asarray(x, np.float32)  # noqa: E731
        params = jax.tree.map(as_array, pin["params"], is_leaf=lambda x: isinstance(x, list))
        outputs = C.our_network_outputs(case, params)
        assert outputs is not None, name
        assert C.digest(outputs) == pin["hash"], name
        mlp = dataclasses.replace(C.network_config(case), network="mlp")
        assert C.our_network_outputs(case, params, mlp) is None, name  # it has *_ln2
    net = actor_critic(TINY, TASKS)
    assert (net.norm_layers, net.norm_eps) == ("first", 1e-6)
    assert TINY.architecture == "mlp-packnet"
    assert dataclasses.replace(TINY, cl_method="ewc").architecture == "mlp"
    assert dataclasses.replace(TINY, network="mlp").architecture == "mlp"


def test_meal_layer_names_and_rules():
    """Our layers under MEAL's names (``get_layer_name``); what MEAL's rules make of
    them: actor/shared trunk kernels prunable, a single head's kernel too, never the
    critic or a multi-head head."""
    assert meal_layer_name("actor_dense1", True) == "actor_Dense_1"
    assert meal_layer_name("common_ln2", True) == "common_LayerNorm_2"
    assert meal_layer_name("actor_head", True) == "actor_Dense_multi_head"
    assert meal_layer_name("critic_head", False) == "critic_Dense_single_head"
    from baselines_jax.cl.packnet import is_frozen_after_task0, is_prunable

    assert is_prunable("actor_Dense_1", "kernel") and is_prunable("common_Dense_2", "kernel")
    assert is_prunable("actor_Dense_single_head", "kernel")
    assert not is_prunable("actor_Dense_1", "bias")
    assert not is_prunable("critic_Dense_1", "kernel")
    assert not is_prunable("actor_Dense_multi_head", "kernel")
    assert is_frozen_after_task0("actor_LayerNorm_1", "scale")
    assert is_frozen_after_task0("actor_Dense_1", "bias")
    assert not is_frozen_after_task0("critic_LayerNorm_1", "scale")
    assert not is_frozen_after_task0("actor_Dense_multi_head", "bias")


@pytest.fixture(scope="module")
def tiny_runs():
    """Seeds (3, 5) vmapped and seed 5 alone over MEAL-3 (3 updates per task, 2 fine-tune
    updates): per task the state after training, after the pruning and after its end."""
    suite = build_suite("MEAL-3", steps_per_task=2 * 8 * 3, seed=0)
    out = {}
    for seeds in ([3, 5], [5]):
        learner = JaxIPPO(suite, TINY, seeds)
        state = learner.init_state()
        stages, metrics = [], []
        for task in range(TASKS):
            state, m_train = learner.train(state, task, learner.updates_per_task)
            trained = state
            if seeds == [5] and task == 0:
                with pytest.raises(RuntimeError, match="end_train .* before end_task"):
                    learner.end_task(state, task, task + 1)
            state = learner.end_train(state)
            pruned = state
            state, m_ft = learner.train(state, task, learner.finetune_updates)
            finetuned = state
            state = learner.end_task(state, task, task + 1 if task + 1 < TASKS else None)
            stages.append(dict(trained=trained, pruned=pruned, finetuned=finetuned, ended=state))
            metrics.append((m_train, m_ft))
        out[tuple(seeds)] = (learner, stages, metrics)
    return out


def _prunable_kernels(learner):
    return sorted(learner.method.layers)


def test_masks_of_different_tasks_are_disjoint_and_pruned_weights_zero(tiny_runs):
    learner, stages, _ = tiny_runs[(3, 5)]
    masks = stages[-1]["ended"].cl.masks["params"]
    for i in range(2):
        for name in _prunable_kernels(learner):
            m = np.asarray(masks[name]["kernel"])[i]  # (tasks, ...)
            assert (m.sum(0) <= 1).all(), name  # no weight in two tasks' masks
            assert m.sum(0).all(), name  # the last task took every free weight
            assert all(m[t].any() for t in range(TASKS)), name
        # biases and norms: task 0's mask only (after its fine-tuning), the critic never
        bias = np.asarray(masks["actor_dense1"]["bias"])[i]
        assert bias[0].all() and not bias[1:].any()
        assert np.asarray(masks["actor_ln1"]["scale"])[i][0].all()
        assert not np.asarray(masks["critic_dense1"]["kernel"])[i].any()
        assert not np.asarray(masks["actor_head"]["kernel"])[i].any()  # multi-head
    for t, stage in enumerate(stages[:-1]):  # the last task prunes nothing
        held = stage["pruned"].cl.masks["params"]
        for name in _prunable_kernels(learner):
            kept = np.asarray(held[name]["kernel"])[:, : t + 1].any(1)
            w = np.asarray(stage["pruned"].params["params"][name]["kernel"])
            assert (w[~kept] == 0).all(), (t, name)
            before = np.asarray(stage["trained"].params["params"][name]["kernel"])
            np.testing.assert_array_equal(w[kept], before[kept])


def test_weights_frozen_by_earlier_tasks_stay_exactly(tiny_runs):
    """A finished task's weights (its mask; task 0's biases and norms) do not move in any
    later task's training or fine-tuning, to the bit; the critic and the heads do."""
    _, stages, _ = tiny_runs[(3, 5)]
    final = stages[-1]["ended"]
    masks = final.cl.masks
    for t in range(TASKS - 1):
        after_t = stages[t]["ended"].params
        for later in stages[t + 1 :]:
            for key in ("trained", "finetuned", "ended"):
                moved = later[key].params

                def check(mask, a, b, t=t):
                    held = np.asarray(mask)[:, : t + 1].any(1)
                    np.testing.assert_array_equal(np.asarray(b)[held], np.asarray(a)[held])

                jax.tree.map(check, masks, after_t, moved)
    p0 = stages[0]["ended"].params["params"]
    p2 = final.params["params"]
    assert not np.array_equal(p0["critic_dense1"]["kernel"], p2["critic_dense1"]["kernel"])
    assert not np.array_equal(p0["actor_head"]["kernel"], p2["actor_head"]["kernel"])


def test_capacity_decreases_task_by_task_to_zero(tiny_runs):
    learner, stages, _ = tiny_runs[(3, 5)]
    left = []
    for stage in stages:
        rows = learner.method.task_rows(
            _seed(stage["ended"].cl, 0), _seed(stage["ended"].params, 0)
        )
        by_layer = {r["layer"]: r for r in rows}
        assert set(by_layer) == {*_prunable_kernels(learner), "all"}
        assert by_layer["all"]["weights"] == sum(
            by_layer[n]["weights"] for n in _prunable_kernels(learner)
        )
        left.append(by_layer["all"]["capacity_left"])
    assert left[0] > left[1] > left[2] == 0.0
    assert left[0] == pytest.approx(2 / 3, abs=0.01)  # task 0 of 3 keeps a third


def test_fine_tune_restarts_adam_and_the_learning_rate(tiny_runs):
    """MEAL's ``on_train_end`` rebuilds the optimizer: the fine-tune phase starts at the
    full learning rate and decays on the training's slope; the task counts its updates
    on (the shaping continues)."""
    _, stages, metrics = tiny_runs[(3, 5)]
    m_train, m_ft = metrics[0]
    np.testing.assert_allclose(np.asarray(m_train["learning_rate"])[:, 0], [3e-4, 2e-4, 1e-4])
    np.testing.assert_allclose(np.asarray(m_ft["learning_rate"])[:, 0], [3e-4, 2e-4])
    pruned = stages[0]["pruned"]
    assert all(float(np.abs(x).sum()) == 0 for x in jax.tree.leaves(pruned.opt_state))
    # the fine-tune updates draw from MEAL's finetune_rng: the second key of a split
    split = jax.vmap(lambda k: jax.random.split(k)[1])(stages[0]["trained"].rng)
    np.testing.assert_array_equal(pruned.rng, split)
    assert np.asarray(stages[0]["finetuned"].update).tolist() == [5, 5]
    assert not np.asarray(pruned.cl.train_mode).any()
    assert np.asarray(stages[0]["ended"].cl.train_mode).all()
    assert np.asarray(stages[0]["ended"].cl.current_task).tolist() == [1, 1]


def test_vmapped_seeds_equal_the_single_seed_run(tiny_runs):
    _, pair, _ = tiny_runs[(3, 5)]
    _, alone, _ = tiny_runs[(5,)]
    for a, b in zip(pair, alone, strict=True):
        for key in ("pruned", "ended"):
            x, y = _seed(a[key], 1), _seed(b[key], 0)
            for u, v in zip(jax.tree.leaves(x.cl.masks), jax.tree.leaves(y.cl.masks), strict=True):
                np.testing.assert_array_equal(u, v)
            for u, v in zip(jax.tree.leaves(x.params), jax.tree.leaves(y.params), strict=True):
                np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-6)


def test_evaluation_acts_with_the_eval_masks(tiny_runs):
    """MEAL's ``get_eval_mask``: a trained task acts with the masks up to it (and the
    heads), an untrained one with every parameter; the job's ``eval_policy`` acts so."""
    from cl_suites.job.jax.acting import eval_policy

    learner, stages, _ = tiny_runs[(3, 5)]
    state = stages[0]["ended"]  # task 0 finished, tasks 1 and 2 not trained
    params, cl = _seed(state.params, 0), _seed(state.cl, 0)
    masked = learner.eval_params(params, cl, 0)
    for name in _prunable_kernels(learner):
        own = np.asarray(cl.masks["params"][name]["kernel"])[0]
        got = np.asarray(masked["params"][name]["kernel"])
        np.testing.assert_array_equal(got[own], np.asarray(params["params"][name]["kernel"])[own])
        assert (got[~own] == 0).all()
    np.testing.assert_array_equal(
        masked["params"]["actor_head"]["kernel"], params["params"]["actor_head"]["kernel"]
    )
    assert not np.asarray(masked["params"]["critic_dense1"]["kernel"]).any()
    untrained = learner.eval_params(params, cl, 1)
    for u, v in zip(jax.tree.leaves(untrained), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(u, v)
    # after the whole sequence task 0's weights alone still decide task 0's actions
    final = stages[-1]["ended"]
    params, cl = _seed(final.params, 0), _seed(final.cl, 0)
    obs = np.random.default_rng(0).integers(0, 2, (6, *learner.suite.obs_shape), np.uint8)
    policy = eval_policy(learner, params, greedy=True, cl=cl)
    want = learner.act(learner.eval_params(params, cl, 0), obs, 0, True)
    np.testing.assert_array_equal(policy(obs, np.zeros(6, int)), np.asarray(want))
    np.testing.assert_array_equal(learner.act(params, obs, 0, True, cl=cl), np.asarray(want))
    logits_masked = learner.apply(learner.eval_params(params, cl, 0), obs.reshape(6, -1), 0)[0]
    logits_plain = learner.apply(params, obs.reshape(6, -1), 0)[0]
    assert not np.allclose(logits_masked, logits_plain)  # all weights: another network


BAD = [
    (dict(packnet_finetune_steps=-1), "packnet_finetune_steps must be a non-negative int"),
    (dict(packnet_finetune_steps=1.5), "packnet_finetune_steps must be a non-negative int"),
    (dict(packnet_finetune_steps=10), "less than one update .* at least 16"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_settings_are_one_line(change, message):
    with pytest.raises(ValueError, match=message) as err:
        dataclasses.replace(TINY, **change)
    assert "\n" not in str(err.value)


def test_bad_sequences_are_one_line_before_anything_compiles():
    obs_dim = 7 * 7 * 26
    with pytest.raises(ValueError, match=r"cycles=2 \(limit 1\)"):
        check_method(TINY, 3, obs_dim, cycles=2)
    tiny_head = dataclasses.replace(TINY, hidden_sizes=(2,), multi_head=False)
    check_method(tiny_head, 12, obs_dim)  # 2 x 6 single-head kernel: 12 tasks fit
    with pytest.raises(ValueError, match=r"layer actor_head has 12 prunable weights.*13 tasks"):
        check_method(tiny_head, 13, obs_dim)
    with_remedy = dataclasses.replace(TINY, remedy=RemedyConfig(remedy="redo"))
    with pytest.raises(ValueError, match="packnet freezes .* remedy"):
        check_method(with_remedy, 3, obs_dim)
    assert dataclasses.replace(TINY, packnet_finetune_steps=1e3).packnet_finetune_steps == 1000
    assert dataclasses.replace(TINY, packnet_finetune_steps=100).finetune_updates == 6  # floor
    assert dataclasses.replace(TINY, cl_method="ft").finetune_updates == 0


# -- the job: the fine-tune phase in the schedule, resume inside it ----------------------
JOB = dict(suite="MEAL-2", method="ft", learner=None, preset="small", num_envs=4)
OVERRIDES = {
    "steps_per_task": 512,
    "eval_every": 256,
    "eval_episodes": 2,
    "episode_len": 100,
    "checkpoint_every": 64,
    "report": False,
    "layout_seed": 0,
}
FINETUNE = 128  # 2 updates of 4 envs x 16 steps


def _packnet_specs(seed):
    """The run as ``--method packnet`` will resolve it (the CLI name is wired by the
    lead): the ``ft`` run's spec with PackNet's learner config."""
    from cl_suites.job.run_spec import resolve_job

    spec = resolve_job(**JOB, seed=seed, overrides=OVERRIDES)
    config = dataclasses.replace(
        spec.learner_config, cl_method="packnet", packnet_finetune_steps=FINETUNE
    )
    return [dataclasses.replace(spec, method="packnet", learner_config=config)]


def _job(run_dir, seed=3, kill_at=None, resume=False):
    from cl_suites.job.jax import train as jax_job

    specs = _packnet_specs(seed)
    if kill_at is None:
        jax_job.run_jax(specs, [seed], [run_dir], resume)
        return run_dir
    with jax_run_dies_after_checkpoint(kill_at):
        jax_job.run_jax(specs, [seed], [run_dir], resume)
    return run_dir


@pytest.fixture(scope="module")
def job_cache(tmp_path_factory):
    """The job's runs compile the same programs: JAX's persistent cache serves the later
    ones (as tests/meal/test_meal_jax_job.py)."""
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    previous = {k: getattr(jax.config, k) for k in keys}
    jax.config.update(keys[0], str(tmp_path_factory.mktemp("jax-cache")))
    jax.config.update(keys[1], 0.0)
    yield
    for key, value in previous.items():
        jax.config.update(key, value)


@pytest.fixture(scope="module")
def packnet_run(tmp_path_factory, job_cache):
    return _job(tmp_path_factory.mktemp("packnet"))


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
def test_job_fine_tunes_inside_the_tasks_schedule_and_logs_capacity(packnet_run):
    from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata, read_packnet

    meta = read_metadata(packnet_run)
    assert [(s["start_step"], s["end_step"]) for s in meta["schedule"]] == [
        (0, 512 + FINETUNE),
        (640, 1280),
    ]
    ev = read_eval(packnet_run)
    assert set(ev.total_step) == {256, 512, 640, 896, 1152, 1280}
    episodes = read_episodes(packnet_run)  # the fine-tune's episodes are task 0's training
    assert (episodes[episodes.total_step.between(513, 640)].task_id == 0).all()
    table = read_packnet(packnet_run)
    assert table.total_step.tolist().count(640) == table.total_step.tolist().count(1280) > 1
    all_rows = table[table.layer == "all"].set_index("task_id")
    assert all_rows.loc[0, "capacity_left"] == pytest.approx(0.5, abs=0.01)  # 1 of 2 tasks
    assert all_rows.loc[1, "capacity_left"] == 0.0
    assert (table.kept <= table.weights).all()


@pytest.mark.slow  # compiles the learner: minutes on a busy 2-core CPU
@pytest.mark.parametrize("kill_at", [512, 576])  # at the pruning; inside the fine-tuning
def test_job_resume_inside_the_fine_tune_phase_is_exact(packnet_run, tmp_path, kill_at):
    from cl_suites.job.jax.checkpoint import jax_checkpoint_path, load_jax_checkpoint
    from cl_suites.rundir.runlog import read_episodes, read_eval, read_packnet

    cut = _job(tmp_path / "cut", kill_at=kill_at)
    assert load_jax_checkpoint(jax_checkpoint_path(cut))[1]["total_step"] == kill_at
    _job(cut, resume=True)
    pd_testing = pytest.importorskip("pandas.testing")
    a, b = (read_eval(d).drop(columns="wall_time") for d in (packnet_run, cut))
    pd_testing.assert_frame_equal(a, b)
    pd_testing.assert_frame_equal(read_episodes(packnet_run), read_episodes(cut))
    pd_testing.assert_frame_equal(read_packnet(packnet_run), read_packnet(cut))
    full = load_jax_checkpoint(jax_checkpoint_path(packnet_run))[0]
    again = load_jax_checkpoint(jax_checkpoint_path(cut))[0]
    assert full.keys() == again.keys() and any(".cl.masks" in k for k in full)
    for key in full:
        np.testing.assert_array_equal(full[key], again[key], err_msg=key)
