"""Torch side of the plasticity diagnostics: what a torch network shows on the probe batch.

:class:`TorchProbe` implements ``cl_suites.metrics.plasticity_tracker.NetworkProbe`` for a
torch module: forward hooks on its activation modules (``nn.ReLU``, ``nn.Tanh``, ...: the
post-activation outputs, conv channels moved last), forward pre-hooks on its output heads
(their input: the penultimate features), parameter copies per network, and the gradient
norm of the last update (:class:`GradientNorms`). The math is
``cl_suites.metrics.plasticity``'s, shared with the JAX learner.

:func:`policy_probe` builds one for the package's SB3 policies: ``actor`` and ``critic``
(features extractor + trunk + head each; a shared features extractor counts in both), and
P&C's knowledge-base column as ``kb/actor`` and ``kb/critic``.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from torch import nn

from baselines_sb3.networks import CReLU
from baselines_sb3.policy_lag import wait_for_update
from cl_suites.metrics.plasticity_tracker import Capture

ACTIVATION_KINDS: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    CReLU: "relu",  # each of its 2n outputs is a ReLU unit
    nn.Tanh: "tanh",
    nn.Sigmoid: "sigmoid",
    nn.LeakyReLU: "other",
    nn.ELU: "other",
    nn.GELU: "other",
    nn.SiLU: "other",
    nn.Softplus: "other",
}
"""Activation modules whose outputs the diagnostics read, and their kind."""


@dataclass(frozen=True)
class TorchNetwork:
    """One network of a module: its name, the module-name prefixes of its layers
    (``layers``: activation modules under them are its hidden layers; ``params``:
    its parameters), its output head's module name (``head``: the head's input is the
    penultimate features), ``kind`` (``"policy"``: outputs are action logits;
    ``"value"``: values) and which forward pass computes it (``forward``: a key of the
    probe's ``forwards``)."""

    name: str
    layers: tuple[str, ...]
    head: str
    kind: str
    forward: str = "main"
    params: tuple[str, ...] | None = None


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p.rstrip(".") or name.startswith(p) for p in prefixes)


