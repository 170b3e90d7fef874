"""Stable-baselines3 view of a gymnasium ``VectorEnv`` with same-step autoreset, and the
callback that ends ``model.learn`` at the end of a sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from cl_suites.core.task import TASK_EPISODE_KEY, SequenceDoneError
from cl_suites.errors import require, silence_legacy_gym_banner

silence_legacy_gym_banner()
require("stable_baselines3", extra="baselines")

from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env.base_vec_env import VecEnv  # noqa: E402

INFO_KEYS = ("task_id", "task_name", "cycle", "task_step", "total_step", "task_switched")


class ForwardingVecEnv(VecEnv):
    """An SB3 ``VecEnv`` over one batched env object ``self.vector_env``.

    ``get_attr``/``set_attr``/``env_method`` first look for the name on the batched env
    itself (e.g. ``task_id``, ``render_mode``, ``schedule``: one value, repeated per
    sub-env); otherwise they reach each sub-env through gymnasium's
    ``VectorEnv.get_attr``/``set_attr``/``call`` when the batched env has them.

    The adapters write SB3's per-env ``info["episode"]`` (``r``, ``l``, ``task_id``) from
    the env's ``task_episode``, the statistics SB3's ``Monitor`` would give, so
    ``env_is_wrapped(Monitor)`` is True: SB3's ``evaluate_policy`` then counts those
    episodes, and ``VecMonitor`` warns that it overwrites them (its ``r``, ``l`` and ``t``
    then stand in for ours, without ``task_id``).
    """

    vector_env: Any

    def close(self) -> None:
        self.vector_env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        indices = list(self._get_indices(indices))
        if hasattr(self.vector_env, attr_name):
            return [getattr(self.vector_env, attr_name)] * len(indices)
        if hasattr(self.vector_env, "get_attr"):
            values = self.vector_env.get_attr(attr_name)
            return [values[i] for i in indices]
        raise AttributeError(f"{type(self.vector_env).__name__} has no attribute {attr_name!r}")

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        if hasattr(self.vector_env, attr_name) or not hasattr(self.vector_env, "set_attr"):
            setattr(self.vector_env, attr_name, value)
        else:
            self.vector_env.set_attr(attr_name, value)

    def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
        indices = list(self._get_indices(indices))
        if hasattr(self.vector_env, method_name) or not hasattr(self.vector_env, "call"):
            result = getattr(self.vector_env, method_name)(*args, **kwargs)
            return [result] * len(indices)
        results = self.vector_env.call(method_name, *args, **kwargs)
        return [results[i] for i in indices]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [wrapper_class is Monitor] * len(self._get_indices(indices))


class SB3VecEnv(ForwardingVecEnv):
    """Lets stable-baselines3 train on a gymnasium ``VectorEnv`` (e.g. ``make_vec``'s).

    SB3 wants a list of per-env info dicts with ``terminal_observation`` and
    ``TimeLimit.truncated`` at episode ends, and ``episode = {"r", "l", "task_id"}`` dicts
    for its episode statistics (``ep_info_buffer``); this adapter builds them from the
    vector env's dict-of-arrays infos (``infos["task_episode"]`` of the sequence envs).
    ``render()``/``get_images()`` return the sub-envs' frames when the vector env was made
    with ``render_mode="rgb_array"`` (so ``VecVideoRecorder`` works). The wrapped env is
    ``self.vector_env`` (subscribe to task switches there).

    Stepping after the end of the sequence raises ``SequenceDoneError`` explaining how to
    stop ``model.learn`` there (``StopTrainingOnSequenceEnd``).
    """

    def __init__(self, vector_env: VectorEnv):
        mode = vector_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SB3VecEnv needs a vector env with AutoresetMode.SAME_STEP, got {mode!r}"
            )
        self.vector_env = vector_env
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )
        self.metadata = {**self.metadata, "render_fps": vector_env.metadata.get("render_fps", 30)}
        self._actions: np.ndarray | None = None
        self._seed: int | None = None

    def reset(self) -> np.ndarray:
        obs, infos = self.vector_env.reset(seed=self._seed)
        self._seed = None
        self.reset_infos = self._to_list(infos, np.zeros(self.num_envs, dtype=bool), None, obs)
        return obs

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        self._seed = seed
        return [seed] * self.num_envs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        if getattr(self.vector_env, "sequence_done", False):
            raise SequenceDoneError(
                f"the task sequence ended at agent step {self.vector_env.total_step} and "
                "cannot be stepped further. With stable-baselines3, pass "
                "callback=cl_suites.StopTrainingOnSequenceEnd() to model.learn() (SB3 "
                "collects whole rollouts, so a total_timesteps that is not a multiple of "
                "n_steps * num_envs runs past the end), or learn for "
                "total_timesteps=venv.vector_env.total_steps with a rollout size that divides it."
            )
        obs, rewards, terminations, truncations, infos = self.vector_env.step(self._actions)
        dones = terminations | truncations
        return (
            obs,
            rewards.astype(np.float32),
            dones,
            self._to_list(infos, dones, terminations, obs),
        )

    def get_images(self) -> Sequence[np.ndarray | None]:
        frames = self.vector_env.render()
        return [None] * self.num_envs if frames is None else list(frames)

    def _to_list(self, infos: dict[str, Any], dones, terminations, obs) -> list[dict[str, Any]]:
        n = self.num_envs
        out: list[dict[str, Any]] = [{} for _ in range(n)]
        for key in (*INFO_KEYS, "sequence_done"):
            if key in infos:
                values = infos[key]
                for i in range(n):
                    out[i][key] = values[i].item() if hasattr(values[i], "item") else values[i]
        if "action_mask" in infos:
            for i in range(n):
                out[i]["action_mask"] = infos["action_mask"][i]
        if TASK_EPISODE_KEY in infos:
            episode = infos[TASK_EPISODE_KEY]
            for i in np.flatnonzero(infos["_" + TASK_EPISODE_KEY]):
                out[i]["episode"] = {
                    "r": float(episode["r"][i]),
                    "l": int(episode["l"][i]),
                    "task_id": int(episode["task_id"][i]),
                }
        final_obs = infos.get("final_obs")
        final_mask = infos.get("_final_obs")
        for i in np.flatnonzero(dones):
            has_final = final_obs is not None and final_mask[i]
            out[i]["terminal_observation"] = final_obs[i] if has_final else obs[i]
            out[i]["TimeLimit.truncated"] = bool(not terminations[i])
        return out


class StopTrainingOnSequenceEnd(BaseCallback):
    """Ends ``model.learn`` at the step where the task sequence ends.

    SB3 collects whole rollouts of ``n_steps`` per env, so a ``total_timesteps`` that is
    not a multiple of the rollout size (or larger than the schedule) would step the
    finished sequence. With this callback, learning stops at the step whose infos report
    ``sequence_done`` (the rollout in progress is not trained on) and, with
    ``verbose=1``, one line says so in the sequence's unit (``info["total_step"]``: agent
    steps; MEAL: env steps, where SB3 counts one timestep per agent). Works with
    ``SB3VecEnv``, MEAL's SB3 vec env and SB3's own vector envs over
    ``gym.make("CLSuite/...")``.

    ``stopped_at``: SB3's ``num_timesteps`` at the stop; ``total_step``: the sequence's
    own count there.

    Usage: ``model.learn(total_timesteps=venv.vector_env.total_steps,
    callback=StopTrainingOnSequenceEnd())``.
    """

    def __init__(self, verbose: int = 1):
        super().__init__(verbose)
        self.stopped_at: int | None = None
        self.total_step: int | None = None

    def _on_step(self) -> bool:
        infos = self.locals.get("infos") or ()
        done = next((info for info in infos if info.get("sequence_done", False)), None)
        if done is None:
            return True
        self.stopped_at = self.num_timesteps
        self.total_step = int(done.get("total_step", self.num_timesteps))
        if self.verbose >= 1:
            try:
                unit = self.training_env.get_attr("step_unit", [0])[0]
            except AttributeError:  # an env without the sequence's accessors
                unit = "steps"
            sb3 = (
                ""
                if self.total_step == self.num_timesteps
                else f" ({self.num_timesteps:,} SB3 timesteps)"
            )
            print(f"The task sequence is done at {self.total_step:,} {unit}{sb3}: training stops.")
        return False
