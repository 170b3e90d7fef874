"""``CLSuite/MEAL-{N}-v0``: a whole MEAL sequence as one PettingZoo ``ParallelEnv``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.core.task import ScheduleAccessors, SequenceCursor
from cl_suites.errors import require
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.engine import MealEngine
from cl_suites.meal.suite import NUM_ACTIONS, MealSuite

require("pettingzoo", extra="meal")

from pettingzoo import ParallelEnv  # noqa: E402


class MealParallelEnv(ScheduleAccessors, ParallelEnv):
    """A MEAL sequence (continual multi-agent Overcooked) as a PettingZoo parallel env.

    Agents ``agent_0 .. agent_{n-1}`` each see ``Box(0, 255, (H, W, C), uint8)``
    (the largest kitchen of the sequence; smaller ones are centred and zero-padded, or
    the view window with partial observability) and act in ``Discrete(6)`` (up, down,
    right, left, stay, interact). The spaces never change.

    Steps are **env steps**: one joint action of all agents = one step of the budget.
    Episodes last ``episode_len`` (400) steps and end by truncation; when the current
    task's budget is spent the running episode is truncated and the next ``reset()``
    starts the next task (``info["task_switched"]`` True). After the last step,
    ``info["sequence_done"]`` is True and ``step`` raises. When an episode ends,
    ``agents`` becomes empty (PettingZoo convention) until ``reset()``.

    Every agent's info holds ``task_id, task_name, cycle, task_step, total_step,
    task_switched, sequence_done``, ``soups`` (team soups delivered this step),
    ``episode_soups`` and ``score`` (= ``episode_soups / max_soups``, MEAL's normalised
    score), and at an episode end ``episode = {"r", "l", "soups", "score", "task_id"}``.

    Seeding: ``reset(seed=s)`` restarts the sequence at step 0 and replays exactly; the
    kitchens themselves are fixed when the env is built (``make_parallel(..., seed=)``).
    """

    metadata: dict[str, Any] = {"name": "meal_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, suite: MealSuite, engine: MealEngine | None = None):
        self.suite = suite
        self.sequence = suite.sequence
        self._env = MealBatchedEnv(suite, 1, autoreset=False, engine=engine)
        self.possible_agents = list(suite.agents)
        self.agents: list[str] = []
        space = suite.sequence.observation_space
        self.observation_spaces = {a: space for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(NUM_ACTIONS) for a in self.possible_agents}
        self.render_mode = None

    # -- schedule helpers (schedule, on_task_switch, current_task) -------------------------
    @property
    def cursor(self) -> SequenceCursor:
        return self._env.cursor

    # -- PettingZoo API -------------------------------------------------------------------
    def observation_space(self, agent: str) -> gym.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        obs, info = self._env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        shared = self._shared_info(info)
        return (
            {a: obs[0, i] for i, a in enumerate(self.possible_agents)},
            {a: dict(shared) for a in self.possible_agents},
        )

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            if self._env.cursor.done:
                raise RuntimeError(
                    f"the {self.sequence.name} sequence is done; call reset(seed=...) to start over"
                )
            raise RuntimeError("no agent is active (episode over or not started); call reset()")
        if not isinstance(actions, dict):
            raise ValueError(
                f"actions must be a dict agent -> action, got {type(actions).__name__}"
            )
        missing = [a for a in self.agents if a not in actions]
        extra = [a for a in actions if a not in self.agents]
        if missing or extra:
            raise ValueError(
                f"actions must hold exactly the active agents {self.agents}; "
                f"missing {missing}, unknown {extra}"
            )
        row = []
        for a in self.possible_agents:
            act = actions[a]
            if not self.action_spaces[a].contains(act) and not (
                isinstance(act, (int, np.integer)) and 0 <= act < NUM_ACTIONS
            ):
                raise ValueError(
                    f"action {act!r} of {a} is not in its action space Discrete({NUM_ACTIONS})"
                )
            row.append(int(act))
        obs, rewards, terms, truncs, info = self._env.step(np.array([row]))
        shared = self._shared_info(info)
        episode = info.get("episode")
        infos = {}
        for i, a in enumerate(self.possible_agents):
            infos[a] = dict(shared)
            if episode is not None:
                infos[a]["episode"] = {
                    "r": float(episode["r"][0, i]),
                    "l": int(episode["l"][0]),
                    "soups": int(episode["soups"][0]),
                    "score": float(episode["score"][0]),
                    "task_id": int(episode["task_id"]),
                }
        agents = self.possible_agents
        out = (
            {a: obs[0, i] for i, a in enumerate(agents)},
            {a: float(rewards[0, i]) for i, a in enumerate(agents)},
            {a: bool(terms[0, i]) for i, a in enumerate(agents)},
            {a: bool(truncs[0, i]) for i, a in enumerate(agents)},
            infos,
        )
        if truncs[0, 0] or terms[0, 0]:
            self.agents = []
        return out

    def close(self) -> None:
        self._env.close()

    def render(self) -> None:
        return None

    @staticmethod
    def _shared_info(info: dict[str, Any]) -> dict[str, Any]:
        return {
            "task_id": info["task_id"],
            "task_name": info["task_name"],
            "cycle": info["cycle"],
            "task_step": info["task_step"],
            "total_step": info["total_step"],
            "task_switched": info["task_switched"],
            "sequence_done": info["sequence_done"],
            "soups": int(info["soups"][0]),
            "episode_soups": int(info["episode_soups"][0]),
            "score": float(info["score"][0]),
        }
