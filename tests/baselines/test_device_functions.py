"""The learners' and CL methods' tensor functions on a second device (issue 39), on a
CPU-only machine: the policy and the inputs on the simulated device of
:mod:`tests.helpers.simulated_device` (torch's ``meta`` device, mixing with CPU tensors refused
as CUDA refuses it, a CPU generator refused for sampling there). Each function must
return its result on the policy's device without mixing devices: V-trace targets,
CLEAR's replay loss, CORA's and MEAL's importances, the quadratic penalties, P&C's
distillation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

from baselines_sb3.cl import CLEAR, ContinualMethod, MealEWC, ProgressCompress, attach_method
from baselines_sb3.cl.base import FreshEpisodes
from baselines_sb3.cl.importance import (
    _stepwise_squared_grads,
    cora_loss,
    mas_importance,
    missing_vmap_rule,
    score_fisher,
)
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from baselines_sb3.policies import ContinualPolicy
from baselines_sb3.vtrace import vtrace_targets
from cl_suites.api import make_vec
from cl_suites.sb3.adapter import SB3VecEnv
from tests.helpers.simulated_device import DEVICE, DeviceMixError, SimulatedDevice

T, B = 5, 3


def _model(method=None, policy=ContinualPolicy, learn=0):
    """A small PPO on Diagnostic with ``method`` (``None``: fine-tuning), trained
    ``learn`` steps on the CPU (to fill the method's buffers)."""
    method = method if method is not None else ContinualMethod()
    venv = make_vec("Diagnostic", 2, n_tasks=2, steps_per_task=256, show_task=False)
    env = SB3VecEnv(venv)
    env.seed(0)
    model = ContinualPPO(
        policy, env, cl_method=method, seed=0, policy_kwargs={"net_arch": [8]},
        n_steps=16, batch_size=16, n_epochs=1,
    )  # fmt: skip
    callback = attach_method(model, method, env)
    if learn:
        model.learn(learn, callback=callback)
    return model


def _obs(policy, n):
    return np.stack([policy.observation_space.sample() for _ in range(n)]).astype(np.float32)


def _episodes(policy, steps, agents=1, actions=True):
    rng = np.random.default_rng(0)
    return FreshEpisodes(
        _obs(policy, steps * agents),
        agents,
        np.arange(steps) % 4,
        np.arange(steps) < steps - 1,
        rng.integers(0, policy.action_space.n, (steps, agents)) if actions else None,
    )


def _on_meta(tensors):
    return all(t.device == DEVICE for t in tensors)


def test_the_simulated_device_refuses_what_cuda_refuses():
    x = th.empty(4, 3, device=DEVICE)
    with SimulatedDevice() as mode:
        with pytest.raises(DeviceMixError, match="meta and cpu"):
            x.gather(-1, th.zeros(4, 1, dtype=th.long))
        with pytest.raises(DeviceMixError, match="cpu generator"):
            th.multinomial(th.softmax(x, -1), 1, generator=th.Generator(device="cpu"))
        assert (x + th.tensor(2.0)).device == DEVICE  # a 0-dim CPU scalar is fine
        assert float(x.sum()) == 1.0 and mode.host_copies == 1  # host copies read ones


def test_vtrace_targets_stay_on_the_device():
    t = lambda *shape: th.empty(*shape, device=DEVICE)  # noqa: E731
    with SimulatedDevice():
        vs, adv = vtrace_targets(t(T, B), t(T, B), t(T, B), t(T, B), t(B), t(T, B))
    assert _on_meta([vs, adv])


def test_cora_loss_on_the_device():
    policy = _model().policy.to(DEVICE)
    rng = np.random.default_rng(0)
    batch = {
        "obs": _obs(policy, (T + 1) * B).reshape(T + 1, B, -1),
        "actions": rng.integers(0, policy.action_space.n, (T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "log_probs": np.full((T, B), -1.0, np.float32),
        "starts": np.zeros((T + 1, B), np.float32),
    }
    with SimulatedDevice():
        loss = cora_loss(policy.logits_and_values, batch, 0.99, 0.5, policy.device, 2.0)
    assert loss.device == DEVICE


@pytest.mark.parametrize("fisher_agents", ["first", "joint"])
def test_meal_ewc_importance_on_the_device(fisher_agents):
    """MEAL's EWC at a task switch: the played actions of agent 0 ("first") or actions
    resampled with the method's generator ("joint")."""
    method = MealEWC(1.0, fisher_agents=fisher_agents)
    policy = _model(method).policy.to(DEVICE)
    params = list(policy.named_parameters())
    with SimulatedDevice():
        fisher = method.compute_importance(_episodes(policy, 6, agents=2), params)
        resampled = score_fisher(
            policy, policy.logits_and_values, params, _episodes(policy, 6), method.generator
        )
    assert _on_meta([*fisher.values(), *resampled.values()])


def test_mas_importance_on_the_device():
    policy = _model().policy.to(DEVICE)
    params = list(policy.named_parameters())
    with SimulatedDevice():
        w = mas_importance(policy, policy.logits_and_values, params, _episodes(policy, 6), 2)
    assert _on_meta(w.values())


def test_quadratic_penalty_on_the_device():
    method = MealEWC(1.0)
    policy = _model(method).policy.to(DEVICE)
    named = method.named_parameters(policy)
    method.terms["all"] = (
        {n: th.ones_like(p) for n, p in named},
        {n: th.zeros_like(p) for n, p in named},
    )
    with SimulatedDevice():
        value = method.penalty_grad_(policy)
        graph = method.penalty(policy)
    assert _on_meta([value, graph, *(p.grad for _, p in named)])


def test_clear_replay_loss_on_the_device():
    method = CLEAR(buffer_size=256, replay_ratio=0.5)
    model = _model(method, learn=128)
    batch = method.buffer.sample(2)
    policy = model.policy.to(DEVICE)
    with SimulatedDevice():
        loss = method.replay_loss(policy, batch)
    assert loss.device == DEVICE


def test_pnc_distillation_on_the_device():
    method = ProgressCompress(lam=1.0)
    model = _model(method, policy=ProgressCompressPolicy, learn=128)
    batch = method.buffer.sample(2, method.rng)
    model.policy.to(DEVICE)
    with SimulatedDevice():
        kl = method.distillation_kl(batch)
        penalty = method.kb_penalty()
    assert kl.device == DEVICE and (penalty is None or penalty.device == DEVICE)


def _one_step_grads(step_loss):
    policy = _model().policy
    params = list(policy.named_parameters())
    obs = th.as_tensor(_obs(policy, 4)).view(4, 1, -1)
    actions, weights = th.zeros(4, 1, dtype=th.long), th.ones(4)
    return _stepwise_squared_grads(
        policy, policy.logits_and_values, params, obs, actions, weights, step_loss
    )


def test_per_step_gradients_loop_only_where_vmap_has_no_rule():
    def host_sync(logits, values, actions):  # .item() cannot be batched: vmap refuses it
        return logits.sum() * float(values.sum().item() >= -1e9)

    with pytest.warns(UserWarning, match="not vectorised"):
        grads = _one_step_grads(host_sync)
    assert any(g.abs().sum() > 0 for g in grads.values())


@pytest.mark.parametrize(
    "error",
    [
        th.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu"),
        RuntimeError("indices should be either on cpu or on the same device"),
    ],
    ids=["oom", "two-devices", "index-device"],
)
def test_out_of_memory_and_device_errors_surface_from_per_step_gradients(error):
    def failing(logits, values, actions):
        raise error

    assert not missing_vmap_rule(error)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not vectorised" detour: the error itself, once
        with pytest.raises(type(error), match=str(error)[:20]):
            _one_step_grads(failing)