def _numpy(t: th.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _units_last(t: th.Tensor) -> np.ndarray:
    a = _numpy(t)
    return np.moveaxis(a, 1, -1) if a.ndim > 2 else a


_OBSERVERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""module -> ``GradientNorms`` that :func:`clip_grad_norm` reports to."""


def clip_grad_norm(module: nn.Module, params: Any, max_norm: float) -> th.Tensor:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)``, and, when the plasticity
    diagnostics watch ``module``, the gradient norms before the clipping (one
    ``_foreach_norm`` call per minibatch). The learners call this instead of torch's."""
    params = list(params)
    watcher = _OBSERVERS.get(module)
    if watcher is not None and watcher.enabled:
        with contextlib.suppress(Exception):  # a diagnostic never stops training
            watcher.observe(params)
    return th.nn.utils.clip_grad_norm_(params, max_norm)


class GradientNorms:
    """The gradient norm of the last update, per network.

    Each minibatch gives, per network, ``sqrt(sum of its parameters' squared gradient
    entries)`` before any clipping (what ``clip_grad_norm_`` returns); :meth:`finish_update`
    (called once per update, before the next rollout) keeps the mean over the update's
    minibatches (Plasticine's ``np.mean(total_grad_norm)``). The minibatches are seen

    * by the package's learners through :func:`clip_grad_norm` (``module`` given: one
      ``_foreach_norm`` per minibatch, no hook), or
    * through hooks (``optimizer`` given, an own loop's): each parameter's gradient norm
      after accumulation, closed at each step of ``optimizer``.
    """

    def __init__(
        self,
        groups: Mapping[str, Sequence[nn.Parameter]],
        optimizer: Any = None,
        module: nn.Module | None = None,
    ):
        self._sq: dict[int, th.Tensor] = {}
        self._groups = {k: [id(p) for p in v] for k, v in groups.items()}
        self._batches: dict[str, list[float]] = {k: [] for k in groups}
        self.last: dict[str, float] = {k: math.nan for k in groups}
        self._handles = []
        self._module = module
        self.enabled = True
        """Whether :func:`clip_grad_norm` reports to it (``PlasticityCallback`` turns it on
        only for the updates right before an evaluation point)."""
        self._layout_key: tuple[int, ...] = ()
        self._layout: dict[str, th.Tensor] = {}
        if module is not None:
            _OBSERVERS[module] = self
        elif optimizer is not None:
            params = {id(p): p for v in groups.values() for p in v}
            for p in params.values():
                if p.requires_grad:
                    self._handles.append(p.register_post_accumulate_grad_hook(self._grad_hook))
            self._handles.append(optimizer.register_step_pre_hook(self._step_hook))

    def observe(self, params: Sequence[th.Tensor]) -> None:
        """One minibatch: the gradients of ``params`` now (before clipping)."""
        with_grad = [p for p in params if p.grad is not None]
        if not with_grad:
            return
        key = tuple(id(p) for p in with_grad)
        if key != self._layout_key:  # which positions belong to which network, once
            position = {i: k for k, i in enumerate(key)}
            device = with_grad[0].grad.device
            self._layout = {
                name: th.tensor(
                    [position[i] for i in ids if i in position], dtype=th.long, device=device
                )
                for name, ids in self._groups.items()
            }
            self._layout_key = key
        sq = th.stack(th._foreach_norm([p.grad.detach() for p in with_grad])).double() ** 2
        names = [n for n, idx in self._layout.items() if len(idx)]
        if not names:
            return
        totals = th.stack([sq.index_select(0, self._layout[n]).sum() for n in names])
        for name, value in zip(names, totals.sqrt().tolist(), strict=True):
            self._batches[name].append(value)

    def _grad_hook(self, p: th.Tensor) -> None:
        if p.grad is not None:  # the norm now: clipping scales .grad in place before step
            self._sq[id(p)] = th.linalg.vector_norm(p.grad.detach())

    def _step_hook(self, *_: Any) -> None:
        if not self._sq:
            return
        sq, self._sq = self._sq, {}
        for name, ids in self._groups.items():
            parts = [sq[i] for i in ids if i in sq]
            if parts:
                norms = th.stack(parts).double()
                self._batches[name].append(float(th.sqrt((norms * norms).sum())))

    def finish_update(self) -> None:
        """Close an update: its mean norm per network becomes :attr:`last`."""
        for name, values in self._batches.items():
            if values:
                self.last[name] = float(np.mean(values))
                values.clear()

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._module is not None and _OBSERVERS.get(self._module) is self:
            del _OBSERVERS[self._module]


class TorchProbe:
    """A torch module's networks on the probe batch (a ``NetworkProbe``).

    Args:
        module: the model (``nn.Module``).
        networks: its :class:`TorchNetwork` s.
        forwards: forward-pass name -> ``fn(module, obs, task_ids) -> (logits (B, A),
            values (B,))``, ``obs`` the probe's rows as stored (numpy). Default
            ``{"main": lambda m, obs, ids: m(torch.as_tensor(obs))}``.
        optimizer: its optimizer, for the gradient norm of the last update (hooks on the
            parameters; ``None``: NaN unless ``through_clipping``).
        through_clipping: the gradient norms come from :func:`clip_grad_norm` (the
            package's learners), no hooks.

    Raises:
        ValueError: a network without any activation module or head the diagnostics can
            read (one line naming it and the module types looked for).
    """

    def __init__(
        self,
        module: nn.Module,
        networks: Sequence[TorchNetwork],
        forwards: Mapping[str, Callable[[nn.Module, Any, np.ndarray], Any]] | None = None,
        optimizer: Any = None,
        through_clipping: bool = False,
    ):
        self.module = module
        self.networks = tuple(networks)
        self.forwards = dict(forwards or {"main": _plain_forward})
        modules = dict(module.named_modules())
        self._activations: dict[str, list[tuple[str, nn.Module, str]]] = {}
        for net in self.networks:
            acts = [
                (name, m, ACTIVATION_KINDS[type(m)])
                for name, m in modules.items()
                if type(m) in ACTIVATION_KINDS
                and _under(name, net.layers)
                and not _under(name, (net.head + ".",))
            ]
            if not acts or net.head not in modules:
                looked = ", ".join(t.__name__ for t in ACTIVATION_KINDS)
                raise ValueError(
                    f"network {net.name!r} of {type(module).__name__} has no layer the "
                    f"plasticity diagnostics can read: it needs activation modules ({looked}) "
                    f"under {list(net.layers)} and a head module {net.head!r}"
                )
            if net.forward not in self.forwards:
                raise ValueError(f"network {net.name!r} names an unknown forward {net.forward!r}")
            self._activations[net.name] = acts
        self._params = {
            net.name: [
                (n, p)
                for n, p in module.named_parameters()
                if _under(n, net.params if net.params is not None else net.layers)
            ]
            for net in self.networks
        }
        self.gradients = GradientNorms(
            {k: [p for _, p in v] for k, v in self._params.items()},
            None if through_clipping else optimizer,
            module if through_clipping else None,
        )

    def capture(self, obs: Any, task_ids: np.ndarray) -> dict[str, Capture]:
        modules = dict(self.module.named_modules())
        out: dict[str, Capture] = {}
        training = self.module.training
        self.module.train(False)
        try:
            for forward, fn in self.forwards.items():
                nets = [n for n in self.networks if n.forward == forward]
                if not nets:
                    continue
                acts: dict[str, np.ndarray] = {}
                heads: dict[str, np.ndarray] = {}
                handles = []

                def keep(name: str, acts: dict = acts) -> Callable[..., None]:
                    def hook(_m: nn.Module, _i: Any, output: th.Tensor) -> None:
                        acts[name] = _units_last(output)

                    return hook

                def keep_input(name: str, heads: dict = heads) -> Callable[..., None]:
                    def hook(_m: nn.Module, inputs: tuple[th.Tensor, ...]) -> None:
                        heads[name] = _numpy(inputs[0])

                    return hook

                try:
                    for net in nets:
                        for name, m, _ in self._activations[net.name]:
                            handles.append(m.register_forward_hook(keep(name)))
                        handles.append(
                            modules[net.head].register_forward_pre_hook(keep_input(net.head))
                        )
                    with th.no_grad():
                        logits, values = fn(self.module, obs, task_ids)
                finally:
                    for h in handles:
                        h.remove()
                for net in nets:
                    names = [n for n, _, _ in self._activations[net.name]]
                    kinds = {k for _, _, k in self._activations[net.name]}
                    outputs = logits if net.kind == "policy" else values
                    out[net.name] = Capture(
                        activations={n: acts[n] for n in names if n in acts},
                        features=heads[net.head],
                        outputs=_numpy(outputs).reshape(len(heads[net.head]), -1)
                        if net.kind == "policy"
                        else _numpy(outputs).reshape(-1),
                        kind=net.kind,
                        activation=kinds.pop() if len(kinds) == 1 else "other",
                    )
        finally:
            self.module.train(training)
        return out

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        return {k: {n: _numpy(p) for n, p in v} for k, v in self._params.items()}

    def gradient_norms(self) -> dict[str, float]:
        return dict(self.gradients.last)

    def finish_update(self) -> None:
        self.gradients.finish_update()

    def close(self) -> None:
        self.gradients.close()


def _plain_forward(module: nn.Module, obs: Any, task_ids: np.ndarray) -> Any:
    return module(th.as_tensor(np.asarray(obs), dtype=th.float32))


def _policy_forward(method: str) -> Callable[[nn.Module, Any, np.ndarray], Any]:
    def forward(policy: nn.Module, obs: Any, task_ids: np.ndarray) -> Any:
        tensors = policy.obs_to_tensor(obs)[0]
        return getattr(policy, method)(tensors)

    return forward


ACTOR_PREFIXES = ("features_extractor.", "pi_features_extractor.", "mlp_extractor.policy_net.")
CRITIC_PREFIXES = ("features_extractor.", "vf_features_extractor.", "mlp_extractor.value_net.")


def policy_probe(policy: nn.Module, optimizer: Any = None) -> TorchProbe:
    """The :class:`TorchProbe` of an SB3 ``ActorCriticPolicy`` of this package: networks
    ``actor`` (features extractor, ``mlp_extractor.policy_net``, ``action_net``) and
    ``critic`` (features extractor, ``mlp_extractor.value_net``, ``value_net``); for P&C
    (``policy.kb``) also ``kb/actor`` and ``kb/critic`` (the knowledge base, its own
    forward pass). ``optimizer``: the policy's (default ``policy.optimizer``)."""
    nets = [
        TorchNetwork(
            "actor", ACTOR_PREFIXES, "action_net", "policy", params=(*ACTOR_PREFIXES, "action_net.")
        ),
        TorchNetwork(
            "critic", CRITIC_PREFIXES, "value_net", "value", params=(*CRITIC_PREFIXES, "value_net.")
        ),
    ]
    forwards = {"main": _policy_forward("logits_and_values")}
    if isinstance(getattr(policy, "kb", None), nn.ModuleDict):
        kb_actor = ("kb.features_extractor.", "kb.mlp_extractor.policy_net.")
        kb_critic = ("kb.features_extractor.", "kb.mlp_extractor.value_net.")
        nets += [
            TorchNetwork(
                "kb/actor",
                kb_actor,
                "kb.action_net",
                "policy",
                "kb",
                params=(*kb_actor, "kb.action_net."),
            ),
            TorchNetwork(
                "kb/critic",
                kb_critic,
                "kb.value_net",
                "value",
                "kb",
                params=(*kb_critic, "kb.value_net."),
            ),
        ]
        forwards["kb"] = _policy_forward("kb_logits_and_values")
    return TorchProbe(policy, nets, forwards, optimizer, through_clipping=optimizer is None)


class PlasticityCallback(BaseCallback):
    """Measures the plasticity diagnostics at every evaluation point of an SB3 run.

    Put it after :class:`~baselines_sb3.callbacks.ContinualEvalCallback` in the callback
    list: whenever the evaluator has evaluated at a new step (in place or submitted beside
    training), the tracker measures the policy at that step, rows tagged with the task
    trained up to it. Feeds the probe batch from the training observations (``new_obs``,
    the task they are played on), closes the gradient norm of each update at the next
    rollout start (with ``policy_lag=1``, where the update then runs in its thread, at the
    next measurement, after waiting for it), and marks the task-start reference when the
    trained task changes (after the update in flight).

    Args:
        tracker: the run's ``PlasticityTracker``.
        probe: the policy's :class:`TorchProbe` (:func:`policy_probe`).
        evaluator: the run's ``Evaluator`` (its ``last_eval_step``).
        schedule: the run's segments (``Segment.end_step``, ``Segment.task_id``).
        agents_per_env: SB3 env slots per env (MEAL: ``num_agents``); steps are
            ``num_timesteps // agents_per_env``.
    """

    def __init__(
        self,
        tracker: Any,
        probe: TorchProbe,
        evaluator: Any,
        schedule: Sequence[Any],
        agents_per_env: int = 1,
    ):
        super().__init__()
        self.tracker, self.probe, self.evaluator = tracker, probe, evaluator
        self.schedule = tuple(schedule)
        self._ends = [s.end_step for s in self.schedule]
        self.agents_per_env = int(agents_per_env)
        self._measured: int | None = None

    def task_at(self, step: int) -> int:
        i = min(bisect.bisect_right(self._ends, step), len(self.schedule) - 1)
        return int(self.schedule[i].task_id)

    @property
    def total_step(self) -> int:
        return self.num_timesteps // self.agents_per_env

    def _on_training_start(self) -> None:
        self._measured = self.evaluator.last_eval_step  # a resumed run measured it already
        obs = getattr(self.model, "_last_obs", None)
        if obs is not None and self.num_timesteps == 0:  # resumed: the checkpoint has it
            self.tracker.observe(self.task_at(self.total_step), obs, self.total_step)

    def _maybe_measure(self) -> None:
        step = self.evaluator.last_eval_step
        if step is None or step == self._measured:
            return
        self._measured = step
        wait_for_update(self.model)  # policy_lag=1: the weights and norms after the update
        with contextlib.suppress(Exception):  # a diagnostic never stops training
            self.probe.finish_update()
        self.tracker.measure(step, self.task_at(step - 1), self.probe)

    def _on_rollout_start(self) -> None:
        if not getattr(self.model, "policy_lag", 0):  # lagged: the update runs now, closed
            with contextlib.suppress(Exception):  # at the next measurement, after it ends
                self.probe.finish_update()
        self._maybe_measure()
        task = self.task_at(self.total_step)
        if self.tracker.task != task:
            wait_for_update(self.model)  # the task-start weights, not weights mid-update
            self.tracker.task_started(task, self.probe)

    def _on_rollout_end(self) -> None:
        """Watch the coming update's gradients only when an evaluation point falls before
        the end of the next rollout (the update before a point is all it reports)."""
        nxt = getattr(self.evaluator, "next_eval_step", None)
        rollout = int(getattr(self.model, "n_steps", 1)) * int(self.model.env.num_envs)
        rollout //= self.agents_per_env
        last = self.schedule[-1].end_step if self.schedule else None
        soon = nxt is not None and nxt <= self.total_step + rollout
        ending = last is not None and self.total_step + rollout >= last
        self.probe.gradients.enabled = bool(soon or ending)

    def _on_step(self) -> bool:
        obs = self.locals.get("new_obs")
        if obs is not None:
            step = self.total_step
            self.tracker.observe(self.task_at(step), obs, step)
        self._maybe_measure()
        return True

    def _on_training_end(self) -> None:
        self._maybe_measure()
