"""Progress & Compress (Schwarz et al., 2018) as CORA's ``progress_and_compress_monobeast.py``.

The policy is a :class:`~baselines_sb3.pnc_policy.ProgressCompressPolicy` (active column,
knowledge base, lateral adapters). The learner's updates are counted from each task
boundary (a change of task id):

* at the first update of a new task the active column is re-initialised (CORA:
  ``reset_active_column``, which resets the column's Conv2d/Linear layers; its adapters,
  held in a plain dict, are not reset: ``reset="column"``. ``reset="column+adapters"``
  also resets them, as the P&C paper and CORA's comment intend);
* **progress** while the update count is ``<= progress_updates``: ordinary RL updates of
  the active column and adapters (the KB runs without gradients);
* **compress** for the rest of the task: each update is replaced by
  ``online-EWC penalty on the KB + kl_cost * sum KL(pi_active || pi_KB)``, the KL *summed*
  over every state of ``batch_unrolls`` replayed unrolls (``T + 1`` observations each)
  drawn from the buffer of recent frames, gradients reaching the KB only.

CORA's ``ProgressAndCompressNet.parameters()`` lists the KB twice (the active column
holds the KB as a submodule, and the KB is appended again), so its optimizer and gradient
clipping see every KB parameter twice: in a compress update the KB's gradient counts
twice in the clipping norm, is scaled by the clipping coefficient twice, and RMSProp
steps it twice (``kb_listed_twice=True`` reproduces this; in progress updates the KB has
no gradient, so nothing changes there).

The KB's Fisher (CORA's online EWC applied to the KB, ``"full"`` normalisation) is taken
where CORA takes it: at the first compress update of every task but the run's first, on
the buffer of recent frames (by then mostly the new task's progress-phase frames) and the
KB as the previous compress phase left it. Evaluation acts with the KB.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th

from baselines_sb3.cl.base import (
    ContinualMethod,
    Rollout,
    find_task_switch_source,
    latest_step_segment,
)
from baselines_sb3.cl.importance import cora_fisher, to_tensor, tree_map
from baselines_sb3.cl.regularizer_base import NORMALIZATIONS, normalize_importance
from baselines_sb3.cl.storage import check_storage
from baselines_sb3.cl.unroll_buffer import GuardedUnrollBuffers, UnrollBuffer
from baselines_sb3.device_rollout import observations_as_tensor
from baselines_sb3.plasticity import clip_grad_norm
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from cl_suites.core.task import Segment, TaskSwitch

RESETS: tuple[str, ...] = ("column", "column+adapters")


def refresh_bootstrap_values(model: Any) -> None:
    """Recompute a V-trace learner's bootstrap values ``V(x_T)`` with the current policy.

    The rollout buffer keeps the value of the observation after the rollout as the policy
    computed it when collecting; CORA bootstraps from the learner's value of that frame in
    the update. The two agree unless the parameters changed in between, which P&C's reset
    of the active column does at the first update of a task. (PPO's returns, computed at
    the end of collection, are left as they are.)"""
    buffer = getattr(model, "rollout_buffer", None)
    last_obs = getattr(model, "_last_obs", None)
    if buffer is None or last_obs is None or not hasattr(buffer, "last_values"):
        return
    with th.no_grad():
        values = model.policy.predict_values(observations_as_tensor(last_obs, model.policy.device))
    buffer.last_values = values.cpu().numpy().flatten()


class ProgressCompress(GuardedUnrollBuffers, ContinualMethod):
    """P&C (see the module docstring).

    Args:
        lam / online_gamma / normalize: the KB's online EWC (CORA: 3000, 0.99, ``"full"``).
        kl_cost: weight of the distillation KL (``kl_div_scale``: 1.0).
        progress_updates: updates of the progress phase after a boundary (CORA's
            ``num_train_steps_of_progress``: Atari 39063, Procgen 3906, CHORES 625);
            ``None``: half the task's updates (P&C paper, CORA appendix C.5). A value that
            leaves no compress phase in a task falls back to half, with a warning.
        fisher_batches / batch_unrolls / buffer_frames: the KB Fisher's batches (100), the
            unrolls per Fisher and distillation batch (default: the learner's ``n_envs``)
            and the frames of the buffer of recent unrolls (CORA Atari/Procgen: 1e5).
        reset: ``"column"`` (CORA's code) or ``"column+adapters"``.
        kb_listed_twice: the KB's parameters count twice in the compress update's
            clipping and optimizer steps, as in CORA (see the module docstring).
        disk_dir: where the buffer's observations go when it is kept on disk.
        storage: ``"auto"`` (RAM when a full buffer fits the free memory, else
            ``disk_dir``, else refuse; ``baselines_sb3.cl.storage``), ``"ram"`` or
            ``"disk"`` (needs ``disk_dir``).
        seed: sampling seed.
    """

    switch_inside_step = True  # the hook reads the network only (ContinualMethod)

    name = "pnc"
    keeps_replay = True
    needs_task_boundaries = True

    def __init__(
        self,
        lam: float = 3000.0,
        online_gamma: float = 0.99,
        normalize: str | None = "full",
        kl_cost: float = 1.0,
        progress_updates: int | None = None,
        fisher_batches: int = 100,
        batch_unrolls: int | None = None,
        buffer_frames: int = 100_000,
        reset: str = "column",
        kb_listed_twice: bool = True,
        disk_dir: Any = None,
        storage: str = "auto",
        seed: int = 0,
    ):
        super().__init__()
        check_storage(storage, disk_dir, self.name)
        self.storage = storage
        self.kb_listed_twice = bool(kb_listed_twice)
        if reset not in RESETS:
            raise ValueError(f"unknown reset {reset!r}; valid: {', '.join(RESETS)}")
        if normalize is not None and normalize not in NORMALIZATIONS:
            raise ValueError(f"unknown normalize {normalize!r}; valid: {', '.join(NORMALIZATIONS)}")
        self.lam, self.online_gamma, self.normalize = float(lam), float(online_gamma), normalize
        self.kl_cost = float(kl_cost)
        self.progress_updates = None if progress_updates is None else int(progress_updates)
        self.fisher_batches, self.batch_unrolls = int(fisher_batches), batch_unrolls
        self.buffer_frames, self.reset, self.disk_dir = int(buffer_frames), reset, disk_dir
        self.rng = np.random.default_rng(seed)
        self.buffer: UnrollBuffer | None = None
        self.kb_terms: tuple[dict[str, th.Tensor], dict[str, th.Tensor]] | None = None
        self.updates_since_boundary = 0
        self.last_task_id: int | None = None  # CORA's _previous_pnc_task_id
        self.kb_task_id: int | None = None  # CORA's EWC _prev_task_id
        self.resets: list[int] = []
        self.consolidations: list[dict[str, Any]] = []
        self._source: Any = None
        self._segment: Segment | None = None
        self._update_stamp: tuple[Segment | None, int] | None = None
        self._warned: set[int] = set()

    # -- wiring --------------------------------------------------------------------------
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
        self.gamma = float(getattr(model, "gamma", 0.99))
        self.vf_coef = float(getattr(model, "vf_coef", 0.5))
        if self.batch_unrolls is None:
            self.batch_unrolls = int(getattr(model, "n_envs", 32) or 32)
        if self.buffer is None:
            self.buffer = self._new_buffer("pnc")
        env = model.get_env() if model is not None else None
        self._source = find_task_switch_source(env) if env is not None else None

    def set_current_segment(self, segment: Segment | None) -> None:
        if segment is not None:
            self._segment = segment

    def current_segment(self) -> Segment | None:
        """The segment of the data the next update trains on (see ``latest_step_segment``)."""
        cursor = getattr(self._source, "cursor", None)
        if cursor is not None:
            return latest_step_segment(cursor)[0]
        return self._segment

    def on_rollout_end(self, rollout: Rollout) -> None:
        self.buffer.add(rollout)
        # what the rollout's update reads of the run, taken now: with policy_lag=1 the
        # update runs while the next rollout moves the cursor on
        self._update_stamp = (self.current_segment(), int(rollout.end_step))

    def on_task_switch(self, event: TaskSwitch) -> None:
        if event.current is not None:
            self._segment = event.current

    # -- phases --------------------------------------------------------------------------
    def progress_length(self, segment: Segment | None, model: Any) -> int:
        """Updates of the progress phase in ``segment``'s task (see ``progress_updates``)."""
        if segment is None:
            return self.progress_updates if self.progress_updates is not None else 0
        cursor = getattr(self._source, "cursor", None)
        envs = cursor.num_envs if cursor is not None else model.n_envs
        steps_per_update = int(model.n_steps) * int(envs)
        task_updates = math.ceil(segment.steps / steps_per_update)
        half = task_updates // 2
        if self.progress_updates is None:
            return half
        if self.progress_updates >= task_updates - 1:
            if segment.index not in self._warned:
                warnings.warn(
                    f"P&C: progress_updates={self.progress_updates} leaves no compress phase in "
                    f"a task of {task_updates} updates; using half of it ({half})",
                    stacklevel=2,
                )
                self._warned.add(segment.index)
            return half
        return self.progress_updates

    def phase(self, segment: Segment | None = None) -> str:
        """The phase of the next update (of data from ``segment``, default the cursor's):
        ``"progress"`` or ``"compress"``."""
        segment = segment if segment is not None else self.current_segment()
        limit = self.progress_length(segment, self.model)
        return "progress" if self.updates_since_boundary <= limit else "compress"

    def custom_update(self, model) -> bool:
        stamp, self._update_stamp = self._update_stamp, None
        segment, step = stamp or (self.current_segment(), int(model.num_timesteps))
        task_id = int(segment.task_id) if segment is not None else 0
        if self.last_task_id is not None and task_id != self.last_task_id:
            self.updates_since_boundary = 0
            self.policy.reset_active_column(adapters=self.reset == "column+adapters")
            self.resets.append(step)
            refresh_bootstrap_values(model)
        if self.kb_task_id is None:
            self.kb_task_id = task_id
        self.last_task_id = task_id
        phase = self.phase(segment)
        self.updates_since_boundary += 1
        if phase == "progress" or len(self.buffer) == 0:
            return False
        if task_id != self.kb_task_id:
            self.consolidate_kb(self.kb_task_id, model, step)
            self.kb_task_id = task_id
        self.compress_step(model)
        return True

    # -- compress ------------------------------------------------------------------------
    def kb_parameters(self) -> list[tuple[str, th.nn.Parameter]]:
        return self.policy.parameter_groups()["knowledge_base"]

    def consolidate_kb(self, task_id: int, model: Any, step: int | None = None) -> None:
        """CORA's ``checkpoint_task`` on the KB: online Fisher ``F = gamma F + F_new``,
        normalised, anchored at the KB's current parameters."""
        params = self.kb_parameters()
        was_training = self.policy.training
        self.policy.set_training_mode(False)
        try:
            fisher = cora_fisher(
                self.policy.kb_logits_and_values,
                params,
                self.buffer,
                num_batches=self.fisher_batches,
                batch_unrolls=int(self.batch_unrolls),
                gamma=self.gamma,
                vf_coef=self.vf_coef,
                rng=self.rng,
                device=self.policy.device,
            )
        finally:
            self.policy.set_training_mode(was_training)
        if self.kb_terms is not None:
            fisher = {k: self.online_gamma * self.kb_terms[0][k] + v for k, v in fisher.items()}
        anchor = {n: p.detach().clone() for n, p in params}
        self.kb_terms = (normalize_importance(fisher, self.normalize), anchor)
        self.consolidations.append(
            {
                "task_id": int(task_id),
                "total_step": int(model.num_timesteps if step is None else step),
            }
        )

    def kb_penalty(self) -> th.Tensor | None:
        """``lam / 2 * sum F (theta_KB - anchor)^2`` (CORA's ``_compute_ewc_loss``, one term)."""
        if self.kb_terms is None or self.lam == 0:
            return None
        importance, anchor = self.kb_terms
        total = sum((importance[n] * (p - anchor[n]).pow(2)).sum() for n, p in self.kb_parameters())
        return 0.5 * self.lam * total

    def distillation_kl(self, batch: Mapping[str, Any]) -> th.Tensor:
        """``sum_states KL(pi_active || pi_KB)`` over every observation of the unrolls."""
        obs = tree_map(
            lambda a: a.reshape(-1, *a.shape[2:]), to_tensor(batch["obs"], self.policy.device)
        )
        with th.no_grad():
            active_logits, _ = self.policy.logits_and_values(obs)
        kb_logits, _ = self.policy.kb_logits_and_values(obs)
        log_active = th.log_softmax(active_logits, dim=-1)
        log_kb = th.log_softmax(kb_logits, dim=-1)
        return (log_active.exp() * (log_active - log_kb)).sum()

    def compress_step(self, model: Any) -> None:
        policy = self.policy
        batch = self.buffer.sample(int(self.batch_unrolls), self.rng)
        kl = self.distillation_kl(batch)
        loss = self.kl_cost * kl
        penalty = self.kb_penalty()
        if penalty is not None:
            loss = loss + penalty
        policy.optimizer.zero_grad()  # only the KB receives gradients below
        loss.backward()
        params = list(policy.parameters())
        if self.kb_listed_twice:
            params += [p for _, p in self.kb_parameters()]
        norm = clip_grad_norm(policy, params, model.max_grad_norm)
        policy.optimizer.step()
        if self.kb_listed_twice:
            policy.optimizer.step()  # the KB's second entry in CORA's parameter list
        if getattr(model, "_logger", None) is not None:
            model.logger.record("train/grad_norm", float(norm))
            model.logger.record("train/pnc_distill_kl", float(kl.detach()))
            if penalty is not None:
                model.logger.record("train/pnc_kb_ewc", float(penalty.detach()))

    # -- checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        terms = None
        if self.kb_terms is not None:
            terms = tuple({n: v.cpu() for n, v in d.items()} for d in self.kb_terms)
        return {
            "buffer": self.buffer.state_dict(),
            "kb_terms": terms,
            "updates_since_boundary": self.updates_since_boundary,
            "last_task_id": self.last_task_id,
            "kb_task_id": self.kb_task_id,
            "resets": list(self.resets),
            "consolidations": list(self.consolidations),
            "segment": None if self._segment is None else self._segment.as_dict(),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        device = self.policy.device if self.policy is not None else "cpu"
        self.buffer.load_state_dict(state["buffer"])
        terms = state["kb_terms"]
        self.kb_terms = (
            None if terms is None else tuple({n: v.to(device) for n, v in d.items()} for d in terms)
        )
        self.updates_since_boundary = int(state["updates_since_boundary"])
        self.last_task_id, self.kb_task_id = state["last_task_id"], state["kb_task_id"]
        self.resets = list(state["resets"])
        self.consolidations = list(state["consolidations"])
        self._segment = Segment(**state["segment"]) if state.get("segment") else None
        self.rng.bit_generator.state = state["rng"]
