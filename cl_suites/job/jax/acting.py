"""How ``ppo-jax`` acts for the evaluator: one seed's parameters as ``policy(obs, task_ids)
-> actions`` (the training job's evaluation, and a kept task policy loaded back)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def eval_policy(
    learner: Any, params: Any, greedy: bool = True, key_seed: int = 0, cl: Any = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids) -> actions`` for the core ``Evaluator``: ``JaxIPPO.act``
    with one seed's ``params``, called once per task present in the batch (rows ``(B, H,
    W, C)``, one per agent of each env; ``task_ids (B,)``). Sampled actions (``greedy``
    False) draw their keys from ``key_seed`` and the call's index. With the seed's CL
    state ``cl``, each task acts with ``learner.eval_params(params, cl, task)`` (PackNet's
    eval masks, MEAL 057f862 ``experiments/evaluation.py:48-58``; made once per task)."""
    import jax

    calls = [0]
    per_task: dict[int, Any] = {}

    def params_of(task: int) -> Any:
        if cl is None:
            return params
        if task not in per_task:
            per_task[task] = learner.eval_params(params, cl, task)
        return per_task[task]

    def act(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        task_ids = np.asarray(task_ids)
        actions = np.zeros(len(task_ids), dtype=np.int64)
        key = None
        if not greedy:
            key = jax.random.fold_in(jax.random.PRNGKey(key_seed), calls[0])
            calls[0] += 1
        for task in np.unique(task_ids):
            rows = task_ids == task
            sub = None if key is None else jax.random.fold_in(key, int(task))
            out = learner.act(params_of(int(task)), obs[rows], int(task), greedy, key=sub)
            actions[rows] = np.asarray(out)
        return actions

    return act
