"""Stable-baselines3 view of a gymnasium ``VectorEnv`` with same-step autoreset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from cl_suites.errors import require, silence_legacy_gym_banner

silence_legacy_gym_banner()
require("stable_baselines3", extra="baselines")

from stable_baselines3.common.vec_env.base_vec_env import VecEnv  # noqa: E402

INFO_KEYS = ("task_id", "task_name", "cycle", "task_step", "total_step", "task_switched")


class ForwardingVecEnv(VecEnv):
    """An SB3 ``VecEnv`` over one batched env object ``self.vector_env``: attribute and
    method access goes to that object (it is one env, not ``num_envs`` separate ones)."""

    vector_env: Any

    def close(self) -> None:
        self.vector_env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self.vector_env, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.vector_env, attr_name, value)

    def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
        result = getattr(self.vector_env, method_name)(*args, **kwargs)
        return [result] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))


class SB3VecEnv(ForwardingVecEnv):
    """Lets stable-baselines3 train on a gymnasium ``VectorEnv`` (e.g. ``make_vec``'s).

    SB3 wants a list of per-env info dicts with ``terminal_observation`` and
    ``TimeLimit.truncated`` at episode ends, and ``episode`` dicts for its episode
    statistics; this adapter builds them from the vector env's dict-of-arrays infos.
    The wrapped env is ``self.vector_env`` (subscribe to task switches there).
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
        obs, rewards, terminations, truncations, infos = self.vector_env.step(self._actions)
        dones = terminations | truncations
        return (
            obs,
            rewards.astype(np.float32),
            dones,
            self._to_list(infos, dones, terminations, obs),
        )

    def _to_list(self, infos: dict[str, Any], dones, terminations, obs) -> list[dict[str, Any]]:
        n = self.num_envs
        out: list[dict[str, Any]] = [{} for _ in range(n)]
        for key in (*INFO_KEYS, "sequence_done"):
            if key in infos:
                values = infos[key]
                for i in range(n):
                    out[i][key] = values[i].item() if hasattr(values[i], "item") else values[i]
        if "action_mask" in infos:  # bool (n_actions,) per env: the current task's valid actions
            for i in range(n):
                out[i]["action_mask"] = infos["action_mask"][i]
        if "episode" in infos:
            mask = infos["_episode"]
            for i in np.flatnonzero(mask):
                out[i]["episode"] = {
                    "r": float(infos["episode"]["r"][i]),
                    "l": int(infos["episode"]["l"][i]),
                    "task_id": int(infos["episode"]["task_id"][i]),
                }
        final_obs = infos.get("final_obs")
        final_mask = infos.get("_final_obs")
        for i in np.flatnonzero(dones):
            has_final = final_obs is not None and final_mask[i]
            out[i]["terminal_observation"] = final_obs[i] if has_final else obs[i]
            out[i]["TimeLimit.truncated"] = bool(not terminations[i])
        return out
