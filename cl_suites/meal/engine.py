"""The jitted MEAL kernel: reset and step ``M`` Overcooked envs in one vmapped call.

meal-bench's ``Overcooked.step_env`` reads the kitchen only from the env *state*, given
the grid size. Every task's kitchen is therefore padded (with walls, centred) to the
largest grid of the sequence, and one step function, compiled once, steps any task, or a
batch mixing tasks (evaluation). Resets read the kitchen from Python constants, so each
task has its own jitted reset (compiled on first use).

meal-bench's ``step`` resets in-step with its own kitchen; here steps go through
``step_env`` (no in-step reset) and episode ends are handled by the caller, so the
wrappers ``StickyActions`` / ``SlipperyTiles`` (its slippery draw over the real kitchen,
``knobs.KitchenSlipperyTiles``) are layered over a no-autoreset view, in MEAL's order.
With ``obs_padding="zeros"`` observations are multiplied by the real-kitchen mask, which
makes them identical to meal-bench's ``PadObsToMax`` (zero padding, centred); partial
observability views are always masked so (MEAL's unpadded views read zeros off the grid).
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from typing import Any, NamedTuple

import numpy as np

from cl_suites.errors import require
from cl_suites.meal.dynamics import overcooked_class
from cl_suites.meal.layouts import REWARD_PER_SOUP, padded
from cl_suites.meal.suite import MealSuite

jax = require("jax", extra="meal")
jnp = jax.numpy


class BatchState(NamedTuple):
    """Device-side state of ``M`` envs: meal-bench states, PRNG keys, kitchen masks."""

    env_state: Any
    keys: Any
    masks: Any


class _NoAutoreset:
    """A meal-bench env whose ``step`` is ``step_env`` (no reset inside the step)."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name == "_env" or name.startswith("__"):  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key, state, actions):
        return self._env.step_env(key, state, actions)

    def reset(self, key):
        return self._env.reset(key)


