"""``ContinualPPO._update`` is its own loop (SB3's ``PPO.train`` has no hook for CORA's and
MEAL's value loss and advantage normalisation), but under SB3's options it computes what
``PPO.train`` computes: the same parameters, bit for bit, after the same rollouts."""

from __future__ import annotations

import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.utils import set_random_seed

from baselines_sb3.learners import ContinualPPO
from baselines_sb3.policies import ContinualPolicy
from cl_suites.suites.diagnostic import CueEnv

LOSSES = ("policy_gradient_loss", "value_loss", "entropy_loss", "clip_fraction")


def _trained(cls: type[PPO], **kwargs) -> PPO:
    """A model after 2 rollouts of 32 agent steps, 3 epochs each; ``model.records``: what
    its updates logged, ``(key, value)`` in order."""
    set_random_seed(0)
    env = make_vec_env(lambda: CueEnv(0), n_envs=2, seed=0)
    model = cls(ContinualPolicy, env, n_steps=16, batch_size=8, n_epochs=3, seed=0, **kwargs)
    logger, model.records = configure(None, []), []
    record = logger.record
    logger.record = lambda key, value, exclude=None: (  # type: ignore[method-assign]
        model.records.append((key, value)) or record(key, value, exclude)
    )
    model.set_logger(logger)
    return model.learn(total_timesteps=64)


@pytest.mark.parametrize(
    "options",
    [{}, {"clip_range_vf": 0.1}, {"normalize_advantage": False}, {"target_kl": 1e-6}],
    ids=["defaults", "clip_range_vf", "no-advantage-normalisation", "target_kl-stops"],
)
def test_continual_ppo_update_equals_sb3_ppo_train(options):
    sb3, ours = _trained(PPO, **options), _trained(ContinualPPO, **options)
    expected_updates = 2 if "target_kl" in options else 6  # early stop: one epoch each
    assert sb3._n_updates == ours._n_updates == expected_updates
    theirs, mine = sb3.policy.state_dict(), ours.policy.state_dict()
    assert list(theirs) == list(mine)
    for name, value in theirs.items():
        assert th.equal(value, mine[name]), name
    if "target_kl" not in options:  # (SB3 logs the stopped minibatch's losses, we do not)
        logged = [sorted((k, v) for k, v in m.records if k[6:] in LOSSES) for m in (sb3, ours)]
        assert logged[0] == logged[1] and len(logged[0]) == 2 * len(LOSSES)  # bit for bit
