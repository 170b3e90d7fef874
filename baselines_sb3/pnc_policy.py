"""Progress & Compress's network as CORA builds it (``progress_and_compress_policy.py``).

Two columns of the same network: the **active column** (the SB3 policy's own modules,
trained by RL in the progress phase) and the **knowledge base** (KB, ``policy.kb``, trained
by distillation in the compress phase). Lateral adapters carry the KB's knowledge into the
active column at every parametrised layer after the first (whose input is the
observation): the adapter of layer ``l`` reads the KB's *input* to its layer ``l`` and its
output is added to the output of the active column's layer ``l`` (P&C eq. 1):

* Conv2d: a fresh copy of the layer (same kernel, stride, padding), ReLU, then a 1x1 conv;
* Linear: ``Linear(in, out)``, ReLU, ``Linear(out, out)``.

The KB runs first, without gradients, on the same batch; forward hooks keep its layer
inputs and add the adapters' outputs in the active column (as CORA does with hooks).
Inside ``evaluation_mode()`` the policy acts with the KB alone (CORA evaluates P&C on its
KB). The two columns are initialised independently, as CORA builds two networks.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch as th
from torch import nn

from baselines_sb3.policies import ContinualPolicy

ADAPTED_LAYERS = (nn.Conv2d, nn.Linear)
COLUMN_PARTS: tuple[str, ...] = ("features_extractor", "mlp_extractor", "action_net", "value_net")
ORTHO_GAINS = {
    "features_extractor": np.sqrt(2),
    "mlp_extractor": np.sqrt(2),
    "action_net": 0.01,
    "value_net": 1.0,
}


def _adapter(layer: nn.Module) -> nn.Sequential:
    if isinstance(layer, nn.Conv2d):
        clone = copy.deepcopy(layer)
        clone.reset_parameters()
        return nn.Sequential(clone, nn.ReLU(), nn.Conv2d(layer.out_channels, layer.out_channels, 1))
    return nn.Sequential(
        nn.Linear(layer.in_features, layer.out_features),
        nn.ReLU(),
        nn.Linear(layer.out_features, layer.out_features),
    )


def adapter_key(name: str) -> str:
    """The key in ``policy.adapters`` of the adapter of layer ``name`` (dots are not allowed
    in module names)."""
    return name.replace(".", "__")


class ProgressCompressPolicy(ContinualPolicy):
    """Active column + knowledge base + lateral adapters (see the module docstring).

    ``adapted_layers``: names of the active-column layers that have an adapter, in forward
    order (``features_extractor.cnn.2``, ..., ``action_net``, ``value_net``).
    """

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.kb = nn.ModuleDict({part: copy.deepcopy(getattr(self, part)) for part in COLUMN_PARTS})
        self._reinitialise(self.kb)
        self.adapters = nn.ModuleDict()
        self.adapted_layers: list[str] = []
        first = self._first_layers()
        for part in COLUMN_PARTS:
            for sub, layer in getattr(self, part).named_modules():
                name = f"{part}.{sub}" if sub else part
                if isinstance(layer, ADAPTED_LAYERS) and name not in first:
                    self.adapters[adapter_key(name)] = _adapter(layer)
                    self.adapted_layers.append(name)
        self._kb_inputs: dict[str, th.Tensor] = {}
        for name in self.adapted_layers:
            self.kb.get_submodule(name).register_forward_pre_hook(
                partial(self._keep_kb_input, name)
            )
            self.get_submodule(name).register_forward_hook(partial(self._add_adapted_kb, name))
        self._act_with_kb = False
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _first_layers(self) -> set[str]:
        """Layers whose input is the observation: CORA skips them (no KB latent to adapt)."""

        def first_in(prefix: str, module: nn.Module) -> list[str]:
            for sub, layer in module.named_modules():
                if isinstance(layer, ADAPTED_LAYERS):
                    return [f"{prefix}.{sub}" if sub else prefix]
            return []

        found = first_in("features_extractor", self.features_extractor)
        if found:
            return set(found)
        trunks = first_in("mlp_extractor.policy_net", self.mlp_extractor.policy_net)
        trunks += first_in("mlp_extractor.value_net", self.mlp_extractor.value_net)
        if not trunks:  # no hidden layers: the heads read the observation
            return {"action_net", "value_net"}
        return set(trunks)

    # -- hooks ---------------------------------------------------------------------------
    def _keep_kb_input(self, name: str, module: nn.Module, inputs: tuple[th.Tensor, ...]) -> None:
        self._kb_inputs[name] = inputs[0]

    def _add_adapted_kb(
        self, name: str, module: nn.Module, inputs: tuple[th.Tensor, ...], output: th.Tensor
    ) -> th.Tensor:
        return output + self.adapters[adapter_key(name)](self._kb_inputs[name])

    # -- (re)initialisation ---------------------------------------------------------------
    def _reinitialise(self, modules: nn.ModuleDict | nn.Module, part: str | None = None) -> None:
        """Fresh weights for every Conv2d/Linear: PyTorch's default (CORA) or SB3's
        orthogonal init with its gains when the policy uses ``ortho_init``."""
        items = modules.items() if isinstance(modules, nn.ModuleDict) else [(part, modules)]
        for name, module in items:
            for layer in module.modules():
                if not isinstance(layer, ADAPTED_LAYERS):
                    continue
                if self.ortho_init and name in ORTHO_GAINS:
                    self.init_weights(layer, gain=float(ORTHO_GAINS[name]))
                else:
                    layer.reset_parameters()

    def reset_active_column(self, adapters: bool = False) -> None:
        """Re-initialise the active column's Conv2d/Linear layers (CORA at every new task),
        and the adapters too when ``adapters`` (see ``ProgressCompress.reset``)."""
        for part in COLUMN_PARTS:
            self._reinitialise(getattr(self, part), part)
        if adapters:
            for layer in self.adapters.modules():
                if isinstance(layer, ADAPTED_LAYERS):
                    layer.reset_parameters()

    # -- parameters ------------------------------------------------------------------------
    def parameter_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """The active column's groups, plus ``adapters`` and ``knowledge_base``."""
        groups = super().parameter_groups()
        groups["adapters"] = [
            (n, p) for n, p in self.named_parameters() if n.startswith("adapters.")
        ]
        groups["knowledge_base"] = [
            (n, p) for n, p in self.named_parameters() if n.startswith("kb.")
        ]
        return groups

    # -- forward -----------------------------------------------------------------------------
    def kb_outputs(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """The KB's (distribution parameters, values ``(B, 1)``, task ids)."""
        latent_pi, latent_vf = self.kb["mlp_extractor"](
            self.features(obs, self.kb["features_extractor"])
        )
        task_ids = self.task_ids(obs)
        params, values = self.heads(
            latent_pi, latent_vf, task_ids, self.kb["action_net"], self.kb["value_net"]
        )
        return params, values, task_ids

    def kb_logits_and_values(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        """The KB's action logits (as the losses see them) and values ``(B,)``."""
        params, values, task_ids = self.kb_outputs(obs)
        if self.action_mask_mode == "full":
            params = self.mask_logits(params, task_ids)
        return params, values.flatten()

    def latents(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        if self._act_with_kb:
            return self.kb["mlp_extractor"](self.features(obs, self.kb["features_extractor"]))
        with th.no_grad():
            self.kb_outputs(obs)
        return super().latents(obs)

    def heads(self, latent_pi, latent_vf, task_ids, action_net=None, value_net=None):
        if self._act_with_kb and action_net is None:
            action_net, value_net = self.kb["action_net"], self.kb["value_net"]
        return super().heads(latent_pi, latent_vf, task_ids, action_net, value_net)

    @contextlib.contextmanager
    def evaluation_mode(self) -> Iterator[None]:
        """Act with the knowledge base (CORA's ``eval_on_kb``)."""
        previous, self._act_with_kb = self._act_with_kb, True
        try:
            yield
        finally:
            self._act_with_kb = previous
