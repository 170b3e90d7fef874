"""``CLSuite/MEAL-{N}-v0``: a whole MEAL sequence as one PettingZoo ``ParallelEnv``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.core.task import (
    RENDER_MODES,
    TASK_EPISODE_KEY,
    ScheduleAccessors,
    SequenceCursor,
    SequenceDoneError,
    check_render_mode,
)
from cl_suites.core.turns import TurnWatch
from cl_suites.errors import require
from cl_suites.meal.batched import MealBatchedEnv
from cl_suites.meal.engine import MealEngine, shared_engine
from cl_suites.meal.render import RENDER_FPS, KitchenRenderer
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
    score), and at an episode end ``task_episode = {"r", "l", "soups", "score",
    "task_id"}`` (the key of every suite's sequence envs; ``episode`` is left to the
    standard wrappers: SB3's ``VecMonitor`` over SuperSuit's vector envs).
    After the last step, ``reset()`` without a seed hands back the last observations
    (so SuperSuit's automatic reset does not fail) and ``step`` raises
    ``SequenceDoneError``.

    Seeding: ``reset(seed=s)`` restarts the sequence at step 0 and replays exactly; the
    kitchens themselves are fixed when the env is built (``make_parallel(..., seed=)``).

    ``render_mode="rgb_array"``: ``render()`` draws the kitchen with meal-bench's sprites
    (``uint8 (H * 32, W * 32, 3)``, the padded kitchen; see ``cl_suites.meal.render``),
    so PettingZoo's ``RecordVideoParallel`` records episodes. The env pickles (the jitted
    engine is rebuilt, or shared with an equal suite's, on unpickling), so SuperSuit's
    ``concat_vec_envs_v1`` and multiprocessing can copy it.
    """

    metadata: dict[str, Any] = {
        "name": "meal_v0",
        "render_modes": list(RENDER_MODES),
        "render_fps": RENDER_FPS,
        "is_parallelizable": True,
    }

    def __init__(
        self, suite: MealSuite, engine: MealEngine | None = None, render_mode: str | None = None
    ):
        self.suite = suite
        self.sequence = suite.sequence
        self.render_mode = check_render_mode(render_mode)
        engine = engine or shared_engine(suite)  # envs of one suite share the jitted kernel
        self._env = MealBatchedEnv(suite, 1, autoreset=False, engine=engine)
        self.possible_agents = list(suite.agents)
        self.agents: list[str] = []
        self.observation_spaces = {
            a: gym.spaces.Box(0, 255, suite.obs_shape, np.uint8) for a in self.possible_agents
        }
        self.action_spaces = {a: gym.spaces.Discrete(NUM_ACTIONS) for a in self.possible_agents}
        self._renderer: KitchenRenderer | None = None
        self._last: tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]] | None = None
        self._turns = TurnWatch(
            self.sequence.name,
            "cl_suites.meal.make_batched(...) or cl_suites.meal.make_sb3_vec_env(...)",
        )

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
        if seed is None and self._env.cursor.done and self._last is not None:
            # the sequence is over: hand back the last observations (steps still raise)
            self.agents = list(self.possible_agents)
            return self._last
        obs, info = self._env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        shared = self._shared_info(info)
        return (
            {a: obs[0, i] for i, a in enumerate(self.possible_agents)},
            {a: dict(shared) for a in self.possible_agents},
        )

    def step(self, actions: dict[str, Any]):
        if self._env.cursor.done:
            raise SequenceDoneError(
                f"the {self.sequence.name} sequence is done; call reset(seed=...) to start over"
            )
        if not self.agents:
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
        if TurnWatch.last is not self._turns:  # another env stepped last
            self._turns.new_turn(self._env.cursor.total_step)
        obs, rewards, terms, truncs, info = self._env.step(np.array([row]))
        shared = self._shared_info(info)
        episode = info.get(TASK_EPISODE_KEY)
        infos = {}
        for i, a in enumerate(self.possible_agents):
            infos[a] = dict(shared)
            if episode is not None:
                infos[a][TASK_EPISODE_KEY] = {
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
        if self._env.cursor.done:
            done_infos = {a: {**infos[a], "task_switched": False} for a in agents}
            self._last = (out[0], done_infos)
        return out

    def close(self) -> None:
        self._env.close()

    def render(self) -> np.ndarray | None:
        """The kitchen now (``uint8 (H, W, 3)``), or ``None`` without a render mode or
        before the first ``reset()``."""
        if self.render_mode is None or self._env._state is None:
            return None
        if self._renderer is None:
            self._renderer = KitchenRenderer(self.suite.num_agents)
        return self._renderer.frames(self._env._state.env_state, [0])[0]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_renderer"] = None  # pygame surfaces; rebuilt on the next render()
        return state

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
