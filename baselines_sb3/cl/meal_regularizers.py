"""MEAL's quadratic-penalty methods: EWC and online EWC (``MealEWC``, ``MealOnlineEWC``), MAS
(``MealMAS``) and L2 (``MealL2``), their importance measured on fresh episodes (the table
of every variant: ``regularizer_base``)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy

from baselines_sb3.cl.base import (
    FreshEpisodes,
    Rollout,
    flat_obs,
    select_parameters,
)
from baselines_sb3.cl.importance import (
    FISHER_AGENTS,
    mas_importance,
    score_fisher,
)
from baselines_sb3.cl.regularizer_base import Importance, QuadraticPenalty, normalize_importance
from baselines_sb3.device_rollout import host_observations
from cl_suites.core.task import TaskSwitch

MEAL_GROUPS: tuple[str, ...] = ("shared", "actor_trunk")


class StateSample:
    """A uniform (reservoir) sample of up to ``capacity`` observations of the current task
    (the fallback of the fresh-episode methods when the job gives no episode source)."""

    def __init__(self, capacity: int, seed: int = 0):
        self.capacity = int(capacity)
        self.rng = np.random.default_rng(seed)
        self.clear()

    def clear(self) -> None:
        self.items: list[Any] = []
        self.seen = 0

    def add_rollout(self, rollout: Rollout, since_step: int) -> None:
        """Add the rows of ``rollout`` played at or after agent step ``since_step``
        (Algorithm R: the ``k``-th offered row replaces slot ``j ~ U{0..k}`` when
        ``j < capacity`` once the sample is full)."""
        t_count, n_envs = rollout.num_steps, rollout.num_envs
        steps = rollout.first_step + np.arange(t_count) * n_envs
        rows = np.flatnonzero(steps >= since_step)
        if rows.size == 0:
            return
        obs = flat_obs(host_observations(rollout.observations))  # kept as numpy
        flat = (rows[:, None] * n_envs + np.arange(n_envs)).ravel()
        n_fill = max(0, min(self.capacity - len(self.items), flat.size))
        self.items.extend(_row(obs, int(i)) for i in flat[:n_fill])
        rest = flat[n_fill:]
        if rest.size:
            seen = self.seen + n_fill + np.arange(rest.size)
            slots = self.rng.integers(0, seen + 1)
            keep = np.flatnonzero(slots < self.capacity)
            for i, j in zip(rest[keep].tolist(), slots[keep].tolist(), strict=True):
                self.items[j] = _row(obs, i)
        self.seen += int(flat.size)

    def episodes(self) -> FreshEpisodes:
        """The sample as single-agent "episodes" of one step each."""
        if isinstance(self.items[0], dict):
            obs: Any = {k: np.stack([it[k] for it in self.items]) for k in self.items[0]}
        else:
            obs = np.stack(self.items)
        n = len(self.items)
        return FreshEpisodes(obs, 1, np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))

    def state_dict(self) -> dict[str, Any]:
        return {"items": list(self.items), "seen": self.seen, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.items, self.seen = list(state["items"]), int(state["seen"])
        self.rng.bit_generator.state = state["rng"]


def _row(obs: Any, index: int) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v[index]) for k, v in obs.items()}
    return np.array(obs[index])


def meal_groups(regularize_critic: bool = False, regularize_heads: bool = False) -> tuple[str, ...]:
    """MEAL's ``build_reg_weights``: everything but the parameters whose path holds
    ``critic`` (unless ``regularize_critic``) or ``actor_head``/``critic_head`` (unless
    ``regularize_heads``)."""
    groups = list(MEAL_GROUPS)
    if regularize_critic:
        groups.append("critic_trunk")
    if regularize_heads:
        groups.append("actor_head")
        if regularize_critic:
            groups.append("critic_head")
    return tuple(groups)


class _FreshEpisodeImportance(QuadraticPenalty):
    """Base of MEAL's methods: importance from fresh episodes of the finished task
    (interface 11), one term, anchored at the latest parameters; the penalty is divided
    by the number of regularised parameters.

    Args:
        lam: ``reg_coef``.
        mode: ``"multi"`` (``F = F + F_new``), ``"online"`` (``F = decay F + (1 - decay)
            F_new``) or ``"last"`` (``F = F_new``).
        decay: online decay (0.9).
        episodes / max_steps: fresh episodes per importance estimate (5 x 500).
        normalize: ``"mean"`` (MEAL's ``normalize_importance``) or ``None``.
        regularize_critic / regularize_heads: also regularise the critic trunk / the heads
            (MEAL Table 4: No / No). ``groups`` overrides both.
        fallback_states: states of the finished task kept for when no episode source is
            set (with a warning).
    """

    needs_fresh_episodes = True
    modes: tuple[str, ...] = ("multi", "online", "last")
    lead_agent = False
    """Ask the source for episodes where every agent plays agent 0's sampled action."""

    def __init__(
        self,
        lam: float,
        mode: str = "multi",
        decay: float = 0.9,
        episodes: int = 5,
        max_steps: int = 500,
        normalize: str | None = None,
        regularize_critic: bool = False,
        regularize_heads: bool = False,
        groups: tuple[str, ...] | str | None = None,
        fallback_states: int = 2_500,
        seed: int = 0,
    ):
        chosen = groups if groups is not None else meal_groups(regularize_critic, regularize_heads)
        super().__init__(lam, groups=chosen, scale_by="params", seed=seed)
        if mode not in self.modes:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(self.modes)}")
        self.mode, self.decay = mode, float(decay)
        self.episodes, self.max_steps = int(episodes), int(max_steps)
        self.normalize = normalize
        self.samples = StateSample(fallback_states, seed)
        # a CPU generator: score_fisher samples on the CPU, so its state resumes anywhere
        self.generator = th.Generator(device="cpu").manual_seed(int(seed))
        self._warned = False

    def on_rollout_end(self, rollout: Rollout) -> None:
        if self.episode_source is None:
            self.samples.add_rollout(rollout, self._task_start)

    def fresh_episodes(self, task_id: int) -> FreshEpisodes | None:
        if self.episode_source is not None:
            return self.episode_source(
                task_id, self.episodes, self.max_steps, lead_agent=self.lead_agent
            )
        if not self._warned:
            warnings.warn(
                f"{self.name}: no fresh-episode source (set_episode_source); estimating the "
                "importance on stored training states instead",
                stacklevel=2,
            )
            self._warned = True
        return self.samples.episodes() if self.samples.items else None

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        """The finished task's raw importance of ``params``."""
        raise NotImplementedError

    def _normalizations(self) -> list[str]:
        return [self.normalize] if self.normalize else []

    def importance(self, episodes: FreshEpisodes) -> Importance:
        """The new importance of the regularised parameters. MEAL normalises (``"mean"``)
        over its whole parameter tree, so a normalised importance is computed for every
        parameter first and then restricted to the regularised ones."""
        regularised = self.named_parameters(self.policy)
        steps = self._normalizations()
        if not steps:
            return self.compute_importance(episodes, regularised)
        new = self.compute_importance(episodes, select_parameters(self.policy, "all"))
        for method in steps:
            new = normalize_importance(new, method)
        return {n: new[n] for n, _ in regularised}

    def combine(self, old: Importance | None, new: Importance) -> Importance:
        """MEAL's ``update_state`` (the importance starts at zero)."""
        if self.mode == "last":
            return new
        if old is None:
            old = {k: th.zeros_like(v) for k, v in new.items()}
        if self.mode == "multi":
            return {k: old[k] + v for k, v in new.items()}
        return {k: self.decay * old[k] + (1.0 - self.decay) * v for k, v in new.items()}

    def consolidate_task(self, event: TaskSwitch) -> None:
        task = int(event.previous.task_id)
        episodes = self.fresh_episodes(task)
        self.samples.clear()
        if episodes is None:
            return
        was_training = self.policy.training
        self.policy.set_training_mode(False)
        try:
            new = self.importance(episodes)
        finally:
            self.policy.set_training_mode(was_training)
        old = self.terms.get("all")
        self.terms["all"] = (self.combine(old[0] if old else None, new), self._anchor())
        self._record(event, steps=episodes.num_steps)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "samples": self.samples.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.samples.load_state_dict(state["samples"])
        self.generator.set_state(state["generator"])


