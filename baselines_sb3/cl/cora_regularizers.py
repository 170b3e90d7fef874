"""CORA's quadratic-penalty methods: EWC (``CoraEWC``) and online EWC (``CoraOnlineEWC``),
with CORA's Fisher on the task's recent unrolls and its importance normalisations
(the table of every variant: ``regularizer_base``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from baselines_sb3.cl.base import Rollout
from baselines_sb3.cl.importance import cora_fisher
from baselines_sb3.cl.regularizer_base import (
    NORMALIZATIONS,
    Importance,
    QuadraticPenalty,
    normalize_importance,
)
from baselines_sb3.cl.storage import check_storage
from baselines_sb3.cl.unroll_buffer import GuardedUnrollBuffers, UnrollBuffer
from cl_suites.core.task import Segment, TaskSwitch


def _switch_state(event: TaskSwitch | None) -> dict[str, Any] | None:
    if event is None:
        return None
    current = None if event.current is None else event.current.as_dict()
    return {
        "previous": event.previous.as_dict(),
        "current": current,
        "total_step": event.total_step,
    }


def _switch_from_state(state: Mapping[str, Any] | None) -> TaskSwitch | None:
    if state is None:
        return None
    current = None if state["current"] is None else Segment(**state["current"])
    return TaskSwitch(Segment(**state["previous"]), current, int(state["total_step"]))


class _CoraFisherMixin(GuardedUnrollBuffers):
    """CORA's Fisher on stored unrolls, shared by EWC and online EWC.

    CORA consolidates inside the loss of the first learner update whose batch carries the
    new task id (``custom_loss``): after that update's rewards entered the running reward
    moments, with the parameters the previous (old task's) update left. Here the switch is
    noted, and the consolidation runs in the first update that trains on steps of the new
    task, when the learner asks for the penalty (``penalty_grad_``, after the learner
    updated its reward moments): an update on a rollout that ended exactly at the switch
    is still the old task's.
    """

    keeps_replay = True
    _pending: TaskSwitch | None = None

    def _consolidate_due(self) -> None:
        """Consolidate the pending switch once the learner has steps of the new task."""
        if self._pending is not None and self._learner_step() > self._task_start:  # type: ignore[attr-defined]
            self._consolidate_pending()

    def penalty_grad_(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        self._consolidate_due()
        return super().penalty_grad_(policy)  # type: ignore[misc]

    def penalty(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        self._consolidate_due()
        return super().penalty(policy)  # type: ignore[misc]

    def on_task_switch(self, event: TaskSwitch) -> None:
        task = int(event.previous.task_id)
        steps = self._switch_step() - self._task_start  # type: ignore[attr-defined]
        self.task_steps[task] = self.task_steps.get(task, 0) + steps  # type: ignore[attr-defined]
        if self._pending is not None:  # a switch with no rollout end in between
            self._consolidate_pending()
        self._pending = event
        if event.current is not None:
            self._segment = event.current
        self._task_start = self._switch_step()  # type: ignore[attr-defined]

    def _consolidate_pending(self) -> None:
        if self._pending is not None:
            event, self._pending = self._pending, None
            self.consolidate_task(event)  # type: ignore[attr-defined]

    def _init_fisher(
        self,
        fisher_batches: int,
        batch_unrolls: int | None,
        buffer_frames: int,
        disk_dir: Any,
        storage: str,
    ) -> None:
        check_storage(storage, disk_dir, self.name)  # type: ignore[attr-defined]
        self.fisher_batches = int(fisher_batches)
        self.batch_unrolls = batch_unrolls
        self.buffer_frames = int(buffer_frames)
        self.disk_dir = disk_dir
        self.storage = storage
        self.rng = np.random.default_rng(self.seed)  # type: ignore[attr-defined]

    def _learner_settings(self, model: Any) -> None:
        self.gamma = float(getattr(model, "gamma", 0.99))
        self.vf_coef = float(getattr(model, "vf_coef", 0.5))
        if self.batch_unrolls is None:
            self.batch_unrolls = int(getattr(model, "n_envs", 32) or 32)

    def _fisher(self, forward: Any, params: list, buffer: UnrollBuffer) -> Importance:
        normalizer = getattr(self.policy, "reward_normalizer", None)  # type: ignore[attr-defined]
        was_training = self.policy.training  # type: ignore[attr-defined]
        self.policy.set_training_mode(False)  # type: ignore[attr-defined]
        try:
            return cora_fisher(
                forward,
                params,
                buffer,
                num_batches=self.fisher_batches,
                batch_unrolls=int(self.batch_unrolls),
                gamma=self.gamma,
                vf_coef=self.vf_coef,
                rng=self.rng,
                device=self.policy.device,  # type: ignore[attr-defined]
                reward_scale=None if normalizer is None else float(normalizer.std()),
            )
        finally:
            self.policy.set_training_mode(was_training)  # type: ignore[attr-defined]


class CoraEWC(_CoraFisherMixin, QuadraticPenalty):
    """EWC as CORA's ``ewc_monobeast.py`` (``online_ewc=False``).

    Args:
        lam: ``ewc_lambda`` (CORA Atari/Procgen/CHORES: 10,000).
        fisher_batches: batches of the Fisher (``n_fisher_samples``: 100).
        batch_unrolls: unrolls per Fisher batch (default: the learner's ``n_envs``, CORA's
            ``batch_size``: 32).
        buffer_frames: transitions kept per task (``replay_buffer_frames``: 1e6).
        min_task_steps: the penalty is off while the current task (all its visits
            together) has fewer agent steps (``ewc_per_task_min_frames``: 2e5; CHORES'
            configs leave CORA's default 20e6). Consolidation always happens.
        groups, seed: see ``QuadraticPenalty``.
        disk_dir: where the buffers' observations go when they are kept on disk (a
            subdirectory per buffer).
        storage: ``"auto"`` (RAM when a full buffer fits the free memory, else
            ``disk_dir``, else refuse; ``baselines_sb3.cl.storage``), ``"ram"`` or
            ``"disk"`` (needs ``disk_dir``).
    """

    name = "ewc"

    def __init__(
        self,
        lam: float = 10_000.0,
        fisher_batches: int = 100,
        batch_unrolls: int | None = None,
        buffer_frames: int = 1_000_000,
        min_task_steps: int = 200_000,
        groups: tuple[str, ...] | str = "all",
        disk_dir: Any = None,
        storage: str = "auto",
        seed: int = 0,
    ):
        super().__init__(lam, groups=groups, scale_by="tasks", seed=seed)
        self._init_fisher(fisher_batches, batch_unrolls, buffer_frames, disk_dir, storage)
        self.min_task_steps = int(min_task_steps)
        self.buffers: dict[int, UnrollBuffer] = {}
        self.task_steps: dict[int, int] = {}

    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        self._learner_settings(model)
        self.plan_storage(0, policy.observation_space, 0, quiet=True)  # refuse it now

    def _buffer(self, task_id: int) -> UnrollBuffer:
        if task_id not in self.buffers:
            self.buffers[task_id] = self._new_buffer(f"task{task_id}")
        return self.buffers[task_id]

    def on_rollout_end(self, rollout: Rollout) -> None:
        """Store the rollout in its task's buffer (a task that ended is consolidated in the
        next update, see ``_CoraFisherMixin``). A rollout cut by a switch mixes two tasks:
        CORA's per-task buffers never hold such unrolls, so it is left out."""
        if rollout.first_step >= self._task_start:
            self._buffer(self.current_task_id()).add(rollout)
        elif self._pending is not None and rollout.end_step <= self._task_start:
            self._buffer(int(self._pending.previous.task_id)).add(rollout)

    def consolidate_task(self, event: TaskSwitch) -> None:
        task = int(event.previous.task_id)
        buffer = self.buffers.get(task)
        if buffer is None or len(buffer) == 0:
            return
        params = self.named_parameters(self.policy)
        fisher = self._fisher(self._forward(), params, buffer)
        self.terms[task] = (fisher, self._anchor())
        self._record(event, unrolls=len(buffer))
        # the old content can never be sampled again when the task does not come back, or
        # when its next visit is at least as long as the ring (it refills it entirely)
        if event.previous.steps >= self.buffer_frames or not self._comes_back(event):
            buffer.clear()
            del self.buffers[task]

    def _comes_back(self, event: TaskSwitch) -> bool:
        """Whether ``event.previous``'s task has a later segment in the schedule."""
        segments = getattr(getattr(self._source, "cursor", None), "segments", None)
        if segments is None:
            return True
        later = segments[event.previous.index + 1 :]
        return any(s.task_id == event.previous.task_id for s in later)

    def current_task_steps(self) -> int:
        """Agent steps of the current task over all its visits so far."""
        task = self.current_task_id()
        return self.task_steps.get(task, 0) + self._learner_step() - self._task_start

    def penalty_active(self) -> bool:
        return self.current_task_steps() >= self.min_task_steps

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "buffers": {k: b.state_dict() for k, b in self.buffers.items()},
            "task_steps": dict(self.task_steps),
            "rng": self.rng.bit_generator.state,
            "pending": _switch_state(self._pending),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffers = {}
        for task, buffer_state in state["buffers"].items():
            self._buffer(int(task)).load_state_dict(buffer_state)
        self.task_steps = {int(k): int(v) for k, v in state["task_steps"].items()}
        self.rng.bit_generator.state = state["rng"]
        self._pending = _switch_from_state(state.get("pending"))


