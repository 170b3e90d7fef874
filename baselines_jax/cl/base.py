"""The hooks a CL method of the JAX learners fills in, and MEAL's regularisers through
them.

A method is built once per learner (``JaxCLMethod(cfg, network, template, num_tasks)``)
and holds no arrays of its own between calls: its per-seed state is a pytree in
``TrainState.cl`` (vmapped over seeds like every other leaf). The learner calls, all
inside its compiled programs and per seed:

* ``init_state(params)`` once, at the start of a run;
* ``penalty(params, state)`` inside each minibatch loss (added to PPO's loss);
* ``transform_grads(grads, params, state, task, key)`` on each minibatch's gradient,
  before the optimizer (``clip_by_global_norm`` then Adam) sees it; returns the gradient
  and ``{name: scalar}`` for :attr:`metric_names` (averaged over the update's minibatches
  into the metrics ``cl/<name>``);
* ``after_update(state, traj, advantages, targets, task, key)`` after an update's epochs,
  with the update's rollout (``traj (T, N, ...)``) and its GAE;
* ``end_task(state, params, importance, task)`` after a task's last update, with the
  importance the learner computed from fresh episodes when :attr:`importance` names one
  (``"fisher"`` or ``"mas"``; ``None`` otherwise).

A method with a fine-tune phase (:attr:`finetunes`, MEAL's PackNet) splits a task into
its training updates and ``JaxIPPO.finetune_updates`` more: between them the learner calls
``end_train(params, state)`` (it may change the parameters; the learner then rebuilds the
optimizer state). A method that evaluates with other parameters than it trains
(:attr:`masks_eval`) gives them per task with ``eval_params(params, state, task)``;
``task_rows(state, params)`` (host side, one seed) are its rows of the run log at each
task's end.

``needs_key``: the method draws random numbers (a per-minibatch key and an after-update
key, split from the update's ``rng`` only for such methods, so the others draw what they
always drew); the keys are ``None`` otherwise.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from baselines_jax.cl import regularizers as reg
from baselines_jax.config import IPPOConfig
from baselines_jax.ppo import Transition

Params = Any


class JaxCLMethod:
    """No protection (the hooks' defaults); subclasses override what they use."""

    needs_key: bool = False
    importance: str | None = None
    metric_names: tuple[str, ...] = ()
    finetunes: bool = False
    """The method has a fine-tune phase after each task's training (``end_train``)."""
    masks_eval: bool = False
    """Evaluation acts with ``eval_params``, not the trained parameters."""
    finetune_steps: int = 0
    """Env steps of the fine-tune phase (whole updates; with :attr:`finetunes`)."""

    def __init__(self, cfg: IPPOConfig, network: nn.Module, template: Params, num_tasks: int):
        self.cfg, self.network, self.num_tasks = cfg, network, num_tasks

    def check_sequence(self, cycles: int) -> None:
        """``ValueError`` (one line) when the method cannot train a sequence played
        ``cycles`` times (checked before anything compiles)."""

    def init_state(self, params: Params) -> Any:
        """One seed's state at the start of a run (``()``: none)."""
        return ()

    def penalty(self, params: Params, state: Any) -> jax.Array:
        """The term added to the minibatch loss."""
        return jnp.zeros((), jnp.float32)

    def transform_grads(
        self, grads: Params, params: Params, state: Any, task: jax.Array, key: jax.Array | None
    ) -> tuple[Params, dict[str, jax.Array]]:
        """The minibatch gradient the optimizer sees, and the stats of :attr:`metric_names`."""
        return grads, {}

    def after_update(
        self,
        state: Any,
        traj: Transition,
        advantages: jax.Array,
        targets: jax.Array,
        task: jax.Array,
        key: jax.Array | None,
    ) -> Any:
        """The state after an update on ``traj`` (``(T, N, ...)``; GAE ``(T, N)``)."""
        return state

    def end_task(
        self, state: Any, params: Params, importance: Params | None, task: jax.Array
    ) -> Any:
        """The state after task ``task``'s last update (``params``: its final ones)."""
        return state

    def end_train(self, params: Params, state: Any) -> tuple[Params, Any]:
        """``(params, state)`` after a task's training updates, before its fine-tune
        updates (only with :attr:`finetunes`; the learner then rebuilds the optimizer)."""
        return params, state

    def eval_params(self, params: Params, state: Any, task: jax.Array) -> Params:
        """The parameters task ``task`` is evaluated with (with :attr:`masks_eval`)."""
        return params

    def task_rows(self, state: Any, params: Params) -> list[dict[str, Any]]:
        """Rows of the run log at a task's end (one seed, numpy; none by default)."""
        return []


class Regularizer(JaxCLMethod):
    """MEAL's penalty methods, ``ft``, ``ewc``, ``online-ewc``, ``mas`` and ``l2``
    (:mod:`baselines_jax.cl.regularizers`); the state is ``CLState(anchor, importance)``."""

    def __init__(self, cfg: IPPOConfig, network: nn.Module, template: Params, num_tasks: int):
        super().__init__(cfg, network, template, num_tasks)
        self.mask = reg.reg_mask(template, cfg.regularize_critic, cfg.regularize_heads)
        self.importance = {"ewc": "fisher", "online-ewc": "fisher", "mas": "mas"}.get(cfg.cl_method)

    def init_state(self, params: Params) -> reg.CLState:
        return reg.init_cl_state(params, self.cfg)

    def penalty(self, params: Params, state: reg.CLState) -> jax.Array:
        return reg.penalty(params, state, self.mask, self.cfg)

    def end_task(
        self, state: reg.CLState, params: Params, importance: Params | None, task: jax.Array
    ) -> reg.CLState:
        return reg.update(state, params, importance, self.cfg)
