"""Sub-envs stepped by a few worker processes, observations, rewards and ends through
shared memory.

:class:`WorkerVectorEnv` is a gymnasium ``VectorEnv`` (same-step autoreset) whose
``num_envs`` sub-envs are stepped by ``num_workers`` processes with one thread each. A
step sends each worker its actions; the worker steps its sub-envs one after another,
writes their observations, rewards, terminations and truncations straight into shared
arrays (nothing of them pickled) and sends back only the info dicts, which are merged
exactly as gymnasium's ``SyncVectorEnv`` merges them. Sub-env ``i`` is seeded with
``seed + i`` as in ``SyncVectorEnv``, so for the same factory and seed the run is the one
``SyncVectorEnv`` gives, bit for bit, whatever the number of workers.

Double buffering (``splits=2``, sample-factory's ``worker_num_splits``): the sub-envs form
``splits`` equal contiguous blocks (``[0, N/2)`` and ``[N/2, N)``), and each worker holds a
contiguous share of every block, so every worker has work in every block.
:meth:`WorkerVectorEnv.start_block` starts the workers on one block's actions and returns
at once, so the learner chooses the next block's actions while the workers step this one;
:meth:`~WorkerVectorEnv.step` then starts the blocks not started yet and gathers them all.
Which block a sub-env is in depends on ``num_envs`` and ``splits`` only, never on the
worker count.

Where gymnasium's ``AsyncVectorEnv`` runs one process per sub-env (32 processes for 32
envs, a round trip each per step), this runs one per core the run may use.

Faults: a worker that dies is noticed within a second, one that sends nothing for
``timeout`` seconds is taken as hung; both raise :class:`EnvWorkerError` naming the worker,
its sub-envs and what the task was, after every worker is stopped. Workers die with the
parent (``PR_SET_PDEATHSIG`` on Linux, and the fork server exits with the parent), ignore
Ctrl-C (the parent stops them), and the shared array is an unlinked temporary file of
multiprocessing's heap: a kill -9 of the parent leaves no process and nothing in
``/dev/shm``.

``save_state`` / ``load_state`` save and restore every worker's sub-envs with
``cl_suites.core.env_state`` (in the workers), so a run resumes bit for bit where the
simulator allows it (ALE; not NetHack).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate

from cl_suites.core.env_state import (
    EnvStateError,
    load_env_state,
    save_env_state,
    simulator_handles,
)
from cl_suites.errors import CLSuitesError

START_METHOD = "forkserver"
"""Workers start from multiprocessing's fork server: a clean process without the parent's
threads (torch's, an update thread), so forking cannot inherit a held lock."""

DEFAULT_TIMEOUT = 30.0
"""Seconds a worker may take for one command before it is taken as hung."""


class EnvWorkerError(CLSuitesError, RuntimeError):
    """An env worker died or hung (the message names it, its sub-envs and the task)."""


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``taskset`` and
    cgroup cpusets narrow it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_env_workers(value: Any, cores: int | None = None) -> int:
    """``value`` as a worker count: an int >= 1; more than the usable cores gives a warning
    (the count is kept: each worker is one process with one thread)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"env_workers must be an integer >= 1, got {value!r}")
    cores = usable_cores() if cores is None else cores
    if value > cores:
        gym.logger.warn(
            f"env_workers={value} is more than the {cores} core(s) this process may use; "
            f"using {value} worker processes that share them"
        )
    return value


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker(
    conn: Any,
    factory_bytes: bytes,
    blocks: list[tuple[int, int]],
    shared: Any,
    observation_space: gym.Space | None,
    num_envs: int,
) -> None:
    """One worker: builds the sub-envs ``[a, b)`` of each of ``blocks`` (global indices, in
    block order) and serves commands until ``close``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    envs: list[gym.Env] = []
    try:
        factory = cloudpickle.loads(factory_bytes)
        indices = [i for a, b in blocks for i in range(a, b)]
        envs = [factory() for _ in indices]
        conn.send(("ok", (envs[0].observation_space, envs[0].action_space)))
        space = observation_space or envs[0].observation_space
        views = _shared_views(space, shared["obs"], num_envs)
        ends = _shared_ends(shared, num_envs)
        offsets = list(itertools.accumulate([0, *(b - a for a, b in blocks)]))
        local = [range(offsets[k], offsets[k + 1]) for k in range(len(blocks))]

        def write(i: int, obs: Any) -> None:
            _assign(views, indices[i], obs)

        while True:
            command, data = conn.recv()
            if command == "step":
                block, actions = data
                conn.send(("ok", _step(envs, local[block], indices, actions, write, ends)))
            elif command == "reset":
                seeds, options = data
                infos = []
                for i, env in enumerate(envs):
                    obs, info = env.reset(seed=seeds[i], options=options)
                    write(i, obs)
                    infos.append([info])
                conn.send(("ok", infos))
            elif command == "get_attr":
                conn.send(("ok", [env.get_wrapper_attr(data) for env in envs]))
            elif command == "set_attr":
                name, values = data
                for env, value in zip(envs, values, strict=True):
                    env.set_wrapper_attr(name, value)
                conn.send(("ok", None))
            elif command == "call":
                name, args, kwargs = data
                results = []
                for env in envs:
                    attr = env.get_wrapper_attr(name)
                    results.append(attr(*args, **kwargs) if callable(attr) else attr)
                conn.send(("ok", results))
            elif command == "render":
                conn.send(("ok", [env.render() for env in envs]))
            elif command == "exact":
                try:
                    simulator_handles(envs)
                    conn.send(("ok", (True, None)))
                except EnvStateError as e:
                    conn.send(("ok", (False, str(e))))
            elif command == "save":
                conn.send(("ok", save_env_state(envs)))
            elif command == "load":
                envs = load_env_state(data, envs)
                conn.send(("ok", None))
            elif command == "close":
                break
            else:
                raise ValueError(f"unknown command {command!r}")
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException as e:  # sent to the parent, which raises it with the worker named
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        for env in envs:
            with contextlib.suppress(Exception):
                env.close()
        conn.close()


def _shared_arrays(space: gym.Space, n: int, ctx: Any) -> Any:
    """Raw shared memory for ``n`` observations of ``space`` (a ``RawArray`` per array
    space, nested like ``Dict`` / ``Tuple`` spaces). No lock, so no named semaphore: the
    memory is an already unlinked file of multiprocessing's heap."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _shared_arrays(sub, n, ctx) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_shared_arrays(sub, n, ctx) for sub in space.spaces)
    if space.shape is None or space.dtype is None:
        raise TypeError(f"env workers need array observation spaces, got {space}")
    nbytes = n * int(np.prod(space.shape, dtype=np.int64)) * np.dtype(space.dtype).itemsize
    return ctx.RawArray("B", max(nbytes, 1))


def _shared_views(space: gym.Space, raw: Any, n: int) -> Any:
    """numpy views ``(n, *shape)`` of :func:`_shared_arrays`'s memory (no copy)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _shared_views(sub, raw[key], n) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_shared_views(sub, r, n) for sub, r in zip(space.spaces, raw, strict=True))
    count = n * int(np.prod(space.shape, dtype=np.int64))
    return np.frombuffer(raw, dtype=space.dtype, count=count).reshape((n, *space.shape))


def _assign(views: Any, index: int, obs: Any) -> None:
    if isinstance(views, dict):
        for key, value in obs.items():
            _assign(views[key], index, value)
    elif isinstance(views, tuple):
        for view, value in zip(views, obs, strict=True):
            _assign(view, index, value)
    else:
        views[index] = obs


END_ARRAYS: tuple[tuple[str, type], ...] = (
    ("rewards", np.float64),
    ("terminations", np.bool_),
    ("truncations", np.bool_),
)
"""The per-sub-env results a step writes into shared memory: ``(N,)`` arrays."""


def _shared_memory(space: gym.Space, n: int, ctx: Any) -> dict[str, Any]:
    """Raw shared memory for ``n`` sub-envs: their observations (``"obs"``) and each of
    :data:`END_ARRAYS`."""
    memory = {"obs": _shared_arrays(space, n, ctx)}
    for name, dtype in END_ARRAYS:
        memory[name] = ctx.RawArray("B", n * np.dtype(dtype).itemsize)
    return memory


def _shared_ends(memory: dict[str, Any], n: int) -> dict[str, np.ndarray]:
    """numpy views ``(n,)`` of :func:`_shared_memory`'s :data:`END_ARRAYS` (no copy)."""
    return {name: np.frombuffer(memory[name], dtype=dtype, count=n) for name, dtype in END_ARRAYS}


def _step(
    envs: list[gym.Env],
    local: range,
    indices: list[int],
    actions: Sequence[Any],
    write: Callable[[int, Any], None],
    ends: dict[str, np.ndarray],
) -> list[list[dict[str, Any]]]:
    """Step the sub-envs ``envs[j]`` for ``j`` in ``local`` (global index ``indices[j]``)
    with same-step autoreset, as ``SyncVectorEnv.step`` does, writing their observations,
    rewards and ends into shared memory; returns the info dicts of each sub-env in the
    order ``SyncVectorEnv`` adds them."""
    rewards, terminations, truncations = ends["rewards"], ends["terminations"], ends["truncations"]
    infos: list[list[dict[str, Any]]] = []
    for j, action in zip(local, actions, strict=True):
        i = indices[j]
        obs, rewards[i], terminations[i], truncations[i], info = envs[j].step(action)
        parts = []
        if terminations[i] or truncations[i]:
            parts.append({"final_obs": obs, "final_info": info})
            obs, info = envs[j].reset()
        parts.append(info)
        infos.append(parts)
        write(j, obs)
    return infos


def check_env_splits(splits: Any, num_envs: int) -> int:
    """``splits`` as a number of blocks of ``num_envs`` sub-envs: an int >= 1 that divides
    ``num_envs``; ``ValueError`` naming it and the allowed ones otherwise."""
    allowed = [k for k in range(1, num_envs + 1) if num_envs % k == 0]
    if isinstance(splits, bool) or not isinstance(splits, int) or splits not in allowed:
        raise ValueError(
            f"env_splits={splits!r} does not divide num_envs={num_envs} into equal blocks; "
            f"use one of {allowed}"
        )
    return splits


def worker_blocks(num_envs: int, num_workers: int, splits: int) -> list[list[tuple[int, int]]]:
    """Each worker's sub-envs: per worker, its range ``(a, b)`` of every block (global
    indices, block order). ``splits`` blocks of ``num_envs / splits`` contiguous sub-envs;
    worker ``w`` holds the ``w``-th contiguous share of each block (sizes as even as the
    counts allow). ``splits=1``: one contiguous chunk per worker."""
    size = num_envs // splits
    bounds = np.linspace(0, size, num_workers + 1).round().astype(int)
    return [
        [(k * size + int(lo), k * size + int(hi)) for k in range(splits)]
        for lo, hi in itertools.pairwise(bounds)
    ]


class WorkerVectorEnv(VectorEnv):
    """``num_envs`` copies of ``env_fn`` stepped by ``num_workers`` processes (see the module
    docstring; at most one worker per sub-env of a block). ``splits``: the blocks the
    sub-envs form for :meth:`start_block` (1: none; it must divide ``num_envs``).
    ``name``: what the sub-envs are (e.g. the task), for error messages; ``timeout``:
    seconds before a silent worker is taken as hung."""

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        num_envs: int,
        num_workers: int,
        *,
        name: str = "env",
        timeout: float = DEFAULT_TIMEOUT,
        observation_space: gym.Space | None = None,
        splits: int = 1,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.splits = check_env_splits(splits, self.num_envs)
        self.block_size = self.num_envs // self.splits
        self.num_workers = max(1, min(int(num_workers), self.block_size))
        self.name, self.timeout = name, float(timeout)
        self.closed = False
        self._blocks = worker_blocks(self.num_envs, self.num_workers, self.splits)
        self._indices = [[i for a, b in blocks for i in range(a, b)] for blocks in self._blocks]
        self._started: list[np.ndarray] = []
        ctx = mp.get_context(START_METHOD)
        probe = env_fn() if observation_space is None else None
        space = observation_space if probe is None else probe.observation_space
        if probe is not None:
            probe.close()
        self._shared = _shared_memory(space, self.num_envs, ctx)
        self._observations = _shared_views(space, self._shared["obs"], self.num_envs)
        self._ends = _shared_ends(self._shared, self.num_envs)
        factory = cloudpickle.dumps(env_fn)
        self._conns, self._procs = [], []
        try:
            for w, blocks in enumerate(self._blocks):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker,
                    args=(child, factory, blocks, self._shared, space, self.num_envs),
                    name=f"cl-suites-env-worker-{w}",
                    daemon=True,
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            spaces = self._gather("start")
        except BaseException:
            self._stop(kill=True)
            raise
        self.single_observation_space, self.single_action_space = spaces[0]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._block_space = batch_space(self.single_action_space, self.block_size)

    # -- VectorEnv API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        self._started = []
        for conn, indices in zip(self._conns, self._indices, strict=True):
            self._send(conn, ("reset", ([seeds[i] for i in indices], options)))
        infos = self._merge(self._in_order(self._gather("reset")))
        return self._copy_observations(), infos

    def start_block(self, block: int, actions: Any) -> None:
        """Start every worker on block ``block``'s ``actions`` (a batch of ``block_size``)
        and return at once; blocks start in order (0, 1, ...), and :meth:`step`, given
        the same actions for them, starts the rest and gathers them all."""
        if block != len(self._started) or block >= self.splits:
            raise RuntimeError(
                f"{self.name}: block {block} started out of order "
                f"({len(self._started)} of {self.splits} started)"
            )
        self._send_block(block, list(iterate(self._block_space, actions)))
        self._started.append(np.array(actions, copy=True))

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        started, self._started = self._started, []
        size = self.block_size
        for block, given in enumerate(started):
            if not np.array_equal(np.asarray(actions)[block * size : (block + 1) * size], given):
                raise RuntimeError(
                    f"{self.name}: step() got other actions for block {block} than "
                    "start_block() stepped it with"
                )
        per_env = list(iterate(self.action_space, actions))
        for block in range(len(started), self.splits):
            self._send_block(block, per_env[block * size : (block + 1) * size])
        infos = [
            parts
            for _ in range(self.splits)  # each worker answers its blocks in order
            for chunk in self._gather("step")
            for parts in chunk
        ]
        ends = self._ends
        return (
            self._copy_observations(),
            ends["rewards"].copy(),
            ends["terminations"].copy(),
            ends["truncations"].copy(),
            self._merge(infos),
        )

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return tuple(self._each("get_attr", name))

    def set_attr(self, name: str, values: Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        for conn, indices in zip(self._conns, self._indices, strict=True):
            self._send(conn, ("set_attr", (name, [values[i] for i in indices])))
        self._gather("set_attr")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(self._each("call", (name, args, kwargs)))

    def render(self) -> tuple[Any, ...] | None:
        return tuple(self._each("render", None))

    def close_extras(self, **kwargs: Any) -> None:
        if self._procs:
            for conn in self._conns:
                with contextlib.suppress(OSError, BrokenPipeError):
                    conn.send(("close", None))
        self._stop()

    # -- exact resume ------------------------------------------------------------------
    @property
    def exact_resume(self) -> bool:
        """True when every worker can save its sub-envs with their simulators."""
        return all(exact for exact, _ in self._each_worker("exact", None))

    def save_state(self) -> list[bytes]:
        """Each worker's sub-envs, saved by ``env_state.save_env_state`` (``EnvStateError``
        with the reason when a simulator cannot be saved)."""
        reasons = [why for exact, why in self._each_worker("exact", None) if not exact]
        if reasons:
            raise EnvStateError(reasons[0])
        return self._each_worker("save", None)

    def load_state(self, states: Sequence[bytes]) -> WorkerVectorEnv:
        """Restore :meth:`save_state`'s states into this env's workers (built like the saved
        env's); returns this env."""
        if len(states) != self.num_workers:
            raise EnvStateError(
                f"the saved task env has {len(states)} worker(s), this one {self.num_workers}"
            )
        self._started = []
        for conn, state in zip(self._conns, states, strict=True):
            self._send(conn, ("load", state))
        self._gather("load")
        return self

    # -- internals --------------------------------------------------------------------
    def _copy_observations(self) -> Any:
        return _copy(self._observations)

    def _each(self, command: str, data: Any) -> list[Any]:
        """``command`` on every worker; the per-sub-env results in sub-env order."""
        return self._in_order(self._each_worker(command, data))

    def _in_order(self, per_worker: list[list[Any]]) -> list[Any]:
        """Per-sub-env results given per worker (each in its sub-envs' order) in global
        sub-env order."""
        out: list[Any] = [None] * self.num_envs
        for indices, results in zip(self._indices, per_worker, strict=True):
            for i, result in zip(indices, results, strict=True):
                out[i] = result
        return out

    def _send_block(self, block: int, actions: list[Any]) -> None:
        """Send each worker its share of block ``block`` with ``actions`` (the block's,
        one per sub-env)."""
        offset = block * self.block_size
        for conn, blocks in zip(self._conns, self._blocks, strict=True):
            a, b = blocks[block]
            self._send(conn, ("step", (block, actions[a - offset : b - offset])))

    def _each_worker(self, command: str, data: Any) -> list[Any]:
        for conn in self._conns:
            self._send(conn, (command, data))
        return self._gather(command)

    def _send(self, conn: Any, message: Any) -> None:
        if self.closed or not self._procs:
            raise RuntimeError(f"{self.name}: the env workers are closed")
        try:
            conn.send(message)
        except (BrokenPipeError, OSError):
            index = self._conns.index(conn)
            self._procs[index].join(1.0)
            self._fail(index, f"died (exit code {self._procs[index].exitcode})", message[0])

    def _gather(self, command: str) -> list[Any]:
        return [self._receive(i, command) for i in range(len(self._conns))]

    def _receive(self, index: int, command: str) -> Any:
        conn, proc = self._conns[index], self._procs[index]
        deadline = time.monotonic() + self.timeout
        while not conn.poll(min(1.0, max(deadline - time.monotonic(), 0.0))):
            if not proc.is_alive():
                self._fail(index, f"died (exit code {proc.exitcode})", command)
            if time.monotonic() >= deadline:
                self._fail(index, f"sent nothing for {self.timeout:g} s (hung)", command)
        try:
            status, payload = conn.recv()
        except (EOFError, OSError):
            proc.join(1.0)
            self._fail(index, f"died (exit code {proc.exitcode})", command)
        if status == "error":
            self._fail(index, f"failed: {payload}", command)
        return payload

    def _fail(self, index: int, what: str, command: str) -> None:
        envs = ", ".join(f"{a}-{b - 1}" for a, b in self._blocks[index])
        self._stop(kill=True)
        raise EnvWorkerError(
            f"env worker {index} (sub-envs {envs} of {self.name}) {what} during "
            f"{command!r}; the workers are stopped (a run resumes from its last checkpoint "
            "with --resume)"
        )

    def _stop(self, kill: bool = False) -> None:
        """Wait for the workers to exit (after ``close``), killing any still running after
        2 s; ``kill``: kill them at once (after a fault: their state is given up)."""
        for proc in self._procs:
            if not kill:
                proc.join(timeout=2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2.0)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        self.closed = True

    def _merge(self, per_env: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """One info dict from each sub-env's parts (in sub-env order), merged as
        ``SyncVectorEnv`` merges them."""
        infos: dict[str, Any] = {}
        for i, parts in enumerate(per_env):
            for info in parts:
                infos = self._add_info(infos, info, i)
        return infos

    def __del__(self) -> None:
        if getattr(self, "_procs", None):
            with contextlib.suppress(Exception):
                self._stop(kill=True)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return np.array(value, copy=True)


if sys.platform != "linux":  # the fork server and PR_SET_PDEATHSIG are Linux's
    START_METHOD = "spawn"