class MealEWC(_FreshEpisodeImportance):
    """EWC as MEAL's ``cl_methods/EWC.py``: ``mode="multi"`` sums the Fishers (``ewc``),
    ``mode="online"`` with ``decay=0.9`` is MEAL's online EWC; Fisher = :func:`score_fisher`
    of 5 fresh episodes x 500 steps: ``fisher_agents="first"`` (MEAL 7d81858, as ppo-jax):
    episodes where every agent plays the action sampled from agent 0's observation, the
    score of that observation and that action at every step; ``"joint"`` (057f862): each
    agent acting on its own observation, the joint log-probability of resampled actions."""

    name = "ewc"

    def __init__(self, lam: float, fisher_agents: str = "first", **kwargs: Any):
        super().__init__(lam, **kwargs)
        if fisher_agents not in FISHER_AGENTS:
            raise ValueError(
                f"unknown fisher_agents {fisher_agents!r}; valid: {', '.join(FISHER_AGENTS)}"
            )
        self.fisher_agents = fisher_agents
        self.lead_agent = fisher_agents == "first"

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        played = None  # "first": the actions played (sampled once, as MEAL); else resampled
        if self.lead_agent and episodes.actions is not None:
            device = next(self.policy.parameters()).device
            played = th.as_tensor(np.asarray(episodes.actions), dtype=th.long, device=device)
        return score_fisher(
            self.policy,
            self._forward(),
            params,
            episodes,
            self.generator,
            self.fisher_agents,
            actions=played,
        )


