"""Progress & Compress (Schwarz et al., 2018), as CORA runs it (appendix C.5).

The policy is a :class:`~baselines_sb3.policies.ProgressCompressPolicy`: an active column
(trained by the learner's RL loss) with lateral adapters from a knowledge base (KB).
Each task's budget is split in half (CORA collects half the budget for each phase rather
than doubling it):

* **progress** (first half of the task): ordinary RL updates of the active column and
  adapters; the KB is frozen (its features reach the column detached).
* **compress** (second half): the active column keeps acting, but each update is
  replaced by distillation of the column into the KB, ``kl_cost * KL(pi_active || pi_KB)``
  on the rollout's states, plus online EWC on the KB's parameters (``lam``, ``gamma``,
  normalised Fisher of the KB, computed at each task switch).

Evaluation acts with the KB (flat curves during progress phases are expected). The
active column is not re-initialised between tasks. The half-way point comes from the
sequence env's schedule (``on_task_switch`` events and its current segment), so P&C needs
task boundaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch as th

from baselines_sb3.cl.base import ContinualMethod, Rollout
from baselines_sb3.cl.regularizers import QuadraticPenalty, _batch_len, _select
from baselines_sb3.policies import ProgressCompressPolicy
from cl_suites.core.task import Segment, TaskSwitch


class _KnowledgeBaseEWC(QuadraticPenalty):
    """Online EWC on the knowledge base's parameters (Fisher of the KB's policy)."""

    name = "pnc-kb-ewc"

    def named_parameters(self, policy):
        return [("kb." + n, p) for n, p in policy.kb.named_parameters() if p.requires_grad]

    def compute_importance(self, policy, obs):
        params = self.named_parameters(policy)
        tensors = [p for _, p in params]
        fisher = {name: th.zeros_like(p) for name, p in params}
        n = _batch_len(obs)
        for i in range(n):
            logits, _ = policy.kb_logits_and_values(_select(obs, i))
            dist = th.distributions.Categorical(logits=logits)
            log_prob = dist.log_prob(dist.sample()).sum()
            for (name, _), g in zip(
                params, th.autograd.grad(log_prob, tensors, allow_unused=True), strict=False
            ):
                if g is not None:
                    fisher[name] += g.pow(2)
        return {k: v / n for k, v in fisher.items()}


class ProgressCompress(ContinualMethod):
    """P&C (see the module docstring).

    Args:
        lam / gamma / normalize / num_samples / min_task_steps: the KB's online EWC.
        kl_cost: weight of the distillation KL.
        seed: seed of the state sample for the Fisher.
    """

    name = "pnc"
    needs_task_boundaries = True

    def __init__(
        self,
        lam: float = 3000.0,
        gamma: float = 0.99,
        normalize: bool = True,
        num_samples: int = 100,
        kl_cost: float = 1.0,
        min_task_steps: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        self.kl_cost = float(kl_cost)
        self.kb_ewc = _KnowledgeBaseEWC(
            lam,
            num_samples=num_samples,
            min_task_steps=min_task_steps,
            decay=gamma,
            normalize=normalize,
            seed=seed,
        )
        self.midpoint = 0
        self.compress_updates = 0

    def bind(self, policy, model=None) -> None:
        if not isinstance(policy, ProgressCompressPolicy):
            raise ValueError(
                "method 'pnc' needs a ProgressCompressPolicy (active column + knowledge base); "
                f"got {type(policy).__name__}"
            )
        if model is not None and not hasattr(model, "cl_method"):
            raise ValueError(
                "method 'pnc' replaces updates in its compress phase and needs a learner with "
                "a cl_method (baselines_sb3 ContinualPPO or VTrace), not plain "
                f"{type(model).__name__}"
            )
        super().bind(policy, model)
        self.kb_ewc.bind(policy, model)

    def set_current_segment(self, segment: Segment | None) -> None:
        if segment is not None:
            self.midpoint = segment.start_step + segment.steps // 2
            self.kb_ewc.set_current_segment(segment)

    def phase(self, total_step: int) -> str:
        """``"progress"`` or ``"compress"`` at agent step ``total_step``."""
        return "compress" if total_step > self.midpoint else "progress"

    def on_rollout_end(self, rollout: Rollout) -> None:
        self.kb_ewc.on_rollout_end(rollout)

    def on_task_switch(self, event: TaskSwitch) -> None:
        self.kb_ewc.on_task_switch(event)
        if event.current is not None:
            self.set_current_segment(event.current)

    def custom_update(self, model) -> bool:
        if self.phase(model.num_timesteps) != "compress":
            return False
        policy = model.policy
        buf = model.rollout_buffer
        for _ in range(int(getattr(model, "n_epochs", 1))):
            for data in buf.get(getattr(model, "batch_size", None)):
                obs = data.observations
                with th.no_grad():
                    active_logits, _ = policy.logits_and_values(obs)
                kb_logits, _ = policy.kb_logits_and_values(obs)
                log_active = th.log_softmax(active_logits, -1)
                kl = (
                    (log_active.exp() * (log_active - th.log_softmax(kb_logits, -1))).sum(-1).mean()
                )
                loss = self.kl_cost * kl
                penalty = self.kb_ewc.penalty(policy)
                if penalty is not None:
                    loss = loss + penalty
                policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
                policy.optimizer.step()
                self.compress_updates += 1
        if getattr(model, "_logger", None) is not None:
            model.logger.record("train/pnc_distill_kl", float(kl.detach()))
        return True

    def state_dict(self) -> dict[str, Any]:
        return {
            "kb_ewc": self.kb_ewc.state_dict(),
            "midpoint": self.midpoint,
            "compress_updates": self.compress_updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.kb_ewc.load_state_dict(state["kb_ewc"])
        self.midpoint = int(state["midpoint"])
        self.compress_updates = int(state["compress_updates"])
