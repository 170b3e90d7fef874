"""``JaxMAPPO``: MEAL 057f862's MAPPO (``experiments/algos/mappo.py``) as ``JaxIPPO``'s
programs with a central critic: the same rollout, GAE, clipped PPO loss, CL penalties and
seed axis, on MAPPO's network and settings.

What MAPPO changes (each a ``docs/fidelity.md`` row, MEAL 057f862 file:line):

* The network (``model/decoupled_mlp.py``): the actor reads the agent's own observation,
  the task's one-hot and the agent's one-hot id; the critic reads every agent's
  observation of the env (``create_global_state_for_critic``) and the task's one-hot, one
  value per env shared by its agents. Rows are ``baselines_jax.network.central_rows``'.
* The settings (:class:`MAPPOConfig`): ``experiments/algos/on_policy.py``'s defaults.
* The learning-rate decay, when on: optax's linear schedule from ``learning_rate`` to
  ``lr_end`` over all of a task's optimizer steps (``mappo.py:82-85``).
* The key: every minibatch splits the update's key once more (the key AGEM would draw
  from, ``mappo.py:280``), so the next epoch's shuffle is MEAL's.
* The importance (``continual/ewc.py``, ``continual/mas.py`` at 057f862): every agent's
  row of one env per step, the actor alone (MEAL's importance network returns a zero
  value for MAPPO, ``mappo.py:143-150``); EWC: the squared gradient of the summed
  log-probabilities of the agents' sampled actions, every step; MAS: of ``1/2 sum logits^2
  / n`` every ``importance_stride``-th step of the episode, divided by all its steps.
  MEAL's importance and evaluation pass no agent ids, so its actor falls back to
  ``row // num_envs``, agent 0 for every row of one env; ours passes each row's id.

Units: as ``JaxIPPO``; an update is ``num_envs * num_steps`` env steps per seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from baselines_jax.config import IPPOConfig
from baselines_jax.learner import JaxIPPO
from baselines_jax.network import central_rows
from cl_suites.declarations import MAPPO_METHODS


@dataclass(frozen=True)
class MAPPOConfig(IPPOConfig):
    """MEAL 057f862's MAPPO: ``MAPPOConfig`` (``algos/mappo.py:28-33``) on
    ``OnPolicyConfig``'s defaults (``algos/on_policy.py:20-47``) and ``BaseConfig``'s
    (``algos/base.py``); the fields it does not name keep ``IPPOConfig``'s values and docs."""

    learning_rate: float = 1e-3
    """Adam step size (``on_policy.py:24``)."""
    anneal_lr: bool = False
    """Decay the step size over each task (``on_policy.py:25``: off)."""
    lr_end: float = 1e-4
    """The step size the decay ends at, after a task's last optimizer step (``on_policy.py:26``)."""
    num_envs: int = 2048
    """Parallel envs per seed (``on_policy.py:27``)."""
    num_steps: int = 400
    """Env steps per env per update (``on_policy.py:28``)."""
    num_minibatches: int = 16
    """Minibatches per epoch (``on_policy.py:32``)."""
    gae_lambda: float = 0.95
    """GAE lambda (``on_policy.py:34``)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip (``on_policy.py:38``)."""
    agent_id_input: bool = True
    """The agent's one-hot id appended to the actor's input (``mappo.py:31``)."""
    regularize_heads: bool = True
    """Also regularise the heads: MEAL's MAPPO does, as its heads' names
    (``actor_Dense_multi_head``) escape ``build_reg_weights``'s ``actor_head`` test
    (``utils.py:113``; ``regularize_heads`` False there)."""
    importance_stride: int = 5
    """MAS: importance from every ``importance_stride``-th step of an episode
    (``base.py:56``; EWC ignores it, as MEAL's)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cl_method not in MAPPO_METHODS:
            raise ValueError(
                f"cl_method {self.cl_method!r} is not trained by mappo-jax yet; valid: "
                f"{', '.join(MAPPO_METHODS)} (ppo-jax takes every MEAL method)"
            )
        if self.shared_backbone:
            raise ValueError("mappo-jax has separate actor and critic: shared_backbone=False")
        if self.remedy.enabled:
            raise ValueError(
                f"mappo-jax takes no plasticity remedy yet (got {self.remedy.remedy!r}); "
                "ppo-jax takes them"
            )
        if not isinstance(self.importance_stride, int) or self.importance_stride < 1:
            raise ValueError(
                f"importance_stride must be a positive int, got {self.importance_stride!r}"
            )

    @property
    def central_critic(self) -> bool:
        return True


def mappo_schedule(cfg: MAPPOConfig, updates_per_task: int) -> optax.Schedule:
    """MEAL's MAPPO decay: ``optax.linear_schedule(lr, lr_end, num_minibatches *
    update_epochs * updates_per_task)`` over the optimizer steps since the task's start."""
    steps = cfg.num_minibatches * cfg.update_epochs * updates_per_task
    return optax.linear_schedule(cfg.learning_rate, cfg.lr_end, steps)


