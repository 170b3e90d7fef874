"""MEAL's trunks computed from the observation's non-zero entries are the dense trunks:
same outputs and same parameter gradients (float32 summation order aside)."""

from __future__ import annotations

import torch as th
from torch.nn import functional as F

from baselines_sb3.networks import SeparateTrunks
from baselines_sb3.sparse import SparseRows, sparse_linear, sparse_rows


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
