"""``M`` copies of a MEAL sequence stepped by one jitted, vmapped call.

Every env plays the same task at the same time and MEAL episodes have a fixed length, so
all envs start and end their episodes together: episode resets and task switches are
batch-wide events and cost nothing per step.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from cl_suites.core.task import (
    TASK_EPISODE_KEY,
    Schedule,
    ScheduleAccessors,
    SequenceCursor,
    check_positive_int,
)
from cl_suites.meal.engine import BatchState, MealEngine, jax
from cl_suites.meal.suite import NUM_ACTIONS, MealSuite

_ENGINES: OrderedDict[tuple, MealEngine] = OrderedDict()
_MAX_ENGINES = 4


def _suite_key(suite: MealSuite) -> tuple:
    layouts = tuple(
        (
            t.name,
            t.seed,
            tuple((k, np.asarray(v).tobytes()) for k, v in sorted(dict(t.layout).items())),
        )
        for t in suite.layouts
    )
    return (
        layouts,
        suite.num_agents,
        suite.episode_len,
        suite.obs_shape,
        tuple(sorted(suite.options.items())),
    )


def shared_engine(suite: MealSuite) -> MealEngine:
    """The ``MealEngine`` of ``suite``, shared by every env of the same kitchens and options
    in this process (its jitted functions compile once; the last few suites are kept)."""
    key = _suite_key(suite)
    if key in _ENGINES:
        _ENGINES.move_to_end(key)
        return _ENGINES[key]
    engine = _ENGINES[key] = MealEngine(suite)
    while len(_ENGINES) > _MAX_ENGINES:
        _ENGINES.popitem(last=False)
    return engine


def check_actions(actions: Any, num_envs: int, num_agents: int) -> np.ndarray:
    """``actions`` as an ``(num_envs, num_agents)`` int array, or a ``ValueError``."""
    arr = np.asarray(actions)
    if arr.shape != (num_envs, num_agents):
        raise ValueError(
            f"actions must have shape (num_envs, num_agents) = ({num_envs}, {num_agents}), "
            f"got {arr.shape}"
        )
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(
                f"actions must be integers in 0..{NUM_ACTIONS - 1}, got dtype {arr.dtype}"
            )
    if arr.size and (arr.min() < 0 or arr.max() >= NUM_ACTIONS):
        bad = arr[(arr < 0) | (arr >= NUM_ACTIONS)]
        raise ValueError(f"actions must be in 0..{NUM_ACTIONS - 1}, got {bad.tolist()[:5]}")
    return arr


class MealBatchedEnv(ScheduleAccessors):
    """A batched MEAL sequence: ``num_envs`` envs x ``num_agents`` agents.

    ``reset(seed=s)`` starts the sequence at step 0; ``step(actions)`` takes
    ``actions (M, n)`` and returns ``obs (M, n, H, W, C) uint8``, ``rewards (M, n)
    float32``, ``terminations (M, n)`` (always False: MEAL episodes only end by time),
    ``truncations (M, n)`` and ``infos``.

    Steps are **env steps** (one joint action = one step): a call counts ``M`` steps
    against the current task's budget, and every env switches task at the first call that
    spends it (``SequenceCursor`` with ``num_envs=M``, see ``schedule()``). An episode ends
    after ``episode_len`` steps (truncation) or at a task switch (truncation). Give
    ``num_envs``, or ``schedule``, the sequence cut for ``M`` envs already (the job's).

    With ``autoreset=True`` (same-step autoreset) the observations returned at an
    episode end already start the next episode (or task); the last ones are in
    ``infos["final_obs"]``. With ``autoreset=False`` the final observations are returned
    and ``reset()`` must be called to go on (the ParallelEnv's mode).

    With ``device_observations=True`` (set by an SB3 view whose learner shares JAX's
    device, see ``cl_suites.job.torch.device_observations``) ``reset`` and ``step``
    return the observations (and ``final_obs``) as the engine's JAX arrays, on its device,
    instead of host numpy arrays; rewards and infos stay numpy.

    ``infos``: the schedule keys ``task_id, task_name, cycle, task_step, total_step,
    task_switched, sequence_done`` as scalars shared by all envs (after a switch they
    describe the new task); ``soups (M,)`` soups delivered this step; ``episode_soups
    (M,)`` soups so far in the episode; ``score (M,)`` = ``episode_soups / max_soups`` (NaN
    for a kitchen without a bound: ``MealLayout.no_bound``); at
    episode ends ``task_episode = {"r": (M, n) returns, "l": (M,), "soups": (M,), "score":
    (M,), "task_id": int}`` and ``_task_episode (M,)`` True (the key of every suite's
    sequence envs; ``episode`` is left to the standard wrappers).

    Rewards: delivery reward (20 per soup) plus, unless ``sparse_rewards``, meal-bench's
    shaping (onion in pot 3, useful plate pick-up 3, soup pick-up 5) times a coefficient
    annealed linearly from 1 to 0 over ``shaping_horizon`` env steps of each task and held
    for each block of ``rollout_steps`` calls (one learner update of ``M * rollout_steps``
    env steps) from the task's start: ``1 - u * M * rollout_steps / shaping_horizon`` in
    update ``u``, MEAL's ``rew_shaping_anneal(update_step * num_steps * num_envs)``
    (``TTomilin/MEAL@7d81858 baselines/IPPO_CL.py:657``) and ppo-jax's; ``rollout_steps=1``
    anneals per call. Each agent
    gets the team's delivery reward (its own with ``individual_rewards``) plus its own
    shaping, as MEAL's trainer (``TTomilin/MEAL@7d81858 baselines/IPPO_CL.py:673-682``).

    Seeding: env ``j`` of task segment ``(cycle, task_id)`` uses the PRNG key
    ``fold_in(PRNGKey(task_seed(seed, cycle, task_id)), j)``, so env 0 of any batch size
    replays the ParallelEnv with the same seed.
    """

    def __init__(
        self,
        suite: MealSuite,
        num_envs: int | None = None,
        *,
        schedule: Schedule | None = None,
        autoreset: bool = True,
        engine: MealEngine | None = None,
        rollout_steps: int = 1,
    ):
        self.suite = suite
        self.sequence = suite.sequence
        self.cursor = SequenceCursor(suite.sequence, suite.sequence.follow(num_envs, schedule))
        self.num_envs = self.cursor.num_envs
        self.num_agents = suite.num_agents
        self.agents = suite.agents
        self.autoreset = autoreset
        self.rollout_steps = check_positive_int("rollout_steps", rollout_steps)
        self.render_mode = None
        self.engine = engine or shared_engine(suite)
        # NaN for a kitchen without a bound: its score is NaN (undefined, as in MEAL)
        self.max_soups = np.array(
            [t.max_soups if t.max_soups > 0 else np.nan for t in suite.layouts], dtype=np.float64
        )
        self._state: BatchState | None = None
        self._keys = None
        self._t = 0
        self._returns = np.zeros((self.num_envs, self.num_agents))
        self._soups = np.zeros(self.num_envs, dtype=np.int64)
        self._need_reset = False
        self._episode_task = 0
        self._no = np.zeros((self.num_envs, self.num_agents), dtype=bool)
        self._yes = np.ones((self.num_envs, self.num_agents), dtype=bool)
        self.device_observations = False
        """Return observations as JAX arrays on the engine's device (no host copy)."""

    def shaping_coef(self) -> float:
        """Weight of the shaped reward in the next ``step`` call: the task's env steps
        before the current update (blocks of ``num_envs * rollout_steps`` from the task's
        start) over ``shaping_horizon``, from 1 down to 0; 0 with sparse rewards."""
        opts = self.suite.options
        if opts["sparse_rewards"]:
            return 0.0
        update = self.num_envs * self.rollout_steps
        steps = self.cursor.task_step // update * update
        return max(0.0, 1.0 - steps / opts["shaping_horizon"])

    # -- API ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """With ``seed`` (or on first use): restart the sequence from step 0. Without, after
        an episode end in ``autoreset=False`` mode: the next episode, or the next task
        after a switch (``task_switched=True``)."""
        switched = self.cursor.begin_episode(
            seed, draw_seed=lambda: int(np.random.SeedSequence().entropy % 2**31)
        )
        obs = self._begin_episode(new_task=switched)
        info = self.cursor.info(task_switched=switched)
        info.update(self._step_stats(np.zeros(self.num_envs, dtype=np.int64)))
        return obs, info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self.cursor.done:
            raise RuntimeError(
                f"the {self.sequence.name} sequence is done; call reset(seed=...) to start over"
            )
        if self._need_reset:
            raise RuntimeError("the episode is over (truncated); call reset() to go on")
        actions = check_actions(actions, self.num_envs, self.num_agents)
        coef = self.shaping_coef()
        spent = self.cursor.advance(self.num_envs)
        self._state, obs, rewards, soups = self.engine.step(self._state, actions, coef)
        if self.device_observations:  # the observations stay on the engine's device
            rewards, soups = (np.array(x) for x in jax.device_get((rewards, soups)))
        else:
            obs, rewards, soups = (np.array(x) for x in jax.device_get((obs, rewards, soups)))
        self._t += 1
        self._returns += rewards
        self._soups += soups
        ended = spent or self._t >= self.suite.episode_len
        info: dict[str, Any] = {}
        if ended:
            info[TASK_EPISODE_KEY] = {
                "r": self._returns.copy(),
                "l": np.full(self.num_envs, self._t),
                "soups": self._soups.copy(),
                "score": self._soups / self.max_soups[self._episode_task],
                "task_id": self._episode_task,
            }
            info["_" + TASK_EPISODE_KEY] = np.ones(self.num_envs, dtype=bool)
        info.update(self._step_stats(soups))
        if spent:
            self.cursor.switch_pending = True
            self.cursor.next_segment()
        if ended:
            if self.autoreset and not self.cursor.done:
                info["final_obs"] = obs
                obs, _ = self.reset()
            else:
                self._need_reset = True
        info.update(
            self.cursor.info(task_switched=bool(spent and self.autoreset and not self.cursor.done))
        )
        return obs, rewards, self._no, (self._yes if ended else self._no), info

    def close(self) -> None:
        self._state = None

    # -- checkpoints (interface of SequenceVectorEnv.state_dict) --------------------------
    @property
    def exact_resume(self) -> bool:
        """Always True: the whole simulator state (JAX arrays and PRNG keys) is saved."""
        return True

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically: the schedule position, the JAX env
        state (its leaves, as host numpy arrays: plain data for a checkpoint) and PRNG keys
        of every env, the running episodes' returns, soups and step, and whether a reset is
        pending."""
        leaves = None if self._state is None else jax.device_get(jax.tree.leaves(self._state))
        return {
            "cursor": self.cursor.state_dict(),
            "batch_leaves": leaves,
            "keys": None if self._keys is None else np.asarray(self._keys),
            "t": self._t,
            "returns": self._returns.copy(),
            "soups": self._soups.copy(),
            "need_reset": self._need_reset,
            "episode_task": self._episode_task,
        }

    def load_state_dict(self, state: dict[str, Any]) -> np.ndarray | None:
        """Restore ``state_dict()``'s output; returns ``None`` (the restore is exact, the
        caller keeps its last observations)."""
        self.cursor.load_state_dict(state["cursor"])
        self._keys = None if state["keys"] is None else jax.numpy.asarray(state["keys"])
        leaves = state["batch_leaves"]
        self._state = (
            None if leaves is None else self._batch_state(leaves, int(state["episode_task"]))
        )
        self._t = int(state["t"])
        self._returns[:] = state["returns"]
        self._soups[:] = state["soups"]
        self._need_reset = bool(state["need_reset"])
        self._episode_task = int(state["episode_task"])
        return None

    # -- internals ------------------------------------------------------------------------
    def _batch_state(self, leaves: list[np.ndarray], task: int) -> BatchState:
        """The ``BatchState`` with ``leaves``, in the structure of a reset of ``task`` (found
        by ``jax.eval_shape``, which runs nothing); ``ValueError`` if they differ."""
        task_ids = np.full(self.num_envs, task)
        template = jax.eval_shape(lambda k: self.engine.reset(task_ids, k)[0], self._keys)
        shapes = [(tuple(x.shape), np.dtype(x.dtype)) for x in jax.tree.leaves(template)]
        saved = [(tuple(np.shape(x)), np.asarray(x).dtype) for x in leaves]
        if shapes != saved:
            raise ValueError(
                f"the saved MEAL env state ({len(saved)} arrays) does not fit this env "
                f"({len(shapes)} arrays of other shapes)"
            )
        arrays = [jax.numpy.asarray(x) for x in leaves]
        return jax.tree.unflatten(jax.tree.structure(template), arrays)

    def _step_stats(self, soups: np.ndarray) -> dict[str, Any]:
        return {
            "soups": soups,
            "episode_soups": self._soups.copy(),
            "score": self._soups / self.max_soups[self.cursor.segment.task_id],
        }

    def _begin_episode(self, new_task: bool) -> Any:
        segment = self.cursor.segment
        if new_task or self._keys is None:
            seed = self.cursor.env_seed(segment)
            self._keys = self.engine.env_keys(seed, self.num_envs)
        else:
            self._keys = self._state.keys
        task_ids = np.full(self.num_envs, segment.task_id)
        self._state, obs = self.engine.reset(task_ids, self._keys)
        self._episode_task = segment.task_id
        self._t = 0
        self._returns[:] = 0.0
        self._soups[:] = 0
        self._need_reset = False
        return obs if self.device_observations else np.asarray(obs)
