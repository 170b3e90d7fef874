"""Network parameters between CORA's IMPALA networks and our policies.

CORA (``AGI-Labs/continual_rl@f2754bb``) names the parameters of its ``ImpalaNet``
(``policies/impala/nets.py``, conv nets of ``utils/common_nets.py``) and of P&C's
``ProgressAndCompressNet`` (``policies/progress_and_compress/progress_and_compress_policy.py``)
differently from our :class:`~baselines_sb3.policies.ContinualPolicy` and
:class:`~baselines_sb3.pnc_policy.ProgressCompressPolicy`; the tensors are the same (same
shapes, same meaning, same order of the core input ``[conv features, clipped reward,
one-hot previous action]``). :func:`cora_state_dict` writes our parameters under CORA's
names (e.g. for ``load_state_dict`` of CORA's model, or a ``model.tar``'s
``model_state_dict``) and :func:`load_cora_state_dict` reads CORA's into ours (e.g. a
snapshot of a CORA run, to evaluate it with our evaluator).

The mapping, ours -> CORA:

* ``features_extractor.cnn.<i>`` -> ``_conv_net._conv_net.<i>`` (the conv stack, same
  indices: ``"shallow"`` = arch ``"orig"``, ``"residual"`` = arch ``"impala_res_cnn"``);
  a residual block's ``conv0`` / ``conv1`` -> its ``_res_block.1`` / ``_res_block.3``;
* ``features_extractor.linear.0`` -> ``_conv_net._post_flatten``;
* ``action_net`` -> ``policy``, ``value_net`` -> ``baseline`` (one output: CORA's
  ``baseline_includes_uncertainty=False`` and ``baseline_extended_arch=False``);
* ``reward_normalizer.reward_{sum,m2,count}`` -> ``reward_{sum,m2,count}`` (float64 here,
  float32 in CORA);
* P&C: the active column under ``_active_column.``, ``kb.<part>`` -> ``knowledge_base.``
  (and CORA's second name of the same module, ``_active_column._knowledge_base.``), the
  adapters of ``adapted_layers`` in order -> ``_active_column._adaptor_params.<j>``, four
  tensors each (the adapter's first layer's weight and bias, then its last layer's).

Only the networks CORA's IMPALA has map (``"shallow"``, ``"residual"``, no MLP trunk:
``net_arch=[]``); anything else raises ``ValueError`` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch as th
from torch import nn

from baselines_sb3.networks import CoraResidualCNN, ImpalaShallowCNN
from baselines_sb3.pnc_policy import ProgressCompressPolicy, adapter_key

CORA_EXTRACTORS = (ImpalaShallowCNN, CoraResidualCNN)
"""Our feature extractors of CORA's conv nets (arch ``"orig"`` and ``"impala_res_cnn"``)."""
_REWARD_MOMENTS = ("reward_sum", "reward_m2", "reward_count")
_HEADS = {"action_net": "policy", "value_net": "baseline"}


def _column_key(name: str) -> str:
    """CORA's ``ImpalaNet`` name of our column parameter ``name`` (see the module docstring)."""
    part, _, rest = name.partition(".")
    if part in _HEADS:
        return f"{_HEADS[part]}.{rest}"
    if part == "features_extractor":
        if rest.startswith("linear.0."):
            return "_conv_net._post_flatten." + rest[len("linear.0.") :]
        if rest.startswith("cnn."):
            inner = rest[len("cnn.") :].replace(".conv0.", "._res_block.1.")
            return "_conv_net._conv_net." + inner.replace(".conv1.", "._res_block.3.")
    if part == "reward_normalizer" and rest in _REWARD_MOMENTS:
        return rest
    raise ValueError(
        f"parameter {name!r} has no counterpart in CORA's ImpalaNet (CORA's IMPALA has the "
        "'shallow' and 'residual' networks with no MLP trunk, net_arch=[])"
    )


def cora_names(policy: nn.Module) -> dict[str, list[str]]:
    """Our parameter / buffer name -> CORA's name(s) of the same tensor, for every trainable
    parameter of ``policy`` and its reward moments (P&C's KB has two names in CORA)."""
    extractor = getattr(policy, "features_extractor", None)
    if not isinstance(extractor, CORA_EXTRACTORS):
        raise ValueError(
            f"{type(extractor).__name__} has no counterpart in CORA's ImpalaNet; CORA's IMPALA "
            "networks are 'shallow' (ImpalaShallowCNN) and 'residual' (CoraResidualCNN)"
        )
    ours = [n for n, _ in policy.named_parameters()]
    ours += [f"reward_normalizer.{m}" for m in _REWARD_MOMENTS if _has_normalizer(policy)]
    if not isinstance(policy, ProgressCompressPolicy):
        return {name: [_column_key(name)] for name in ours}
    adapters = {
        f"adapters.{adapter_key(layer)}": j for j, layer in enumerate(policy.adapted_layers)
    }
    out: dict[str, list[str]] = {}
    for name in ours:
        if name.startswith("kb."):
            key = _column_key(name[len("kb.") :])
            out[name] = [f"knowledge_base.{key}", f"_active_column._knowledge_base.{key}"]
        elif name.startswith("adapters."):
            prefix, layer, tensor = name.rsplit(".", 2)
            slot = {"0": 0, "2": 2}[layer] + (0 if tensor == "weight" else 1)
            out[name] = [f"_active_column._adaptor_params.{4 * adapters[prefix] + slot}"]
        else:
            out[name] = [f"_active_column.{_column_key(name)}"]
    return out


def _has_normalizer(policy: nn.Module) -> bool:
    return isinstance(getattr(policy, "reward_normalizer", None), nn.Module)


def _our_tensors(policy: nn.Module) -> dict[str, th.Tensor]:
    tensors = dict(policy.named_parameters())
    if _has_normalizer(policy):
        normalizer = policy.reward_normalizer
        tensors.update({f"reward_normalizer.{m}": getattr(normalizer, m) for m in _REWARD_MOMENTS})
    return tensors


def cora_state_dict(policy: nn.Module) -> dict[str, th.Tensor]:
    """``policy``'s parameters (and reward moments, as float32) under CORA's names: a
    state dict for CORA's ``ImpalaNet`` / ``ProgressAndCompressNet``."""
    tensors = _our_tensors(policy)
    out: dict[str, th.Tensor] = {}
    for name, keys in cora_names(policy).items():
        value = tensors[name].detach().clone()
        if name.startswith("reward_normalizer."):
            value = value.float()
        for key in keys:
            out[key] = value
    return out


@th.no_grad()
def load_cora_state_dict(policy: nn.Module, state: Mapping[str, th.Tensor]) -> None:
    """Copy CORA's parameters (a ``state_dict`` of its ``ImpalaNet`` or
    ``ProgressAndCompressNet``, e.g. ``model.tar``'s ``model_state_dict``) into ``policy``.

    Raises ``ValueError`` naming the first of our tensors whose CORA counterpart is missing
    or has another shape."""
    tensors = _our_tensors(policy)
    for name, keys in cora_names(policy).items():
        key = keys[0]
        if key not in state:
            raise ValueError(f"CORA's state dict has no {key!r} (for our {name!r})")
        value = th.as_tensor(state[key])
        if tuple(value.shape) != tuple(tensors[name].shape):
            raise ValueError(
                f"CORA's {key!r} has shape {tuple(value.shape)}, our {name!r} "
                f"{tuple(tensors[name].shape)}"
            )
        tensors[name].copy_(value.to(tensors[name]))