class MealEngine:
    """Jitted reset/step of a ``MealSuite``'s kitchens for any batch size.

    ``reset(task_ids, keys)`` -> ``(BatchState, obs)``; ``step(state, actions, coef)`` ->
    ``(BatchState, obs, rewards, soups)`` with ``obs (M, n, H, W, C) uint8``,
    ``rewards (M, n) float32`` (the team's delivery reward, or the agent's own with
    ``individual_rewards``, plus ``coef`` x the agent's own shaping), ``soups (M,) int32``
    (soups the team delivered this step). Arrays stay on the device; the caller fetches
    what it needs.

    Pickling stores only the suite: unpickling rebuilds the engine, or reuses a live
    engine of an equal suite in this process (``shared_engine``), so copies of an env
    (SuperSuit's ``concat_vec_envs_v1``) share one compiled kernel.
    """

    def __init__(self, suite: MealSuite):
        from meal.wrappers.sticky_actions import StickyActions

        from cl_suites.meal.knobs import KitchenSlipperyTiles, kitchen_view_mask

        self.suite = suite
        opts = suite.options
        self.agents = suite.agents
        self.num_agents = suite.num_agents
        height, width = suite.grid_shape
        self._padded = [padded(t, height, width) for t in suite.layouts]
        partial = opts["partial_observability"]
        self._use_mask = (not partial) and opts["obs_padding"] == "zeros"
        agents, use_mask = self.agents, self._use_mask

        def chain(task_id: int, base: Any) -> Any:
            env = _NoAutoreset(base)
            if opts["sticky_actions"]:
                env = StickyActions(env, opts["repeat_action_prob"])
            if opts["slippery_tiles"]:
                kitchen = suite.layouts[task_id]
                rows, cols = np.nonzero(self._padded[task_id][1])  # its cells in the grid
                box = (int(rows.min()), int(cols.min()), kitchen.height, kitchen.width)
                env = KitchenSlipperyTiles(env, opts["slipping_prob"], box)
            return env

        def finish(base: Any, env_state: Any, obs: Any, mask: Any) -> Any:
            """The ``(n, H, W, C)`` uint8 observations, masked to the real kitchen."""
            obs = jnp.stack([obs[a] for a in agents]).astype(jnp.uint8)
            if partial:
                return obs * kitchen_view_mask(base, env_state, mask)
            if use_mask:
                return obs * mask[None, :, :, None]
            return obs

        self._chain = chain
        self._finish = finish
        self._task_envs: dict[int, Any] = {}
        self._resets: dict[int, Any] = {}
        self._reset_pure: dict[int, Any] = {}
        template_base = self._base_env(0)
        play = chain(0, template_base).step
        if opts["complementary_restrictions"]:
            play = self._role_step(chain)
        self.obs_shape = suite.obs_shape
        individual = opts["individual_rewards"]

        def step_one(env_state, key, mask, act, coef):
            key, sub = jax.random.split(key)
            actions = {a: act[i] for i, a in enumerate(agents)}
            obs, env_state, rew, _, info = play(sub, env_state, actions)
            obs = finish(template_base, env_state, obs, mask)
            deliver = jnp.stack([rew[a] for a in agents]).astype(jnp.float32)
            shaped = jnp.stack([info["shaped_reward"][a] for a in agents]).astype(jnp.float32)
            team = deliver if individual else jnp.full_like(deliver, deliver.sum())
            rewards = team + coef * shaped  # each agent's own shaping, as MEAL's trainer
            soups = jnp.round(deliver.sum() / REWARD_PER_SOUP).astype(jnp.int32)
            return env_state, key, obs, rewards, soups

        batched = jax.vmap(step_one, in_axes=(0, 0, 0, 0, None))

        def step(state: BatchState, actions, coef):
            env_state, keys, obs, rewards, soups = batched(
                state.env_state, state.keys, state.masks, actions, coef
            )
            return BatchState(env_state, keys, state.masks), obs, rewards, soups

        self.step_batch = step
        self._step = jax.jit(step)
        self._fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(None, 0)))
        self._concat = jax.jit(lambda parts: jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts))
        _ENGINES.setdefault(_suite_key(suite), self)

    def __reduce__(self) -> tuple[Any, tuple[MealSuite]]:
        return shared_engine, (self.suite,)

    # -- public -------------------------------------------------------------------------
    def env_keys(self, seed: int, num_envs: int):
        """``(num_envs, 2)`` PRNG keys: env ``j`` gets ``fold_in(PRNGKey(seed), j)``, so env
        ``j``'s randomness does not depend on the batch size."""
        return self._fold(jax.random.PRNGKey(int(seed)), jnp.arange(num_envs, dtype=jnp.uint32))

    def reset(self, task_ids: np.ndarray, keys) -> tuple[BatchState, Any]:
        """Start an episode in every env: env ``j`` plays task ``task_ids[j]`` (the envs of
        a task must form one contiguous block, as in evaluation batches).

        ``keys`` are the envs' PRNG keys (carried on in the returned state).
        """
        task_ids = np.asarray(task_ids)
        starts = np.flatnonzero(np.r_[True, task_ids[1:] != task_ids[:-1]])
        if len(np.unique(task_ids)) != len(starts):
            raise ValueError("reset needs the envs of each task in one contiguous block")
        bounds = [*starts.tolist(), len(task_ids)]
        parts = [
            self._reset_fn(int(task_ids[a]))(keys if len(bounds) == 2 else keys[a:b])
            for a, b in itertools.pairwise(bounds)
        ]
        env_state, new_keys, obs = parts[0] if len(parts) == 1 else self._concat(parts)
        masks = jnp.asarray(np.stack([self._padded[int(t)][1] for t in task_ids]))
        return BatchState(env_state, new_keys, masks), obs

    def step(self, state: BatchState, actions: np.ndarray, coef: float):
        """One step of every env; ``actions (M, n)`` ints in ``0..5``."""
        return self._step(state, jnp.asarray(actions, dtype=jnp.int32), jnp.float32(coef))

    def reset_batch(self, task_id: Any, keys) -> tuple[BatchState, Any]:
        """Pure, jittable form of ``reset`` for envs that all play task ``task_id``: a
        Python int (that task's reset alone is traced), or an int32 scalar array, so one
        compiled program serves every task (``lax.switch`` over the tasks' resets; MEAL pads
        every kitchen to one grid, so their states share one shape). Build the tasks'
        ``pure_reset`` first, outside the trace. ``step_batch`` is the pure form of
        ``step``. For learners that compile the rollout (``baselines_jax``)."""
        if isinstance(task_id, (int, np.integer)):
            env_state, new_keys, obs = self.pure_reset(int(task_id))(keys)
            mask = jnp.asarray(np.asarray(self._padded[int(task_id)][1]))
        else:
            branches = [self.pure_reset(t) for t in range(len(self._padded))]
            env_state, new_keys, obs = jax.lax.switch(task_id, branches, keys)
            masks = np.stack([np.asarray(m) for _, m in self._padded])
            mask = jnp.asarray(masks)[task_id]
        masks = jnp.broadcast_to(mask, (keys.shape[0], *mask.shape))
        return BatchState(env_state, new_keys, masks), obs

    # -- internals ----------------------------------------------------------------------
    def _base_env(self, task_id: int, waiter_id: int | None = None) -> Any:
        """Task ``task_id``'s meal-bench env on its padded kitchen; with complementary
        restrictions, agent ``waiter_id`` is the waiter (default: the task's draw)."""
        opts = self.suite.options
        env_class = overcooked_class(opts["dynamics"], opts["partial_observability"])
        kwargs: dict[str, Any] = {
            "layout": self._padded[task_id][0],
            "layout_name": self.suite.layouts[task_id].name,
            "num_agents": self.num_agents,
            "max_steps": self.suite.episode_len,
            "task_id": task_id,
            "random_pot_size": opts["random_pot_size"],
            "random_cook_time": opts["random_cook_time"],
            "random_reset": opts.get("random_reset", False),
        }
        if opts.get("complementary_restrictions", False):
            from cl_suites.meal.knobs import agent_restrictions, waiter

            chosen = waiter(opts["layout_seed"] + task_id) if waiter_id is None else waiter_id
            kwargs["agent_restrictions"] = agent_restrictions(chosen)
        if opts["partial_observability"]:
            kwargs["difficulty"] = opts["stochasticity_level"]
        return env_class(**kwargs)

    def _role_step(self, chain: Any) -> Any:
        """A step ``(key, state, actions)`` that plays each env's task roles: one env per
        waiter (agent 0 or 1), chosen by the task id in the env's state."""
        from cl_suites.meal.knobs import base_state, waiter

        seed = self.suite.options["layout_seed"]
        waiters = jnp.asarray([waiter(seed + t) for t in range(len(self.suite.layouts))])
        steps = [chain(0, self._base_env(0, waiter_id=w)).step for w in (0, 1)]

        def play(key, env_state, actions):
            task_id = base_state(env_state).task_id
            return jax.lax.switch(waiters[task_id], steps, key, env_state, actions)

        return play

    def _reset_fn(self, task_id: int):
        if task_id not in self._resets:
            self._resets[task_id] = jax.jit(self.pure_reset(task_id))
        return self._resets[task_id]

    def pure_reset(self, task_id: int):
        """The vmapped (not jitted) reset ``keys -> (env_state, keys, obs)`` of task
        ``task_id``'s envs; build it outside any JAX trace (it creates the task's env)."""
        if task_id not in self._reset_pure:
            base = self._base_env(task_id)
            env = self._chain(task_id, base)
            mask = jnp.asarray(self._padded[task_id][1])
            finish = self._finish

            def reset_one(key):
                key, sub = jax.random.split(key)
                obs, env_state = env.reset(sub)
                return env_state, key, finish(base, env_state, obs, mask)

            self._reset_pure[task_id] = jax.vmap(reset_one)
        return self._reset_pure[task_id]


_ENGINES: weakref.WeakValueDictionary[bytes, MealEngine] = weakref.WeakValueDictionary()


def _suite_key(suite: MealSuite) -> bytes:
    """A digest of everything the engine compiles from: kitchens, agents, episode length,
    observation shape and options (pickle bytes are not canonical, so not those)."""
    digest = hashlib.sha256(
        repr(
            (suite.num_agents, suite.episode_len, suite.obs_shape, sorted(suite.options.items()))
        ).encode()
    )
    for layout in suite.layouts:
        digest.update(layout.name.encode())
        for key in sorted(layout.layout):
            value = np.asarray(layout.layout[key])
            digest.update(f"{key}:{value.dtype}:{value.shape}".encode() + value.tobytes())
    return digest.digest()


def shared_engine(suite: MealSuite) -> MealEngine:
    """A ``MealEngine`` for ``suite``: a live one of an equal suite (same kitchens and
    options) when this process has one, else a new one."""
    return _ENGINES.get(_suite_key(suite)) or MealEngine(suite)
