"""Double-buffered acting (issue 50 item 2, ``env_splits``): the policy acts on the envs
block by block while the env workers step the block before; for a given seed the
trajectory (observations, actions, rewards, dones, log-probabilities, values) and the
learned parameters are the same bit for bit whatever the number of env workers, and
actions are drawn as ``torch.multinomial`` draws them."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.block_acting import BlockActor, choose, exponential_noise
from baselines_sb3.learners import ContinualPPO, VTrace
from baselines_sb3.policies import ContinualPolicy
from cl_suites import SequenceVectorEnv
from cl_suites.api import make_sequence

th.set_num_threads(1)

FIELDS = ("observations", "actions", "rewards", "episode_starts", "log_probs", "values")


class _Rollouts(BaseCallback):
    """Keeps a copy of every rollout the learner collected."""

    def __init__(self) -> None:
        super().__init__()
        self.rollouts: list[dict[str, np.ndarray]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        self.rollouts.append({name: getattr(buffer, name).copy() for name in FIELDS})


def _train(learner: str, mode: str, workers: int | None, splits: int, num_envs: int = 6):
    """(rollouts, final parameters) of 10 rollouts of 8 steps on Diagnostic (a task switch
    at agent step 480)."""
    sequence = make_sequence("Diagnostic", n_tasks=2, steps_per_task=480)
    env = SequenceVectorEnv(sequence, num_envs, mode, env_workers=workers, env_splits=splits)
    venv = env.to_sb3()
    venv.seed(3)
    kwargs = dict(n_steps=8, seed=0, policy_kwargs={"net_arch": [16]})
    if learner == "ppo":
        model = ContinualPPO(ContinualPolicy, venv, batch_size=24, n_epochs=2, **kwargs)
    else:
        model = VTrace(ContinualPolicy, venv, policy_lag=int(learner[-1]), **kwargs)
    rollouts = _Rollouts()
    try:
        model.learn(num_envs * 8 * 10, callback=rollouts)
    finally:
        env.close()
    return rollouts.rollouts, [p.detach().clone() for p in model.policy.parameters()]


def _differences(a, b) -> list[str]:
    """What differs between two runs of :func:`_train` (empty: the same bit for bit)."""
    (rollouts_a, params_a), (rollouts_b, params_b) = a, b
    out = [] if len(rollouts_a) == len(rollouts_b) else ["rollout count"]
    for i, (x, y) in enumerate(zip(rollouts_a, rollouts_b, strict=False)):
        out += [f"rollout {i} {k}" for k in FIELDS if not np.array_equal(x[k], y[k])]
    if not all(th.equal(p, q) for p, q in zip(params_a, params_b, strict=True)):
        out.append("parameters")
    return out


@pytest.mark.parametrize("learner", ["vtrace0", "vtrace1", "ppo"])
def test_double_buffered_runs_are_the_same_for_1_2_and_3_workers(learner):
    runs = {w: _train(learner, "workers", w, 2) for w in (1, 2, 3)}
    runs["sync"] = _train(learner, "sync", None, 2)  # blocks acted on, stepped together
    assert _differences(runs[1], runs[2]) == []
    assert _differences(runs[1], runs[3]) == []
    assert _differences(runs[1], runs["sync"]) == []


def test_double_buffering_keeps_the_one_block_trajectory_but_not_the_value_bits():
    """Observations, actions, rewards, dones and log-probabilities are the one-block run's;
    the value head (16 -> 1) sums its products in another order on 3 rows than on 6, so
    the stored values (and from the first update on, the parameters) differ by about an
    ulp: exact identity with ``env_splits=1`` needs a policy whose rows do not depend on
    the batch size."""
    one, two = _train("vtrace1", "sync", None, 1), _train("vtrace1", "workers", 2, 2)
    differing = _differences(one, two)
    assert differing and all(x.endswith(" values") or x == "parameters" for x in differing)
    for a, b in zip(one[0], two[0], strict=True):
        np.testing.assert_allclose(a["values"], b["values"], rtol=0, atol=1e-6)


def test_actions_are_torch_multinomial_s_draws_for_any_block_split():
    probs = th.softmax(th.randn(64, 18, generator=th.Generator().manual_seed(1)), dim=-1)
    generator = th.Generator().manual_seed(7)
    expected = th.multinomial(probs, 1, generator=generator).squeeze(1)
    generator.manual_seed(7)
    noise = exponential_noise(64, probs, generator)
    assert th.equal(choose(probs, noise), expected)
    halves = th.cat([choose(probs[:32], noise[:32]), choose(probs[32:], noise[32:])])
    assert th.equal(halves, expected)


def test_an_env_without_blocks_is_acted_on_in_one():
    venv = SequenceVectorEnv(make_sequence("Diagnostic"), 4).to_sb3()
    try:
        actor = BlockActor(venv)
        assert (actor.splits, actor.starter is venv.vector_env) == (1, True)
    finally:
        venv.close()
