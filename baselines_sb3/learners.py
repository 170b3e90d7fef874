"""Learners: an IMPALA-style V-trace actor-critic and PPO, as SB3 algorithms with CL hooks.

Both accept a :class:`~baselines_sb3.cl.base.ContinualMethod` through ``cl_method``; its
penalty / extra loss reach the optimizer through the ``zero_grad`` hook of
:func:`~baselines_sb3.cl.base.install_loss_hook` (clipped together with the loss), and a
method may take over an update (P&C's compress phase) through ``custom_update``.

Both follow the task switches of the sequence env they train on (they subscribe to the
env's ``on_task_switch``; see :class:`TaskSwitchLearner`):

* ``lr_schedule``: ``"constant"``; ``"linear"`` (SB3: one decay over the whole run);
  ``"linear-per-task"``: ``lr * (1 - min(k * B, S) / S)`` for the ``k``-th update of a
  task of ``S`` steps with ``B`` steps per update, restarting at every task (CORA's
  ``monobeast.py`` ``lr_lambda``, MEAL Table 4); ``"linear-steps"``: one decay to 0 over
  ``lr_decay_steps`` agent steps, then 0 (CORA's PPO).
* ``reset_optimizer_at_switch``: the optimizer's state (Adam moments, RMSProp averages)
  is emptied after the update of the rollout in which the task switched, i.e. after the
  old task's last update (MEAL builds a new optimizer per task after the previous one).

Both are stateless beyond what checkpoints already hold: the schedule position is read
from the env's ``SequenceCursor`` at every update, and a reset is part of the optimizer
state saved after the switch, so a resumed run continues both exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.utils import explained_variance, update_learning_rate
from torch.nn import functional as F

from baselines_sb3.block_acting import BlockActingCollector
from baselines_sb3.buffers import (
    SparseRowsRolloutBuffer,
    VTraceDictRolloutBuffer,
    VTraceRolloutBuffer,
    flat_observations,
)
from baselines_sb3.cl.base import (
    ContinualMethod,
    find_task_switch_source,
    install_loss_hook,
    latest_step_segment,
    learner_batch_size,
)
from baselines_sb3.device_rollout import (
    DeviceRolloutCollector,
    device_buffer_class,
    observations_on,
)
from baselines_sb3.plasticity import clip_grad_norm
from baselines_sb3.policy_lag import PolicyLagLearner
from baselines_sb3.running_stats import REWARD_STD_COUNTS, RunningRewardStd
from baselines_sb3.vtrace import vtrace_loss, vtrace_targets

LR_SCHEDULES: tuple[str, ...] = ("constant", "linear", "linear-per-task", "linear-steps")
ADVANTAGE_NORMALIZATIONS: tuple[str, ...] = ("minibatch", "minibatch-biased", "batch", "none")
VALUE_LOSSES: tuple[str, ...] = ("mse", "clipped-max")


def _check(name: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")
    return value


class TaskSwitchLearner:
    """Mixin for SB3 on-policy algorithms: the CL method's hook, the per-task learning-rate
    schedule and the optimizer reset at task switches (see the module docstring)."""

    cl_method: ContinualMethod | None
    lr_schedule_kind: str
    lr_decay_steps: int | None
    reset_optimizer_at_switch: bool
    update_threads: int | None = None
    """torch's intra-op threads during an update (the epochs over a rollout); ``None``:
    whatever the process uses (the main job's default: ``main_job.TORCH_THREADS``)."""
    _optimizer_reset_pending: bool = False
    """A task switch happened in the rollout being collected: empty the optimizer's state
    after its update."""

    def _init_task_schedule(
        self,
        cl_method: ContinualMethod | None,
        lr_schedule: str,
        lr_decay_steps: int | None,
        reset_optimizer_at_switch: bool,
    ) -> None:
        self.cl_method = cl_method
        self.lr_schedule_kind = _check("lr_schedule", lr_schedule, LR_SCHEDULES)
        if lr_schedule == "linear-steps" and not lr_decay_steps:
            raise ValueError("lr_schedule 'linear-steps' needs lr_decay_steps (agent steps)")
        self.lr_decay_steps = int(lr_decay_steps) if lr_decay_steps else None
        self.reset_optimizer_at_switch = bool(reset_optimizer_at_switch)
        self._optimizer_reset_pending = False
        self._switch_source: Any = None
        self._unsubscribe: Callable[[], None] | None = None

    def _setup_model(self) -> None:
        super()._setup_model()  # type: ignore[misc]
        if self.cl_method is not None:
            install_loss_hook(self, self.cl_method)  # type: ignore[arg-type]
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._switch_source = find_task_switch_source(self.env)  # type: ignore[attr-defined]
        if self._switch_source is not None:
            self._unsubscribe = self._switch_source.on_task_switch(self._on_task_switch)

    def train(self) -> None:
        """One update (``_update``), with ``update_threads`` threads if set (not with
        ``policy_lag=1``: the update then shares the process's threads with acting)."""
        previous = th.get_num_threads()
        threads = previous if getattr(self, "policy_lag", 0) else (self.update_threads or previous)
        if threads != previous:
            th.set_num_threads(threads)
        try:
            self._update()  # type: ignore[attr-defined]
        finally:
            if threads != previous:
                th.set_num_threads(previous)
        self.record_cl_loss()
        if self._optimizer_reset_pending:
            self._optimizer_reset_pending = False
            self.policy.optimizer.state.clear()  # type: ignore[attr-defined]

    def record_cl_loss(self, value: th.Tensor | None = None) -> None:
        """The CL method's loss of the update's last minibatch: the loss hook hands each
        minibatch's ``value`` (a tensor, kept on the device), and the update logs the last
        one as ``train/cl_loss`` when it ends (one host sync per update)."""
        if value is not None:
            self._cl_loss = value
            return
        pending, self._cl_loss = getattr(self, "_cl_loss", None), None
        if pending is not None:
            self.logger.record("train/cl_loss", float(pending))  # type: ignore[attr-defined]

    def _on_task_switch(self, event: Any) -> None:
        # subscribed before any CL method (``_setup_model``): with policy_lag=1 the update
        # in flight finishes here, so every handler after this one sees the learner as in
        # lockstep
        wait = getattr(self, "wait_for_update", None)
        if wait is not None:
            wait()
        # the switch fires inside the env step that spends the task's budget, so the
        # rollout being collected is the old task's: reset after its update (MEAL builds
        # the new task's optimizer after the old task's last update)
        if self.reset_optimizer_at_switch:
            self._optimizer_reset_pending = True

    # -- learning rate -----------------------------------------------------------------------
    def _base_learning_rate(self) -> float:
        lr = self.learning_rate  # type: ignore[attr-defined]
        return float(lr(1.0) if callable(lr) else lr)

    def task_progress(self) -> float | None:
        """CORA's ``min(k * B, S) / S`` for the update about to run (``None`` without a
        sequence env). ``k`` counts this task's earlier updates: the cursor's steps into
        the task (or into the task just finished, when this update's rollout ended exactly
        at a switch) divided by the steps per update ``B``, rounded up, minus one."""
        cursor = getattr(self._switch_source, "cursor", None)
        if cursor is None:
            return None
        steps_per_update = self.n_steps * cursor.num_envs  # type: ignore[attr-defined]
        segment, task_steps = latest_step_segment(cursor)
        k = max(math.ceil(task_steps / steps_per_update) - 1, 0)
        return min(k * steps_per_update, segment.steps) / segment.steps

    def current_learning_rate(self) -> float:
        """The learning rate of the update about to run (with ``policy_lag=1``, the value
        computed when the update was started)."""
        frozen = getattr(self, "_frozen_lr", None)
        if frozen is not None:
            return frozen
        lr0 = self._base_learning_rate()
        kind = self.lr_schedule_kind
        if kind == "constant":
            return lr0
        if kind == "linear-steps":
            per_update = self.n_steps * self.n_envs  # type: ignore[attr-defined]
            k = max(math.ceil(self.num_timesteps / per_update) - 1, 0)  # type: ignore[attr-defined]
            updates = max(self.lr_decay_steps // per_update, 1)
            return lr0 * max(0.0, 1.0 - k / updates)
        progress = self.task_progress() if kind == "linear-per-task" else None
        if progress is None:  # "linear", or no sequence env to follow
            progress = 1.0 - self._current_progress_remaining  # type: ignore[attr-defined]
        return lr0 * (1.0 - progress)

    def _update_learning_rate(self, optimizers: Any) -> None:
        lr = self.current_learning_rate()
        self.logger.record("train/learning_rate", lr)  # type: ignore[attr-defined]
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            update_learning_rate(optimizer, lr)


# --------------------------------------------------------------------------- V-trace learner
class VTrace(PolicyLagLearner, TaskSwitchLearner, BlockActingCollector, OnPolicyAlgorithm):
    """IMPALA-style synchronous actor-critic with V-trace targets (an SB3 algorithm).

    Each update uses the whole rollout (``n_envs`` unrolls of ``n_steps``), one gradient
    step, V-trace targets with truncation ``rho_bar``/``c_bar`` (with synchronous
    collection the behaviour and target policies coincide at the update, so V-trace
    equals n-step returns here; off-policy data such as CLEAR's replay uses the full
    correction). RMSProp by default (``alpha``, ``rms_prop_eps``), as in IMPALA/CORA.
    CORA runs 64 asynchronous actors feeding batches of 32 unrolls; this learner steps 32
    envs, in lockstep (``policy_lag=0``) or with the update of one rollout running while
    the next is collected (``policy_lag=1``: one update of lag, as IMPALA's actors;
    deterministic and resumable either way, see :mod:`baselines_sb3.policy_lag`). With the
    training env's ``env_splits`` > 1 either way acts on the envs block by block while the
    env workers step the block before (:mod:`baselines_sb3.block_acting`).

    Args (beyond SB3's ``OnPolicyAlgorithm``): ``rho_bar``, ``c_bar``, ``use_rms_prop``,
    ``rms_prop_alpha``, ``rms_prop_eps``, ``loss_reduction`` (``"sum"`` over the batch as in
    TorchBeast, or ``"mean"``), ``normalize_reward`` (divide rewards by their running
    standard deviation, CORA's MiniHack; replayed rewards that a ``cl_method`` adds to the
    update, CLEAR's, join the moments and are divided by the same std),
    ``reward_std_count`` (``"cora"``: CORA's count of ``T`` per ``(T, B)`` batch, or
    ``"true"``; see :class:`RunningRewardStd`), ``lr_schedule``, ``lr_decay_steps``,
    ``reset_optimizer_at_switch``, ``cl_method``, ``policy_lag`` (0 or 1).

    ``policy`` is a policy class or one of SB3's names, as for ``ContinualPPO``
    (``"MlpPolicy"``, ``"CnnPolicy"``, ``"MultiInputPolicy"``).
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = dict(PPO.policy_aliases)

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
        normalize_reward: bool = False,
        reward_std_count: str = "cora",
        lr_schedule: str = "constant",
        lr_decay_steps: int | None = None,
        reset_optimizer_at_switch: bool = False,
        cl_method: ContinualMethod | None = None,
        policy_lag: int = 0,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: str = "auto",
        _init_setup_model: bool = True,
        **kwargs: Any,
    ):
        _check("loss_reduction", loss_reduction, ("mean", "sum"))
        _check("reward_std_count", reward_std_count, REWARD_STD_COUNTS)
        self._init_policy_lag(policy_lag)
        self._init_task_schedule(cl_method, lr_schedule, lr_decay_steps, reset_optimizer_at_switch)
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
        self.normalize_reward = bool(normalize_reward)
        self.reward_std_count = reward_std_count
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
        if self.normalize_reward:
            self.policy.reward_normalizer = RunningRewardStd(self.reward_std_count).to(self.device)
        self._setup_policy_lag()

    def _update(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        if self.cl_method is not None and self.cl_method.custom_update(self):
            self._n_updates += 1
            return
        buf = self.rollout_buffer
        t_len, n_envs = buf.buffer_size, buf.n_envs
        obs = flat_observations(buf.observations, self.device)
        actions = th.as_tensor(buf.actions.reshape(t_len * n_envs, -1), device=self.device)
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
        values = values.flatten()
        as_t = lambda a: th.as_tensor(a, device=self.device, dtype=th.float32)  # noqa: E731
        rewards = as_t(buf.rewards)
        if self.normalize_reward:
            rewards = self._normalize_rewards(rewards)
        starts = as_t(buf.episode_starts)
        dones_after = th.cat([starts[1:], as_t(buf.last_dones).unsqueeze(0)], dim=0)
        vs, pg_adv = vtrace_targets(
            as_t(buf.log_probs),
            log_prob.detach().view(t_len, n_envs),
            rewards,
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
        norm = clip_grad_norm(self.policy, self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()
        self._n_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/grad_norm", float(norm))
        for key, value in stats.items():
            self.logger.record(f"train/{key}", value)

    def _normalize_rewards(self, rewards: th.Tensor) -> th.Tensor:
        """``rewards`` ``(T, E)`` divided by the running std, after updating its moments with
        them and with the rewards the CL method replays in this update (CORA: one update
        with the concatenated ``(T, E + R)`` batch, ``clear_monobeast.py`` / ``monobeast.py``
        ``compute_loss``)."""
        normalizer = self.policy.reward_normalizer
        replayed = None
        if self.cl_method is not None:
            replayed = self.cl_method.extra_rewards(self.policy, learner_batch_size(self))
        if replayed is None:
            normalizer.update(rewards)
        else:
            normalizer.update(th.cat([rewards, replayed.to(rewards)], dim=1))
        return rewards / normalizer.std().float()

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 100,
        tb_log_name: str = "VTrace",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ):
        if self.policy_lag:
            return self._learn_lagged(
                total_timesteps,
                callback,
                log_interval,
                tb_log_name,
                reset_num_timesteps,
                progress_bar,
            )
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )


# --------------------------------------------------------------------------- PPO
class ContinualPPO(TaskSwitchLearner, BlockActingCollector, DeviceRolloutCollector, PPO):
    """SB3 ``PPO`` with a ``cl_method``, the task-switch behaviour of
    :class:`TaskSwitchLearner` and the PPO variants of the reference code.

    Extra args:
        value_loss: ``"mse"`` (SB3: ``mse(returns, values)``, with ``clip_range_vf``
            clipping the prediction) or ``"clipped-max"`` (CORA's PPO and MEAL:
            ``0.5 * max((V - R)^2, (V_clip - R)^2)``, ``V_clip`` clipped around the old value
            by ``clip_range_vf``, default ``clip_range``).
        advantage_normalization: ``"minibatch"`` (SB3: per minibatch, unbiased std),
            ``"minibatch-biased"`` (MEAL: per minibatch, ``jnp.std``), ``"batch"`` (CORA's
            PPO: over the whole rollout, unbiased std + 1e-5) or ``"none"``; default from
            SB3's ``normalize_advantage``.
        n_minibatches: minibatches per epoch; sets ``batch_size = n_steps * n_envs //
            n_minibatches`` (overrides ``batch_size``).
        lr_schedule / lr_decay_steps / reset_optimizer_at_switch: see the module docstring.

    An env that hands its observations as tensors on the policy's device (MEAL's JAX
    engine beside torch) fills a device-side rollout buffer
    (:mod:`baselines_sb3.device_rollout`): no observation goes through the host. With the
    training env's ``env_splits`` > 1 the policy acts on the envs block by block while the
    env workers step the block before (:mod:`baselines_sb3.block_acting`).
    """

    def __init__(
        self,
        *args: Any,
        cl_method: ContinualMethod | None = None,
        value_loss: str = "mse",
        advantage_normalization: str | None = None,
        n_minibatches: int | None = None,
        lr_schedule: str = "constant",
        lr_decay_steps: int | None = None,
        reset_optimizer_at_switch: bool = False,
        **kwargs: Any,
    ):
        self._init_task_schedule(cl_method, lr_schedule, lr_decay_steps, reset_optimizer_at_switch)
        self.value_loss = _check("value_loss", value_loss, VALUE_LOSSES)
        if advantage_normalization is None:
            advantage_normalization = (
                "minibatch" if kwargs.get("normalize_advantage", True) else "none"
            )
        self.advantage_normalization = _check(
            "advantage_normalization", advantage_normalization, ADVANTAGE_NORMALIZATIONS
        )
        if n_minibatches is not None:
            env = kwargs.get("env", args[1] if len(args) > 1 else None)
            n_steps = int(kwargs.get("n_steps", 2048))
            kwargs["batch_size"] = max(1, n_steps * int(env.num_envs) // int(n_minibatches))
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        dict_space = isinstance(self.observation_space, spaces.Dict)
        if self.rollout_buffer_class is None and dict_space:
            self.rollout_buffer_class = SparseRowsRolloutBuffer
        self.device_observations = observations_on(self.env, self.device)
        if self.device_observations:
            base = self.rollout_buffer_class or (DictRolloutBuffer if dict_space else RolloutBuffer)
            self.rollout_buffer_class = device_buffer_class(base)
        super()._setup_model()
        if isinstance(self.rollout_buffer, SparseRowsRolloutBuffer):
            self.rollout_buffer.rows_of = getattr(self.policy, "sparse_features", None)

    def _update(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        if self.cl_method is not None and self.cl_method.custom_update(self):
            self._n_updates += 1
            return
        clip_range = self.clip_range(self._current_progress_remaining)
        clip_vf = (
            self.clip_range_vf(self._current_progress_remaining)
            if self.clip_range_vf is not None
            else None
        )
        buf = self.rollout_buffer
        if self.advantage_normalization == "batch":
            adv = buf.advantages
            buf.advantages = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-5)
        # the minibatches' statistics stay on the device until the update ends: one host
        # sync per update, not five per minibatch (only target_kl needs each KL at once)
        stats: list[th.Tensor] = []
        if self.cl_method is not None:  # e.g. CLEAR draws every minibatch's replay at once
            per_epoch = -(-buf.buffer_size * buf.n_envs // self.batch_size)
            self.cl_method.start_update(self.policy, self.batch_size, self.n_epochs * per_epoch)
        try:
            self._epochs(clip_range, clip_vf, stats)
        finally:
            if self.cl_method is not None:
                self.cl_method.end_update()
        explained = explained_variance(buf.values.flatten(), buf.returns.flatten())
        if stats:  # each minibatch's float32 value as a float, averaged as before
            per_minibatch = th.stack(stats).cpu().numpy().astype(np.float64)
            keys = ("policy_gradient_loss", "value_loss", "entropy_loss", "clip_fraction")
            for key, column in zip(keys, per_minibatch.T, strict=True):
                self.logger.record(f"train/{key}", float(np.mean(column)))
        self.logger.record("train/explained_variance", explained)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)

    def _epochs(self, clip_range: float, clip_vf: float | None, stats: list[th.Tensor]) -> None:
        """PPO's epochs over the rollout; each minibatch's ``(pg_loss, value_loss,
        entropy_loss, clip_fraction)`` appended to ``stats`` (on the device)."""
        for _epoch in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = actions.long().flatten()
                loss, pg_loss, value_loss, entropy_loss, ratio, log_prob = self.minibatch_loss(
                    data, actions, clip_range, clip_vf
                )
                if self.target_kl is not None:
                    with th.no_grad():
                        log_ratio = log_prob - data.old_log_prob
                        approx_kl = float(th.mean((th.exp(log_ratio) - 1) - log_ratio))
                    if approx_kl > 1.5 * self.target_kl:
                        self._n_updates += 1
                        return
                self.policy.optimizer.zero_grad()
                loss.backward()
                clip_grad_norm(self.policy, self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                with th.no_grad():
                    clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float())
                    stats.append(th.stack([pg_loss, value_loss, entropy_loss, clip_fraction]))
            self._n_updates += 1

    def minibatch_loss(
        self, data: Any, actions: th.Tensor, clip_range: float, clip_vf: float | None
    ) -> tuple[th.Tensor, ...]:
        """PPO's loss on one minibatch (without the CL penalty, which the loss hook adds
        to the gradients): ``(loss, pg_loss, value_loss, entropy_loss, ratio, log_prob)``
        with ``loss = pg_loss + ent_coef * entropy_loss + vf_coef * value_loss``."""
        values, log_prob, entropy = self.policy.evaluate_actions(data.observations, actions)
        values = values.flatten()
        advantages = data.advantages
        if self.advantage_normalization.startswith("minibatch") and len(advantages) > 1:
            unbiased = self.advantage_normalization == "minibatch"
            advantages = (advantages - advantages.mean()) / (
                advantages.std(unbiased=unbiased) + 1e-8
            )
        ratio = th.exp(log_prob - data.old_log_prob)
        pg_loss = -th.min(
            advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
        ).mean()
        value_loss = self._value_loss(values, data, clip_range, clip_vf)
        entropy_loss = -th.mean(entropy if entropy is not None else -log_prob)
        loss = pg_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        return loss, pg_loss, value_loss, entropy_loss, ratio, log_prob

    def _value_loss(
        self, values: th.Tensor, data: Any, clip_range: float, clip_vf: float | None
    ) -> th.Tensor:
        if self.value_loss == "clipped-max":
            bound = clip_vf if clip_vf is not None else clip_range
            clipped = data.old_values + th.clamp(values - data.old_values, -bound, bound)
            return (
                0.5 * th.max((values - data.returns).pow(2), (clipped - data.returns).pow(2)).mean()
            )
        if clip_vf is not None:
            values = data.old_values + th.clamp(values - data.old_values, -clip_vf, clip_vf)
        return F.mse_loss(data.returns, values)
