"""A plasticity remedy on top of a CL method: ``--method redo`` (fine-tuning with ReDo),
``--method ewc+redo`` (EWC with ReDo); issue 54.

:func:`with_remedy` makes the class: a subclass of the base method's class whose
constructor also takes the remedy's options (``cl_suites.remedies.RemedyConfig``: declared
once there, typed, with their one-line docs) and whose hooks run the remedy beside the base
method's. The algorithms are ``baselines_sb3.remedies``'; this module only says *when*:

* ReDo: after every ``redo_period`` -th update of a task (:meth:`on_update_end`), on that
  update's rollout observations (Plasticine recycles after the update, on ``b_obs``).
* shrink-and-perturb: after every optimizer step (a post-step hook on the policy's
  optimizer), or at each task switch.
* continual backprop: after every optimizer step, on the activations of that step's
  forward pass (forward hooks while the policy trains).
* reset: at each task switch (the heads of the task about to start, or every layer).
* plasticity injection: after the update in the middle of each task and/or at its end.

Every change to the network happens after the evaluation and the plasticity diagnostics
of the task's end (``switch_inside_step = False``: the base method hears the switch then
too) and never under an update running in a thread (``policy_lag=1``: the callback waits).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch as th

from baselines_sb3 import remedies as lib
from baselines_sb3.cl.base import ContinualMethod, Rollout, flat_obs
from baselines_sb3.keywords import accepted_options
from cl_suites.core.task import Segment, TaskSwitch
from cl_suites.remedies import OPTION_NAMES, RemedyConfig, compose, option_docs

REMEDY_SEED_OFFSET = 54_000
"""The remedy's generator is seeded with the run seed plus this (a stream of its own)."""


