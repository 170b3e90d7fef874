"""MEAL's trunks computed from the observation's non-zero entries are the dense trunks:
same outputs and same parameter gradients (float32 summation order aside)."""

from __future__ import annotations

import torch as th
from torch.nn import functional as F

from baselines_sb3.networks import SeparateTrunks
from baselines_sb3.sparse import SparseRows, reuse_tables, sparse_linear, sparse_rows


def _observations(rows: int = 64, width: int = 7 * 7 * 26, density: float = 0.03) -> th.Tensor:
    gen = th.Generator().manual_seed(0)
    mask = th.rand(rows, width, generator=gen) < density
    return (mask * th.randint(1, 4, (rows, width), generator=gen)).to(th.uint8)


def test_rows_hold_the_observation_and_the_one_hot_columns():
    x = _observations()
    ids = th.arange(len(x)) % 3
    rows = SparseRows.build(x, [(ids, 3)])
    dense = th.cat([x.float(), F.one_hot(ids, 3).float()], dim=1)
    assert rows.shape == dense.shape
    assert th.equal(rows.to_dense(), dense)


def test_sparse_linear_equals_linear_with_the_same_gradients():
    x = _observations()
    layer = th.nn.Linear(x.shape[1], 16)
    dense_out = layer(x.float())
    dense_out.square().sum().backward()
    dense_grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    out = sparse_linear(sparse_rows(x, layer.weight), layer.weight, layer.bias)
    out.square().sum().backward()
    th.testing.assert_close(out, dense_out, rtol=1e-5, atol=1e-5)
    for p, g in zip(layer.parameters(), dense_grads, strict=True):
        th.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


def test_dense_path_for_small_dense_or_transformed_batches():
    weight = th.zeros(8, 7 * 7 * 26)
    assert sparse_rows(_observations(rows=8), weight) is None  # fewer than MIN_ROWS
    assert sparse_rows(_observations(density=0.5), weight) is None  # too dense
    seen = []
    th.func.vmap(lambda row: seen.append(sparse_rows(row[None], weight)) or row)(
        _observations().float()
    )
    assert seen == [None]  # functorch-wrapped: the caller computes densely


def test_meal_trunks_give_the_dense_trunks_outputs_and_gradients():
    x = _observations()
    th.manual_seed(1)
    sparse = SeparateTrunks(x.shape[1], [128, 128], sparse_input=True)
    dense = SeparateTrunks(x.shape[1], [128, 128], sparse_input=False)
    dense.load_state_dict(sparse.state_dict())
    outs = [net(x.float()) for net in (sparse, dense)]
    target = th.randn(len(x), 128, generator=th.Generator().manual_seed(2))
    for pi, vf in outs:  # not pi.sum(): LayerNorm makes that gradient ~0
        ((pi * target).sum() + vf.square().sum()).backward()
    for a, b in zip(outs[0], outs[1], strict=True):
        th.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(sparse.named_parameters(), dense.parameters(), strict=True):
        th.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=2e-4, msg=name)  # summation order


def _filled_buffer(rows_of, n_steps: int = 16, n_envs: int = 8):
    import numpy as np
    from gymnasium import spaces

    from baselines_sb3.buffers import SparseRowsRolloutBuffer

    width = 7 * 7 * 26
    space = spaces.Dict(
        {
            "obs": spaces.Box(0, 255, (7, 7, 26), np.uint8),
            "task_id": spaces.Box(0, 2, (1,), np.int64),
        }
    )
    buf = SparseRowsRolloutBuffer(n_steps, space, spaces.Discrete(6), n_envs=n_envs)
    buf.rows_of = rows_of
    obs = (
        _observations(rows=n_steps * n_envs, width=width).numpy().reshape(n_steps, n_envs, 7, 7, 26)
    )
    for t in range(n_steps):
        buf.add(
            {"obs": obs[t], "task_id": np.full((n_envs, 1), t % 3)},
            np.zeros((n_envs, 1)),
            np.zeros(n_envs),
            np.zeros(n_envs),
            th.zeros(n_envs),
            th.zeros(n_envs),
        )
    buf.compute_returns_and_advantage(th.zeros(n_envs), np.zeros(n_envs))
    return buf


