"""Continual-learning methods for SB3 learners (one small interface, see ``base``)."""

from __future__ import annotations

from typing import Any

from baselines_sb3.cl.base import (
    ContinualMethod,
    ContinualMethodCallback,
    Rollout,
    attach_method,
    install_loss_hook,
)
from baselines_sb3.cl.clear import CLEAR, ReservoirBuffer
from baselines_sb3.cl.pnc import ProgressCompress
from baselines_sb3.cl.regularizers import EWC, MAS, L2Anchor, OnlineEWC, QuadraticPenalty

METHODS: dict[str, type[ContinualMethod]] = {
    "ft": ContinualMethod,
    "ewc": EWC,
    "online-ewc": OnlineEWC,
    "l2": L2Anchor,
    "mas": MAS,
    "pnc": ProgressCompress,
    "clear": CLEAR,
}


def make_method(name: str, seed: int = 0, **kwargs: Any) -> ContinualMethod:
    """The CL method ``name`` (one of ``METHODS``) with its hyperparameters."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(METHODS)}")
    cls = METHODS[name]
    if cls is ContinualMethod:
        return ContinualMethod()
    if name in ("ewc", "online-ewc", "l2", "mas", "pnc", "clear"):
        kwargs.setdefault("seed", seed)
    return cls(**kwargs)


__all__ = [
    "CLEAR",
    "EWC",
    "MAS",
    "METHODS",
    "ContinualMethod",
    "ContinualMethodCallback",
    "L2Anchor",
    "OnlineEWC",
    "ProgressCompress",
    "QuadraticPenalty",
    "ReservoirBuffer",
    "Rollout",
    "attach_method",
    "install_loss_hook",
    "make_method",
]