class JaxMAPPO(JaxIPPO):
    """MEAL 057f862's MAPPO (:class:`MAPPOConfig`) on ``suite`` for ``seeds`` (one
    program, vmapped); ``JaxIPPO``'s API."""

    minibatch_splits_key = True

    def __init__(self, suite: Any, config: MAPPOConfig, seeds: Any):
        if not isinstance(config, MAPPOConfig):
            raise TypeError(f"JaxMAPPO needs a MAPPOConfig, got {type(config).__name__}")
        super().__init__(suite, config, seeds)
        self.tx_schedule = mappo_schedule(config, self.updates_per_task)
        lr = self.tx_schedule if config.anneal_lr else config.learning_rate
        self.tx = optax.chain(
            optax.clip_by_global_norm(config.max_grad_norm),
            optax.adam(learning_rate=lr, eps=config.adam_eps),
        )

    def _flat(self, obs: jax.Array) -> jax.Array:
        """``(M, n, H, W, C)`` -> ``(n * M, D + n + n D)``: ``central_rows``."""
        return central_rows(obs.reshape(*obs.shape[:2], -1))

    # -- MEAL 057f862's importance -------------------------------------------------------
    def _importance_rows(self, obs: jax.Array) -> jax.Array:
        """One env per seed ``(K, 1, n, H, W, C)`` -> ``(K, n, D + n + n D)``."""
        return jax.vmap(self._flat)(obs)

    def _fisher(self, params: Any, key: jax.Array, task_id: int) -> Any:
        """MEAL 057f862's EWC Fisher (``continual/ewc.py:56-110``): ``importance_episodes``
        x ``importance_steps`` steps (running on through episode ends), each step the
        agents' actions sampled from the actor, the squared gradient of their summed
        log-probabilities; the mean over all steps."""
        apply = self.apply

        def log_prob_sum(p, x, a):
            logits, _ = apply(p, x, task_id)
            return jnp.take_along_axis(jax.nn.log_softmax(logits), a[:, None], 1).sum()

        def per_step(obs, index, keys):
            def per_seed(p, xs, kk):
                logits, _ = apply(p, xs, task_id)
                a = jax.random.categorical(kk, logits)
                return a, jax.tree.map(jnp.square, jax.grad(log_prob_sum)(p, xs, a))

            a, g2 = jax.vmap(per_seed)(params, self._importance_rows(obs), keys)
            return a[:, None], g2

        return self._importance_mean(
            params, key, task_id, per_step, self.cfg.importance_steps, resets=True
        )

    def _mas(self, params: Any, key: jax.Array, task_id: int) -> Any:
        """MEAL 057f862's MAS (``continual/mas.py``): each of ``importance_episodes``
        episodes until its end or ``importance_steps``, the squared gradient of ``1/2
        sum(logits^2) / n`` over the agents' rows (the value MEAL's importance network
        gives MAPPO is zero) at every ``importance_stride``-th step; the sum divided by
        every step of the episodes."""
        cfg, apply, n = self.cfg, self.apply, self.num_agents

        def l2(p, x):
            logits, _ = apply(p, x, task_id)
            return 0.5 * jnp.sum(logits * logits) / n

        def per_step(obs, index, keys):
            counted = (index % cfg.importance_stride == 0).astype(jnp.float32)

            def per_seed(p, xs, kk):
                g = jax.grad(l2)(p, xs)
                logits, _ = apply(p, xs, task_id)
                a = jax.random.categorical(kk, logits)
                return a, jax.tree.map(lambda v: jnp.square(v) * counted, g)

            a, g2 = jax.vmap(per_seed)(params, self._importance_rows(obs), keys)
            return a[:, None], g2

        steps = min(cfg.importance_steps, self.episode_len)
        return self._importance_mean(params, key, task_id, per_step, steps, resets=False)


__all__ = ["JaxMAPPO", "MAPPOConfig", "mappo_schedule"]
