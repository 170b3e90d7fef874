"""Speed traps on a GPU (issue 39): the PPO update waits on the device (a copy to the
host: ``float(t)``, ``.item()``, ``.cpu()``, ...) a fixed number of times per update, not
per minibatch, with a CL penalty's loss hook too; the CPU's channels-last acting batches
are not made on other devices."""

from __future__ import annotations

import sys

import numpy as np
import torch as th
from gymnasium import spaces
from torch.overrides import TorchFunctionMode

from baselines_sb3.cl import CLEAR, MealL2, ReservoirBuffer, attach_method
from baselines_sb3.learners import ContinualPPO
from baselines_sb3.networks import CoraResidualCNN
from baselines_sb3.policies import ContinualPolicy
from cl_suites.api import make_vec
from cl_suites.sb3.adapter import SB3VecEnv
from tests.helpers.device_probe import PACKAGES

HOST_COPIES = {
    th.Tensor.__float__, th.Tensor.__bool__, th.Tensor.__int__, th.Tensor.item,
    th.Tensor.cpu, th.Tensor.numpy, th.Tensor.tolist,
}  # fmt: skip
TORCH_DISPATCH = ("torch/_tensor.py", "torch/overrides.py")


class CountHostCopies(TorchFunctionMode):
    """Counts the host copies the project's code asks for (``sites``: where); torch's
    own (Adam's step counter, on the CPU on every device) are not the learner's."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_COPIES:
            frame = sys._getframe(1)  # past torch's dispatch (Tensor.__float__ and the like)
            while frame is not None and frame.f_code.co_filename.endswith(TORCH_DISPATCH):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(PACKAGES):
                self.sites.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        return func(*args, **(kwargs or {}))


def _host_copies_per_update(batch_size: int, method=None) -> int:
    env = SB3VecEnv(make_vec("Diagnostic", 2, n_tasks=2, steps_per_task=256, show_task=False))
    env.seed(0)
    model = ContinualPPO(
        ContinualPolicy, env, n_steps=32, batch_size=batch_size, n_epochs=2, seed=0,
        cl_method=method,
    )  # fmt: skip
    if method is not None:
        attach_method(model, method, env)
    model.learn(64)  # a rollout in the buffer, the logger set up
    with CountHostCopies() as mode:
        model.train()
    return len(mode.sites)


def test_ppo_syncs_with_the_host_a_fixed_number_of_times_per_update():
    few, many = _host_copies_per_update(32), _host_copies_per_update(4)  # 4 vs 32 minibatches
    assert few == many


def test_the_cl_loss_is_logged_once_per_update():
    few, many = (_host_copies_per_update(b, MealL2(1.0)) for b in (32, 4))
    assert few == many


class CountChannelsLast(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.count += func is th.Tensor.contiguous and th.channels_last in (*args, *kwargs.values())
        return func(*args, **kwargs)


def test_channels_last_acting_is_for_the_cpu_only():
    """The CPU's oneDNN convolutions gain from channels-last acting batches; on another
    device (here the meta device) the conversion would only copy every batch."""
    space = spaces.Box(0, 255, (3, 64, 64), np.uint8)
    counts = {}
    for device in ("cpu", "meta"):
        cnn = CoraResidualCNN(space, features_dim=16).to(device)
        with th.no_grad(), CountChannelsLast() as mode:
            cnn(th.zeros(2, 3, 64, 64, device=device))
        counts[device] = mode.count
    assert counts == {"cpu": 1, "meta": 0}


def _clear_run(prefetch: bool, monkeypatch, **ppo):
    """PPO + CLEAR on Diagnostic, 6 updates of 8 minibatches; ``prefetch=False``: the
    replay drawn minibatch by minibatch, as before. Returns the model, the method and the
    number of ``buffer.sample`` calls."""
    method = CLEAR(buffer_size=512, replay_ratio=0.5)
    env = SB3VecEnv(make_vec("Diagnostic", 2, n_tasks=2, steps_per_task=256, show_task=False))
    env.seed(0)
    model = ContinualPPO(
        ContinualPolicy, env, n_steps=32, batch_size=16, n_epochs=2, seed=0, cl_method=method,
        policy_kwargs={"net_arch": [16]}, **ppo,
    )  # fmt: skip
    callback = attach_method(model, method, env)
    with monkeypatch.context() as mp:
        if not prefetch:
            mp.setattr(CLEAR, "start_update", lambda *args: None)
        calls = []
        sample = ReservoirBuffer.sample
        mp.setattr(ReservoirBuffer, "sample", lambda b, n: calls.append(n) or sample(b, n))
        model.learn(6 * 64, callback=callback)
    return model, method, calls


def test_clear_draws_an_updates_replay_at_once_and_trains_as_before(monkeypatch):
    for ppo in ({}, {"target_kl": 1e-6}):  # a KL early stop leaves pre-drawn replay unused
        (a, ca, before), (b, cb, after) = (_clear_run(p, monkeypatch, **ppo) for p in (0, 1))
        for name, value in a.policy.state_dict().items():
            assert th.equal(value, b.policy.state_dict()[name]), name
        assert ca.buffer.rng.bit_generator.state == cb.buffer.rng.bit_generator.state
        assert a._n_updates == b._n_updates and (a._n_updates < 12) == bool(ppo)  # KL stops
        assert len(after) < len(before) and all(n > 1 for n in after)  # one draw per update