class MealOnlineEWC(MealEWC):
    """MEAL's online EWC: ``F = 0.9 F + 0.1 F_new``."""

    name = "online-ewc"

    def __init__(self, lam: float, mode: str = "online", **kwargs: Any):
        super().__init__(lam, mode=mode, **kwargs)


class MealMAS(_FreshEpisodeImportance):
    """MAS as MEAL 7d81858's ``cl_methods/MAS.py``: squared gradients of ``1/2 sum_agents
    ||[log pi, V]||^2`` at every step of fresh episodes, the mean over the live steps,
    replaced per task (``mode="last"``), not normalised. MEAL 057f862's form is
    ``stride=5, agent_mean=True, normalize_task=True, mode="online"`` (each task's
    importance divided by its mean over the whole parameter tree, then ``0.9 w + 0.1 w_new``)."""

    name = "mas"

    def __init__(
        self,
        lam: float,
        mode: str = "last",
        stride: int = 1,
        normalize_task: bool = False,
        agent_mean: bool = False,
        **kwargs: Any,
    ):
        super().__init__(lam, mode=mode, **kwargs)
        self.stride = int(stride)
        self.normalize_task = bool(normalize_task)
        self.agent_mean = bool(agent_mean)

    def _normalizations(self) -> list[str]:
        # 057f862: the task's importance (already normalised when norm_importance) is
        # divided by its mean again in update_state
        return super()._normalizations() + (["mean"] if self.normalize_task else [])

    def compute_importance(
        self, episodes: FreshEpisodes, params: list[tuple[str, th.nn.Parameter]]
    ) -> Importance:
        return mas_importance(
            self.policy, self._forward(), params, episodes, self.stride, self.agent_mean
        )


class MealL2(QuadraticPenalty):
    """L2 as MEAL's ``L2``: importance 1, anchored at the initial parameters from the
    first task on, then at the parameters of every task switch; divided by the number of
    regularised parameters."""

    name = "l2"

    def __init__(
        self,
        lam: float,
        regularize_critic: bool = False,
        regularize_heads: bool = False,
        groups: tuple[str, ...] | str | None = None,
        seed: int = 0,
    ):
        chosen = groups if groups is not None else meal_groups(regularize_critic, regularize_heads)
        super().__init__(lam, groups=chosen, scale_by="params", seed=seed)

    def bind(self, policy: ActorCriticPolicy, model: Any = None) -> None:
        super().bind(policy, model)
        if not self.terms:
            self._set_anchor()

    def _set_anchor(self) -> None:
        ones = {n: th.ones_like(p) for n, p in self.named_parameters(self.policy)}
        self.terms["all"] = (ones, self._anchor())
        self._flat = None

    def consolidate_task(self, event: TaskSwitch) -> None:
        self._set_anchor()
        self._record(event)
