"""Linear layers over mostly-zero inputs, computed from the non-zero entries only.

MEAL's observations are 97% zeros (Overcooked's 26 feature planes mark a handful of
cells each), and the first layer of each of MEAL's two trunks (1,276 inputs -> 128 units)
is where nearly all of IPPO's arithmetic goes: dense, a PPO minibatch of 512 rows spends
about 12 of its 20 ms in those two matrix products and their weight gradients. Computed
from the non-zero entries, the same products cost a fraction of that.

:func:`sparse_linear` is ``x @ weight.T + bias`` (``torch.nn.functional.linear``), the
same function of the same parameters; only the float32 summation order differs (about
1e-6 relative). :class:`SparseRows` holds a batch's non-zero entries in CSR form, found
once and shared by every layer that reads the batch (the actor and critic trunks), and
can be built straight from the raw observation (any dtype, e.g. uint8) plus one-hot
columns (the task id), without the dense float copy. The forward pass gathers and
scales weight rows (``embedding_bag``), the weight gradient is ``x.T @ grad`` as a CSR
product (scipy), the input gradient (rarely needed) a dense product.

:func:`sparse_rows` decides per batch: batches of at least ``MIN_ROWS`` rows of plain CPU
tensors whose density is at most ``MAX_DENSITY``; smaller or denser batches and
functorch transforms (``vmap``/``grad`` for per-sample Fisher terms) return ``None``, and
the caller takes the dense path.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence

import numpy as np
import scipy.sparse
import torch as th
from torch.nn import functional as F

MIN_ROWS = 32
"""Batches with fewer rows use the dense product (finding non-zeros costs more there)."""
MAX_DENSITY = 0.15
"""Inputs with a larger fraction of non-zero entries use the dense product."""


def _plain(t: th.Tensor) -> bool:
    """False for functorch-wrapped tensors (inside ``vmap`` / ``torch.func.grad``)."""
    functorch = th._C._functorch
    return not (functorch.is_batchedtensor(t) or functorch.is_gradtrackingtensor(t))


class SparseRows:
    """A batch of feature rows ``(B, D)`` in CSR form (float32 values).

    Attributes: ``shape``; ``cols`` ``(nnz,)`` int64 column of each entry, grouped by
    row; ``values`` ``(nnz,)`` float32; ``indptr`` ``(B + 1,)`` (row ``r``'s entries are
    ``indptr[r]:indptr[r + 1]``); ``density`` = nnz / (B * D).
    """

    def __init__(self, cols: th.Tensor, values: th.Tensor, indptr: th.Tensor, shape: tuple):
        self.cols, self.values, self.indptr = cols, values, indptr
        self.shape = (int(shape[0]), int(shape[1]))
        self.density = len(cols) / max(self.shape[0] * self.shape[1], 1)
        self._csr: scipy.sparse.csr_matrix | None = None

    @classmethod
    def build(cls, x: th.Tensor, one_hots: Sequence[tuple[th.Tensor, int]] = ()) -> SparseRows:
        """The rows ``[x, one_hot(ids_1, n_1), ...]``: ``x`` ``(B, D)`` of any numeric
        dtype (its non-zero entries), then one column block of width ``n`` per
        ``(ids (B,), n)`` with a single 1.0 per row."""
        x = x.detach()
        rows, width = x.shape
        pos = x.reshape(-1).nonzero().squeeze(1)
        row = th.div(pos, width, rounding_mode="floor")
        cols = pos - row * width
        values = x.reshape(-1)[pos].to(th.float32)
        counts = th.bincount(row, minlength=rows)
        total_width = width
        if one_hots:
            extra = len(one_hots)
            # row r's entries move right by r * extra slots; its one-hot entries follow them
            ends = th.cumsum(counts, 0) + th.arange(rows) * extra
            index = pos.new_empty(len(pos) + rows * extra)
            out_cols = th.empty_like(index)
            out_values = values.new_empty(len(index))
            keep = th.arange(len(pos)) + row * extra
            out_cols[keep], out_values[keep] = cols, values
            for k, (ids, n) in enumerate(one_hots):
                slot = ends + k
                out_cols[slot] = ids.detach().reshape(-1).long() + total_width
                out_values[slot] = 1.0
                total_width += int(n)
            cols, values, counts = out_cols, out_values, counts + extra
        indptr = th.zeros(rows + 1, dtype=th.int64)
        th.cumsum(counts, 0, out=indptr[1:])
        return cls(cols, values, indptr, (rows, total_width))

    def take(self, index: th.Tensor) -> SparseRows:
        """The rows ``index`` ``(b,)`` long, in that order, as a new batch (the same entries
        as building it from those rows of the input)."""
        index = index.reshape(-1).long()
        counts = (self.indptr[1:] - self.indptr[:-1])[index]
        indptr = th.zeros(len(index) + 1, dtype=th.int64)
        th.cumsum(counts, 0, out=indptr[1:])
        # entry j of output row r is entry j of input row index[r]
        shift = th.repeat_interleave(self.indptr[index] - indptr[:-1], counts)
        entries = th.arange(int(indptr[-1])) + shift
        return SparseRows(
            self.cols[entries], self.values[entries], indptr, (len(index), self.shape[1])
        )

    def csr(self) -> scipy.sparse.csr_matrix:
        """The same entries as a scipy CSR matrix (sharing the index and value memory)."""
        if self._csr is None:
            self._csr = scipy.sparse.csr_matrix(
                (self.values.numpy(), self.cols.numpy(), self.indptr.numpy()), shape=self.shape
            )
        return self._csr

    def to_dense(self) -> th.Tensor:
        return th.from_numpy(self.csr().toarray())


def sparse_rows(
    x: th.Tensor, weight: th.Tensor, one_hots: Sequence[tuple[th.Tensor, int]] = ()
) -> SparseRows | None:
    """``SparseRows.build(x, one_hots)`` when the sparse product pays off for a layer of
    ``weight`` (see the module docstring), else ``None``."""
    if (
        x.dim() != 2
        or x.shape[0] < MIN_ROWS
        or x.device.type != "cpu"
        or weight.device.type != "cpu"
        or weight.dtype != th.float32
        or (x.is_floating_point() and x.dtype != th.float32)
        or not (_plain(x) and _plain(weight) and all(_plain(ids) for ids, _ in one_hots))
    ):
        return None
    rows = SparseRows.build(x, one_hots)
    return rows if rows.density <= MAX_DENSITY else None


class _TableCache(threading.local):
    """The weight tables of one :func:`reuse_tables` scope (per thread)."""

    depth = 0
    tables: dict[int, tuple[weakref.ref, int, int, th.Tensor]]

    def __init__(self) -> None:
        self.tables = {}


_CACHE = _TableCache()


@contextlib.contextmanager
def reuse_tables() -> Iterator[None]:
    """Within this scope, forward passes without autograd reuse each weight's table (a
    rollout: one table per weight instead of one per step). The caller vouches that the
    weights do not change within it: a weight's version counter cannot be trusted to say
    so (a fused optimizer step, ``torch.optim.Adam(fused=True)``, and writes through
    ``.data`` leave it unchanged), so outside a scope every pass makes a fresh table."""
    _CACHE.depth += 1
    try:
        yield
    finally:
        _CACHE.depth -= 1
        if _CACHE.depth == 0:
            _CACHE.tables.clear()


def _table(weight: th.Tensor) -> th.Tensor:
    """``weight.T`` as a contiguous ``(in, out)`` table: made anew for every pass, except
    without autograd inside :func:`reuse_tables`."""
    if th.is_grad_enabled() or not _CACHE.depth:
        return weight.detach().t().contiguous()
    key = (weight._version, weight.data_ptr())
    cached = _CACHE.tables.get(id(weight))
    if cached is not None and cached[0]() is weight and cached[1:3] == key:
        return cached[3]
    table = weight.detach().t().contiguous()
    _CACHE.tables[id(weight)] = (weakref.ref(weight), *key, table)
    return table


class _SparseLinear(th.autograd.Function):
    @staticmethod
    def forward(ctx, rows: SparseRows, weight, bias):  # type: ignore[override]
        ctx.rows = rows
        ctx.save_for_backward(weight)
        out = F.embedding_bag(
            rows.cols, _table(weight), rows.indptr[:-1], mode="sum", per_sample_weights=rows.values
        )
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        rows: SparseRows = ctx.rows
        grad_w = grad_b = None
        if ctx.needs_input_grad[1]:
            g = grad_out.detach().contiguous().numpy()
            grad_w = th.from_numpy(np.asarray(rows.csr().T @ g)).t()
        if ctx.needs_input_grad[2]:
            grad_b = grad_out.sum(0)
        return None, grad_w, grad_b


def sparse_linear(rows: SparseRows, weight: th.Tensor, bias: th.Tensor | None) -> th.Tensor:
    """``F.linear(x, weight, bias)`` for the rows ``x`` that ``rows`` holds (no gradient
    flows to ``x``: it is an observation)."""
    if rows.shape[1] != weight.shape[1]:
        raise ValueError(
            f"sparse rows have {rows.shape[1]} columns, the layer takes {weight.shape[1]}"
        )
    return _SparseLinear.apply(rows, weight, bias)