def test_minibatch_rows_found_once_per_rollout_equal_rows_built_per_minibatch():
    from baselines_sb3.policies import SPARSE_ROWS_KEY

    def rows_of(obs):
        x = obs["obs"].reshape(len(obs["obs"]), -1)
        return SparseRows.build(x, [(obs["task_id"].reshape(-1), 3)])

    buf = _filled_buffer(rows_of)
    seen = 0
    for batch_size in (32, 128, 16):  # 16 < MIN_ROWS: no rows, the policy decides itself
        for data in buf.get(batch_size):
            obs = data.observations
            if batch_size < 32:
                assert SPARSE_ROWS_KEY not in obs
                continue
            taken = obs[SPARSE_ROWS_KEY]
            built = rows_of(obs)  # what the policy would build from this minibatch
            assert taken.shape == built.shape
            for a, b in ((taken.cols, built.cols), (taken.values, built.values)):
                assert th.equal(a, b)
            assert th.equal(taken.indptr, built.indptr)
            seen += 1
    assert seen == 4 + 1
    assert next(_filled_buffer(lambda obs: None).get(32)).observations.keys() == {
        "obs",
        "task_id",
    }


def test_meal_ppo_trains_on_rows_found_once_per_rollout():
    from baselines_sb3.buffers import SparseRowsRolloutBuffer
    from baselines_sb3.factory import build_model, wrap_env
    from cl_suites.api import make_vec
    from cl_suites.job import hyperparameters
    from cl_suites.sb3.adapter import SB3VecEnv
    from cl_suites.suites.diagnostic import build

    sequence = build(n_tasks=2, steps_per_task=256, show_task=False)
    hp = hyperparameters.preset_settings("MEAL-2", "ppo", "ft", "paper")
    vec = SB3VecEnv(make_vec("Diagnostic", 2, n_tasks=2, steps_per_task=256, show_task=False))
    env, _ = wrap_env(vec, sequence, hp, multi_head=True, task_id_input=True)
    model = build_model(
        "ppo", env, sequence, hp, None, method="ft", seed=0, multi_head=True, task_id_input=True
    )
    assert isinstance(model.rollout_buffer, SparseRowsRolloutBuffer)
    assert model.rollout_buffer.rows_of == model.policy.sparse_features


def _fused_adam_step(layer: th.nn.Linear) -> None:
    optimizer = th.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    version = layer.weight._version
    layer(th.ones(2, layer.in_features)).square().sum().backward()
    optimizer.step()
    assert layer.weight._version == version  # why the version counter cannot be trusted


def test_passes_without_autograd_use_the_weights_after_a_fused_step():
    x = _observations()
    rows = SparseRows.build(x)
    layer = th.nn.Linear(x.shape[1], 16)
    with th.no_grad():
        sparse_linear(rows, layer.weight, layer.bias)  # a first pass, as a rollout's
    _fused_adam_step(layer)
    with th.no_grad():
        expected = F.linear(x.float(), layer.weight, layer.bias)
        th.testing.assert_close(sparse_linear(rows, layer.weight, layer.bias), expected)
        with reuse_tables():  # a rollout after the update: its own table
            first = sparse_linear(rows, layer.weight, layer.bias)
            th.testing.assert_close(first, expected)
            th.testing.assert_close(sparse_linear(rows, layer.weight, layer.bias), first)
    _fused_adam_step(layer)
    with th.no_grad(), reuse_tables():  # the next rollout does not see the last one's table
        expected = F.linear(x.float(), layer.weight, layer.bias)
        th.testing.assert_close(sparse_linear(rows, layer.weight, layer.bias), expected)
