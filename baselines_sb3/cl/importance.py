"""Parameter-importance estimators of the reference code.

* :func:`cora_fisher` (CORA ``ewc_monobeast.py`` ``checkpoint_task``): the mean over
  ``num_batches`` replay batches (``batch_unrolls`` unrolls of the task's recent frames)
  of the squared gradient of the batch-*summed* IMPALA policy-gradient + baseline loss
  (V-trace targets, no entropy term) - :func:`cora_loss`.
* :func:`score_fisher` (MEAL ``EWC``): the mean over the steps of fresh episodes of the
  squared gradient of agent 0's log-probability (paper time; or the joint
  ``sum_agents log pi(a_i | o_i)``, later code) of actions sampled from the policy.
* :func:`mas_importance` (MEAL ``MAS``): the mean over the live steps of fresh episodes
  of the squared gradient of ``1/2 sum_agents ||[log pi(.|o_i), V(o_i)]||^2`` (later code:
  divided by the ``A`` agents, every ``stride``-th step of an episode).

Per-step gradients of :func:`score_fisher` and :func:`mas_importance` are batched with
``torch.func`` (``vmap(grad(...))``) and fall back to a loop for modules without vmap rules.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch.func import functional_call, grad, vmap

from baselines_sb3.cl.base import FreshEpisodes
from baselines_sb3.cl.unroll_buffer import UnrollBuffer
from baselines_sb3.vtrace import vtrace_targets

Params = list[tuple[str, th.nn.Parameter]]
Forward = Callable[[Any], tuple[th.Tensor, th.Tensor]]
"""``forward(obs) -> (logits (N, n), values (N,))``, e.g. ``policy.logits_and_values``."""


def tree_map(fn: Callable[[Any], Any], obs: Any) -> Any:
    """``fn`` applied to an observation array/tensor or to each value of a dict of them."""
    return {k: fn(v) for k, v in obs.items()} if isinstance(obs, dict) else fn(obs)


def to_tensor(obs: Any, device: th.device | str) -> Any:
    return tree_map(lambda a: th.as_tensor(np.asarray(a), device=device), obs)


def cora_loss(
    forward: Forward,
    batch: dict[str, Any],
    gamma: float,
    vf_coef: float,
    device: th.device | str,
    reward_scale: float | None = None,
) -> th.Tensor:
    """CORA's policy-gradient + baseline loss on time-major unrolls (``UnrollBuffer.sample``):
    ``-sum(pg_adv * log pi(a)) + vf_coef * 1/2 * sum((v_s - V)^2)`` over the ``T x B``
    transitions, V-trace targets with the stored behaviour log-probabilities, bootstrap
    from the value of the ``T+1``-th observation (as ``monobeast.py`` ``compute_loss`` with
    ``with_custom_loss=False``; the entropy term is not part of it)."""
    starts = th.as_tensor(batch["starts"], device=device)
    t_len, b = batch["rewards"].shape
    obs = tree_map(lambda a: a.reshape(-1, *a.shape[2:]), to_tensor(batch["obs"], device))
    logits, values = forward(obs)
    logits, values = logits.view(t_len + 1, b, -1), values.view(t_len + 1, b)
    actions = th.as_tensor(batch["actions"], device=device).long()
    log_pi = th.log_softmax(logits[:t_len], dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    rewards = th.as_tensor(batch["rewards"], device=device)
    if reward_scale is not None:
        rewards = rewards / reward_scale
    vs, pg_adv = vtrace_targets(
        th.as_tensor(batch["log_probs"], device=device),
        log_pi.detach(),
        rewards,
        values[:t_len].detach(),
        values[t_len].detach(),
        gamma * (1.0 - starts[1:]),
    )
    pg_loss = -(pg_adv * log_pi).sum()
    baseline_loss = vf_coef * 0.5 * (vs - values[:t_len]).pow(2).sum()
    return pg_loss + baseline_loss


def cora_fisher(
    forward: Forward,
    params: Params,
    buffer: UnrollBuffer,
    *,
    num_batches: int,
    batch_unrolls: int,
    gamma: float,
    vf_coef: float,
    rng: np.random.Generator,
    device: th.device | str,
    reward_scale: float | None = None,
) -> dict[str, th.Tensor]:
    """CORA's diagonal Fisher: ``mean_batches (d cora_loss / d theta)^2`` (see module doc)."""
    tensors = [p for _, p in params]
    total = {name: th.zeros_like(p) for name, p in params}
    for _ in range(int(num_batches)):
        batch = buffer.sample(batch_unrolls, rng)
        with th.enable_grad():
            loss = cora_loss(forward, batch, gamma, vf_coef, device, reward_scale)
            grads = th.autograd.grad(loss, tensors, allow_unused=True)
        for (name, _), g in zip(params, grads, strict=True):
            if g is not None:
                total[name] += g.detach().pow(2)
    return {name: t / int(num_batches) for name, t in total.items()}


