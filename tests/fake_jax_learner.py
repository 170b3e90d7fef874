"""A tiny stand-in for ``baselines_jax`` with its API (``IPPOConfig``, ``JaxIPPO``): numpy
"training" whose result depends on every update, the seed and the task, so the job's
chunking, checkpoints, resume and seed slicing can be tested without compiling a learner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class IPPOConfig:
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    num_envs: int = 16
    num_steps: int = 128
    update_epochs: int = 8
    num_minibatches: int = 8
    gamma: float = 0.99
    gae_lambda: float = 0.957
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    layer_norm: bool = True
    multi_head: bool = True
    task_id_input: bool = True
    cl_method: str = "ft"
    reg_coef: float | None = None


class TrainState(NamedTuple):
    params: np.ndarray
    counter: np.ndarray
    t: np.ndarray
    ret: np.ndarray
    ended: np.ndarray


class JaxIPPO:
    """``params`` (K, 6): logits of a state-independent policy; ``key`` (K,) counters."""

    def __init__(self, suite, config: IPPOConfig, seeds):
        self.suite, self.config, self.seeds = suite, config, [int(s) for s in seeds]
        self.compile_seconds = 0.0
        self.episode_len = suite.episode_len

    def init_state(self) -> TrainState:
        k = len(self.seeds)
        rng = np.stack([np.random.default_rng(s).normal(size=6) for s in self.seeds])
        return TrainState(
            params=rng.astype(np.float32),
            counter=np.zeros(k, dtype=np.int64),
            t=np.zeros(k, dtype=np.int64),
            ret=np.zeros((k, self.config.num_envs), dtype=np.float32),
            ended=np.zeros(k, dtype=np.int64),
        )

    def train(self, state, task_id, num_updates, *, cycle=0):
        self.compile_seconds += 0.01
        s = {k: v.copy() for k, v in state._asdict().items()}
        cfg, k = self.config, len(self.seeds)
        ends = np.full((num_updates, k), -1, dtype=np.int32)
        rets = np.zeros((num_updates, k, cfg.num_envs), dtype=np.float32)
        for u in range(num_updates):
            for i, seed in enumerate(self.seeds):
                noise = np.random.default_rng([seed, int(s["counter"][i]), task_id]).normal(size=6)
                s["params"][i] += np.float32(cfg.learning_rate) * noise.astype(np.float32)
            s["counter"] += 1
            for j in range(cfg.num_steps):
                s["ret"] += s["params"][:, :1] * 0.01
                s["t"] += 1
                end = s["t"] >= self.episode_len
                ends[u, end] = j
                rets[u, end] = s["ret"][end]
                s["ret"][end] = 0.0
                s["t"][end] = 0
        return TrainState(**s), {"episode_end": ends, "episode_return": rets}

    def end_task(self, state, task_id):
        s = {k: v.copy() for k, v in state._asdict().items()}
        s["ended"] += 1
        s["t"][:] = 0
        s["ret"][:] = 0.0
        return TrainState(**s)

    def act(self, params, obs, task_id, greedy):
        return np.full(len(obs), int(np.argmax(params)) if greedy else 0)

    def state_dict(self, state):
        return {k: np.asarray(v) for k, v in state._asdict().items()}

    def load_state_dict(self, arrays):
        return TrainState(**{k: np.array(v) for k, v in arrays.items()})
