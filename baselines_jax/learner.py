"""``JaxIPPO``: MEAL's IPPO trainer as one compiled program per ``train`` call, for ``K``
seeds at once (every array of ``TrainState`` has a leading seed axis ``K``).

``train(state, task_id, num_updates)`` runs ``num_updates`` x (rollout of ``num_steps``
env steps on ``num_envs`` envs per seed, GAE, ``update_epochs`` x ``num_minibatches``
Adam steps) in one ``lax.scan``; nothing returns to the host between env steps. The envs
are the suite's (``cl_suites.meal.engine.MealEngine``'s pure ``reset_batch`` /
``step_batch``); all envs of all seeds start and end their episodes together (fixed
episode length), so episode resets are one ``lax.cond`` per step. The task id is data
(an int32 argument, not a constant of the program): one compilation of ``train`` per chunk
length and one of ``end_task`` serve every task of the sequence.

``end_task`` does what MEAL does after a task's last update: the CL method's importance
from fresh episodes and its anchor, then a new optimizer state (Adam moments and the
learning-rate schedule restart with the next task).

A plasticity remedy (``IPPOConfig.remedy``, ``cl_suites.remedies.RemedyConfig``; the
functions are ``baselines_jax.remedies``') runs inside the same programs:

* ReDo: after every ``redo_period(updates_per_task)``-th update of a task, on that update's
  rollout observations (Plasticine recycles after the update, on ``b_obs``);
* shrink-and-perturb: after every optimizer step (``snp_every="minibatch"``, inside the
  minibatch scan), or in ``end_task`` when a task follows (``"task"``);
* continual backprop: after every optimizer step, on that minibatch's activations (the
  loss's forward pass returns them);
* plasticity injection: after the update whose 1-based count within the task is in
  ``injection_updates(updates_per_task)``, and in ``end_task`` (``injects_at_end``);
* reset: in ``end_task`` when a task follows (``next_task``): the heads (a multi-head
  network: the next task's slice only) or every layer.

``end_task`` applies them after the new optimizer state: the moments a reset or an
injection at a task's end would zero are zero already (MEAL restarts Adam per task). Their
random keys are split from the state's ``rng`` only when a remedy is set (once per update
and once per ``end_task``), so a run without one draws what it always drew.

Units: ``num_updates`` updates; an update is ``num_envs * num_steps`` env steps per seed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from baselines_jax import cl as cl_lib
from baselines_jax import remedies as rem
from baselines_jax.cl import memory as cl_memory
from baselines_jax.config import NETWORKS, IPPOConfig
from baselines_jax.network import ActorCritic, central_row_dim, central_rows
from baselines_jax.ppo import Transition, gae, lr_schedule, make_optimizer, ppo_loss
from cl_suites.core.task import task_seed
from cl_suites.meal.batched import shared_engine
from cl_suites.meal.engine import BatchState
from cl_suites.meal.suite import NUM_ACTIONS, MealSuite


class TrainState(NamedTuple):
    """Everything a run needs to continue exactly, each leaf with a leading seed axis
    ``K``: network ``params``, ``opt_state``, ``cl`` (anchor and importance), the envs'
    ``env`` state and last ``obs (K, M, n, H, W, C) uint8``, ``t`` (step in the running
    episode), ``rng``, ``task`` (task being trained, -1 before the first), ``update``
    (updates done in this task), ``seed``, and the running episodes' ``ep_return (K, M)``
    (agent 0's return: the team's with shared rewards), ``ep_soups (K, M)`` and the
    plasticity remedy's ``remedy`` (``baselines_jax.remedies.RemedyState``: leafless
    without shrink-and-perturb's initial parameters or continual backprop's statistics).
    ``cl`` is the CL method's state (``baselines_jax.cl``: the regularisers'
    ``CLState(anchor, importance)``, AGEM's memory, PackNet's masks)."""

    params: Any
    opt_state: Any
    cl: Any
    env: BatchState
    obs: jax.Array
    t: jax.Array
    rng: jax.Array
    task: jax.Array
    update: jax.Array
    seed: jax.Array
    ep_return: jax.Array
    ep_soups: jax.Array
    remedy: rem.RemedyState = rem.RemedyState()


Metrics = dict[str, jax.Array]
"""Per update and seed, shape ``(num_updates, K)``: ``total_loss``, ``value_loss``,
``actor_loss``, ``entropy``, ``reg_loss`` (means over the update's minibatches),
``reward`` (mean reward per agent step), ``soups`` (soups delivered in the rollout, all
envs), ``shaping_coef``, ``learning_rate`` (of the update's first minibatch).
Per env step, shape ``(num_updates, K, num_steps, num_envs)``: ``episode_done`` (an
episode ended at this step), ``episode_return`` (its return, agent 0's), ``episode_soups``
(its soups); zeros where no episode ended. Episodes all last ``episode_len`` steps.
With a remedy (``JaxIPPO.remedy_metrics`` names them), shape ``(num_updates, K)``:
``remedy/update`` (the update's 1-based count within its task), ``remedy/recycled`` (1
where ReDo ran after the update) and ``remedy/recycled/<layer>`` (units it recycled),
``remedy/injected`` (1 after an update that injected plasticity); shape ``(num_updates,
K, update_epochs * num_minibatches)``: ``remedy/replaced/<layer>`` (continual backprop:
units replaced after each optimizer step). With a CL method that reports
(``JaxIPPO.cl_metrics`` names them), shape ``(num_updates, K)``: ``cl/<name>``, the mean
over the update's minibatches (``baselines_jax.cl``)."""


_COMPILE_SECONDS = [0.0]
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _on_duration(event: str, seconds: float, **_: Any) -> None:
    if event in _COMPILE_EVENTS:
        _COMPILE_SECONDS[0] += seconds


jax.monitoring.register_event_duration_secs_listener(_on_duration)


@functools.cache
def _keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory (``mallopt``: trim threshold 1 GiB, mmap
    threshold 32 MiB, its maximum) instead of handing it back to the OS after every
    compiled call. XLA's CPU runtime allocates the program's buffers per call; with the
    default thresholds the K-seed program's large buffers are mapped and unmapped every
    call and page-faulted in anew (measured: 4.5 s of 13 s system time per 4-update call
    of 5 seeds at 16 envs). Same as ``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...``.
    Process-wide, so it runs once, when the first ``JaxIPPO`` is built (not on import).
    A no-op (``False``) where libc has no ``mallopt``."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    trim = libc.mallopt(m_trim_threshold, 1 << 30)
    mmap = libc.mallopt(m_mmap_threshold, 32 << 20)
    return bool(trim and mmap)


def _grad_norm(grads: Any, prefixes: tuple[str, ...]) -> jax.Array:
    """Euclidean norm of the gradient of the modules whose names start with ``prefixes``
    (before any clipping: the plasticity diagnostics' ``grad_norm``)."""
    parts = [
        jnp.sum(jnp.square(leaf))
        for name, sub in grads["params"].items()
        if name.startswith(prefixes)
        for leaf in jax.tree.leaves(sub)
    ]
    return jnp.sqrt(sum(parts)) if parts else jnp.float32(jnp.nan)


def _schedule_count(opt_state: Any) -> jax.Array:
    """The learning-rate schedule's step count in an optax state (``(K,)``)."""
    is_sched = lambda x: isinstance(x, optax.ScaleByScheduleState)  # noqa: E731
    (found,) = [x for x in jax.tree.leaves(opt_state, is_leaf=is_sched) if is_sched(x)]
    return found.count


def _split(keys: jax.Array, n: int = 2) -> tuple[jax.Array, ...]:
    out = jax.vmap(lambda k: jax.random.split(k, n))(keys)
    return tuple(out[:, i] for i in range(n))


def actor_critic(config: IPPOConfig, num_tasks: int, num_agents: int = 0) -> ActorCritic:
    """The network of a run of ``config`` over ``num_tasks`` tasks (MEAL's MLP
    actor-critic, ``config.architecture``'s norms; ``JaxIPPO.network``); with
    ``config.central_critic`` (MAPPO) the critic reads the env's ``num_agents``
    observations."""
    norm_layers, norm_eps = NETWORKS[config.architecture]
    return ActorCritic(
        action_dim=NUM_ACTIONS,
        num_tasks=int(num_tasks),
        hidden_sizes=tuple(config.hidden_sizes),
        activation=config.activation,
        layer_norm=config.layer_norm,
        norm_layers=norm_layers,
        norm_eps=norm_eps,
        shared_backbone=config.shared_backbone,
        multi_head=config.multi_head,
        task_id_input=config.task_id_input,
        central_critic=config.central_critic,
        num_agents=int(num_agents) if config.central_critic else 0,
        agent_id_input=bool(getattr(config, "agent_id_input", False)),
    )


def input_dim(config: IPPOConfig, obs_dim: int, num_agents: int) -> int:
    """The width of the network's input rows: ``obs_dim``, or ``central_rows``' width with
    ``config.central_critic``."""
    return central_row_dim(obs_dim, num_agents) if config.central_critic else int(obs_dim)


def check_method(
    config: IPPOConfig, num_tasks: int, obs_dim: int, cycles: int = 1, num_agents: int = 0
) -> None:
    """``ValueError`` (one line) when ``config``'s CL method cannot train a sequence of
    ``num_tasks`` tasks played ``cycles`` times on observations of ``obs_dim`` values
    (PackNet's limits); builds the method on the network's shapes, compiles nothing."""
    if config.cl_method not in cl_lib.METHODS:
        return  # not built here (JaxIPPO names it)
    if cl_lib.method_class(config).check_sequence is cl_lib.JaxCLMethod.check_sequence:
        return  # the method has no limits to check
    network = actor_critic(config, num_tasks, num_agents)
    width = input_dim(config, obs_dim, num_agents)
    template = jax.eval_shape(lambda: network.init(jax.random.PRNGKey(0), jnp.zeros((1, width))))
    cl_lib.make(config, network, template, int(num_tasks)).check_sequence(int(cycles))


def act_with(
    network: ActorCritic,
    obs_dim: int,
    params: Any,
    obs: Any,
    task_id: int,
    greedy: bool,
    key: jax.Array | None = None,
) -> jax.Array:
    """Actions of ``network`` with ``params`` for observations ``obs (..., H, W, C)`` (or
    flat ``(..., D)``, ``D = obs_dim``) of task ``task_id``: argmax with ``greedy``, else
    sampled with ``key`` (:meth:`JaxIPPO.act`, and a saved task policy's actions). A
    central-critic network (MAPPO) reads the rows env-major, every agent of each env in
    turn (row ``m n + i``: agent ``i`` of env ``m``; ``(M * n, ...)`` as the evaluator
    gives them, or ``(M, n, ...)``), as ``central_rows``; actions in ``obs``'s order."""
    if not greedy and key is None:
        raise ValueError("act(greedy=False) needs a PRNG key")
    key = key if key is not None else jax.random.PRNGKey(0)
    obs = jnp.asarray(obs)
    if not network.central_critic:
        return _act(network, params, obs, jnp.int32(task_id), greedy, key, int(obs_dim))
    n = network.num_agents
    leading = obs.shape[: obs.ndim - (1 if obs.shape[-1] == obs_dim else 3)]
    count = int(np.prod(leading))
    if count % n:
        raise ValueError(
            f"a central-critic network acts on every agent of each env: {count} rows are "
            f"not a multiple of {n} agents"
        )
    rows = central_rows(obs.reshape(-1, n, int(obs_dim)))  # (n M, D + n + n D), agent-major
    actions = _act(network, params, rows, jnp.int32(task_id), greedy, key, rows.shape[-1])
    return jnp.swapaxes(actions.reshape(n, -1), 0, 1).reshape(leading)


class JaxIPPO:
    """MEAL's IPPO (``IPPOConfig``) on ``suite`` for ``seeds`` (one program, vmapped).

    ``compile_seconds``: total time spent compiling (kept out of training time);
    ``compile_log``: ``(what, seconds)`` per compiled program; ``remedy_metrics``: the
    names of the remedy's per-update metrics (see :data:`Metrics`); ``switch_event``: what
    the remedy does in ``end_task`` when a task follows (``remedy.csv``'s ``reset``,
    ``injected``, ``shrunk``; ``None``: nothing).
    """

    minibatch_splits_key = False
    """Each minibatch splits the update's key once (MEAL 057f862's on-policy learners; the
    paper-time IPPO does not): the next epoch's shuffle reads the key after those splits."""

    def __init__(self, suite: MealSuite, config: IPPOConfig, seeds: Sequence[int]):
        seeds = [int(s) for s in seeds]
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"seeds must be distinct non-negative ints, got {seeds}")
        self.suite, self.cfg, self.seeds = suite, config, seeds
        _keep_freed_memory()
        self.engine = shared_engine(suite)
        for task_id in range(len(suite.layouts)):  # build the envs outside any trace
            self.engine.pure_reset(task_id)
        self.num_tasks = len(suite.layouts)
        self.num_agents = suite.num_agents
        self.obs_dim = int(np.prod(suite.obs_shape))
        self.input_dim = input_dim(config, self.obs_dim, self.num_agents)
        cl_memory.check_memory(config, self.num_tasks, self.obs_dim, len(seeds))  # AGEM, ER-ACE
        self.episode_len = int(suite.episode_len)
        budgets = {int(t.budget) for t in suite.sequence.tasks}
        self.steps_per_task = max(budgets)
        self.updates_per_task = max(self.steps_per_task // config.env_steps_per_update, 1)
        opts = suite.options
        self.sparse_rewards = bool(opts.get("sparse_rewards", False))
        self.shaping_horizon = float(opts.get("shaping_horizon", self.steps_per_task))
        self.network = actor_critic(config, self.num_tasks, self.num_agents)
        self.compile_seconds = 0.0
        self.compile_log: list[tuple[str, float]] = []
        self._compiled: dict[tuple, Any] = {}
        template = self.network.init(jax.random.PRNGKey(0), jnp.zeros((1, self.input_dim)))
        self.mask = cl_lib.reg_mask(template, config.regularize_critic, config.regularize_heads)
        self.method = cl_lib.make(config, self.network, template, self.num_tasks)
        self.method.check_sequence(int(suite.sequence.cycles))
        self.cl_metrics = tuple(f"cl/{name}" for name in self.method.metric_names)
        self.finetunes = bool(self.method.finetunes)
        self.finetune_updates = (
            int(self.method.finetune_steps) // config.env_steps_per_update if self.finetunes else 0
        )
        self.tx = make_optimizer(config, self.updates_per_task, floor=self.finetunes)
        self.tx_schedule = lr_schedule(config, self.updates_per_task, floor=self.finetunes)
        self.remedy = config.remedy
        self.layers = rem.layers_of(self.network)
        self.per_unit = rem.outputs_per_unit(config.activation)
        rc = self.remedy
        what = {"redo": "recycled", "cbp": "replaced"}.get(str(rc.remedy))
        names = tuple(f"remedy/{what}/{layer.name}" for layer in self.layers) if what else ()
        if rc.remedy in ("redo", "plasticity-injection"):
            names += ("remedy/recycled" if rc.remedy == "redo" else "remedy/injected",)
        self.remedy_metrics: tuple[str, ...] = (*names, "remedy/update") if rc.enabled else ()
        self.switch_event: str | None = None
        if rc.remedy == "reset":
            self.switch_event = "reset"
        elif rc.remedy == "plasticity-injection" and rc.injects_at_end:
            self.switch_event = "injected"
        elif rc.remedy == "shrink-perturb" and rc.snp_every == "task":
            self.switch_event = "shrunk"

    # -- building blocks -----------------------------------------------------------------
    def apply(
        self, params: Any, x: jax.Array, task: jax.Array | int
    ) -> tuple[jax.Array, jax.Array]:
        """``(logits (B, 6), values (B,))`` for flat observations ``x (B, D)``."""
        return self.network.apply(params, x, task)

    def init_params(self, seed: int) -> Any:
        """MEAL's initialisation: ``PRNGKey(seed)`` split once, the second key inits."""
        _, key = jax.random.split(jax.random.PRNGKey(seed))
        return self.network.init(key, jnp.zeros((1, self.input_dim)))

    def fresh_params(self, key: jax.Array) -> Any:
        """A new initialisation of the network from ``key`` (its own initialisers: the
        remedies' fresh draws)."""
        return self.network.init(key, jnp.zeros((1, self.input_dim)))

    def _init_remedy(self, params: Any) -> rem.RemedyState:
        """One seed's remedy state: shrink-and-perturb's initial parameters, continual
        backprop's zero statistics; leafless otherwise."""
        rc = self.remedy
        initial = cbp = None
        if rc.remedy == "shrink-perturb" and rc.snp_noise == "initial":
            initial = jax.tree.map(jnp.array, params)
        if rc.remedy == "cbp":
            cbp = rem.init_cbp(self.layers, self.per_unit)
        return rem.RemedyState(initial, cbp)

    def _compile(self, name: tuple, fn: Any) -> Any:
        """``jax.jit(fn)`` cached under ``name``; calling it adds the time JAX spends
        tracing, lowering and compiling to ``compile_seconds``."""
        if name not in self._compiled:
            self._compiled[name] = jax.jit(fn)
        jitted = self._compiled[name]

        def call(*call_args: Any) -> Any:
            before = _COMPILE_SECONDS[0]
            out = jitted(*call_args)
            spent = _COMPILE_SECONDS[0] - before
            if spent > 0:
                self.compile_seconds += spent
                self.compile_log.append((repr(name), spent))
            return out

        return call

    def _flat(self, obs: jax.Array) -> jax.Array:
        """``(M, n, H, W, C)`` -> ``(n * M, D)``, agent-major (MEAL's ``batchify``)."""
        return jnp.swapaxes(obs, 0, 1).reshape(-1, self.obs_dim)

    # -- API ----------------------------------------------------------------------------
    def init_state(self) -> TrainState:
        """Fresh parameters, optimizer and CL state per seed; envs not started (the first
        ``train`` call of a task starts them)."""
        params = jax.tree.map(lambda *x: jnp.stack(x), *[self.init_params(s) for s in self.seeds])
        k = len(self.seeds)
        opt_state = jax.vmap(self.tx.init)(params)
        cl_state = jax.vmap(self.method.init_state)(params)
        keys = jnp.stack([jax.random.split(jax.random.PRNGKey(s))[0] for s in self.seeds])
        env, obs = self._reset_envs(0, keys, 0)
        return TrainState(
            params=params,
            opt_state=opt_state,
            cl=cl_state,
            env=env,
            obs=obs,
            t=jnp.zeros(k, jnp.int32),
            rng=keys,
            task=jnp.full(k, -1, jnp.int32),
            update=jnp.zeros(k, jnp.int32),
            seed=jnp.asarray(self.seeds, jnp.int32),
            ep_return=jnp.zeros((k, self.cfg.num_envs), jnp.float32),
            ep_soups=jnp.zeros((k, self.cfg.num_envs), jnp.int32),
            remedy=jax.vmap(self._init_remedy)(params),
        )

    def _reset_envs(self, task_id: int, rng: jax.Array, cycle: int) -> tuple[BatchState, jax.Array]:
        """Start task ``task_id``'s envs: env ``j`` of seed ``s`` gets the key
        ``fold_in(PRNGKey(task_seed(s, cycle, task_id)), j)`` as ``MealBatchedEnv``."""
        del rng
        keys = jnp.stack(
            [
                self.engine.env_keys(task_seed(s, cycle, task_id), self.cfg.num_envs)
                for s in self.seeds
            ]
        )
        reset = self._compile(
            ("reset",), lambda ks, tid: jax.vmap(lambda k: self.engine.reset_batch(tid, k))(ks)
        )
        return reset(keys, jnp.int32(task_id))

    def train(
        self, state: TrainState, task_id: int, num_updates: int, *, cycle: int = 0
    ) -> tuple[TrainState, Metrics]:
        """``num_updates`` updates on task ``task_id`` (one compiled program). A task
        different from ``state.task`` starts its envs first (seeded as
        ``MealBatchedEnv``'s, ``cycle`` as in ``task_seed``)."""
        self._check_task(task_id)
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")
        if int(np.asarray(state.task)[0]) != task_id:
            env, obs = self._reset_envs(task_id, state.rng, cycle)
            k = len(self.seeds)
            state = state._replace(
                env=env,
                obs=obs,
                t=jnp.zeros(k, jnp.int32),
                task=jnp.full(k, task_id, jnp.int32),
                update=jnp.zeros(k, jnp.int32),
                ep_return=jnp.zeros_like(state.ep_return),
                ep_soups=jnp.zeros_like(state.ep_soups),
            )
        fn = self._compile(
            ("train", int(num_updates)),
            lambda s, tid: jax.lax.scan(lambda c, _: self._update(c, tid), s, None, num_updates),
        )
        return fn(state, jnp.int32(task_id))

    def end_task(self, state: TrainState, task_id: int, next_task: int | None = None) -> TrainState:
        """After task ``task_id``'s last update (MEAL's order): its importance from fresh
        episodes (EWC / online EWC: Fisher; MAS), the anchor, then a new optimizer state;
        then the remedy's task-end step (module docstring): a reset and shrink-and-perturb
        at the switch need the task that follows (``next_task``; ``None``: none follows,
        they are skipped). The job calls it after the task's end was evaluated."""
        self._check_task(task_id)
        if next_task is not None:
            self._check_task(next_task)
        if self.finetunes and bool(np.asarray(state.cl.train_mode).any()):
            raise RuntimeError(
                f"{self.cfg.cl_method}: end_train (the pruning) must come before end_task"
            )
        fn = self._compile(("end_task",), lambda s, tid, nxt: self._end_task(s, tid, nxt))
        return fn(state, jnp.int32(task_id), jnp.int32(-1 if next_task is None else next_task))

    def end_train(self, state: TrainState) -> TrainState:
        """The end of a task's training updates, for a method with a fine-tune phase
        (``finetunes``; MEAL's PackNet ``on_train_end``): the method's ``end_train``
        (PackNet: pruning), a new optimizer state, and the fine-tune updates' key split
        off the state's ``rng`` (MEAL's ``finetune_rng``). The job then trains
        ``finetune_updates`` more updates of the task (``train``) and ends it
        (``end_task``: PackNet's fine-tune end)."""
        if not self.finetunes:
            raise ValueError(f"cl_method {self.cfg.cl_method!r} has no fine-tune phase")
        fn = self._compile(("end_train",), self._end_train)
        return fn(state)

    def _end_train(self, state: TrainState) -> TrainState:
        params, cl_state = jax.vmap(self.method.end_train)(state.params, state.cl)
        _, finetune_rng = _split(state.rng)
        return state._replace(
            params=params,
            cl=cl_state,
            opt_state=jax.vmap(self.tx.init)(params),
            rng=finetune_rng,
        )

    def eval_params(self, params: Any, cl: Any, task_id: int) -> Any:
        """The parameters of one seed (``params``, its CL state ``cl``) that task
        ``task_id`` is evaluated with: the method's ``eval_params`` (PackNet: the masks
        of the tasks up to ``task_id``), ``params`` itself for the other methods."""
        if not self.method.masks_eval or cl is None:
            return params
        self._check_task(task_id)
        fn = self._compile(("eval_params",), self.method.eval_params)
        return fn(params, cl, jnp.int32(task_id))

    def act(
        self,
        params: Any,
        obs: Any,
        task_id: int,
        greedy: bool,
        key: jax.Array | None = None,
        cl: Any = None,
    ) -> jax.Array:
        """Actions for observations ``obs (..., H, W, C)`` (or flat ``(..., D)``) of one
        seed's ``params``: argmax with ``greedy``, else sampled with ``key``; with that
        seed's CL state ``cl``, through :meth:`eval_params` (PackNet's eval masks)."""
        params = self.eval_params(params, cl, task_id)
        return act_with(self.network, self.obs_dim, params, obs, task_id, greedy, key)

    def state_dict(self, state: TrainState) -> dict[str, np.ndarray]:
        """Flat ``name -> numpy array`` (leading seed axis kept)."""
        leaves = jax.tree_util.tree_flatten_with_path(state)[0]
        return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}

    def load_state_dict(self, d: dict[str, np.ndarray]) -> TrainState:
        """The ``TrainState`` that ``state_dict`` wrote (names and shapes must match)."""
        template = self.init_state()
        leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
        names = [jax.tree_util.keystr(p) for p, _ in leaves]
        missing = sorted(set(names) - set(d))
        extra = sorted(set(d) - set(names))
        if missing or extra:
            raise ValueError(f"state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]}")
        out = []
        for (_, ref), name in zip(leaves, names, strict=True):
            value = np.asarray(d[name])
            if value.shape != ref.shape:
                raise ValueError(f"{name}: shape {value.shape}, expected {ref.shape}")
            leaf = jnp.asarray(value, dtype=ref.dtype)
            if getattr(ref, "weak_type", False):
                # MEAL's env state holds ints made from Python ints (weakly typed); as
                # strong int32 they would promote the env's uint8 maze updates (a JAX
                # FutureWarning) and compile other programs than the uninterrupted run's
                leaf = ref.at[...].set(leaf)  # ``ref``'s dtype and weak type, these values
            out.append(leaf)
        return jax.tree_util.tree_unflatten(treedef, out)

    # -- internals -----------------------------------------------------------------------
    def _check_task(self, task_id: int) -> None:
        if not 0 <= int(task_id) < self.num_tasks:
            raise ValueError(f"task_id must be in 0..{self.num_tasks - 1}, got {task_id}")

    def shaping_coef(self, update: jax.Array) -> jax.Array:
        """Weight of the shaped reward in an update: MEAL's ``rew_shaping_anneal`` of the
        task's env steps before the update (``update * num_envs * num_steps``), linear
        from 1 to 0 over the suite's ``shaping_horizon``; 0 with sparse rewards."""
        if self.sparse_rewards:
            return jnp.zeros_like(update, dtype=jnp.float32)
        steps = update.astype(jnp.float32) * self.cfg.env_steps_per_update
        return jnp.clip(1.0 - steps / self.shaping_horizon, 0.0, 1.0)

    def _maybe_reset(self, task_id: int, env: BatchState, obs: jax.Array, t: jax.Array):
        """Start new episodes where the (shared) episode step reached the episode length."""
        done = t[0] >= self.episode_len
        reset = jax.vmap(lambda k: self.engine.reset_batch(task_id, k))
        env, obs = jax.lax.cond(done, lambda: reset(env.keys), lambda: (env, obs))
        return env, obs, jnp.where(done, 0, t), done

    def _rollout(self, state: TrainState, task_id: int, coef: jax.Array):
        num_steps = self.cfg.num_steps

        def policy(params, obs, key):
            x = self._flat(obs)
            logits, value = self.apply(params, x, task_id)
            action = jax.random.categorical(key, logits)
            log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]
            return x, action, value, log_prob

        def env_step(carry, _):
            env, obs, t, rng, ep_return, ep_soups = carry
            rng, key = _split(rng)
            x, action, value, log_prob = jax.vmap(policy)(state.params, obs, key)
            m = self.cfg.num_envs
            env_act = jnp.swapaxes(action.reshape(-1, self.num_agents, m), 1, 2)
            env, obs, rewards, soups = jax.vmap(self.engine.step_batch)(env, env_act, coef)
            env, obs, t, done = self._maybe_reset(task_id, env, obs, t + 1)
            ep_return = ep_return + rewards[:, :, 0]
            ep_soups = ep_soups + soups
            episode = {
                "episode_done": jnp.broadcast_to(done, ep_return.shape),
                "episode_return": jnp.where(done, ep_return, 0.0),
                "episode_soups": jnp.where(done, ep_soups, 0),
            }
            ep_return = jnp.where(done, 0.0, ep_return)
            ep_soups = jnp.where(done, 0, ep_soups)
            reward = jnp.swapaxes(rewards, 1, 2).reshape(rewards.shape[0], -1)
            tr = Transition(
                done=jnp.broadcast_to(done, action.shape).astype(jnp.float32),
                action=action,
                value=value,
                reward=reward,
                log_prob=log_prob,
                obs=x,
            )
            return (env, obs, t, rng, ep_return, ep_soups), (tr, soups.sum(-1), episode)

        carry = (state.env, state.obs, state.t, state.rng, state.ep_return, state.ep_soups)
        carry, (traj, soups, episodes) = jax.lax.scan(env_step, carry, None, num_steps)
        env, obs, t, rng, ep_return, ep_soups = carry
        traj = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), traj)  # (K, T, ...)
        episodes = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), episodes)  # (K, T, M)
        state = state._replace(
            env=env, obs=obs, t=t, rng=rng, ep_return=ep_return, ep_soups=ep_soups
        )
        return state, traj, soups.sum(0), episodes

    def _ppo(self, params, opt_state, cl_state, traj: Transition, last_obs, rng, task_id: int):
        """One seed's PPO epochs on its rollout ``traj`` ``(T, N, ...)`` (no remedy, no CL
        keys; the CL state is not advanced)."""
        params, opt_state, rng, losses, _, _, _, _ = self._epochs(
            params, opt_state, cl_state, traj, last_obs, rng, task_id, None, None, None
        )
        return params, opt_state, rng, losses

    def _epochs(
        self, params, opt_state, cl_state, traj, last_obs, rng, task_id, remedy, key, cl_key
    ):
        """One seed's PPO epochs; with ``remedy`` (its ``RemedyState``) and ``key``, the
        remedies of every optimizer step (shrink-and-perturb, continual backprop) after
        each step, minibatch ``j`` of epoch ``e`` drawing from ``split(fold_in(key, e),
        num_minibatches)[j]`` (continual backprop: ``split`` of it into the count draws'
        key and the weights' key). The CL method (``self.method``) adds its penalty to each
        minibatch loss and transforms each minibatch gradient; a method that draws
        (``needs_key``) gets ``split(fold_in(steps_key, e), num_minibatches)[j]`` there
        and ``after_key`` after the epochs, where ``steps_key, after_key = split(cl_key)``.
        Returns ``(params, opt_state, rng, mean losses, remedy, {layer: units replaced at
        each optimizer step (epochs * minibatches,)}, cl_state after the update, {CL
        metric: mean over the minibatches})``."""
        cfg, rc, method = self.cfg, self.remedy, self.method
        cbp = rc.remedy == "cbp"
        snp = rc.remedy == "shrink-perturb" and rc.snp_every == "minibatch"
        per_step = remedy is not None and (cbp or snp)
        features = per_step and cbp
        drawing = cl_key is not None
        steps_key, after_key = jax.random.split(cl_key) if drawing else (None, None)
        _, last_value = self.apply(params, self._flat(last_obs), task_id)
        advantages, targets = gae(
            traj.done, traj.value, traj.reward, last_value, cfg.gamma, cfg.gae_lambda
        )

        def loss_fn(p, batch, adv, tgt):
            acts = None
            if features:  # the activations of this forward pass, for continual backprop
                logits, values, acts = rem.trunk_activations(self.network, p, batch.obs, task_id)
            else:
                logits, values = self.apply(p, batch.obs, task_id)
            loss, (value_loss, actor_loss, entropy) = ppo_loss(logits, values, batch, adv, tgt, cfg)
            reg = method.penalty(p, cl_state)
            return loss + reg, ((value_loss, actor_loss, entropy, reg), acts)

        def remedy_step(p, o, r, acts, k):
            """The per-step remedy after the optimizer step."""
            counts = {}
            if snp:
                noise = r.initial if rc.snp_noise == "initial" else self.fresh_params(k)
                p = rem.shrink_perturb(p, noise, rc.snp_shrink, rc.perturb)
            if cbp:
                k_count, k_weights = jax.random.split(k)
                drawn = rem.draw_uniforms(k_weights, p, self.layers)
                p, o, state, counts = rem.cbp_step(
                    p, o, r.cbp, acts, {n: ku for n, (ku, _) in drawn.items()}, self.layers,
                    cfg.activation, rc.cbp_replacement_rate, rc.cbp_maturity, rc.cbp_decay,
                    count_uniforms=rem.draw_counts(k_count, self.layers),
                    reset_moments=rc.cbp_reset_moments,
                )  # fmt: skip
                r = r._replace(cbp=state)
            return p, o, r, counts

        def minibatch(carry, xs):
            p, o, r = carry
            mb, k, ck = xs
            (total, (aux, acts)), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, *mb)
            norms = (
                _grad_norm(grads, ("actor_", "common_")),
                _grad_norm(grads, ("critic_", "common_")),
            )
            grads, cl_stats = method.transform_grads(grads, p, cl_state, task_id, ck)
            updates, o = self.tx.update(grads, o, p)
            p = optax.apply_updates(p, updates)
            counts = {}
            if per_step:
                p, o, r, counts = remedy_step(p, o, r, acts, k)
            return (p, o, r), ((total, *aux, *norms), counts, cl_stats)

        def epoch(carry, index):
            p, o, r, k = carry
            k, sub = jax.random.split(k)
            size = advantages.size
            perm = jax.random.permutation(sub, size)
            batch = jax.tree.map(
                lambda a: a.reshape((size, *a.shape[2:]))[perm].reshape(
                    (cfg.num_minibatches, -1, *a.shape[2:])
                ),
                (traj, advantages, targets),
            )
            keys = cl_keys = None
            if per_step:
                keys = jax.random.split(jax.random.fold_in(key, index), cfg.num_minibatches)
            if drawing:
                cl_keys = jax.random.split(
                    jax.random.fold_in(steps_key, index), cfg.num_minibatches
                )
            (p, o, r), out = jax.lax.scan(minibatch, (p, o, r), (batch, keys, cl_keys))
            if self.minibatch_splits_key:  # MEAL 057f862's on-policy learners
                k = jax.lax.fori_loop(
                    0, cfg.num_minibatches, lambda _, kk: jax.random.split(kk)[0], k
                )
            return (p, o, r, k), out

        carry = (params, opt_state, remedy if per_step else None, rng)
        (params, opt_state, r, rng), (losses, counts, cl_stats) = jax.lax.scan(
            epoch, carry, jnp.arange(cfg.update_epochs)
        )
        remedy = r if per_step else remedy
        counts = {name: n.reshape(-1) for name, n in counts.items()}  # (epochs * minibatches,)
        cl_state = method.after_update(cl_state, traj, advantages, targets, task_id, after_key)
        cl_stats = {name: v.mean() for name, v in cl_stats.items()}
        return (
            params,
            opt_state,
            rng,
            [x.mean() for x in losses],
            remedy,
            counts,
            cl_state,
            cl_stats,
        )

    def _update(self, state: TrainState, task_id: int) -> tuple[TrainState, Metrics]:
        coef = self.shaping_coef(state.update)
        state, traj, soups, episodes = self._rollout(state, task_id, coef)
        rng, steps_key, after_key, cl_key = state.rng, None, None, None
        if self.remedy.enabled:  # keys of the remedy: only a run with one draws them
            rng, remedy_key = _split(rng)
            steps_key, after_key = _split(remedy_key)
        if self.method.needs_key:  # the CL method's: only a method that draws gets them
            rng, cl_key = _split(rng)
        params, opt_state, rng, losses, remedy, replaced, cl_state, cl_stats = jax.vmap(
            lambda p, o, c, tr, ob, r, rs, k, ck: self._epochs(
                p, o, c, tr, ob, r, task_id, rs, k, ck
            )
        )(
            state.params, state.opt_state, state.cl, traj, state.obs, rng, state.remedy,
            steps_key, cl_key,
        )  # fmt: skip
        params, opt_state, remedy_metrics = self._after_update(
            params, opt_state, state.update + 1, traj.obs, task_id, after_key
        )
        remedy_metrics.update({f"remedy/replaced/{k}": v for k, v in replaced.items()})
        if self.remedy.enabled:
            remedy_metrics["remedy/update"] = state.update + 1
        lr = (  # the schedule restarts at every task (and at PackNet's pruning)
            self.tx_schedule(_schedule_count(state.opt_state))
            if self.cfg.anneal_lr
            else jnp.full_like(coef, self.cfg.learning_rate)
        )
        metrics = dict(
            zip(
                (
                    "total_loss",
                    "value_loss",
                    "actor_loss",
                    "entropy",
                    "reg_loss",
                    "grad_norm_actor",
                    "grad_norm_critic",
                ),
                losses,
                strict=True,
            )
        )
        metrics.update(
            reward=traj.reward.mean((1, 2)),
            soups=soups,
            shaping_coef=coef,
            learning_rate=lr,
            **episodes,
            **remedy_metrics,
            **{f"cl/{name}": v for name, v in cl_stats.items()},
        )
        state = state._replace(
            params=params,
            opt_state=opt_state,
            cl=cl_state,
            rng=rng,
            update=state.update + 1,
            remedy=remedy,
        )
        return state, metrics

    def _after_update(self, params, opt_state, count, obs, task_id, key):
        """The remedies after an update (all seeds; ``count (K,)``: the update's 1-based
        number within the task, the same for every seed): ReDo on the rollout's
        observations ``obs (K, T, N, D)`` after every ``redo_period``-th update, plasticity
        injection after the ``injection_updates``. Returns ``(params, opt_state,
        metrics)``."""
        rc, k = self.remedy, count.shape[0]
        metrics: dict[str, jax.Array] = {}
        if rc.remedy == "redo":
            period = rc.redo_period(self.updates_per_task)
            batch = obs.reshape(k, -1, obs.shape[-1])

            def recycle(args):
                return jax.vmap(
                    lambda p, o, x, kk: rem.redo(
                        self.network, p, o, x, task_id, kk, rc.redo_tau, rc.redo_reset_moments
                    )
                )(*args, batch, key)

            def keep(args):
                return (*args, {ly.name: jnp.zeros(k, jnp.int32) for ly in self.layers})

            due = count[0] % period == 0
            params, opt_state, recycled = jax.lax.cond(due, recycle, keep, (params, opt_state))
            metrics = {f"remedy/recycled/{name}": n for name, n in recycled.items()}
            metrics["remedy/recycled"] = jnp.broadcast_to(due, (k,)).astype(jnp.int32)
        elif rc.remedy == "plasticity-injection":
            due = jnp.isin(count[0], jnp.asarray(rc.injection_updates(self.updates_per_task)))
            opt_state = jax.lax.cond(due, jax.vmap(rem.inject), lambda o: o, opt_state)
            metrics = {"remedy/injected": jnp.broadcast_to(due, (k,)).astype(jnp.int32)}
        return params, opt_state, metrics

    def _end_task(self, state: TrainState, task_id: int, next_task: jax.Array) -> TrainState:
        cfg, method = self.cfg, self.method
        rng, key = _split(state.rng)
        new = None
        if method.importance == "fisher":
            new = self._fisher(state.params, key, task_id)
        elif method.importance == "mas":
            new = self._mas(state.params, key, task_id)
        if new is not None and cfg.normalize_importance:
            new = jax.vmap(cl_lib.normalize)(new)
        cl_state = jax.vmap(lambda c, p, n: method.end_task(c, p, n, task_id))(
            state.cl, state.params, new
        )
        state = state._replace(
            cl=cl_state,
            opt_state=jax.vmap(self.tx.init)(state.params),
            rng=rng,
            update=jnp.zeros_like(state.update),
        )
        return self._remedy_at_switch(state, next_task) if self.remedy.enabled else state

    def _remedy_at_switch(self, state: TrainState, next_task: jax.Array) -> TrainState:
        """The remedy at a task's end, after the new optimizer state, when a task follows
        (``next_task >= 0``; nothing changes after the sequence's last task): reset
        (heads: the slice of ``next_task`` on a multi-head network), shrink-and-perturb
        (``snp_every="task"``), plasticity injection (``injects_at_end``: the heads'
        moments are fresh already)."""
        rc = self.remedy
        rng, key = _split(state.rng)
        params, opt_state = state.params, state.opt_state
        follows = next_task >= 0
        if rc.remedy == "reset":

            def reset_one(p, o, k):
                p, touched = rem.reset(
                    p, self.fresh_params(k), rc.reset_layers, next_task, self.num_tasks,
                    self.cfg.multi_head,
                )  # fmt: skip
                return p, rem.zero_moments(o, touched)

            params, opt_state = jax.lax.cond(
                follows, lambda a: jax.vmap(reset_one)(*a, key), lambda a: a, (params, opt_state)
            )
        elif rc.remedy == "shrink-perturb" and rc.snp_every == "task":

            def snp_one(p, r, k):
                noise = r.initial if rc.snp_noise == "initial" else self.fresh_params(k)
                return rem.shrink_perturb(p, noise, rc.snp_shrink, rc.perturb)

            params = jax.lax.cond(
                follows, lambda p: jax.vmap(snp_one)(p, state.remedy, key), lambda p: p, params
            )
        elif rc.remedy == "plasticity-injection" and rc.injects_at_end:
            opt_state = jax.lax.cond(follows, jax.vmap(rem.inject), lambda o: o, opt_state)
        return state._replace(params=params, opt_state=opt_state, rng=rng)

    def _importance_envs(self, task_id: int, keys: jax.Array):
        """One env per seed for importance episodes (``keys (K, 2)``)."""
        return jax.vmap(lambda k: self.engine.reset_batch(task_id, k[None]))(keys)

    def _importance_mean(self, params, key, task_id, per_step, steps: int, resets: bool) -> Any:
        """The mean of a per-step importance over ``importance_episodes`` fresh episodes of
        ``steps`` steps (one env per seed; each episode from its own key). ``per_step(obs
        (K, 1, n, H, W, C), index, keys (K, 2)) -> (actions (K, 1, n), importance tree)``
        gives the step's importance and the actions played; with ``resets`` an episode runs
        on through its end (a new one starts), else it stops at ``steps``."""
        cfg = self.cfg

        def one_step(carry, index):
            env, obs, t, acc, k = carry
            k, ks = _split(k)
            actions, g2 = per_step(obs, index, ks)
            acc = jax.tree.map(jnp.add, acc, g2)
            env, obs, _, _ = jax.vmap(self.engine.step_batch)(
                env, actions, jnp.zeros(actions.shape[0])
            )
            if resets:
                env, obs, t, _ = self._maybe_reset(task_id, env, obs, t + 1)
            return (env, obs, t, acc, k), None

        def episode(carry, _):
            acc, k = carry
            k, k_ep = _split(k)
            k_ep, k_reset = _split(k_ep)
            env, obs = self._importance_envs(task_id, k_reset)
            t = jnp.zeros(obs.shape[0], jnp.int32)
            carry = (env, obs, t, acc, k_ep)
            (_, _, _, acc, _), _ = jax.lax.scan(one_step, carry, jnp.arange(steps))
            return (acc, k), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (acc, _), _ = jax.lax.scan(episode, (zeros, key), None, cfg.importance_episodes)
        total = cfg.importance_episodes * steps
        return jax.tree.map(lambda x: x / total, acc)

    def _fisher(self, params: Any, key: jax.Array, task_id: int) -> Any:
        """MEAL 7d81858's EWC Fisher: ``importance_episodes`` x ``importance_steps`` steps
        (running on through episode ends), each step agent 0's observation, an action
        sampled from its policy and played by every agent, squared gradient of its
        log-probability; the mean over all steps."""
        apply, n = self.apply, self.num_agents

        def per_step(obs, index, keys):
            obs0 = obs[:, 0, 0].reshape(obs.shape[0], -1)

            def per_seed(p, o, kk):
                logits, _ = apply(p, o[None], task_id)
                a = jax.random.categorical(kk, logits[0])
                return a, cl_lib.fisher_term(apply, p, o, a, task_id)

            a, g2 = jax.vmap(per_seed)(params, obs0, keys)
            return jnp.broadcast_to(a[:, None, None], (a.shape[0], 1, n)), g2

        return self._importance_mean(
            params, key, task_id, per_step, self.cfg.importance_steps, resets=True
        )

    def _mas(self, params: Any, key: jax.Array, task_id: int) -> Any:
        """MEAL 7d81858's MAS importance: every step of ``importance_episodes`` episodes
        (each until its end or ``importance_steps``), the squared gradient of ``sum_agents
        1/2 ||[log pi, V]||^2``, every agent acting with its sampled policy; the mean over
        the steps; replaced per task, unnormalised."""
        apply = self.apply

        def per_step(obs, index, keys):
            def per_seed(p, o, kk):
                x = o[0].reshape(self.num_agents, -1)
                g2 = cl_lib.mas_term(apply, p, x, task_id)
                logits, _ = apply(p, x, task_id)
                a = jax.vmap(lambda lg: jax.random.categorical(kk, lg))(logits)
                return a, g2

            a, g2 = jax.vmap(per_seed)(params, obs, keys)
            return a[:, None], g2

        steps = min(self.cfg.importance_steps, self.episode_len)
        return self._importance_mean(params, key, task_id, per_step, steps, resets=False)


def _act_impl(network, params, obs, task, greedy, key, obs_dim):
    x = obs.reshape(-1, obs_dim)
    logits, _ = network.apply(params, x, task)
    actions = jnp.argmax(logits, -1) if greedy else jax.random.categorical(key, logits)
    return actions.reshape(obs.shape[: obs.ndim - (1 if obs.shape[-1] == obs_dim else 3)])


_act = jax.jit(_act_impl, static_argnums=(0, 4, 6))