class CoraOnlineEWC(_CoraFisherMixin, QuadraticPenalty):
    """Online EWC as CORA's ``ewc_monobeast.py`` (``online_ewc=True``): one term, ``F =
    gamma F + F_new`` then normalised, anchor = the latest parameters; one unroll buffer
    for all tasks; the penalty applies from the first consolidation on (CORA's code skips
    the min-steps gate for online EWC; ``min_task_steps`` > 0 applies the paper's).

    Args: ``lam`` (175), ``online_gamma`` (0.99), ``normalize`` (``"row"``, see
    :func:`normalize_importance`), and those of :class:`CoraEWC`.
    """

    name = "online-ewc"

    def __init__(
        self,
        lam: float = 175.0,
        online_gamma: float = 0.99,
        normalize: str | None = "row",
        fisher_batches: int = 100,
        batch_unrolls: int | None = None,
        buffer_frames: int = 1_000_000,
        min_task_steps: int = 0,
        groups: tuple[str, ...] | str = "all",
        disk_dir: Any = None,
        storage: str = "auto",
        seed: int = 0,
    ):
        super().__init__(lam, groups=groups, scale_by="tasks", seed=seed)
        self._init_fisher(fisher_batches, batch_unrolls, buffer_frames, disk_dir, storage)
        if normalize is not None and normalize not in NORMALIZATIONS:
            raise ValueError(f"unknown normalize {normalize!r}; valid: {', '.join(NORMALIZATIONS)}")
        self.online_gamma = float(online_gamma)
        self.normalize = normalize
        self.min_task_steps = int(min_task_steps)
        self.buffer: UnrollBuffer | None = None
        self.task_steps: dict[int, int] = {}

    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        self._learner_settings(model)
        if self.buffer is None:
            self.buffer = self._new_buffer("online")

    def on_rollout_end(self, rollout: Rollout) -> None:
        self.buffer.add(rollout)

    def consolidate_task(self, event: TaskSwitch) -> None:
        if len(self.buffer) == 0:
            return
        params = self.named_parameters(self.policy)
        fisher = self._fisher(self._forward(), params, self.buffer)
        old = self.terms.get("online")
        if old is not None:  # P&C eq. 9
            fisher = {k: self.online_gamma * old[0][k] + v for k, v in fisher.items()}
        self.terms["online"] = (normalize_importance(fisher, self.normalize), self._anchor())
        self._record(event, unrolls=len(self.buffer))

    def penalty_active(self) -> bool:
        if self.min_task_steps <= 0:
            return True
        task = self.current_task_id()
        steps = self.task_steps.get(task, 0) + self._learner_step() - self._task_start
        return steps >= self.min_task_steps

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "buffer": self.buffer.state_dict(),
            "task_steps": dict(self.task_steps),
            "rng": self.rng.bit_generator.state,
            "pending": _switch_state(self._pending),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffer.load_state_dict(state["buffer"])
        self.task_steps = {int(k): int(v) for k, v in state["task_steps"].items()}
        self.rng.bit_generator.state = state["rng"]
        self._pending = _switch_from_state(state.get("pending"))


# --------------------------------------------------------------------------- MEAL
