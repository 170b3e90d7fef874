"""What the remedies do to an optimizer's per-parameter state (torch ``Optimizer.state``).

Two operations: forget a parameter entirely (:func:`forget`: its state entry is deleted, as a
parameter the optimizer has never stepped has none; Adam then starts it at step 0 with zero
moments) and zero the running statistics of some of its rows or columns
(:func:`zero_entries`). The statistics are every state tensor shaped like the parameter:
Adam's ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``), RMSprop's ``square_avg`` /
``momentum_buffer`` / ``grad_avg``, SGD's ``momentum_buffer``. Adam's ``step`` is one
counter per tensor in torch (GnT's ``AdamGnT`` keeps one per entry): it is left as it is,
so a zeroed entry's next update is bias-corrected with the tensor's step.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch as th
from torch import nn


def forget(optimizer: th.optim.Optimizer | None, params: Iterable[nn.Parameter]) -> int:
    """Delete the state entries of ``params`` (no-op without an optimizer); returns how
    many entries were deleted."""
    if optimizer is None:
        return 0
    return sum(optimizer.state.pop(p, None) is not None for p in params)


def zero_entries(
    optimizer: th.optim.Optimizer | None, param: th.Tensor, index: th.Tensor, dim: int
) -> None:
    """Zero the running statistics of ``param``'s entries at ``index`` (long) along ``dim``
    (0: rows / output units, 1: columns / input channels). No-op without an optimizer
    or before the parameter's first step."""
    if optimizer is None or index.numel() == 0:
        return
    state = optimizer.state.get(param)
    if not state:
        return
    for key, value in state.items():
        if key != "step" and isinstance(value, th.Tensor) and value.shape == param.shape:
            value.index_fill_(dim, index.to(value.device), 0.0)
