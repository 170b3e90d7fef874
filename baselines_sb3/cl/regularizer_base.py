"""The shared base of the quadratic-penalty methods CORA and MEAL define
(:class:`QuadraticPenalty`); CORA's variants are in ``cora_regularizers``, MEAL's in
``meal_regularizers``.

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

from collections.abc import Mapping
from typing import Any

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from baselines_sb3.cl.base import (
    ContinualMethod,
    find_task_switch_source,
    latest_step_segment,
    logits_and_values,
    select_parameters,
)
from cl_suites.core.task import Segment, TaskSwitch

Importance = dict[str, th.Tensor]


NORMALIZATIONS: tuple[str, ...] = ("row", "row-intended", "full", "mean")


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

    switch_inside_step = True  # the hook reads the network only (ContinualMethod)

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