class RemedyMethod(ContinualMethod):
    """The remedy half of a composed method (see the module docstring); the other half
    is the base method's class, after this one in the MRO (:func:`with_remedy`)."""

    remedy: str = ""
    switch_inside_step = False

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}
        self.remedy_config = RemedyConfig(remedy=self.remedy, **options)
        base = type(self).__mro__[type(self).__mro__.index(RemedyMethod) + 1]
        if "seed" in accepted_options(base):
            kwargs["seed"] = seed
        super().__init__(**kwargs)
        # the remedy's own random numbers (never the training's global stream), kept in
        # checkpoints: a resumed run draws what the uninterrupted one drew
        self.generator = th.Generator().manual_seed(int(seed) + REMEDY_SEED_OFFSET)
        self._rollout_obs: Any = None
        self._updates_in_task = 0
        self._task_steps = 0  # the current task's budget, in the schedule's steps
        self._remedy_task = 0
        self._initial: list[th.Tensor] | None = None
        self._cbp: lib.ContinualBackprop | None = None
        self._features: dict[str, th.Tensor] | None = None
        self._hooks = contextlib.ExitStack()
        self._rows: list[dict[str, Any]] = []
        self._row_sink: Callable[[list[dict[str, Any]]], None] | None = None
        self._step_source: Callable[[], int] | None = None
        self._agents_per_env = 1

    # -- wiring ----------------------------------------------------------------------
    def bind(self, policy: Any, model: Any = None) -> None:
        super().bind(policy, model)
        cfg = self.remedy_config
        optimizer = policy.optimizer
        if cfg.remedy == "shrink-perturb" and self._initial is None:
            self._initial = [p.detach().clone() for p in policy.parameters()]
        if cfg.remedy == "cbp":
            links = lib.policy_links(policy)
            self._cbp = lib.ContinualBackprop(
                links,
                optimizer,
                replacement_rate=cfg.cbp_replacement_rate,
                maturity=cfg.cbp_maturity,
                decay=cfg.cbp_decay,
                generator=self.generator,
                reset_moments=cfg.cbp_reset_moments,
            )
            # the activations of every forward pass; the last before a step is its own
            self._features = self._hooks.enter_context(lib.capture_features(links))
        if cfg.remedy == "redo":
            lib.policy_links(policy)  # a network without recyclable layers: refused now
        if (cfg.remedy == "shrink-perturb" and cfg.snp_every == "minibatch") or self._cbp:
            self._hooks.callback(optimizer.register_step_post_hook(self._after_step).remove)

    def set_current_segment(self, segment: Segment | None) -> None:
        super().set_current_segment(segment)
        if segment is not None:
            self._start_task(segment)

    def _start_task(self, segment: Segment) -> None:
        self._remedy_task = int(segment.task_id)
        self._updates_in_task = 0
        self._task_steps = int(segment.steps)

    @property
    def _updates_per_task(self) -> int:
        """The current task's updates (its budget over the steps of one update)."""
        per_update = self._steps_per_update()
        return max(1, math.ceil(self._task_steps / per_update)) if per_update else 1

    def _steps_per_update(self) -> int:
        """Steps of the schedule's unit per update: the learner's rows (``n_steps x
        n_envs``, one per agent) over the agents per env (MEAL's segments count env
        steps, its learner a row per agent)."""
        model = self.model
        if model is None:
            return 0
        rows = int(getattr(model, "n_steps", 0)) * int(getattr(model, "n_envs", 0))
        return rows // self._agents_per_env

    # -- events ----------------------------------------------------------------------
    def on_rollout_end(self, rollout: Rollout) -> None:
        super().on_rollout_end(rollout)
        if self.remedy_config.remedy == "redo":  # rows now: the update flattens the buffer
            self._rollout_obs = flat_obs(rollout.observations)

    def on_update_end(self) -> None:
        super().on_update_end()
        cfg = self.remedy_config
        self._updates_in_task += 1
        n = self._updates_in_task
        if cfg.remedy == "redo" and n % cfg.redo_period(self._updates_per_task) == 0:
            self._recycle()
        elif cfg.remedy == "plasticity-injection" and n in cfg.injection_updates(
            self._updates_per_task
        ):
            lib.inject_plasticity(self.policy, self.policy.optimizer)
            self._log("injected", n)

    def close(self) -> None:
        """Remove the hooks the remedy put on the policy and its optimizer."""
        self._hooks.close()

    def on_task_switch(self, event: TaskSwitch) -> None:
        """The base method's switch, then the remedy's, when a task follows (nothing is
        changed after the sequence's last task: no training would see it)."""
        super().on_task_switch(event)
        cfg = self.remedy_config
        if event.current is None:
            return
        if cfg.remedy == "reset":
            if cfg.reset_layers == "heads":
                task = event.current.task_id
                lib.reset_heads(self.policy, self.policy.optimizer, task, self.generator)
            else:
                lib.reset_all(self.policy, self.policy.optimizer, generator=self.generator)
            self._log("reset", self._updates_in_task)
        elif cfg.remedy == "plasticity-injection" and cfg.injects_at_end:
            lib.inject_plasticity(self.policy, self.policy.optimizer)
            self._log("injected", self._updates_in_task)
        elif cfg.remedy == "shrink-perturb" and cfg.snp_every == "task":
            self._shrink_perturb()
            self._log("shrunk", self._updates_in_task)
        self._start_task(event.current)

    def _after_step(self, *_: Any) -> None:
        if not self.policy.training:
            return
        cfg = self.remedy_config
        if cfg.remedy == "shrink-perturb":
            self._shrink_perturb()
        elif self._cbp is not None and self._features is not None:
            replaced = self._cbp.observe(self._features)
            counts = {name: int(units.numel()) for name, units in replaced.items()}
            if any(counts.values()):
                self._log("replaced", self._updates_in_task + 1, counts)  # during update k

    # -- the remedies ----------------------------------------------------------------
    def _shrink_perturb(self) -> None:
        cfg = self.remedy_config
        noise = (
            lib.fresh_init_like(self.policy, self.generator) if cfg.snp_noise == "fresh" else None
        )
        lib.shrink_perturb(
            list(self.policy.parameters()), self._initial, cfg.snp_shrink, cfg.perturb, noise
        )

    def _recycle(self) -> None:
        if self._rollout_obs is None:
            return
        recycled = lib.recycle_dormant(
            self.policy,
            self._rollout_obs,  # numpy through the policy's obs_to_tensor, tensors as they are
            tau=self.remedy_config.redo_tau,
            optimizer=self.policy.optimizer,
            reset_moments=self.remedy_config.redo_reset_moments,
            generator=self.generator,
        )
        self._log("recycled", self._updates_in_task, recycled)

    def _log(self, event: str, update: int, units: Mapping[str, int] | None = None) -> None:
        """Remember what the remedy did: rows of ``remedy.csv`` (``REMEDY_COLUMNS``), one
        per layer (``all`` when it acted on the whole network or its heads)."""
        step = (
            self._step_source() if self._step_source is not None else int(self.model.num_timesteps)
        )
        base = {"total_step": step, "task_id": self._remedy_task, "update": update, "event": event}
        layers = units.items() if units else (("all", 0),)
        self._rows += [{**base, "layer": name, "units": int(n)} for name, n in layers]

    def set_event_sink(
        self,
        sink: Callable[[list[dict[str, Any]]], None] | None,
        step: Callable[[], int] | None = None,
        agents_per_env: int = 1,
    ) -> None:
        """Where :meth:`flush_events` writes (the job: ``RunLog.log_remedy``), the step
        count its rows carry (the job: the sequence's ``total_step``, as ``eval.csv``'s;
        default: the learner's ``num_timesteps``) and the agents per env (the learner's
        rows per step of the schedule: MEAL's 2 or 3), which a task's updates are counted
        with (ReDo's and injection's cadences)."""
        self._row_sink, self._step_source = sink, step
        self._agents_per_env = max(1, int(agents_per_env))

    def flush_events(self) -> None:
        """Write what the remedy did since the last flush. The job calls it after each
        checkpoint is written, so ``remedy.csv`` holds what the checkpointed network went
        through: a resumed run writes the rest again, nothing twice."""
        rows, self._rows = self._rows, []
        if rows and self._row_sink is not None:
            self._row_sink(rows)

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = dict(super().state_dict())
        state["remedy"] = {
            "updates_in_task": self._updates_in_task,
            "task_steps": self._task_steps,
            "task_id": self._remedy_task,
            "initial": None if self._initial is None else [t.cpu() for t in self._initial],
            "cbp": None if self._cbp is None else self._cbp.state_dict(),
            "generator": self.generator.get_state(),
        }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        mine = state.pop("remedy", None)
        super().load_state_dict(state)
        if not mine:
            return
        self._updates_in_task = int(mine["updates_in_task"])
        self._task_steps = int(mine["task_steps"])
        self._remedy_task = int(mine["task_id"])
        self.generator.set_state(mine["generator"])
        if mine.get("initial") is not None and self.policy is not None:
            device = self.policy.device
            self._initial = [t.to(device) for t in mine["initial"]]
        if mine.get("cbp") is not None and self._cbp is not None:
            self._cbp.load_state_dict(mine["cbp"])


