"""Learners: an IMPALA-style V-trace actor-critic as an SB3 algorithm, and PPO with CL hooks.

Both accept a :class:`~baselines_sb3.cl.base.ContinualMethod` through ``cl_method``;
its penalty/extra loss reach the optimizer through the ``zero_grad`` hook of
:func:`~baselines_sb3.cl.base.install_loss_hook` (clipped together with the loss), and a
method may take over an update (P&C's compress phase) through ``custom_update``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from baselines_sb3.cl.base import ContinualMethod, install_loss_hook
from baselines_sb3.vtrace import vtrace_loss, vtrace_targets


# --------------------------------------------------------------------------- buffers
class _BootstrapMixin:
    """Keeps the bootstrap values and skips SB3's GAE loop (V-trace computes its own targets)."""

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        self.last_values = last_values.clone().cpu().numpy().flatten()
        self.last_dones = np.asarray(dones, dtype=np.float32).copy()


class VTraceRolloutBuffer(_BootstrapMixin, RolloutBuffer):
    """Rollout buffer for V-trace (plain observations)."""


class VTraceDictRolloutBuffer(_BootstrapMixin, DictRolloutBuffer):
    """Rollout buffer for V-trace (Dict observations)."""


def _obs_tensor(observations: Any, device: th.device) -> Any:
    """``(T, E, ...)`` buffer observations to a flat ``(T*E, ...)`` tensor (or dict of them)."""
    if isinstance(observations, dict):
        return {k: _obs_tensor(v, device) for k, v in observations.items()}
    return th.as_tensor(observations.reshape(-1, *observations.shape[2:]), device=device)


# --------------------------------------------------------------------------- V-trace learner
class VTrace(OnPolicyAlgorithm):
    """IMPALA-style synchronous actor-critic with V-trace targets (an SB3 algorithm).

    Each update uses the whole rollout (``n_envs`` unrolls of ``n_steps``), one gradient
    step, V-trace targets with truncation ``rho_bar``/``c_bar`` (with synchronous
    collection the behaviour and target policies coincide at the update, so V-trace
    equals n-step returns here; off-policy data such as CLEAR's replay uses the full
    correction). RMSProp by default (``alpha``, ``rms_prop_eps``), as in IMPALA/CORA.

    Args (beyond SB3's ``OnPolicyAlgorithm``): ``rho_bar``, ``c_bar``, ``use_rms_prop``,
    ``rms_prop_alpha``, ``rms_prop_eps``, ``loss_reduction`` (``"sum"`` over the batch as in
    TorchBeast, or ``"mean"``), ``cl_method``.
    """

    def __init__(
        self,
        policy: Any,
        env: Any,
        learning_rate: float = 4e-4,
        n_steps: int = 20,
        gamma: float = 0.99,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float = 40.0,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        use_rms_prop: bool = True,
        rms_prop_alpha: float = 0.99,
        rms_prop_eps: float = 0.01,
        loss_reduction: str = "mean",
        cl_method: ContinualMethod | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: str = "auto",
        _init_setup_model: bool = True,
        **kwargs: Any,
    ):
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=1.0,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=False,
            sde_sample_freq=-1,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
            supported_action_spaces=(
                spaces.Discrete,
                spaces.MultiDiscrete,
                spaces.Box,
                spaces.MultiBinary,
            ),
            **kwargs,
        )
        self.rho_bar, self.c_bar = float(rho_bar), float(c_bar)
        self.loss_reduction = loss_reduction
        self.cl_method = cl_method
        if use_rms_prop and "optimizer_class" not in self.policy_kwargs:
            self.policy_kwargs["optimizer_class"] = th.optim.RMSprop
            self.policy_kwargs["optimizer_kwargs"] = dict(
                alpha=rms_prop_alpha, eps=rms_prop_eps, momentum=0.0
            )
        self.rollout_buffer_class = (
            VTraceDictRolloutBuffer
            if isinstance(self.observation_space, spaces.Dict)
            else VTraceRolloutBuffer
        )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.cl_method is not None:
            install_loss_hook(self, self.cl_method)

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        if self.cl_method is not None and self.cl_method.custom_update(self):
            return
        buf = self.rollout_buffer
        t_len, n_envs = buf.buffer_size, buf.n_envs
        obs = _obs_tensor(buf.observations, self.device)
        actions = th.as_tensor(buf.actions.reshape(t_len * n_envs, -1), device=self.device)
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
        values = values.flatten()
        as_t = lambda a: th.as_tensor(a, device=self.device, dtype=th.float32)  # noqa: E731
        starts = as_t(buf.episode_starts)
        dones_after = th.cat([starts[1:], as_t(buf.last_dones).unsqueeze(0)], dim=0)
        vs, pg_adv = vtrace_targets(
            as_t(buf.log_probs),
            log_prob.detach().view(t_len, n_envs),
            as_t(buf.rewards),
            values.detach().view(t_len, n_envs),
            as_t(buf.last_values),
            self.gamma * (1.0 - dones_after),
            self.rho_bar,
            self.c_bar,
        )
        loss, stats = vtrace_loss(
            log_prob,
            entropy if entropy is not None else -log_prob,
            values,
            vs.flatten(),
            pg_adv.flatten(),
            self.vf_coef,
            self.ent_coef,
            self.loss_reduction,
        )
        self.policy.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()
        self._n_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        for key, value in stats.items():
            self.logger.record(f"train/{key}", value)

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 100,
        tb_log_name: str = "VTrace",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ):
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )


# --------------------------------------------------------------------------- PPO
class ContinualPPO(PPO):
    """SB3 ``PPO`` plus a ``cl_method``: the method's losses go through the optimizer hook,
    and a method may replace an update (``custom_update``, e.g. P&C compress)."""

    def __init__(self, *args: Any, cl_method: ContinualMethod | None = None, **kwargs: Any):
        self.cl_method = cl_method
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.cl_method is not None:
            install_loss_hook(self, self.cl_method)

    def train(self) -> None:
        if self.cl_method is not None:
            self.policy.set_training_mode(True)
            self._update_learning_rate(self.policy.optimizer)
            if self.cl_method.custom_update(self):
                return
        super().train()