# -- per-step estimators over fresh episodes -----------------------------------------------
class _Outputs(th.nn.Module):
    """``forward(obs) -> (logits, values)`` as a module (for ``functional_call``)."""

    def __init__(self, policy: th.nn.Module, forward: Forward):
        super().__init__()
        self.policy = policy
        self._forward = forward

    def forward(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        return self._forward(obs)


StepLoss = Callable[[th.Tensor, th.Tensor, th.Tensor], th.Tensor]
"""``step_loss(logits (A, n), values (A,), actions (A,)) -> scalar`` of one env step."""


_NO_VMAP_RULE = ("batching rule", "vmap", "functorch", "not implemented for batched")
"""Words of the ``RuntimeError`` s ``torch.func.vmap`` raises for an op it cannot batch."""


def missing_vmap_rule(err: BaseException) -> bool:
    """Whether ``err`` says ``vmap`` cannot batch an op (the per-step loop is then the way
    out), as opposed to running out of memory or mixing devices, which must surface."""
    if isinstance(err, th.OutOfMemoryError):
        return False
    text = str(err).lower()
    if "out of memory" in text or "device" in text:
        return False
    return any(word in text for word in _NO_VMAP_RULE)


def _stepwise_squared_grads(
    policy: th.nn.Module,
    forward: Forward,
    params: Params,
    obs: Any,
    actions: th.Tensor,
    weights: th.Tensor,
    step_loss: StepLoss,
    chunk: int = 64,
) -> dict[str, th.Tensor]:
    """``sum_s weights_s * (d step_loss_s / d theta)^2`` with ``obs`` ``(S, A, ...)``."""
    total = {name: th.zeros_like(p) for name, p in params}
    steps = np.flatnonzero(weights.cpu().numpy() > 0)
    if steps.size == 0:
        return total
    module = _Outputs(policy, forward)
    detached = {"policy." + name: p.detach() for name, p in params}

    def one(theta: dict[str, th.Tensor], x: Any, a: th.Tensor) -> th.Tensor:
        logits, values = functional_call(module, theta, (x,))
        return step_loss(logits, values, a)

    try:
        per_step = vmap(grad(one), in_dims=(None, 0, 0))
        for lo in range(0, steps.size, chunk):
            idx = th.as_tensor(steps[lo : lo + chunk], device=actions.device)
            grads = per_step(detached, tree_map(lambda t: t[idx], obs), actions[idx])  # noqa: B023
            w = weights[idx]
            for name, _ in params:
                g2 = grads["policy." + name].pow(2)
                total[name] += (w.view(-1, *([1] * (g2.dim() - 1))) * g2).sum(0).detach()
        return total
    except RuntimeError as err:
        if not missing_vmap_rule(err):
            raise  # out of memory, tensors on two devices, a bug: not the loop's to hide
        warnings.warn(f"per-step gradients not vectorised ({err}); looping", stacklevel=3)
    total = {name: th.zeros_like(p) for name, p in params}
    tensors = [p for _, p in params]
    for s in steps.tolist():
        logits, values = forward(tree_map(lambda t: t[s], obs))  # noqa: B023
        grads = th.autograd.grad(step_loss(logits, values, actions[s]), tensors, allow_unused=True)
        for (name, _), g in zip(params, grads, strict=True):
            if g is not None:
                total[name] += weights[s] * g.detach().pow(2)
    return total


def _by_step(episodes: FreshEpisodes, device: th.device | str) -> Any:
    s, a = episodes.num_steps, int(episodes.num_agents)
    return tree_map(
        lambda t: t.reshape(s, a, *t.shape[1:]), to_tensor(episodes.observations, device)
    )


FISHER_AGENTS: tuple[str, ...] = ("first", "joint")


def sample_actions(logits: th.Tensor, generator: th.Generator | None = None) -> th.Tensor:
    """One action per row of ``logits`` ``(N, n)``, on the logits' device. The draw runs on
    the CPU with ``generator`` (a CPU generator: its saved state resumes on any device,
    and the draw is the same on every device up to the probabilities' rounding)."""
    probs = th.softmax(logits, dim=-1)
    return th.multinomial(probs.cpu(), 1, generator=generator).to(logits.device)


def score_fisher(
    policy: th.nn.Module,
    forward: Forward,
    params: Params,
    episodes: FreshEpisodes,
    generator: th.Generator | None = None,
    agents: str = "first",
    actions: th.Tensor | None = None,
) -> dict[str, th.Tensor]:
    """MEAL's Fisher over every step of the chunks (through episode ends, as MEAL's
    ``lax.scan`` of ``max_steps`` steps): ``mean_steps (d log pi / d theta)^2`` with actions
    sampled from the policy (or the given ``actions (S, A)``).

    ``agents="first"`` (MEAL 7d81858 ``cl_methods/EWC.py``): agent 0's observation and
    action only; ``"joint"`` (057f862 ``experiments/continual/ewc.py``): the joint
    ``sum_agents log pi(a_i | o_i)``."""
    if agents not in FISHER_AGENTS:
        raise ValueError(f"unknown Fisher agents {agents!r}; valid: {', '.join(FISHER_AGENTS)}")
    device = next(policy.parameters()).device
    obs = _by_step(episodes, device)
    if agents == "first":
        obs = tree_map(lambda t: t[:, :1], obs)
    if actions is None:
        with th.no_grad():
            logits, _ = forward(tree_map(lambda t: t.reshape(-1, *t.shape[2:]), obs))
            actions = sample_actions(logits, generator).view(episodes.num_steps, -1)
    else:
        actions = actions.to(device)
        if agents == "first":
            actions = actions[:, :1]

    def log_prob(lg: th.Tensor, _v: th.Tensor, act: th.Tensor) -> th.Tensor:
        return th.log_softmax(lg, dim=-1).gather(-1, act.view(-1, 1)).sum()

    weights = th.ones(episodes.num_steps, device=device)
    total = _stepwise_squared_grads(policy, forward, params, obs, actions, weights, log_prob)
    return {name: t / episodes.num_steps for name, t in total.items()}


def mas_importance(
    policy: th.nn.Module,
    forward: Forward,
    params: Params,
    episodes: FreshEpisodes,
    stride: int = 1,
    agent_mean: bool = False,
) -> dict[str, th.Tensor]:
    """MEAL's MAS importance: squared gradients of ``1/2 sum_agents ||[log pi, V]||^2``
    (divided by the number of agents ``A`` with ``agent_mean``, 057f862) summed over the
    steps with ``step_in_episode % stride == 0`` before the episode's end, divided by the
    number of live steps (all of them, strided or not, as MEAL counts). MEAL 7d81858
    ``cl_methods/MAS.py``: every step (``stride=1``), no division by ``A``."""
    device = next(policy.parameters()).device
    obs = _by_step(episodes, device)
    alive = th.as_tensor(episodes.alive, device=device, dtype=th.float32)
    strided = th.as_tensor(np.asarray(episodes.step_in_episode) % int(stride) == 0, device=device)
    weights = alive * strided.float()
    dummy = th.zeros(episodes.num_steps, int(episodes.num_agents), dtype=th.long, device=device)

    def half_sq_norm(lg: th.Tensor, v: th.Tensor, _a: th.Tensor) -> th.Tensor:
        vec = th.cat([th.log_softmax(lg, dim=-1), v.reshape(-1, 1)], dim=-1)
        total = 0.5 * vec.pow(2).sum()
        return total / vec.shape[0] if agent_mean else total

    total = _stepwise_squared_grads(policy, forward, params, obs, dummy, weights, half_sq_norm)
    live = float(alive.sum())
    return {name: t / max(live, 1e-8) for name, t in total.items()}
