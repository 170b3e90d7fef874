"""MEAL's torch learner acts with the weights it trains.

Its first trunk layers compute from the observation's non-zero entries
(``baselines_sb3.sparse``) and its Adam is fused, which leaves the parameters' version
counters alone. Until 2026-11-29 the sparse layers cached their weight table for every
pass without autograd until the version counter moved, so rollouts, evaluations and the
plasticity probe kept using the first layers' initial weights while the updates trained
the current ones (found through ``ppo-jax`` and ``ppo`` ending with very different
dormant ratios on the same settings). The table is now reused only within one rollout
(``reuse_tables``; ``tests/baselines/test_sparse_first_layer.py`` pins the layer).
"""

from __future__ import annotations

import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

pytest.importorskip("meal")

from tests.helpers.meal_learner import meal_ft_learner
from tests.meal.test_meal_job import JOB
from tests.meal.test_meal_job import OVERRIDES as MEAL_JOB


class _RolloutLogProbs(BaseCallback):
    """At each rollout's end: the largest gap between the log-probabilities the rollout
    stored and those of the current policy (with autograd: a fresh pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[float] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        data = next(self.model.rollout_buffer.get(batch_size=None))
        with th.enable_grad():
            _, log_prob, _ = self.model.policy.evaluate_actions(
                data.observations, data.actions.long().flatten()
            )
        self.gaps.append(float((log_prob.detach() - data.old_log_prob).abs().max()))


@pytest.mark.parametrize("device_observations", [False, True], ids=["host", "device"])
def test_rollouts_after_updates_sample_from_the_updated_policy(device_observations):
    overrides = {**MEAL_JOB, "episode_len": 20, "device_observations": device_observations}
    model, env = meal_ft_learner(JOB, overrides)
    assert model.policy._sparse_features and model.policy.optimizer.defaults["fused"]
    callback = _RolloutLogProbs()
    model.learn(total_timesteps=3 * model.n_steps * env.num_envs, callback=callback)
    assert len(callback.gaps) == 3  # the second and third rollouts follow updates
    assert max(callback.gaps) < 1e-4, callback.gaps