def _remedy_signature(base: type) -> inspect.Signature:
    """The composed constructor's signature: the remedy's options (keyword-only, with
    their defaults), the run seed (the remedy's generator) and ``**kwargs`` for the base
    method's (``accepted_options`` walks on
    to the base class through it)."""
    defaults = RemedyConfig()
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, name))
        for name in OPTION_NAMES
    ]
    params.append(inspect.Parameter("seed", inspect.Parameter.KEYWORD_ONLY, default=0))
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


_CLASSES: dict[tuple[type, str], type] = {}


def with_remedy(base: type[ContinualMethod], remedy: str) -> type[ContinualMethod]:
    """The class of ``base`` with ``remedy`` (one of ``cl_suites.remedies.REMEDIES``), made
    once per pair. Its options: ``base``'s and the remedy's (``option_docs()``)."""
    key = (base, remedy)
    if key not in _CLASSES:

        def __init__(self: Any, **kwargs: Any) -> None:
            RemedyMethod.__init__(self, **kwargs)

        __init__.__signature__ = _remedy_signature(base)  # type: ignore[attr-defined]
        docs = "\n".join(f"    {k}: {v}" for k, v in option_docs().items())
        name = compose(getattr(base, "name", "ft"), remedy)
        _CLASSES[key] = type(
            f"{base.__name__}With{remedy.title().replace('-', '')}",
            (RemedyMethod, base),
            {
                "__init__": __init__,
                "name": name,
                "remedy": remedy,
                "__doc__": f"{base.__name__} with the remedy {remedy!r}.\n\n    Args:\n{docs}\n",
                "__module__": __name__,
            },
        )
    return _CLASSES[key]
