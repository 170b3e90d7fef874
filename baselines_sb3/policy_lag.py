"""Acting on the next rollout while the learner updates on the last one (IMPALA's policy lag).

With ``policy_lag=1`` an update runs in a background thread while the main thread
collects the next rollout with a copy of the parameters from before that update (the
*behaviour* network). Rollout ``k + 1`` is therefore played by the parameters after update
``k - 1`` and trained on by those after update ``k``: one update of lag, as in IMPALA and
CORA's asynchronous actors, which V-trace's importance weights correct (the behaviour
log-probabilities are stored with the rollout). With ``policy_lag=0`` the learner steps
in lockstep (collect, then update), SB3's own loop.

What stays exact, and how:

* **Determinism.** Actions are sampled from a generator of the learner's own
  (``acting_generator``, seeded from the run seed, saved in checkpoints), never from
  torch's global one, which the update thread may use; the update reads nothing that
  collection changes (its learning rate is computed before it starts, it trains on its own
  rollout buffer and bootstrap observation). Same seed, same run, bit for bit.
* **Events see the learner as in lockstep.** Everything that reads or changes the learner
  during collection first waits for the update in flight (:func:`wait_for_update`): task
  switches (the learner subscribes to them before any CL method, and waits), evaluations
  and checkpoints (the job's callbacks wait). A rollout's ``on_rollout_end`` (CL methods
  storing unrolls, CLEAR's replay) runs after the update in flight has finished and before
  the next one starts. So every hook sees the parameters it would see in lockstep.
* **Bootstrap values** ``V(x_T)`` are the learner's, computed when the rollout is handed
  to it (CORA's learner bootstraps from its own value of the last frame).

Costs: a second copy of the network and of the rollout buffer. The update's torch
threads are ``torch_threads`` (acting and the update share the process's intra-op pool,
so ``update_threads`` must not differ).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3.block_acting import BlockActor
from cl_suites.core.background import BackgroundCall

POLICY_LAGS: tuple[int, ...] = (0, 1)


def check_policy_lag(value: Any) -> int:
    """``value`` as a policy lag (0 or 1); ``ValueError`` naming it otherwise."""
    if isinstance(value, bool) or value not in POLICY_LAGS:
        raise ValueError(
            f"policy_lag {value!r} is not allowed; use 0 (lockstep: collect, then update) or "
            "1 (the update overlaps acting on the next rollout)"
        )
    return int(value)


def frozen_copy(policy: Any) -> Any:
    """A copy of an SB3 policy for acting while the original trains on: no optimizer, no
    gradients, evaluation mode (the behaviour network; an evaluation beside training)."""
    optimizer = policy.optimizer
    policy.optimizer = None
    try:
        frozen = copy.deepcopy(policy)
    finally:
        policy.optimizer = optimizer
    frozen.requires_grad_(False)
    frozen.set_training_mode(False)
    return frozen


def wait_for_update(model: Any) -> None:
    """Block until the update in flight (``policy_lag=1``) has finished; a no-op for any
    other learner. A callback that reads or changes the learner (policy, optimizer,
    buffers) during a rollout calls this first."""
    waiter = getattr(model, "wait_for_update", None)
    if waiter is not None:
        waiter()


class PolicyLagLearner:
    """Mixin for an SB3 on-policy learner whose update may overlap the next rollout's
    collection (see the module docstring). The learner calls :meth:`_init_policy_lag` in
    its constructor and :meth:`_setup_policy_lag` at the end of ``_setup_model``; its
    ``learn`` goes through :meth:`_learn_lagged` when ``policy_lag`` is 1."""

    policy_lag: int = 0
    behaviour_policy: Any = None
    acting_generator: th.Generator | None = None

    def _init_policy_lag(self, policy_lag: int) -> None:
        self.policy_lag = check_policy_lag(policy_lag)
        self._update_thread = BackgroundCall("cl-suites-update")
        self._frozen_lr: float | None = None

    def _setup_policy_lag(self) -> None:
        if not self.policy_lag:
            return
        if not isinstance(self.action_space, spaces.Discrete):  # type: ignore[attr-defined]
            raise ValueError(
                f"policy_lag 1 needs a Discrete action space, got {self.action_space}; "  # type: ignore[attr-defined]
                "use policy_lag 0"
            )
        self.behaviour_policy = frozen_copy(self.policy)  # type: ignore[attr-defined]
        self._next_buffer = self.rollout_buffer_class(  # type: ignore[attr-defined]
            self.n_steps,  # type: ignore[attr-defined]
            self.observation_space,  # type: ignore[attr-defined]
            self.action_space,  # type: ignore[attr-defined]
            device=self.device,  # type: ignore[attr-defined]
            gamma=self.gamma,  # type: ignore[attr-defined]
            gae_lambda=self.gae_lambda,  # type: ignore[attr-defined]
            n_envs=self.n_envs,  # type: ignore[attr-defined]
            **self.rollout_buffer_kwargs,  # type: ignore[attr-defined]
        )
        self.acting_generator = th.Generator(device=self.device)  # type: ignore[attr-defined]
        self.acting_generator.manual_seed(int(self.seed or 0))  # type: ignore[attr-defined]

    def _excluded_save_params(self) -> list[str]:
        # SB3's save(): the machinery is rebuilt by _setup_model on load
        return [
            *super()._excluded_save_params(),  # type: ignore[misc]
            "_update_thread",
            "behaviour_policy",
            "_next_buffer",
            "acting_generator",
        ]

    # -- the update in flight ----------------------------------------------------------
    def wait_for_update(self) -> None:
        """Block until the update in flight has finished (re-raising its error)."""
        self._update_thread.wait()

    def _sync_behaviour(self) -> None:
        """The behaviour network takes the learner's current parameters."""
        self.behaviour_policy.load_state_dict(self.policy.state_dict())  # type: ignore[attr-defined]

    def _start_update(self) -> None:
        """Freeze what the update reads from the run's live state, then start it."""
        self._frozen_lr = self.current_learning_rate()  # type: ignore[attr-defined]
        self._update_thread.start(self._lagged_train)

    def _lagged_train(self) -> None:
        try:
            self.train()  # type: ignore[attr-defined]
        finally:
            self._frozen_lr = None

    # -- checkpoints -------------------------------------------------------------------
    def policy_lag_state(self) -> dict[str, Any] | None:
        """The behaviour network and the acting generator (``None`` with ``policy_lag=0``)."""
        if not self.policy_lag:
            return None
        return {
            "behaviour_policy": self.behaviour_policy.state_dict(),
            "acting_generator": self.acting_generator.get_state(),
        }

    def load_policy_lag_state(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`policy_lag_state`; ``None`` (a lockstep checkpoint): the behaviour
        network takes the learner's parameters."""
        if not self.policy_lag:
            return
        if state is None:
            self._sync_behaviour()
            return
        self.behaviour_policy.load_state_dict(state["behaviour_policy"])
        self.acting_generator.set_state(state["acting_generator"])

    # -- the loop ----------------------------------------------------------------------
    def _learn_lagged(
        self,
        total_timesteps: int,
        callback: Any,
        log_interval: int | None,
        tb_log_name: str,
        reset_num_timesteps: bool,
        progress_bar: bool,
    ) -> Any:
        """SB3's ``OnPolicyAlgorithm.learn`` with the update of rollout ``k`` running while
        rollout ``k + 1`` is collected."""
        iteration = 0
        total_timesteps, callback = self._setup_learn(  # type: ignore[attr-defined]
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        callback.on_training_start(locals(), globals())
        try:
            while self.num_timesteps < total_timesteps:  # type: ignore[attr-defined]
                collected = self._collect_lagged(self.env, callback, self.n_steps)  # type: ignore[attr-defined]
                self.wait_for_update()
                if collected is None:
                    break
                self._finish_rollout(collected, callback)
                iteration += 1
                self._update_current_progress_remaining(self.num_timesteps, total_timesteps)  # type: ignore[attr-defined]
                if log_interval is not None and iteration % log_interval == 0:
                    self.dump_logs(iteration)  # type: ignore[attr-defined]
                self._start_update()
        finally:
            self.wait_for_update()
        callback.on_training_end()
        return self

    def _collect_lagged(self, env: VecEnv, callback: BaseCallback, n_rollout_steps: int) -> Any:
        """SB3's ``collect_rollouts`` into the spare buffer, acting with the behaviour
        network and ``acting_generator`` (block by block with ``env_splits`` > 1:
        :mod:`baselines_sb3.block_acting`); the learner's ``rollout_buffer`` and ``_last_obs``
        (what the update in flight reads) are left alone until :meth:`_finish_rollout`.
        Returns ``(buffer, last_obs, last_episode_starts, dones)``, or ``None`` when a
        callback stopped training."""
        behaviour = self.behaviour_policy
        actor = BlockActor(env)
        buffer = self._next_buffer
        buffer.reset()
        last_obs = self._last_obs  # type: ignore[attr-defined]
        last_starts = self._last_episode_starts  # type: ignore[attr-defined]
        callback.on_rollout_start()
        n_steps = 0
        dones = np.zeros(env.num_envs, dtype=bool)
        while n_steps < n_rollout_steps:
            with th.no_grad():
                obs_tensor = obs_as_tensor(last_obs, self.device)  # type: ignore[attr-defined]
                actions_t, values, log_probs = actor.act(
                    behaviour, obs_tensor, self.acting_generator
                )
            actions = actions_t.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs  # type: ignore[attr-defined]
            callback.update_locals(locals())
            if not callback.on_step():
                return None
            self._update_info_buffer(infos, dones)  # type: ignore[attr-defined]
            n_steps += 1
            for idx, done in enumerate(dones):  # SB3's bootstrap of time-limit truncations
                if (
                    done
                    and infos[idx].get("terminal_observation") is not None
                    and infos[idx].get("TimeLimit.truncated", False)
                ):
                    terminal_obs = behaviour.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                    with th.no_grad():
                        terminal_value = behaviour.predict_values(terminal_obs)[0]
                    rewards[idx] += self.gamma * terminal_value  # type: ignore[attr-defined]
            buffer.add(last_obs, actions.reshape(-1, 1), rewards, last_starts, values, log_probs)
            last_obs, last_starts = new_obs, dones
        return buffer, last_obs, last_starts, dones

    def _finish_rollout(self, collected: Any, callback: BaseCallback) -> None:
        """The collected rollout becomes the learner's (the update before it has finished):
        its buffer, bootstrap observation and value (the learner's ``V(x_T)``, with the
        parameters its update starts from, as CORA's learner bootstraps) and the callbacks'
        ``on_rollout_end``; then the behaviour network takes the learner's parameters for
        the next rollout."""
        buffer, last_obs, last_starts, dones = collected
        self._next_buffer, self.rollout_buffer = self.rollout_buffer, buffer  # type: ignore[has-type]
        self._last_obs, self._last_episode_starts = last_obs, last_starts
        with th.no_grad():
            values = self.policy.predict_values(obs_as_tensor(last_obs, self.device))  # type: ignore[attr-defined]
        buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.update_locals({"rollout_buffer": buffer, "dones": dones, "values": values})
        callback.on_rollout_end()
        self._sync_behaviour()
