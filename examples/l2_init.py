"""An own continual-learning method as a cl-suites plug-in: an L2 pull to earlier weights.

Run it like a built-in method, with the preset's learner, network and settings,
checkpoints, ``--resume``, sweeps and the report (from the repository root, so that
``examples`` is found; an installed package needs no such care)::

    cl-suites options --suite Diagnostic --method examples.l2_init:L2Init
    cl-suites run --suite Diagnostic --method examples.l2_init:L2Init --preset small \\
        --set lam=10 --run-dir runs/l2-init
    cl-suites sweep --suite Diagnostic --methods ft,examples.l2_init:L2Init --seeds 0 \\
        --preset small

``docs/own-method.md`` is the contract of the hooks used here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from baselines_sb3 import ContinualMethod
from cl_suites.core.task import TaskSwitch
from cl_suites.job.option_specs import Opt


class L2Init(ContinualMethod):
    """``lam / 2 * sum_k (theta_k - anchor_k)^2`` added to every minibatch loss.

    Args:
        lam: strength of the pull to the anchor
        anchor: the weights pulled to: "previous" (those at the end of the previous task,
            from the second task on) or "init" (the initial weights, from the start)
    """

    name = "l2-init"
    needs_task_boundaries = True  # the anchor moves at task switches

    def __init__(
        self,
        lam: Annotated[float, Opt("float", low=0.0)] = 1.0,
        anchor: Literal["previous", "init"] = "previous",
    ) -> None:
        super().__init__()
        self.lam = float(lam)
        self.anchor_kind = anchor
        self.anchor: dict[str, th.Tensor] = {}
        self.switches = 0

    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        if self.anchor_kind == "init" and not self.anchor:
            self.anchor = self._weights()

    def on_task_switch(self, event: TaskSwitch) -> None:
        if event.current is None:  # the sequence is over
            return
        self.switches += 1
        if self.anchor_kind == "previous":
            self.anchor = self._weights()

    def penalty(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        if not self.anchor or self.lam == 0.0:
            return None
        terms = [
            (p - self.anchor[n]).pow(2).sum()
            for n, p in policy.named_parameters()
            if n in self.anchor
        ]
        return 0.5 * self.lam * th.stack(terms).sum()

    # checkpoints hold tensors and plain containers (loaded with weights_only=True)
    def state_dict(self) -> dict[str, Any]:
        return {"anchor": dict(self.anchor), "switches": self.switches}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        device = next(self.policy.parameters()).device if self.policy is not None else None
        self.anchor = {n: t.to(device) for n, t in state["anchor"].items()}
        self.switches = int(state["switches"])

    def _weights(self) -> dict[str, th.Tensor]:
        assert self.policy is not None
        return {n: p.detach().clone() for n, p in self.policy.named_parameters() if p.requires_grad}
