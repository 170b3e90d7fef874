"""Parameters between the torch MEAL policy (``baselines_sb3.policies.ContinualPolicy``
with MEAL's ``SeparateTrunks``) and the flax ``ActorCritic`` (same function: same layer
sizes, input layout ``[flattened obs, task one-hot]`` and head slices per task).

torch ``Linear.weight (out, in)`` is flax ``Dense.kernel (in, out)``; LayerNorm
``weight``/``bias`` are ``scale``/``bias``. Trunk layers keep their order
(``policy_net`` -> ``actor_dense{i}``/``actor_ln{i}``, ``value_net`` -> ``critic_*``),
``action_net`` -> ``actor_head``, ``value_net`` -> ``critic_head``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _trunk_names(module: Any, prefix: str) -> list[tuple[Any, str]]:
    """``(torch layer, flax name)`` of a trunk's Linear and LayerNorm layers, in order."""
    import torch as th

    out, dense, norm = [], 0, 0
    for layer in module:
        if isinstance(layer, th.nn.Linear):
            dense += 1
            out.append((layer, f"{prefix}_dense{dense}"))
        elif isinstance(layer, th.nn.LayerNorm):
            norm += 1
            out.append((layer, f"{prefix}_ln{norm}"))
    return out


def _layers(policy: Any) -> list[tuple[Any, str]]:
    from baselines_sb3.networks import SeparateTrunks

    trunks = policy.mlp_extractor
    if not isinstance(trunks, SeparateTrunks):
        raise ValueError(
            "params_from_torch needs MEAL's separate trunks (trunk_layer_norm=True), got "
            f"{type(trunks).__name__}"
        )
    return [
        *_trunk_names(trunks.policy_net, "actor"),
        *_trunk_names(trunks.value_net, "critic"),
        (policy.action_net, "actor_head"),
        (policy.value_net, "critic_head"),
    ]


def params_from_torch(policy: Any) -> dict[str, Any]:
    """The flax ``{"params": ...}`` tree (numpy float32) of a torch MEAL policy."""
    import torch as th

    params: dict[str, dict[str, np.ndarray]] = {}
    for layer, name in _layers(policy):
        w = layer.weight.detach().cpu().numpy().astype(np.float32)
        b = layer.bias.detach().cpu().numpy().astype(np.float32)
        if isinstance(layer, th.nn.LayerNorm):
            params[name] = {"scale": w, "bias": b}
        else:
            params[name] = {"kernel": w.T.copy(), "bias": b}
    return {"params": params}


def torch_names(policy: Any) -> dict[str, tuple[str, str]]:
    """torch parameter name -> (flax module name, flax leaf name)."""
    import torch as th

    by_module = {id(m): n for n, m in policy.named_modules()}
    out = {}
    for layer, name in _layers(policy):
        prefix = by_module[id(layer)]
        first = "scale" if isinstance(layer, th.nn.LayerNorm) else "kernel"
        out[f"{prefix}.weight"] = (name, first)
        out[f"{prefix}.bias"] = (name, "bias")
    return out


def load_into_torch(policy: Any, params: Any) -> None:
    """Copy a flax ``{"params": ...}`` tree into the torch policy (inverse of
    ``params_from_torch``)."""
    import torch as th

    tree = params["params"]
    named = dict(policy.named_parameters())
    with th.no_grad():
        for torch_name, (module, leaf) in torch_names(policy).items():
            value = np.asarray(tree[module][leaf])
            named[torch_name].copy_(th.as_tensor(value.T if leaf == "kernel" else value))
