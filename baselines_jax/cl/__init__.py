"""The CL methods of the JAX learners: one module each, one line each in :data:`METHODS`.

The hooks a method fills in are :class:`baselines_jax.cl.base.JaxCLMethod`'s; the learner
(``baselines_jax.learner.JaxIPPO``) calls them inside its compiled programs. MEAL's
penalty methods (``ft``, ``ewc``, ``online-ewc``, ``mas``, ``l2``) are
:class:`~baselines_jax.cl.base.Regularizer`, their pure functions
:mod:`baselines_jax.cl.regularizers` (re-exported here); its replay methods ``agem`` and
``er-ace`` keep the episodic memory of :mod:`baselines_jax.cl.memory`.
"""

from __future__ import annotations

import importlib
from typing import Any

import flax.linen as nn

from baselines_jax.cl.base import JaxCLMethod, Regularizer
from baselines_jax.cl.regularizers import (
    CLState,
    fisher_term,
    init_cl_state,
    mas_term,
    normalize,
    penalty,
    reg_mask,
    update,
)
from baselines_jax.config import IPPOConfig

METHODS: dict[str, str] = {
    "ft": "baselines_jax.cl.base:Regularizer",
    "ewc": "baselines_jax.cl.base:Regularizer",
    "online-ewc": "baselines_jax.cl.base:Regularizer",
    "mas": "baselines_jax.cl.base:Regularizer",
    "l2": "baselines_jax.cl.base:Regularizer",
    "agem": "baselines_jax.cl.agem:AGEM",
    "er-ace": "baselines_jax.cl.er_ace:ERACE",
    "packnet": "baselines_jax.cl.packnet:PackNet",
}
"""``cl_method`` -> ``"module:Class"`` of its :class:`JaxCLMethod`."""


def method_class(cfg: IPPOConfig) -> type[JaxCLMethod]:
    """The class of the method ``cfg.cl_method`` (imported on first use)."""
    module, _, attr = METHODS[cfg.cl_method].partition(":")
    return getattr(importlib.import_module(module), attr)


def make(cfg: IPPOConfig, network: nn.Module, template: Any, num_tasks: int) -> JaxCLMethod:
    """The method ``cfg.cl_method`` for ``network`` (``template``: its parameters'
    shapes) on a sequence of ``num_tasks`` tasks."""
    return method_class(cfg)(cfg, network, template, num_tasks)


__all__ = [
    "METHODS",
    "CLState",
    "JaxCLMethod",
    "Regularizer",
    "fisher_term",
    "init_cl_state",
    "make",
    "mas_term",
    "method_class",
    "normalize",
    "penalty",
    "reg_mask",
    "update",
]
