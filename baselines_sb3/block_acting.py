"""Double-buffered acting: the policy acts on the envs one block at a time while the env
workers step the blocks already acted on (sample-factory's ``worker_num_splits``,
moolib's ``num_batches``).

With ``env_splits = S`` (the training env's, ``SequenceVectorEnv.env_splits``) the
``N`` sub-envs form ``S`` equal contiguous blocks of ``M = N / S``. At every vector step
the learner runs its policy on block 0's observations, hands block 0's actions to the env
workers (``start_block``: they step it at once), runs the policy on block 1 while they do,
and so on; the last block's actions go with the ordinary ``env.step``, which gathers every
block. The policy's forward pass on blocks ``1..S-1`` overlaps the workers stepping the
blocks before, so ``(S - 1) / S`` of the shorter of the two is saved per step
(``cl_suites.job.cost_model.split_saving``).

What stays exact: actions are drawn as ``torch.multinomial(probs, 1)`` draws them (its
one-sample path: ``argmax(probs / q)`` with ``q ~ Exp(1)`` of the whole ``(N, n_actions)``
batch from the generator), the noise drawn once per step for all ``N`` sub-envs, so the
generator is used as in one-block acting and sub-env ``i`` gets the same noise whatever
``S``. Which block a sub-env is in depends on ``N`` and ``S`` only, never on the number of
env workers, so the trajectory of a seed is the same for every worker count (and for
``vectorization_mode=sync``, where the blocks are acted on one by one but stepped
together). Whether it is also the one-block run's depends on the policy giving each
row the same values on ``M`` rows as on ``N`` (batched matrix products may sum in another
order for another batch size).
"""

from __future__ import annotations

from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3.device_rollout import collect_rollout
from baselines_sb3.sparse import reuse_tables

ActingStep = tuple[th.Tensor, th.Tensor, th.Tensor]
"""``(actions (B,), values (B, 1), log_probs (B,))`` of one acting step."""


def acting_distributions(policy: Any, obs: Any) -> tuple[Any, Any, th.Tensor]:
    """``(distribution of the losses, distribution actions are chosen from, values (B,
    1))`` of a Discrete-action SB3 actor-critic (a task's action mask applied to the
    second: ``ContinualPolicy``; any SB3 ``ActorCriticPolicy``: the same distribution)."""
    if hasattr(policy, "loss_and_acting_distributions"):
        return policy.loss_and_acting_distributions(obs)
    dist = policy.get_distribution(obs)
    return dist, dist, policy.predict_values(obs)


def exponential_noise(count: int, probs: th.Tensor, generator: th.Generator | None) -> th.Tensor:
    """``Exp(1)`` draws ``(count, n_actions)`` in ``probs``' dtype and device, from
    ``generator`` (``None``: torch's default one), as ``torch.multinomial`` draws them."""
    noise = th.empty((count, probs.shape[-1]), dtype=probs.dtype, device=probs.device)
    return noise.exponential_(1, generator=generator)


def choose(probs: th.Tensor, noise: th.Tensor) -> th.Tensor:
    """Actions ``(B,)`` from ``probs (B, n_actions)`` and :func:`exponential_noise` rows:
    ``torch.multinomial(probs, 1)``'s draw, given the same generator state."""
    return th.argmax(probs / noise, dim=-1)


def rows(obs: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of a batch of observations (a tensor or a dict of them)."""
    if isinstance(obs, dict):
        return {key: value[start:stop] for key, value in obs.items()}
    return obs[start:stop]


def batch_size(obs: Any) -> int:
    """The rows of a batch of observations (a tensor or a dict of them)."""
    if isinstance(obs, dict):
        return int(next(iter(obs.values())).shape[0])
    return int(obs.shape[0])


class BlockActor:
    """Acting on ``env``'s sub-envs block by block (see the module docstring).

    ``splits``: the blocks (the training env's ``env_splits``; 1 for an env without them,
    e.g. MEAL's batched engine or SB3's own vector envs). ``starter``: what steps a block
    ahead (the ``SequenceVectorEnv`` under the SB3 view and its wrappers, whose
    ``start_block`` passes it to its env workers); ``None`` when nothing does.
    """

    def __init__(self, env: VecEnv):
        vector_env = getattr(env.unwrapped, "vector_env", None)
        self.splits = int(getattr(vector_env, "env_splits", 1))
        self.starter = vector_env if hasattr(vector_env, "start_block") else None

    def act(self, policy: Any, obs: Any, generator: th.Generator | None) -> ActingStep:
        """``policy``'s actions, values and log-probabilities on ``obs`` (``N`` rows),
        acted on block by block, each block but the last started on the env workers as
        soon as its actions are chosen; actions drawn from ``generator`` (``None``:
        torch's default one) as ``torch.multinomial`` draws them."""
        n = batch_size(obs)
        size = n // self.splits
        noise = None
        parts: list[ActingStep] = []
        for block in range(self.splits):
            lo, hi = block * size, (block + 1) * size
            loss_dist, acting, values = acting_distributions(policy, rows(obs, lo, hi))
            probs = acting.distribution.probs
            if noise is None:  # the whole step's noise, drawn once
                noise = exponential_noise(n, probs, generator)
            actions = choose(probs, noise[lo:hi])
            if self.starter is not None and block < self.splits - 1:
                self.starter.start_block(block, actions.cpu().numpy())
            parts.append((actions, values, loss_dist.log_prob(actions)))
        if len(parts) == 1:
            return parts[0]
        actions, values, log_probs = (th.cat(column) for column in zip(*parts, strict=True))
        return actions, values, log_probs


class BlockActingCollector:
    """Mixin for an SB3 ``OnPolicyAlgorithm`` acting in lockstep (``policy_lag=0``): with
    ``env_splits`` > 1, ``collect_rollouts`` is SB3's loop
    (``baselines_sb3.device_rollout.collect_rollout``) acting through :class:`BlockActor`
    with torch's default generator, as the policy's own sampling uses it; otherwise the
    next class's ``collect_rollouts``, untouched."""

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        actor = BlockActor(env)
        if actor.splits == 1:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)  # type: ignore[misc]
        policy = self.policy  # type: ignore[attr-defined]
        with reuse_tables():
            return collect_rollout(
                self,
                env,
                callback,
                rollout_buffer,
                n_rollout_steps,
                act=lambda obs: actor.act(policy, obs, None),
            )
