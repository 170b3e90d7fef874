"""Quadratic-penalty methods as CORA and MEAL define them.

Every method adds ``lam / 2 * scale * sum_t sum_k F_t,k (theta_k - anchor_t,k)^2`` to the
loss; they differ in the importance ``F``, in how tasks combine into terms ``t``, in
``scale`` and in what is regularised:

=================== ============================================ ============================
method              importance / terms                           scale, parameters
=================== ============================================ ============================
``CoraEWC``         CORA Fisher (``cora_fisher``) on the task's  ``1 / #stored tasks``; every
(``ewc``)           recent unrolls; one term per task id,        parameter; penalty off until
                    overwritten when the task comes back         the current task has
                                                                 ``min_task_steps``
``CoraOnlineEWC``   one term: ``F = gamma F + F_new``, then      1; every parameter; no gate
(``online-ewc``)    normalised (``"row"`` / ``"full"``)          (CORA's code)
``MealEWC``         MEAL Fisher (``score_fisher``, agent 0) on   ``1 / #regularised
(``ewc``)           fresh episodes; one term: ``F = F + F_new``  parameters``; actor trunk
                    (``mode="multi"``), anchor = latest          (+ shared) by default
``MealEWC``         ``F = 0.9 F + 0.1 F_new``                    as above
(``online-ewc``)
``MealMAS``         ``mas_importance`` every step, replaced      as above
(``mas``)           per task (``w = w_new``), not normalised
``MealL2``          ``F = 1``, anchor = initial parameters,      as above; active from the
(``l2``)            then the latest at every switch              first task
=================== ============================================ ============================

The importance of a finished task is computed at the task switch (the agent step where
the sequence env's ``on_task_switch`` fires; CORA's methods: in the first update of the
next task, as CORA). The penalty gradient is written straight into ``.grad`` in closed
form (``penalty_grad_``): with ``F_sum = sum_t F_t`` and the importance-weighted anchor
``m_bar = sum_t F_t anchor_t / F_sum`` it is ``lam * scale * F_sum (theta - m_bar)``, as
cheap after 100 tasks as after one, and as precise as CORA's ``F (theta - anchor)`` for one
term (``m_bar`` is then the anchor itself).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from baselines_sb3.cl.base import (
    ContinualMethod,
    FreshEpisodes,
    Rollout,
    find_task_switch_source,
    flat_obs,
    latest_step_segment,
    logits_and_values,
    select_parameters,
)
from baselines_sb3.cl.importance import (
    FISHER_AGENTS,
    cora_fisher,
    mas_importance,
    score_fisher,
)
from baselines_sb3.cl.storage import check_storage
from baselines_sb3.cl.unroll_buffer import GuardedUnrollBuffers, UnrollBuffer
from baselines_sb3.device_rollout import host_observations
from cl_suites.core.task import Segment, TaskSwitch

Importance = dict[str, th.Tensor]
NORMALIZATIONS: tuple[str, ...] = ("row", "row-intended", "full", "mean")
MEAL_GROUPS: tuple[str, ...] = ("shared", "actor_trunk")


def normalize_importance(importance: Importance, method: str | None) -> Importance:
    """CORA's and MEAL's Fisher normalisations.

    * ``"row"``: what CORA's ``checkpoint_task`` computes for ``normalize_fisher_method =
      "row"``: its dimension is chosen from the network's *last* parameter (a bias, the
      loop variable left over from the gradient loop), so every tensor is L2-normalised
      along dim 0 (``F.normalize(v, dim=0)``).
    * ``"row-intended"``: dim 1 for matrices and filters, dim 0 for vectors (the code's
      evident intent).
    * ``"full"``: each tensor divided by its Frobenius norm (tensors of zeros stay zero,
      where CORA would produce NaN).
    * ``"mean"``: MEAL's ``normalize_importance``: everything divided by the mean
      absolute importance over all parameters.
    """
    if method is None:
        return importance
    if method == "mean":
        total = sum(float(v.detach().abs().sum()) for v in importance.values())
        count = sum(v.numel() for v in importance.values())
        mean = total / (count + 1e-8)
        return {k: v / (mean + 1e-8) for k, v in importance.items()}
    out = {}
    for name, v in importance.items():
        if method == "full":
            norm = th.linalg.vector_norm(v)
            out[name] = v / norm if float(norm) > 0 else v
        elif method == "row":
            out[name] = th.nn.functional.normalize(v, dim=0)
        elif method == "row-intended":
            out[name] = th.nn.functional.normalize(v, dim=1 if v.dim() > 1 else 0)
        else:
            raise ValueError(
                f"unknown normalization {method!r}; valid: {', '.join(NORMALIZATIONS)}"
            )
    return out


class StateSample:
    """A uniform (reservoir) sample of up to ``capacity`` observations of the current task
    (the fallback of the fresh-episode methods when the job gives no episode source)."""

    def __init__(self, capacity: int, seed: int = 0):
        self.capacity = int(capacity)
        self.rng = np.random.default_rng(seed)
        self.clear()

    def clear(self) -> None:
        self.items: list[Any] = []
        self.seen = 0

    def add_rollout(self, rollout: Rollout, since_step: int) -> None:
        """Add the rows of ``rollout`` played at or after agent step ``since_step``
        (Algorithm R: the ``k``-th offered row replaces slot ``j ~ U{0..k}`` when
        ``j < capacity`` once the sample is full)."""
        t_count, n_envs = rollout.num_steps, rollout.num_envs
        steps = rollout.first_step + np.arange(t_count) * n_envs
        rows = np.flatnonzero(steps >= since_step)
        if rows.size == 0:
            return
        obs = flat_obs(host_observations(rollout.observations))  # kept as numpy
        flat = (rows[:, None] * n_envs + np.arange(n_envs)).ravel()
        n_fill = max(0, min(self.capacity - len(self.items), flat.size))
        self.items.extend(_row(obs, int(i)) for i in flat[:n_fill])
        rest = flat[n_fill:]
        if rest.size:
            seen = self.seen + n_fill + np.arange(rest.size)
            slots = self.rng.integers(0, seen + 1)
            keep = np.flatnonzero(slots < self.capacity)
            for i, j in zip(rest[keep].tolist(), slots[keep].tolist(), strict=True):
                self.items[j] = _row(obs, i)
        self.seen += int(flat.size)

    def episodes(self) -> FreshEpisodes:
        """The sample as single-agent "episodes" of one step each."""
        if isinstance(self.items[0], dict):
            obs: Any = {k: np.stack([it[k] for it in self.items]) for k in self.items[0]}
        else:
            obs = np.stack(self.items)
        n = len(self.items)
        return FreshEpisodes(obs, 1, np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))

    def state_dict(self) -> dict[str, Any]:
        return {"items": list(self.items), "seen": self.seen, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.items, self.seen = list(state["items"]), int(state["seen"])
        self.rng.bit_generator.state = state["rng"]


def _row(obs: Any, index: int) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v[index]) for k, v in obs.items()}
    return np.array(obs[index])


class QuadraticPenalty(ContinualMethod):
    """Base of the quadratic-penalty methods (see the module docstring).

    Args:
        lam: penalty strength ``lambda``.
        groups: parameter groups to regularise (``policy.parameter_groups()`` names) or
            ``"all"``.
        scale_by: ``"tasks"`` (divide by the number of stored terms, CORA's
            ``scale_ewc_by_num_tasks``), ``"params"`` (divide by the number of regularised
            parameters, MEAL) or ``"none"``.
        seed: seed of the method's sampling.

    State: ``terms`` maps a key (a task id, or ``"all"``) to ``(importance, anchor)``
    dicts keyed by parameter name.
    """

    needs_task_boundaries = True

    def __init__(
        self,
        lam: float,
        groups: tuple[str, ...] | str = "all",
        scale_by: str = "none",
        seed: int = 0,
    ):
        super().__init__()
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        if scale_by not in ("tasks", "params", "none"):
            raise ValueError(f"unknown scale_by {scale_by!r}; valid: tasks, params, none")
        self.lam = float(lam)
        self.groups = groups if isinstance(groups, str) else tuple(groups)
        self.scale_by = scale_by
        self.seed = int(seed)
        self.terms: dict[Any, tuple[Importance, Importance]] = {}
        self.consolidations: list[dict[str, Any]] = []
        self._flat: tuple[Any, ...] | None = None
        self._source: Any = None
        self._segment: Segment | None = None
        self._task_start = 0  # learner steps (model.num_timesteps) where the current task began

    # -- wiring --------------------------------------------------------------------------
    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        self.named_parameters(policy)  # fails early on unknown groups
        env = model.get_env() if model is not None else None
        self._source = find_task_switch_source(env) if env is not None else None

    def set_current_segment(self, segment: Segment | None) -> None:
        if segment is not None:
            self._segment = segment

    def current_task_id(self) -> int:
        """The task of the data the next update trains on: the segment of the env cursor's
        latest step (``latest_step_segment``: an update on a rollout that ended exactly at
        a switch is the old task's, as CORA labels an update with its batch's task), else
        the last segment heard of."""
        cursor = getattr(self._source, "cursor", None)
        if cursor is not None:
            return int(latest_step_segment(cursor)[0].task_id)
        return int(self._segment.task_id) if self._segment is not None else 0

    def named_parameters(self, policy: ActorCriticPolicy) -> list[tuple[str, th.nn.Parameter]]:
        """The regularised parameters (``groups``)."""
        return select_parameters(policy, self.groups)

    def _learner_step(self) -> int:
        return int(getattr(self.model, "num_timesteps", 0))

    def _switch_step(self) -> int:
        """Learner step where the task that starts at this switch begins: the switch fires
        inside ``env.step``, before SB3 counts that vector step."""
        return self._learner_step() + int(getattr(self.model, "n_envs", 0) or 0)

    def on_task_switch(self, event: TaskSwitch) -> None:
        self.consolidate_task(event)
        if event.current is not None:
            self._segment = event.current
        self._task_start = self._switch_step()

    def consolidate_task(self, event: TaskSwitch) -> None:
        """Fold the finished task (``event.previous``) into the penalty."""
        raise NotImplementedError

    def _forward(self) -> Any:
        """``obs -> (logits, values)`` of the protected policy (any SB3 actor-critic)."""
        return lambda obs: logits_and_values(self.policy, obs)

    def _anchor(self) -> Importance:
        return {n: p.detach().clone() for n, p in self.named_parameters(self.policy)}

    def _record(self, event: TaskSwitch, **extra: Any) -> None:
        """Note a consolidation of ``event.previous`` (``total_step``: the env's step)."""
        self._flat = None
        self.consolidations.append(
            {"task_id": int(event.previous.task_id), "total_step": int(event.total_step), **extra}
        )

    # -- loss ----------------------------------------------------------------------------
    def penalty_active(self) -> bool:
        return True

    def _flat_state(self, policy: ActorCriticPolicy) -> tuple[Any, ...]:
        """``(params, sizes, F_sum, Fm_sum, C, n_terms, n_params)`` over the terms, flat;
        rebuilt after a consolidation or a checkpoint load."""
        if self._flat is None or self._flat[0] is not policy:
            named = self.named_parameters(policy)
            names = [n for n, _ in named]
            params = [p for _, p in named]
            sizes = [p.numel() for p in params]
            device = params[0].device if params else "cpu"
            f_sum = th.zeros(sum(sizes), dtype=th.float64, device=device)
            fm_sum = th.zeros_like(f_sum)
            fmm_sum = th.zeros((), dtype=th.float64, device=device)
            for importance, anchor in self.terms.values():
                f = th.cat([importance[n].reshape(-1).to(device) for n in names]).double()
                m = th.cat([anchor[n].reshape(-1).to(device) for n in names]).double()
                f_sum += f
                fm_sum += f * m
                fmm_sum += (f * m.pow(2)).sum()
            # sum_t F_t (theta - m_t) = F_sum (theta - m_bar), m_bar = sum_t F_t m_t / F_sum: one
            # term's m_bar is its anchor exactly, so theta - m_bar loses no precision
            mean = th.where(f_sum > 0, fm_sum / f_sum.clamp_min(1e-300), th.zeros_like(f_sum))
            const = fmm_sum - (f_sum * mean.pow(2)).sum()  # sum_t F_t m_t^2 - F_sum m_bar^2
            self._flat = (
                policy,
                params,
                sizes,
                f_sum.float(),
                mean.float(),
                const,
                len(self.terms),
                sum(sizes),
            )
        return self._flat

    def scale(self, n_terms: int, n_params: int) -> float:
        if self.scale_by == "tasks":
            return 1.0 / max(n_terms, 1)
        if self.scale_by == "params":
            return 1.0 / (n_params + 1e-8)
        return 1.0

    def penalty(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        """The penalty with an autograd graph (the learners use ``penalty_grad_``)."""
        if not self.terms or self.lam == 0 or not self.penalty_active():
            return None
        named = dict(self.named_parameters(policy))
        total = sum(
            (importance[n] * (named[n] - anchor[n]).pow(2)).sum()
            for importance, anchor in self.terms.values()
            for n in named
        )
        _, _, _, _, _, _, n_terms, n_params = self._flat_state(policy)
        return 0.5 * self.lam * self.scale(n_terms, n_params) * total

    def penalty_grad_(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        """Adds ``lam * scale * F_sum (theta - m_bar)`` (``= lam * scale * sum_t F_t (theta -
        m_t)``) to ``.grad`` (no autograd graph) and returns the penalty's value."""
        if not self.terms or self.lam == 0 or not self.penalty_active():
            return None
        _, params, sizes, f_sum, mean, const, n_terms, n_params = self._flat_state(policy)
        if not params:
            return None
        coef = self.lam * self.scale(n_terms, n_params)
        with th.no_grad():
            diff = th.cat([p.reshape(-1) for p in params]) - mean
            grad = (f_sum * diff).mul_(coef)
            value = 0.5 * coef * ((f_sum.double() * diff.double().pow(2)).sum() + const)
            for p, g in zip(params, grad.split(sizes), strict=True):
                if p.grad is None:
                    p.grad = g.view_as(p).clone()
                else:
                    p.grad.add_(g.view_as(p))
        return value.float()

    # -- checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "terms": {
                k: ({n: v.cpu() for n, v in f.items()}, {n: v.cpu() for n, v in m.items()})
                for k, (f, m) in self.terms.items()
            },
            "consolidations": list(self.consolidations),
            "task_start": self._task_start,
            "segment": None if self._segment is None else self._segment.as_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        device = self.policy.device if self.policy is not None else "cpu"
        self.terms = {
            k: ({n: v.to(device) for n, v in f.items()}, {n: v.to(device) for n, v in m.items()})
            for k, (f, m) in state["terms"].items()
        }
        self.consolidations = list(state["consolidations"])
        self._task_start = int(state["task_start"])
        self._segment = Segment(**state["segment"]) if state.get("segment") else None
        self._flat = None


# --------------------------------------------------------------------------- CORA
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
def meal_groups(regularize_critic: bool = False, regularize_heads: bool = False) -> tuple[str, ...]:
    """MEAL's ``build_reg_weights``: everything but the parameters whose path holds
    ``critic`` (unless ``regularize_critic``) or ``actor_head``/``critic_head`` (unless
    ``regularize_heads``)."""
    groups = list(MEAL_GROUPS)
    if regularize_critic:
        groups.append("critic_trunk")
    if regularize_heads:
        groups.append("actor_head")
        if regularize_critic:
            groups.append("critic_head")
    return tuple(groups)


class _FreshEpisodeImportance(QuadraticPenalty):
    """Base of MEAL's methods: importance from fresh episodes of the finished task
    (interface 11), one term, anchored at the latest parameters; the penalty is divided
    by the number of regularised parameters.

    Args:
        lam: ``reg_coef``.
        mode: ``"multi"`` (``F = F + F_new``), ``"online"`` (``F = decay F + (1 - decay)
            F_new``) or ``"last"`` (``F = F_new``).
        decay: online decay (0.9).
        episodes / max_steps: fresh episodes per importance estimate (5 x 500).
        normalize: ``"mean"`` (MEAL's ``normalize_importance``) or ``None``.
        regularize_critic / regularize_heads: also regularise the critic trunk / the heads
            (MEAL Table 4: No / No). ``groups`` overrides both.
        fallback_states: states of the finished task kept for when no episode source is
            set (with a warning).
    """

    needs_fresh_episodes = True
    modes: tuple[str, ...] = ("multi", "online", "last")
    lead_agent = False
    """Ask the source for episodes where every agent plays agent 0's sampled action."""

    def __init__(
        self,
        lam: float,
        mode: str = "multi",
        decay: float = 0.9,
        episodes: int = 5,
        max_steps: int = 500,
        normalize: str | None = None,
        regularize_critic: bool = False,
        regularize_heads: bool = False,
        groups: tuple[str, ...] | str | None = None,
        fallback_states: int = 2_500,
        seed: int = 0,
    ):
        chosen = groups if groups is not None else meal_groups(regularize_critic, regularize_heads)
        super().__init__(lam, groups=chosen, scale_by="params", seed=seed)
        if mode not in self.modes:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(self.modes)}")
        self.mode, self.decay = mode, float(decay)
        self.episodes, self.max_steps = int(episodes), int(max_steps)
        self.normalize = normalize
        self.samples = StateSample(fallback_states, seed)
        # a CPU generator: score_fisher samples on the CPU, so its state resumes anywhere
        self.generator = th.Generator(device="cpu").manual_seed(int(seed))
        self._warned = False

    def on_rollout_end(self, rollout: Rollout) -> None:
        if self.episode_source is None:
            self.samples.add_rollout(rollout, self._task_start)

    def fresh_episodes(self, task_id: int) -> FreshEpisodes | None:
        if self.episode_source is not None:
            return self.episode_source(
                task_id, self.episodes, self.max_steps, lead_agent=self.lead_agent
            )
        if not self._warned:
            warnings.warn(
                f"{self.name}: no fresh-episode source (set_episode_source); estimating the "
                "importance on stored training states instead",
                stacklevel=2,
            )
            self._warned = True
        return self.samples.episodes() if self.samples.items else None

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        """The finished task's raw importance of ``params``."""
        raise NotImplementedError

    def _normalizations(self) -> list[str]:
        return [self.normalize] if self.normalize else []

    def importance(self, episodes: FreshEpisodes) -> Importance:
        """The new importance of the regularised parameters. MEAL normalises (``"mean"``)
        over its whole parameter tree, so a normalised importance is computed for every
        parameter first and then restricted to the regularised ones."""
        regularised = self.named_parameters(self.policy)
        steps = self._normalizations()
        if not steps:
            return self.compute_importance(episodes, regularised)
        new = self.compute_importance(episodes, select_parameters(self.policy, "all"))
        for method in steps:
            new = normalize_importance(new, method)
        return {n: new[n] for n, _ in regularised}

    def combine(self, old: Importance | None, new: Importance) -> Importance:
        """MEAL's ``update_state`` (the importance starts at zero)."""
        if self.mode == "last":
            return new
        if old is None:
            old = {k: th.zeros_like(v) for k, v in new.items()}
        if self.mode == "multi":
            return {k: old[k] + v for k, v in new.items()}
        return {k: self.decay * old[k] + (1.0 - self.decay) * v for k, v in new.items()}

    def consolidate_task(self, event: TaskSwitch) -> None:
        task = int(event.previous.task_id)
        episodes = self.fresh_episodes(task)
        self.samples.clear()
        if episodes is None:
            return
        was_training = self.policy.training
        self.policy.set_training_mode(False)
        try:
            new = self.importance(episodes)
        finally:
            self.policy.set_training_mode(was_training)
        old = self.terms.get("all")
        self.terms["all"] = (self.combine(old[0] if old else None, new), self._anchor())
        self._record(event, steps=episodes.num_steps)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "samples": self.samples.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.samples.load_state_dict(state["samples"])
        self.generator.set_state(state["generator"])


class MealEWC(_FreshEpisodeImportance):
    """EWC as MEAL's ``cl_methods/EWC.py``: ``mode="multi"`` sums the Fishers (``ewc``),
    ``mode="online"`` with ``decay=0.9`` is MEAL's online EWC; Fisher = :func:`score_fisher`
    of 5 fresh episodes x 500 steps: ``fisher_agents="first"`` (MEAL 7d81858, as ppo-jax):
    episodes where every agent plays the action sampled from agent 0's observation, the
    score of that observation and that action at every step; ``"joint"`` (057f862): each
    agent acting on its own observation, the joint log-probability of resampled actions."""

    name = "ewc"

    def __init__(self, lam: float, fisher_agents: str = "first", **kwargs: Any):
        super().__init__(lam, **kwargs)
        if fisher_agents not in FISHER_AGENTS:
            raise ValueError(
                f"unknown fisher_agents {fisher_agents!r}; valid: {', '.join(FISHER_AGENTS)}"
            )
        self.fisher_agents = fisher_agents
        self.lead_agent = fisher_agents == "first"

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        played = None  # "first": the actions played (sampled once, as MEAL); else resampled
        if self.lead_agent and episodes.actions is not None:
            device = next(self.policy.parameters()).device
            played = th.as_tensor(np.asarray(episodes.actions), dtype=th.long, device=device)
        return score_fisher(
            self.policy,
            self._forward(),
            params,
            episodes,
            self.generator,
            self.fisher_agents,
            actions=played,
        )


class MealOnlineEWC(MealEWC):
    """MEAL's online EWC: ``F = 0.9 F + 0.1 F_new``."""

    name = "online-ewc"

    def __init__(self, lam: float, mode: str = "online", **kwargs: Any):
        super().__init__(lam, mode=mode, **kwargs)


class MealMAS(_FreshEpisodeImportance):
    """MAS as MEAL 7d81858's ``cl_methods/MAS.py``: squared gradients of ``1/2 sum_agents
    ||[log pi, V]||^2`` at every step of fresh episodes, the mean over the live steps,
    replaced per task (``mode="last"``), not normalised. MEAL 057f862's form is
    ``stride=5, agent_mean=True, normalize_task=True, mode="online"`` (each task's
    importance divided by its mean over the whole parameter tree, then ``0.9 w + 0.1 w_new``)."""

    name = "mas"

    def __init__(
        self,
        lam: float,
        mode: str = "last",
        stride: int = 1,
        normalize_task: bool = False,
        agent_mean: bool = False,
        **kwargs: Any,
    ):
        super().__init__(lam, mode=mode, **kwargs)
        self.stride = int(stride)
        self.normalize_task = bool(normalize_task)
        self.agent_mean = bool(agent_mean)

    def _normalizations(self) -> list[str]:
        # 057f862: the task's importance (already normalised when norm_importance) is
        # divided by its mean again in update_state
        return super()._normalizations() + (["mean"] if self.normalize_task else [])

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        return mas_importance(
            self.policy, self._forward(), params, episodes, self.stride, self.agent_mean
        )


class MealL2(QuadraticPenalty):
    """L2 as MEAL's ``L2``: importance 1, anchored at the initial parameters from the
    first task on, then at the parameters of every task switch; divided by the number of
    regularised parameters."""

    name = "l2"

    def __init__(
        self,
        lam: float,
        regularize_critic: bool = False,
        regularize_heads: bool = False,
        groups: tuple[str, ...] | str | None = None,
        seed: int = 0,
    ):
        chosen = groups if groups is not None else meal_groups(regularize_critic, regularize_heads)
        super().__init__(lam, groups=chosen, scale_by="params", seed=seed)

    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        if not self.terms:
            self._set_anchor()

    def _set_anchor(self) -> None:
        ones = {n: th.ones_like(p) for n, p in self.named_parameters(self.policy)}
        self.terms["all"] = (ones, self._anchor())
        self._flat = None

    def consolidate_task(self, event: TaskSwitch) -> None:
        self._set_anchor()
        self._record(event)
