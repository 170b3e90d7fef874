"""Rollouts whose observations stay on the learner's device.

An env may hand its observations as torch tensors already on the policy's device (MEAL's
SB3 view, whose JAX engine shares the device with torch: ``cl_suites.job.torch.
device_observations``). SB3 would copy them to the host twice per step (its rollout
buffer holds numpy arrays) and back to the device for every minibatch. Here:

* :class:`DeviceObservations`: a mixin for SB3's ``RolloutBuffer`` and
  ``DictRolloutBuffer`` (and their subclasses) that keeps the observations as torch tensors
  on the buffer's device, in the observation space's dtype; actions, rewards, values and
  the rest stay numpy as in SB3. Minibatches take the same values in the same order, so an
  update is bit-identical to SB3's.
* :class:`DeviceRolloutCollector`: a mixin for ``OnPolicyAlgorithm`` whose
  ``collect_rollouts`` feeds tensor observations straight to the policy (SB3's loop
  otherwise; its own when the env hands numpy), through :func:`collect_rollout`, SB3's
  loop with the acting step given (double-buffered acting uses it too:
  ``baselines_sb3.block_acting``).
* :func:`observations_as_tensor` / :func:`host_observations`: observations (numpy, tensors
  or dicts of either) to the device or to host numpy (checkpoints, host-side samples).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3.sparse import reuse_tables


def observations_as_tensor(obs: Any, device: th.device | str) -> Any:
    """``obs`` (numpy, torch, or a dict of them) as torch tensors on ``device``; a tensor
    already there is returned as is (SB3's ``obs_as_tensor``, tensors accepted)."""
    if isinstance(obs, dict):
        return {key: observations_as_tensor(value, device) for key, value in obs.items()}
    return th.as_tensor(obs, device=device)


def host_observations(obs: Any) -> Any:
    """``obs`` with every torch tensor as a host numpy array (numpy stays as it is)."""
    if isinstance(obs, dict):
        return {key: host_observations(value) for key, value in obs.items()}
    if isinstance(obs, th.Tensor):
        return obs.detach().cpu().numpy()
    return obs


def holds_tensors(obs: Any) -> bool:
    """Whether ``obs`` (or a value of a dict ``obs``) is a torch tensor."""
    if isinstance(obs, dict):
        return any(holds_tensors(value) for value in obs.values())
    return isinstance(obs, th.Tensor)


def _torch_dtype(dtype: np.dtype) -> th.dtype:
    return th.from_numpy(np.empty(0, dtype=dtype)).dtype


class DeviceObservations:
    """Mixin for SB3's ``RolloutBuffer`` / ``DictRolloutBuffer``: ``observations`` (each
    key's, for a Dict space) are torch tensors on ``self.device``. ``add`` takes tensors
    or numpy; ``get`` flattens and indexes them with torch (SB3's own ``get`` and
    ``_get_samples``, through ``swap_and_flatten`` and ``to_torch``)."""

    device: th.device
    observations: Any
    observation_space: spaces.Space
    obs_shape: Any
    n_envs: int
    pos: int

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.observations = self._on_device(self.observations)

    def _on_device(self, storage: Any) -> Any:
        if isinstance(storage, dict):
            return {key: self._on_device(value) for key, value in storage.items()}
        return th.zeros(storage.shape, dtype=_torch_dtype(storage.dtype), device=self.device)

    def add(
        self,
        obs: Any,
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
    ) -> None:
        """SB3's ``add``, the observations written on the device."""
        if len(log_prob.shape) == 0:
            log_prob = log_prob.reshape(-1, 1)
        if isinstance(self.observations, dict):
            for key, storage in self.observations.items():
                shape = (self.n_envs, *self.obs_shape[key])
                storage[self.pos] = th.as_tensor(obs[key], device=self.device).reshape(shape)
        else:
            shape = (self.n_envs, *self.obs_shape)
            self.observations[self.pos] = th.as_tensor(obs, device=self.device).reshape(shape)
        action = action.reshape((self.n_envs, self.action_dim))  # type: ignore[attr-defined]
        self.actions[self.pos] = np.array(action)  # type: ignore[attr-defined]
        self.rewards[self.pos] = np.array(reward)  # type: ignore[attr-defined]
        self.episode_starts[self.pos] = np.array(episode_start)  # type: ignore[attr-defined]
        self.values[self.pos] = value.clone().cpu().numpy().flatten()  # type: ignore[attr-defined]
        self.log_probs[self.pos] = log_prob.clone().cpu().numpy()  # type: ignore[attr-defined]
        self.pos += 1
        if self.pos == self.buffer_size:  # type: ignore[attr-defined]
            self.full = True

    def to_torch(self, array: Any, copy: bool = True) -> th.Tensor:
        """A tensor (observation rows, already indexed into a new tensor) as it is; numpy
        as SB3 converts it."""
        if isinstance(array, th.Tensor):
            return array.to(self.device)
        return super().to_torch(array, copy)  # type: ignore[misc]


class DeviceRolloutCollector:
    """Mixin for an SB3 ``OnPolicyAlgorithm``: with ``device_observations`` (the env hands
    torch tensors on the policy's device), ``collect_rollouts`` is SB3's with the
    observations fed to the policy and the buffer as they come; otherwise SB3's own.
    Either way the weights do not change within a rollout, so sparse first layers make
    their weight table once for it, not once per step
    (:func:`baselines_sb3.sparse.reuse_tables`)."""

    device_observations: bool = False

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        with reuse_tables():
            if not self.device_observations:
                return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)  # type: ignore[misc]
            return collect_rollout(self, env, callback, rollout_buffer, n_rollout_steps)


