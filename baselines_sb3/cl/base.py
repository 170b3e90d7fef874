"""The interface every continual-learning method implements, and how it plugs into SB3.

A :class:`ContinualMethod` sees four things: the policy it protects (``bind``), each
finished rollout (``on_rollout_end``), each task switch of the sequence env
(``on_task_switch``), and the optimizer steps of the learner, where it contributes a
``penalty(policy)`` (regularisers) and an ``extra_loss(policy, batch_size)`` (replay).
A method that estimates importance on fresh episodes of the finished task (MEAL's Fisher
and MAS) sets ``needs_fresh_episodes`` and receives ``set_episode_source(fn)`` from the
job (interface 11, see :data:`EpisodeSource`).

**Gradient clipping.** The penalty and extra loss are added *without forking SB3*:
:func:`install_loss_hook` wraps the policy optimizer's ``zero_grad``. Every SB3
on-policy ``train()`` (PPO, A2C, and this package's V-trace learner) runs
``optimizer.zero_grad(); loss.backward(); clip_grad_norm_(params, max_grad_norm);
optimizer.step()`` per minibatch; the wrapped ``zero_grad`` zeroes the gradients and then
back-propagates ``penalty + extra_loss`` (the penalty through ``penalty_grad_``, which
quadratic penalties compute in closed form), so ``loss.backward()`` accumulates onto them and
the sum of both gradients goes through the same ``clip_grad_norm_`` before the step. The
hook only acts while the policy is in training mode (``train()`` sets it; rollouts and
evaluation do not), so the gradient of the learner's total objective
``loss + penalty + extra_loss`` is exactly what gets clipped.

Use with any SB3 on-policy algorithm (e.g. plain ``PPO`` on a multi-agent VecEnv)::

    method = EWC(lam=1e4)
    callback = attach_method(model, method)          # bind + hook + task-switch wiring
    model.learn(total_steps, callback=[callback, ...])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from cl_suites.core.task import Segment, TaskSwitch


@dataclass
class Rollout:
    """One finished rollout, time-major, as stored by SB3's rollout buffer.

    Attributes:
        observations: ``(T, E, *obs_shape)`` array, or a dict of them for Dict spaces
            (SB3 keeps them as float32; image values are still 0..255). Torch tensors
            on the policy's device where the env hands them so (MEAL beside JAX,
            ``baselines_sb3.device_rollout``; ``host_observations`` gives numpy).
        actions: ``(T, E)`` (discrete) or ``(T, E, *action_shape)``.
        rewards: ``(T, E)`` float32 (SB3 already added ``gamma * V(final_obs)`` on truncation).
        episode_starts: ``(T, E)`` float32, 1 where the observation starts an episode.
        values: ``(T, E)`` behaviour values; ``log_probs``: ``(T, E)`` behaviour log-probs.
        first_step: agent step (global, summed over sub-envs) of the rollout's first row.
        end_step: agent step after the rollout's last row.
        last_observations: ``(E, *obs_shape)`` (or dict) observation after the last row,
            the one the learner bootstraps from (a tensor as ``observations``); ``None``
            when unknown.
        last_episode_starts: ``(E,)`` 1 where ``last_observations`` starts an episode.
        behaviour_policy: the network that played the rollout when it is not the
            learner's policy (``policy_lag=1``: the parameters before the last update;
            ``None``: the learner's policy played it, as in lockstep).
    """

    observations: Any
    actions: np.ndarray
    rewards: np.ndarray
    episode_starts: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    first_step: int
    end_step: int
    last_observations: Any = None
    last_episode_starts: np.ndarray | None = None
    behaviour_policy: ActorCriticPolicy | None = None

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.rewards.shape[1])


@dataclass
class FreshEpisodes:
    """Observations of fresh episodes of one task, played by the current policy.

    Attributes:
        observations: one batch as the policy takes it (a dict of arrays for Dict
            layouts, the ``task_id`` key included for task-aware policies), ``S * A`` rows
            ordered step by step and, within a step, agent by agent.
        num_agents: ``A``, the agents acting at each step (1 for single-agent suites).
        step_in_episode: ``(S,)`` index of each step within its episode chunk (0, 1, ...).
        alive: ``(S,)`` True for the steps before the first end of an episode in the chunk
            (a chunk of ``max_steps`` steps continues through auto-resets).
        actions: ``(S, A)`` the action each agent played at each step, or ``None`` when
            not recorded (stored training states).
    """

    observations: Any
    num_agents: int
    step_in_episode: np.ndarray
    alive: np.ndarray
    actions: np.ndarray | None = None

    @property
    def num_steps(self) -> int:
        return len(self.step_in_episode)


EpisodeSource = Callable[..., FreshEpisodes]
"""``fn(task_id, episodes, max_steps, lead_agent=False) -> FreshEpisodes``: play
``episodes`` chunks of ``max_steps`` env steps each (auto-resetting) of task ``task_id``
with the current policy (sampled actions), on envs separate from the training env
(interface 11; MEAL's Fisher: 5 x 500). Every agent samples from its own observation, or,
with ``lead_agent``, every agent plays the action sampled from agent 0's observation (MEAL
7d81858's Fisher episodes). The job provides it; without one the method falls back to
stored training states with a warning."""


class ContinualMethod:
    """Base class: fine-tuning (no protection). Subclasses override what they need.

    Class attributes:
        name: the CLI name (``ft``, ``ewc``, ...).
        needs_task_boundaries: the method must hear task switches; attaching it to an
            env that signals none raises ``ValueError``.
        needs_fresh_episodes: the method wants ``set_episode_source`` (interface 11).
        keeps_replay: the method stores observations in a replay buffer placed by the
            memory guard (its constructor takes ``disk_dir`` and ``storage``;
            ``baselines_sb3.cl.storage``).
        switch_inside_step: ``on_task_switch`` is called inside the env step that ends
            the task, before the learner's update of that rollout and before the task's
            end is evaluated (the built-in methods: their hooks only read the network,
            and count steps from there). ``False`` (the default, own methods): it is
            called after the evaluation and plasticity diagnostics of the task's end
            (and after the update when the task ends with a rollout), so a hook that
            changes the network (a head reset) never changes the end-of-task rows.
    """

    name = "ft"
    needs_task_boundaries = False
    needs_fresh_episodes = False
    keeps_replay = False
    switch_inside_step = False

    def __init__(self) -> None:
        self.policy: ActorCriticPolicy | None = None
        self.model: OnPolicyAlgorithm | None = None
        self.episode_source: EpisodeSource | None = None

    def set_episode_source(self, fn: EpisodeSource | None) -> None:
        """Where fresh episodes of a finished task come from (interface 11)."""
        self.episode_source = fn

    # -- wiring ----------------------------------------------------------------------
    def bind(self, policy: ActorCriticPolicy, model: OnPolicyAlgorithm | None = None) -> None:
        """Remember the policy (and learner) to protect; called once after construction."""
        self.policy = policy
        self.model = model

    def set_current_segment(self, segment: Segment | None) -> None:
        """The segment being trained when the method is attached (for methods that need it)."""

    def plan_storage(
        self,
        unroll_length: int,
        observation_space: spaces.Space,
        num_actions: int,
        quiet: bool = False,
    ) -> bool:
        """Methods that ``keeps_replay``: whether their replay buffer's observations go to
        disk, by the memory guard (``baselines_sb3.cl.storage``), before anything is
        allocated; raises ``ReplayMemoryError`` when the buffer fits nowhere. The job calls
        it before the run directory exists, the method again when it makes the buffer.
        ``unroll_length``: the learner's T; ``num_actions``: the policy's outputs;
        ``quiet``: no message when the buffer goes to disk."""
        raise NotImplementedError(f"method {self.name!r} keeps no replay buffer")

    # -- events ----------------------------------------------------------------------
    def on_rollout_end(self, rollout: Rollout) -> None:
        """Called after every rollout, before the learner's update."""

    def on_task_switch(self, event: TaskSwitch) -> None:
        """Called at the agent step where the sequence env switches task."""

    def on_update_end(self) -> None:
        """Called after each update of the learner, before the next rollout is collected
        (and once more when training ends); the update has finished even when it runs in
        a thread beside the rollout (``policy_lag=1``)."""

    # -- losses ----------------------------------------------------------------------
    def penalty(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        """Scalar added to every minibatch loss (``None``: nothing)."""
        return None

    def extra_loss(self, policy: ActorCriticPolicy, batch_size: int) -> th.Tensor | None:
        """Scalar added to every minibatch loss that needs data (replay); ``batch_size`` is
        the learner's minibatch size in transitions."""
        return None

    def extra_rewards(self, policy: ActorCriticPolicy, batch_size: int) -> th.Tensor | None:
        """Rewards of the data this update's ``extra_loss`` will train on, time-major
        ``(T, R)`` (``None``: none). A learner with a running reward normaliser calls it
        before updating the normaliser, so that replayed rewards join its moments (CORA's
        CLEAR); a method that answers must train on exactly that data in the update's
        ``extra_loss``."""
        return None

    def start_update(self, policy: ActorCriticPolicy, batch_size: int, minibatches: int) -> None:
        """Called before an update of ``minibatches`` minibatches of ``batch_size``
        transitions (at most: a KL early stop ends it sooner), so that a method can fetch
        the data its ``extra_loss`` needs for all of them at once (CLEAR's replay)."""

    def end_update(self) -> None:
        """Called when the update :meth:`start_update` announced has ended."""

    def custom_update(self, model: OnPolicyAlgorithm) -> bool:
        """Replace the learner's update for this rollout (P&C compress phase); True if done."""
        return False

    # -- evaluation ------------------------------------------------------------------
    def eval_policy_module(self, policy: ActorCriticPolicy) -> ActorCriticPolicy:
        """The network that evaluation should act with (P&C: the knowledge base)."""
        return policy

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def penalty_grad_(self, policy: ActorCriticPolicy) -> th.Tensor | None:
        """Add ``d penalty / d theta`` to the parameters' ``.grad`` and return the penalty's
        detached value (``None``: no penalty). Default: back-propagate ``penalty``;
        quadratic penalties override it with their closed-form gradient."""
        penalty = self.penalty(policy)
        if penalty is None:
            return None
        penalty.backward()
        return penalty.detach()

    def total_loss(self, policy: ActorCriticPolicy, batch_size: int) -> th.Tensor | None:
        """``penalty + extra_loss`` (``None`` when both are absent)."""
        terms = [
            t for t in (self.penalty(policy), self.extra_loss(policy, batch_size)) if t is not None
        ]
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else sum(terms[1:], terms[0])


def learner_batch_size(model: OnPolicyAlgorithm) -> int:
    """Transitions per minibatch of an SB3 on-policy learner (PPO ``batch_size``; A2C and
    V-trace use the whole rollout)."""
    batch = getattr(model, "batch_size", None)
    return int(batch) if batch else int(model.n_steps * model.n_envs)


def install_loss_hook(model: OnPolicyAlgorithm, method: ContinualMethod) -> None:
    """Make the policy optimizer's ``zero_grad`` back-propagate the method's losses.

    See the module docstring: the gradients then accumulate with the learner's loss
    gradients and are clipped together. Re-install after replacing the optimizer.
    """
    optimizer = model.policy.optimizer
    if getattr(optimizer, "_cl_hooked", None) is method:
        return
    original = type(optimizer).zero_grad

    def zero_grad(set_to_none: bool = True) -> None:
        original(optimizer, set_to_none=set_to_none)
        policy = model.policy
        if not policy.training:
            return
        value = method.penalty_grad_(policy)
        extra = method.extra_loss(policy, learner_batch_size(model))
        if extra is not None:
            extra.backward()
            value = extra.detach() if value is None else value + extra.detach()
        if value is None or getattr(model, "_logger", None) is None:
            return
        if hasattr(model, "record_cl_loss"):  # logged once at the update's end
            model.record_cl_loss(value.detach())
        else:
            model.logger.record("train/cl_loss", float(value))

    optimizer.zero_grad = zero_grad  # type: ignore[method-assign]
    optimizer._cl_hooked = method  # type: ignore[attr-defined]


def find_task_switch_source(env: Any) -> Any | None:
    """The object with ``on_task_switch(callback)`` behind an SB3 VecEnv (through
    ``VecEnvWrapper``s and ``SB3VecEnv.vector_env``), or ``None``."""
    seen = 0
    while env is not None and seen < 32:
        if hasattr(env, "on_task_switch"):
            return env
        if isinstance(env, VecEnvWrapper):
            env = env.venv
        elif hasattr(env, "vector_env"):
            env = env.vector_env
        else:
            return None
        seen += 1
    return None


class ContinualMethodCallback(BaseCallback):
    """Feeds rollouts to the method, task switches when the env only reports them in
    ``info["task_switched"]`` (no ``on_task_switch`` to subscribe to), and the env's task
    switches to a method that hears them after the task's end is evaluated
    (``switch_inside_step = False``): put it after ``ContinualEvalCallback`` and
    ``PlasticityCallback`` in the callback list. Such a switch is delivered at the step
    where the evaluation callback evaluates the task's end: at the switch step when it
    falls inside a rollout, else after that rollout's update, at the next rollout's start
    (or at the end of training)."""

    def __init__(self, method: ContinualMethod, switches_from_infos: bool = False):
        super().__init__()
        self.method = method
        self.switches_from_infos = switches_from_infos
        self._rollout_start = 0
        self._pending: list[TaskSwitch] = []
        self._collected = False  # a rollout whose update has not been announced yet

    def switch(self, event: TaskSwitch) -> None:
        """The env's task switch (subscribed by :func:`attach_method`): to the method now,
        or after the evaluation of the task's end (``switch_inside_step``)."""
        if self.method.switch_inside_step:
            self.method.on_task_switch(event)
        else:
            self._pending.append(event)

    def _deliver(self) -> None:
        if not self._pending:
            return
        wait = getattr(self.model, "wait_for_update", None)
        if wait is not None:  # policy_lag=1: never change the network under its update
            wait()
        events, self._pending = self._pending, []
        for event in events:
            self.method.on_task_switch(event)

    def _update_ended(self) -> None:
        if not self._collected:
            return
        self._collected = False
        wait = getattr(self.model, "wait_for_update", None)
        if wait is not None:  # policy_lag=1: the update runs beside the next rollout
            wait()
        self.method.on_update_end()

    def _on_rollout_start(self) -> None:
        self._update_ended()  # the previous rollout's update has run
        self._deliver()  # a switch at the previous rollout's end, evaluated after its update
        self._rollout_start = self.num_timesteps

    def _on_training_end(self) -> None:
        self._update_ended()
        self._deliver()

    def _on_step(self) -> bool:
        if self._pending and self.locals.get("n_steps", -2) + 1 < self.model.n_steps:
            self._deliver()  # inside the rollout: the evaluation at this step came first
        if self.switches_from_infos:
            infos = self.locals.get("infos", [])
            if infos and infos[0].get("task_switched"):
                info = infos[0]
                stub = Segment(-1, int(info.get("cycle", 0)), -1, "", -1, self.num_timesteps)
                now = Segment(
                    -1,
                    int(info.get("cycle", 0)),
                    int(info.get("task_id", -1)),
                    str(info.get("task_name", "")),
                    self.num_timesteps,
                    -1,
                )
                self.method.on_task_switch(TaskSwitch(stub, now, self.num_timesteps))
        return True

    def _on_rollout_end(self) -> None:
        self.method.on_rollout_end(rollout_from_buffer(self.model, self._rollout_start))
        self._collected = True


def rollout_from_buffer(model: OnPolicyAlgorithm, first_step: int) -> Rollout:
    """The learner's latest rollout (call at rollout end, before the update)."""
    buf = model.rollout_buffer
    last_starts = getattr(model, "_last_episode_starts", None)
    return Rollout(
        observations=buf.observations,
        actions=buf.actions.reshape(buf.buffer_size, buf.n_envs, *buf.actions.shape[2:])
        if buf.actions.shape[-1] != 1
        else buf.actions[..., 0],
        rewards=buf.rewards,
        episode_starts=buf.episode_starts,
        values=buf.values,
        log_probs=buf.log_probs,
        first_step=int(first_step),
        end_step=int(model.num_timesteps),
        last_observations=getattr(model, "_last_obs", None),
        last_episode_starts=None if last_starts is None else np.asarray(last_starts, np.float32),
        behaviour_policy=getattr(model, "behaviour_policy", None),
    )


def attach_method(
    model: OnPolicyAlgorithm,
    method: ContinualMethod,
    env: VecEnv | None = None,
) -> ContinualMethodCallback:
    """Wire ``method`` into ``model``: bind it, install the loss hook, subscribe it to the
    env's task switches; returns the callback to pass to ``model.learn`` (after the
    evaluation callbacks: a method that hears switches after the task's end is evaluated
    gets them from it, see :class:`ContinualMethodCallback`).

    Raises ``ValueError`` when the method needs task boundaries and the env gives none.
    """
    env = env if env is not None else model.get_env()
    method.bind(model.policy, model)
    install_loss_hook(model, method)
    source = find_task_switch_source(env)
    callback = ContinualMethodCallback(method)
    if source is not None:
        source.on_task_switch(callback.switch)
        current = getattr(source, "current_task", None)
        method.set_current_segment(current if isinstance(current, Segment) else None)
    elif method.needs_task_boundaries:
        if getattr(method, "accepts_info_switches", False):
            callback.switches_from_infos = True
        else:
            raise ValueError(
                f"method {method.name!r} needs task boundaries, but the env "
                f"{type(env).__name__} gives none (no on_task_switch to subscribe to); "
                "use a cl_suites sequence env (SequenceVectorEnv wrapped in SB3VecEnv) or a "
                "task-agnostic method (ft, clear)"
            )
    return callback


def latest_step_segment(cursor: Any) -> tuple[Segment, int]:
    """The segment of the env's latest step and the steps taken in it so far.

    Right after a switch (``task_step == 0``) the latest step still belonged to the
    previous segment, fully spent: an update on a rollout that ended exactly at a switch
    trains on the previous task's data (CORA labels an update with its batch's task).
    """
    if cursor.task_step == 0 and cursor.index > 0:
        previous = cursor.segments[cursor.index - 1]
        return previous, previous.steps
    return cursor.segment, cursor.task_step


def select_parameters(
    policy: ActorCriticPolicy, groups: tuple[str, ...] | str = "all"
) -> list[tuple[str, th.nn.Parameter]]:
    """Trainable ``(name, parameter)`` pairs of the named groups, in ``named_parameters``
    order. ``groups="all"``: every trainable parameter. Group names are those of
    ``policy.parameter_groups()`` (interface 12); unknown names raise ``ValueError``."""
    if groups == "all":
        return [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
    if isinstance(groups, str):
        groups = (groups,)
    if hasattr(policy, "parameter_groups"):
        available = policy.parameter_groups()
    else:  # any SB3 ActorCriticPolicy has the same parts
        from baselines_sb3.policies import parameter_groups

        available = parameter_groups(policy)
    unknown = [g for g in groups if g not in available]
    if unknown:
        raise ValueError(
            f"unknown parameter group(s) {unknown}; valid: {', '.join(available) or 'none'} "
            "(or 'all')"
        )
    chosen = {id(p) for g in groups for _, p in available[g]}
    return [(n, p) for n, p in policy.named_parameters() if id(p) in chosen]


def flat_obs(observations: Any, index: np.ndarray | slice | None = None) -> Any:
    """Rows of a time-major ``(T, E, ...)`` observation array (or dict) flattened to
    ``(T*E, ...)``."""
    if isinstance(observations, dict):
        return {k: flat_obs(v, index) for k, v in observations.items()}
    flat = observations.reshape(-1, *observations.shape[2:])
    return flat if index is None else flat[index]


def logits_and_values(policy: ActorCriticPolicy, obs: Any) -> tuple[th.Tensor, th.Tensor]:
    """Action logits ``(B, n)`` and values ``(B,)`` of any SB3 actor-critic with a
    Discrete action space (``ContinualPolicy`` computes both in one pass)."""
    if hasattr(policy, "logits_and_values"):
        return policy.logits_and_values(obs)
    dist = policy.get_distribution(obs)
    return dist.distribution.logits, policy.predict_values(obs).flatten()