def collect_rollout(
    model: Any,
    env: VecEnv,
    callback: BaseCallback,
    rollout_buffer: RolloutBuffer,
    n_rollout_steps: int,
    act: Callable[[Any], tuple[th.Tensor, th.Tensor, th.Tensor]] | None = None,
) -> bool:
    """SB3 2.x ``OnPolicyAlgorithm.collect_rollouts``, line for line, with
    ``observations_as_tensor`` (tensors kept on the device; numpy converted as SB3 does)
    where SB3 calls ``obs_as_tensor``, and ``act(obs)`` (``(actions, values, log_probs)``;
    default: ``model.policy``) where SB3 calls the policy."""
    act = model.policy if act is None else act
    assert model._last_obs is not None, "No previous observation was provided"
    model.policy.set_training_mode(False)
    n_steps = 0
    rollout_buffer.reset()
    if model.use_sde:
        model.policy.reset_noise(env.num_envs)
    callback.on_rollout_start()
    while n_steps < n_rollout_steps:
        if model.use_sde and model.sde_sample_freq > 0 and n_steps % model.sde_sample_freq == 0:
            model.policy.reset_noise(env.num_envs)
        with th.no_grad():
            obs_tensor = observations_as_tensor(model._last_obs, model.device)
            actions, values, log_probs = act(obs_tensor)
        actions = actions.cpu().numpy()
        clipped_actions = actions
        if isinstance(model.action_space, spaces.Box):
            if model.policy.squash_output:
                clipped_actions = model.policy.unscale_action(clipped_actions)
            else:
                clipped_actions = np.clip(actions, model.action_space.low, model.action_space.high)
        new_obs, rewards, dones, infos = env.step(clipped_actions)
        model.num_timesteps += env.num_envs
        callback.update_locals(locals())
        if not callback.on_step():
            return False
        model._update_info_buffer(infos, dones)
        n_steps += 1
        if isinstance(model.action_space, spaces.Discrete):
            actions = actions.reshape(-1, 1)
        # a truncated episode bootstraps from its terminal observation (SB3 issue #633)
        for idx, done in enumerate(dones):
            if (
                done
                and infos[idx].get("terminal_observation") is not None
                and infos[idx].get("TimeLimit.truncated", False)
            ):
                terminal_obs = model.policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    terminal_value = model.policy.predict_values(terminal_obs)[0]
                rewards[idx] += model.gamma * terminal_value
        rollout_buffer.add(
            model._last_obs, actions, rewards, model._last_episode_starts, values, log_probs
        )
        model._last_obs = new_obs
        model._last_episode_starts = dones
    with th.no_grad():
        values = model.policy.predict_values(observations_as_tensor(new_obs, model.device))
    rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
    callback.update_locals(locals())
    callback.on_rollout_end()
    return True


def device_buffer_class(base: type[RolloutBuffer]) -> type[RolloutBuffer]:
    """``base`` (SB3's ``RolloutBuffer``, ``DictRolloutBuffer`` or a subclass) with its
    observations on the device: ``Device<base name>``, made once per ``base``."""
    if issubclass(base, DeviceObservations):
        return base
    if base not in _DEVICE_BUFFERS:
        name = f"Device{base.__name__}"
        _DEVICE_BUFFERS[base] = type(name, (DeviceObservations, base), {"__module__": __name__})
    return _DEVICE_BUFFERS[base]


_DEVICE_BUFFERS: dict[type, type] = {}


def observations_on(env: VecEnv, device: th.device | str) -> bool:
    """Whether ``env`` (through its wrappers) hands its observations as torch tensors on
    ``device`` (its ``observation_device``, e.g. MEAL's SB3 view)."""
    given = getattr(env, "observation_device", None)
    if given is None:
        return False
    a, b = th.device(given), th.device(device)
    return a.type == b.type and (a.index or 0) == (b.index or 0)
