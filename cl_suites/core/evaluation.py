"""Policy-agnostic evaluation on every task and split of a sequence, on a schedule.

One :class:`Evaluator` serves every suite. Where its environments come from is a small
pluggable piece, an *eval env source*: :class:`TaskEnvSource` (the default) builds one
batched env per (task, split) from the sequence's ``TaskSpec`` factories; MEAL's source
(``cl_suites.meal.evaluation.MealEvalSource``) steps every kitchen in one jitted call and
has several agents per env, which act with one shared policy (parameter sharing: each
agent is one row of the policy's batch).
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cl_suites.core.background import BackgroundCall
from cl_suites.core.heterogeneity import role_heterogeneity
from cl_suites.core.task import Segment, TaskSequence, check_positive_int, task_seed
from cl_suites.core.vector import VectorizationMode, make_task_vector_env

if TYPE_CHECKING:  # annotations only: core never imports the run directory (torch)
    from cl_suites.rundir.runlog import RunLog

Policy = Callable[..., np.ndarray]
"""``policy(obs, task_ids) -> actions``: a batch of observations ``(B, *obs_shape)`` and
the task id of each row ``(B,)`` to a batch of actions ``(B, *action_shape)``. Task-agnostic
policies ignore ``task_ids``; multi-head policies use them to pick their head. In
multi-agent suites each agent of each env is one row (row ``e * num_agents + i`` is agent
``i`` of env ``e``). A policy with ``needs_previous_action_reward = True`` (CORA's IMPALA
network) is called ``policy(obs, task_ids, prev_actions (B,), prev_rewards (B,))``, both
zero at the start of each episode. A policy with ``needs_episode_starts = True`` (a
recurrent agent that resets its state) also gets ``episode_starts=`` ``(B,)`` bool, True
on each row's first step of an episode (its first call of an evaluation, and the step
after an episode ended)."""

EVAL_SEED_OFFSET = 1_000_003
ROLLOUT_SEED_OFFSET = 2_000_003


@dataclass
class EvalBatch:
    """Sub-envs that play together, and what each of them plays.

    Attributes:
        env: a batched env with same-step autoreset: ``step(actions)`` returns ``(obs,
            rewards (N,), terminations (N,), truncations (N,), infos)``; ``close()``.
        obs: the current observations, ``(N, *obs_shape)``, or ``(N, num_agents,
            *obs_shape)`` when ``num_agents`` is set.
        task_ids / splits: the task id and split each sub-env plays, ``(N,)``.
        targets: episodes each sub-env plays, ``(N,)``.
        num_agents: ``None`` for single-agent envs; else agents per env (actions are then
            ``(N, num_agents)``, rewards the team's return contribution per env).
    """

    env: Any
    obs: np.ndarray
    task_ids: np.ndarray
    splits: tuple[str, ...]
    targets: np.ndarray
    num_agents: int | None = None
    counts: np.ndarray = field(init=False)
    running: np.ndarray = field(init=False)
    prev_actions: np.ndarray = field(init=False)
    prev_rewards: np.ndarray = field(init=False)
    starts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.task_ids)
        self.counts = np.zeros(n, dtype=np.int64)
        self.running = np.zeros(n, dtype=np.float64)
        rows = n * (self.num_agents or 1)
        self.prev_actions = np.zeros(rows, dtype=np.int64)  # zero at each episode start
        self.prev_rewards = np.zeros(rows, dtype=np.float32)
        self.starts = np.ones(rows, dtype=bool)  # each row's first step of an episode

    @property
    def num_envs(self) -> int:
        return len(self.task_ids)

    @property
    def finished(self) -> bool:
        return bool((self.counts >= self.targets).all())

    def policy_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The observations as policy rows and their task ids (agents flattened)."""
        if self.num_agents is None:
            return self.obs, self.task_ids
        n, k = self.num_envs, self.num_agents
        return self.obs.reshape(n * k, *self.obs.shape[2:]), np.repeat(self.task_ids, k)

    def step(self, actions: np.ndarray) -> np.ndarray:
        """Step with the policy's ``actions`` for this batch's rows; returns the mask of
        sub-envs whose episode ended."""
        rows = np.asarray(actions).reshape(-1)
        if self.num_agents is not None:
            actions = rows.reshape(self.num_envs, self.num_agents)
        self.obs, rewards, terminations, truncations, _ = self.env.step(actions)
        self.running += rewards
        ended = np.asarray(terminations | truncations)
        per_row = self.num_agents or 1
        ended_rows = np.repeat(ended, per_row)
        self.prev_actions = np.where(ended_rows, 0, rows).astype(np.int64)
        self.prev_rewards = np.where(ended_rows, 0.0, np.repeat(rewards, per_row)).astype(
            np.float32
        )
        self.starts = ended_rows.astype(bool)
        return ended

    def previous_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Each policy row's previous action and reward (zero at an episode's start)."""
        return self.prev_actions, self.prev_rewards


def _act(policy: Policy, batches: Sequence[EvalBatch]) -> np.ndarray:
    """The policy's actions for every row of ``batches``, in one call. Policies that take
    the previous action and reward (CORA's IMPALA inputs:
    ``policy.needs_previous_action_reward``) get them as two more arguments; recurrent
    policies (``policy.needs_episode_starts``) get ``episode_starts=`` per row."""
    rows, ids = zip(*(b.policy_rows() for b in batches), strict=True)
    args = [np.concatenate(rows), np.concatenate(ids)]
    if getattr(policy, "needs_previous_action_reward", False):
        actions, rewards = zip(*(b.previous_rows() for b in batches), strict=True)
        args += [np.concatenate(actions), np.concatenate(rewards)]
    if getattr(policy, "needs_episode_starts", False):
        starts = np.concatenate([b.starts for b in batches])
        return np.asarray(policy(*args, episode_starts=starts))
    return np.asarray(policy(*args))


def _count_actions(
    counts: np.ndarray | None, rows: np.ndarray, envs: np.ndarray
) -> np.ndarray | None:
    """``counts (n_envs, n_agents, n_actions)`` plus one for the action of every agent of
    the envs ``envs`` (bool mask) in ``rows`` (policy rows, agent ``i`` of env ``e`` at
    ``e * n_agents + i``); the action axis grows to the largest action seen. ``None`` (no
    counts kept from then on) for actions that are not integers."""
    if counts is None:
        return None
    acts = np.asarray(rows)
    if acts.dtype.kind not in "iu" and not (
        acts.dtype.kind == "f" and np.all(np.isfinite(acts)) and np.all(acts == np.round(acts))
    ):
        return None
    n_envs, n_agents = counts.shape[:2]
    acts = acts.reshape(n_envs, n_agents).astype(np.int64)
    if acts.size and acts.min() < 0:
        return None
    top = int(acts.max()) + 1 if acts.size else 0
    if top > counts.shape[2]:
        counts = np.pad(counts, ((0, 0), (0, 0), (0, top - counts.shape[2])))
    e, a = np.nonzero(np.broadcast_to(np.asarray(envs)[:, None], acts.shape))
    np.add.at(counts, (e, a, acts[e, a]), 1)
    return counts


class EvalEnvSource(Protocol):
    """Where an :class:`Evaluator` gets its environments (the pluggable piece)."""

    def start(
        self, keys: Sequence[tuple[int, str]], seeds: dict[tuple[int, str], int], episodes: int
    ) -> list[EvalBatch]:
        """Reset (with ``seeds``) and return batches playing ``episodes`` episodes of every
        (task id, split) in ``keys``."""

    def start_rollout(self, task_id: int, num_envs: int, seed: int) -> EvalBatch:
        """A batch of ``num_envs`` training envs of ``task_id`` (train split), reset."""

    def check_render(self) -> None:
        """Raise ``ValueError`` when the envs cannot render ``rgb_array`` frames."""

    def close(self) -> None: ...


def _task_vector_env(
    task: Any,
    split: str,
    num_envs: int,
    vectorization_mode: VectorizationMode,
    evaluation: bool,
    render_mode: str | None,
) -> Any:
    if render_mode is None:
        return make_task_vector_env(task, split, num_envs, vectorization_mode, evaluation)
    try:  # the core passes render_mode through (interface 3) ...
        return make_task_vector_env(
            task, split, num_envs, vectorization_mode, evaluation, render_mode=render_mode
        )
    except TypeError as e:
        if "render_mode" not in str(e):
            raise
    import gymnasium as gym  # ... or, until it does, build the batch here
    from gymnasium.vector import AutoresetMode

    factory = functools.partial(task.env_factory(split, evaluation), render_mode=render_mode)
    vec = gym.vector.AsyncVectorEnv if vectorization_mode == "async" else gym.vector.SyncVectorEnv
    return vec([factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


class TaskEnvSource:
    """Eval envs of a ``TaskSequence``: one batched env per (task, split), built from the
    task's factories on first use and reused (reseeded at every evaluation point).

    Args:
        sequence: the task sequence.
        num_envs: sub-envs per (task, split) (``episodes`` are spread over them, each
            sub-env playing a fixed share, which avoids a bias towards short episodes).
        vectorization_mode: ``"sync"`` or ``"async"`` for tasks without native batching.
        render_mode: ``"rgb_array"`` to build envs that render (video capture).
    """

    def __init__(
        self,
        sequence: TaskSequence,
        num_envs: int,
        vectorization_mode: VectorizationMode = "sync",
        render_mode: str | None = None,
    ):
        self.sequence = sequence
        self.num_envs = check_positive_int("num_envs", num_envs)
        self.vectorization_mode = vectorization_mode
        self.render_mode = render_mode
        self._envs: dict[tuple[int, str, bool], Any] = {}

    def _env(self, task_id: int, split: str, evaluation: bool, num_envs: int) -> Any:
        key = (task_id, split, evaluation)
        env = self._envs.get(key)
        if env is None or env.num_envs != num_envs:
            if env is not None:
                env.close()
            env = self._envs[key] = _task_vector_env(
                self.sequence.tasks[task_id],
                split,
                num_envs,
                self.vectorization_mode,
                evaluation,
                self.render_mode if evaluation else None,
            )
        return env

    def start(
        self, keys: Sequence[tuple[int, str]], seeds: dict[tuple[int, str], int], episodes: int
    ) -> list[EvalBatch]:
        batches = []
        n = self.num_envs
        targets = np.array([(episodes + i) // n for i in range(n)])
        for task_id, split in keys:
            env = self._env(task_id, split, True, n)
            obs, _ = env.reset(seed=seeds[(task_id, split)])
            batches.append(EvalBatch(env, obs, np.full(n, task_id), (split,) * n, targets))
        return batches

    def start_rollout(self, task_id: int, num_envs: int, seed: int) -> EvalBatch:
        env = self._env(task_id, "train", False, num_envs)
        obs, _ = env.reset(seed=seed)
        ones = np.ones(num_envs, dtype=np.int64)
        return EvalBatch(env, obs, np.full(num_envs, task_id), ("train",) * num_envs, ones)

    def check_render(self) -> None:
        task = self.sequence.tasks[0]
        try:
            env = self._env(0, task.splits[0], True, self.num_envs)
            env.reset(seed=0)
            frames = env.render()
        except (TypeError, NotImplementedError) as e:
            raise ValueError(
                f"{self.sequence.name}'s task envs cannot render rgb_array frames yet "
                f"({type(e).__name__}: {e}); run without capture_video"
            ) from e
        if frames is None or np.asarray(frames[0]).ndim != 3:
            raise ValueError(
                f"{self.sequence.name}'s task envs return no rgb_array frames; run without "
                "capture_video"
            )

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


_NOT_REBUILT = (
    "OrderEnforcing",
    "PassiveEnvChecker",
    "EnvChecker",
    "RecordEpisodeStatistics",
    "DictInfoToList",
)
"""Wrappers not rebuilt around eval envs: those ``gym.make`` adds itself, and bookkeeping
ones that change nothing the policy sees (episode statistics, the infos' layout)."""


def own_wrappers(
    env: Any,
) -> tuple[list[tuple[type, dict[str, Any]]], list[tuple[type, dict[str, Any]]]]:
    """The wrappers of an own training env, to rebuild around evaluation envs: ``(vector
    wrappers, single-env wrappers)``, each innermost first, as ``(class, constructor
    keywords)``. ``env``: a wrapped ``gym.make("CLSuite/...")`` (single-env wrappers such
    as ``FrameStackObservation``) or a wrapped vector env (``gymnasium.make_vec`` /
    ``cl_suites.make_vec`` under ``gymnasium.wrappers.vector`` wrappers). ``ValueError``
    for a wrapper that does not record its constructor keywords (gymnasium's
    ``RecordConstructorArgs``, which its wrappers use): it cannot be rebuilt."""
    import gymnasium as gym

    layers: list[tuple[type, dict[str, Any]]] = []
    node = env
    for _ in range(64):
        if not isinstance(node, gym.Wrapper | gym.vector.VectorWrapper):
            break
        name = type(node).__name__
        if name not in _NOT_REBUILT:
            kwargs = getattr(node, "_saved_kwargs", None)
            if kwargs is None:
                raise ValueError(
                    f"cannot rebuild wrapper {name} around the evaluation envs: it does not "
                    "record its constructor arguments (derive it from "
                    "gymnasium.utils.RecordConstructorArgs), or pass an env_source"
                )
            kwargs = {k: v for k, v in kwargs.items() if k != "env"}
            layers.append((type(node), kwargs))
        node = node.env
    layers.reverse()
    vector = [w for w in layers if issubclass(w[0], gym.vector.VectorWrapper)]
    single = [w for w in layers if not issubclass(w[0], gym.vector.VectorWrapper)]
    return vector, single


def _apply(env: Any, wrappers: Sequence[tuple[type, dict[str, Any]]]) -> Any:
    for cls, kwargs in wrappers:
        env = cls(env, **kwargs)
    return env


class WrappedEnvSource(TaskEnvSource):
    """Eval envs of a ``TaskSequence`` played through the wrappers of an own training env
    (:func:`own_wrappers`): every sub-env of a (task, split) gets the single-env wrappers
    (a frame stack: the policy gets stacked frames at evaluation too), and the batch the
    vector wrappers. ``cl_suites.Recorder(env=...)`` builds one from the env it is given.

    Args:
        sequence: the task sequence.
        num_envs: sub-envs per (task, split).
        env: the own training env (wrapped), whose wrappers are rebuilt.
        vectorization_mode: ``"sync"`` or ``"async"``.
    """

    def __init__(
        self,
        sequence: TaskSequence,
        num_envs: int,
        env: Any,
        vectorization_mode: VectorizationMode = "sync",
    ):
        super().__init__(sequence, num_envs, vectorization_mode)
        self.vector_wrappers, self.single_wrappers = own_wrappers(env)

    def _env(self, task_id: int, split: str, evaluation: bool, num_envs: int) -> Any:
        key = (task_id, split, evaluation)
        env = self._envs.get(key)
        if env is not None and env.num_envs == num_envs:
            return env
        if env is not None:
            env.close()
        task = self.sequence.tasks[task_id]
        if self.single_wrappers:
            import gymnasium as gym
            from gymnasium.vector import AutoresetMode

            factory = task.env_factory(split, evaluation=evaluation)
            wrappers = self.single_wrappers
            vec = (
                gym.vector.AsyncVectorEnv
                if self.vectorization_mode == "async"
                else gym.vector.SyncVectorEnv
            )
            env = vec(
                [lambda: _apply(factory(), wrappers)] * num_envs,
                autoreset_mode=AutoresetMode.SAME_STEP,
            )
        else:
            env = make_task_vector_env(task, split, num_envs, self.vectorization_mode, evaluation)
        env = self._envs[key] = _apply(env, self.vector_wrappers)
        return env


class Evaluator:
    """Runs ``episodes`` episodes per task and split every ``every`` steps.

    Steps are the sequence's unit: agent steps (summed over sub-envs), or env steps for
    MEAL. Evaluation envs are separate from the training env. At each evaluation point
    ``s`` every (task, split) is reseeded from ``(seed, s, task, split)``, so the same
    seed gives the same evaluation episodes, also after a resumed run.

    Use from any training loop::

        evaluator = Evaluator(sequence, seed=0, run_log=log)
        ...
        evaluator.maybe_evaluate(total_step, policy)   # after every (vector) step

    Evaluation points: ``first_eval_step`` (0: before training), then every ``every``
    steps on the global grid (``k * every``), or, with ``segments``, every ``every``
    steps counted from the start of each schedule segment (``start + k * every``, k >= 1,
    up to the segment's end: MEAL's "every N updates of each task"), and every step of
    ``task_ends`` (the job passes each task's end: the end-of-task point always exists,
    whatever the cadence).

    A loop that trains and acts itself calls :meth:`maybe_evaluate` after every (vector)
    step: it evaluates when a point is reached (``due``) and does nothing otherwise, so
    it is cheap to call every step. At a task's end call it *before* anything the loop
    does at the switch changes the network (a head reset, a consolidation that moves
    weights): the end-of-task row then describes the network that finished the task.

    Args:
        sequence: the task sequence; ``every`` and ``episodes`` default to its
            ``eval_every`` and ``eval_episodes``.
        seed: run seed.
        run_log: where records are appended (optional).
        num_envs: sub-envs per evaluation env (default: ``episodes``).
        vectorization_mode: ``"sync"`` or ``"async"`` for tasks without native batching.
        first_eval_step: the first evaluation point (0: evaluate before training;
            ``None``: the first point of the cadence after step 0).
        segments: the run's schedule, for per-segment cadence (see above).
        task_ends: steps that are evaluation points besides the cadence (each task's
            ``Segment.end_step``; ``None``: the cadence only).
        env_source: where the envs come from (default: the sequence's own
            ``eval_source()`` when it has one, as MEAL's; else ``TaskEnvSource``). Any
            object with the :class:`EvalEnvSource` methods: ``WrappedEnvSource`` plays
            through the wrappers of an own training env (frame stacks and the like), so
            the policy sees at evaluation what it sees in training.
        video: a ``cl_suites.core.video.VideoRecorder`` that says at which evaluation
            points to record one episode per task and split (the source must render).
        max_episode_steps: an evaluation-only episode cap in steps of one sub-env
            (``None``: whole episodes, the papers' protocol; CORA's Atari evaluation plays
            whole games). An episode that reaches it counts with the return it has so
            far; its sub-env then plays that episode out unrecorded before its next one.

    Attributes:
        eval_seconds: wall seconds spent in ``evaluate`` so far.
        last_heterogeneity: multi-agent suites (MEAL): the role-heterogeneity rows of the
            last evaluation, one per (task, split) (``heterogeneity.csv``, written through
            the run log); empty for single-agent suites.
        progress: a ``cl_suites.rundir.progress.RunProgress`` that shows each evaluation
            as a phase (set by ``RunProgress(..., evaluator=...)``), or ``None``.
    """

    def __init__(
        self,
        sequence: TaskSequence,
        *,
        seed: int = 0,
        run_log: RunLog | None = None,
        every: int | None = None,
        episodes: int | None = None,
        num_envs: int | None = None,
        vectorization_mode: VectorizationMode = "sync",
        first_eval_step: int | None = 0,
        segments: Sequence[Segment] | None = None,
        env_source: EvalEnvSource | None = None,
        video: Any = None,
        max_episode_steps: int | None = None,
        task_ends: Sequence[int] | None = None,
    ):
        self.sequence = sequence
        self.seed = int(seed)
        self.run_log = run_log
        self.every = check_positive_int("every", every or sequence.eval_every)
        self.episodes = check_positive_int("episodes", episodes or sequence.eval_episodes)
        self.num_envs = check_positive_int("num_envs", num_envs or self.episodes)
        self.segments = tuple(segments) if segments is not None else None
        self.task_ends = tuple(sorted({int(e) for e in task_ends or ()}))
        self.video = video
        self.max_episode_steps = (
            None
            if max_episode_steps is None
            else check_positive_int("max_episode_steps", max_episode_steps)
        )
        self.eval_seconds = 0.0
        self.last_heterogeneity: list[dict[str, Any]] = []
        self.progress: Any = None
        if env_source is None and sequence.eval_source is not None:
            env_source = sequence.eval_source()  # MEAL: all kitchens in one jitted call
        self.source: EvalEnvSource = env_source or TaskEnvSource(
            sequence,
            self.num_envs,
            vectorization_mode,
            render_mode="rgb_array" if video is not None else None,
        )
        if video is not None:
            self.source.check_render()
        self.next_eval_step = (
            self.point_after(0) if first_eval_step is None else int(first_eval_step)
        )
        self.last_eval_step: int | None = None
        self._start = time.monotonic()
        self._background = BackgroundCall("cl-suites-eval")

    # -- cadence ------------------------------------------------------------------------
    def due(self, total_step: int) -> bool:
        """True when ``total_step`` has reached the next evaluation point."""
        return total_step >= self.next_eval_step

    def point_after(self, total_step: int) -> int:
        """The first evaluation point after ``total_step`` (a task end included)."""
        point = self._cadence_after(total_step)
        i = bisect.bisect_right(self.task_ends, total_step)
        if i < len(self.task_ends):
            point = min(point, self.task_ends[i])
        return point

    def _cadence_after(self, total_step: int) -> int:
        if self.segments is None:
            return (total_step // self.every + 1) * self.every
        for seg in self.segments:
            if seg.end_step <= total_step:
                continue
            k = max(0, total_step - seg.start_step) // self.every + 1
            point = seg.start_step + k * self.every
            if point <= seg.end_step:
                return point
        return 2**62  # no point left in the schedule

    def points(self, start_step: int, end_step: int) -> list[int]:
        """The evaluation points still due from ``start_step`` up to ``end_step``, the
        final evaluation at ``end_step`` included (as every training loop ends with one)."""
        points = []
        point = self.next_eval_step if self.next_eval_step >= start_step else start_step
        if not self.due(point):
            point = self.point_after(point)
        while point < end_step:
            points.append(point)
            point = self.point_after(point)
        return [*points, int(end_step)]

    def episodes_per_point(self) -> int:
        """Episodes one evaluation plays: ``episodes`` per task and split."""
        return self.episodes * sum(len(task.splits) for task in self.sequence.tasks)

    # -- evaluation ---------------------------------------------------------------------
    def maybe_evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate if an evaluation point was reached; returns the new records (maybe none).

        Call it after every (vector) step of an own loop with ``total_step`` (agent steps
        summed over sub-envs; MEAL: env steps) and the greedy ``policy(obs, task_ids) ->
        actions``; a step past a point evaluates once, at that step. At a task's end,
        call it before the loop's own switch handling changes the network."""
        if not self.due(total_step):
            return []
        return self.evaluate(total_step, policy)

    def evaluate(self, total_step: int, policy: Policy) -> list[dict[str, Any]]:
        """Evaluate every task and split now; one record per (task, split).

        All envs step in lockstep, so each ``policy`` call sees one batch with the rows of
        every env that still has episodes to play (``task_ids`` tells them apart). Records
        hold ``total_step, task_id, task_name, split, mean_return, std_return, episodes,
        wall_time`` (``wall_time``: seconds since the evaluator was built).
        """
        keys = [
            (task_id, split)
            for task_id, task in enumerate(self.sequence.tasks)
            for split in task.splits
        ]
        seeds = {
            (task_id, split): task_seed(
                self.seed + EVAL_SEED_OFFSET,
                int(total_step),
                2 * task_id + self.sequence.tasks[task_id].splits.index(split),
            )
            for task_id, split in keys
        }
        capture = self.video is not None and self.video.due(total_step)
        t0 = time.monotonic()
        if self.progress is not None:
            self.progress.begin_evaluation(int(total_step), self.episodes * len(keys))
        try:
            batches = self.source.start(keys, seeds, self.episodes)
            returns, action_counts = self._play(batches, policy, total_step if capture else None)
        finally:
            self.eval_seconds += time.monotonic() - t0
            if self.progress is not None:
                self.progress.end_evaluation()
        wall_time = round(time.monotonic() - self._start, 3)
        records = [
            {
                "total_step": int(total_step),
                "task_id": task_id,
                "task_name": self.sequence.tasks[task_id].name,
                "split": split,
                "mean_return": float(np.mean(returns[(task_id, split)])),
                "std_return": float(np.std(returns[(task_id, split)])),
                "episodes": len(returns[(task_id, split)]),
                "wall_time": wall_time,
            }
            for task_id, split in keys
        ]
        self.last_heterogeneity = self._heterogeneity(total_step, action_counts)
        self.next_eval_step = self.point_after(int(total_step))
        self.last_eval_step = int(total_step)
        if capture:
            self.video.done(total_step)
        if self.run_log is not None:
            self.run_log.log_eval(records)
            if self.last_heterogeneity and hasattr(self.run_log, "log_heterogeneity"):
                self.run_log.log_heterogeneity(self.last_heterogeneity)
        return records

    def _heterogeneity(
        self, total_step: int, action_counts: dict[tuple[int, str], list[np.ndarray]]
    ) -> list[dict[str, Any]]:
        """One ``heterogeneity.csv`` row per (task, split) of a multi-agent evaluation:
        MEAL's role-heterogeneity index of the agents' greedy actions in its counted
        episodes (:func:`cl_suites.core.heterogeneity.role_heterogeneity`)."""
        rows = []
        for (task_id, split), per_env in sorted(action_counts.items()):
            width = max(c.shape[-1] for c in per_env)
            stacked = np.stack([np.pad(c, ((0, 0), (0, width - c.shape[-1]))) for c in per_env])
            rows.append(
                {
                    "total_step": int(total_step),
                    "task_id": int(task_id),
                    "task_name": self.sequence.tasks[task_id].name,
                    "split": split,
                    "heterogeneity": role_heterogeneity(stacked.transpose(1, 0, 2)),
                    "envs": len(per_env),
                }
            )
        return rows

    def rollout_observations(
        self, task_id: int, episodes: int, max_steps: int, policy: Policy, total_step: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh training episodes of ``task_id``: ``episodes`` envs play ``max_steps`` steps
        each (episodes that end restart), acting with ``policy``.

        Returns every observation the policy saw, as policy rows ``(max_steps * episodes
        [* num_agents], *obs_shape)`` ordered step by step, then env by env (then agent by
        agent); their task ids; and ``ended`` ``(max_steps, episodes)`` bool, True where an
        env's episode ended at that step. The envs are seeded from ``(seed, total_step,
        task_id)``. Used for importances that need fresh episodes of the finished task
        (MEAL's Fisher: 5 episodes x 500 steps).
        """
        seed = task_seed(self.seed + ROLLOUT_SEED_OFFSET, int(total_step), int(task_id))
        batch = self.source.start_rollout(int(task_id), int(episodes), seed)
        rows, ids, ended = [], [], []
        for _ in range(int(max_steps)):
            obs, task_ids = batch.policy_rows()
            rows.append(np.array(obs))
            ids.append(task_ids)
            ended.append(batch.step(_act(policy, [batch])))
        return np.concatenate(rows), np.concatenate(ids), np.stack(ended)

    def _play(
        self, batches: list[EvalBatch], policy: Policy, video_step: int | None
    ) -> tuple[dict[tuple[int, str], list[float]], dict[tuple[int, str], list[np.ndarray]]]:
        """Play every batch's episodes; returns each (task, split)'s episode returns and,
        for multi-agent batches with integer actions, each of its eval envs' greedy-action
        counts ``(num_agents, n_actions)`` over the steps of its recorded episodes."""
        returns: dict[tuple[int, str], list[float]] = {
            (int(t), s): [] for b in batches for t, s in zip(b.task_ids, b.splits, strict=True)
        }
        counts: list[np.ndarray | None] = [
            np.zeros((b.num_envs, b.num_agents, 0), dtype=np.int64)
            if (b.num_agents or 1) > 1
            else None
            for b in batches
        ]
        recording = self._start_recording(batches) if video_step is not None else []
        cap = self.max_episode_steps
        lengths = [np.zeros(b.num_envs, dtype=np.int64) for b in batches]
        cut_short = [np.zeros(b.num_envs, dtype=bool) for b in batches]  # playing out a cut one
        active = list(range(len(batches)))
        while active:
            actions = _act(policy, [batches[j] for j in active])
            offset = 0
            for j in active:
                b = batches[j]
                width = b.num_envs * (b.num_agents or 1)
                if counts[j] is not None:
                    counting = (b.counts < b.targets) & ~cut_short[j]
                    counts[j] = _count_actions(
                        counts[j], actions[offset : offset + width], counting
                    )
                ended = b.step(actions[offset : offset + width])
                offset += width
                lengths[j] += 1
                cut = np.zeros_like(ended) if cap is None else (lengths[j] >= cap) & ~ended
                cut &= ~cut_short[j]
                for i in np.flatnonzero(ended | cut):
                    if not cut_short[j][i] and b.counts[i] < b.targets[i]:
                        returns[(int(b.task_ids[i]), b.splits[i])].append(float(b.running[i]))
                        b.counts[i] += 1
                    b.running[i] = 0.0
                cut_short[j] = (cut_short[j] | cut) & ~ended
                lengths[j][ended] = 0
            self._record_frames(recording)
            active = [j for j in active if not batches[j].finished]
            if self.progress is not None:
                self.progress.evaluation_advance(sum(len(r) for r in returns.values()))
        if video_step is not None:
            for rec in recording:
                self.video.write(video_step, rec["task_id"], rec["split"], rec["frames"])
        per_key: dict[tuple[int, str], list[np.ndarray]] = {}
        for b, c in zip(batches, counts, strict=True):
            if c is None:
                continue
            for i in np.flatnonzero(b.targets > 0):
                per_key.setdefault((int(b.task_ids[i]), b.splits[i]), []).append(c[i])
        return returns, per_key

    # -- video --------------------------------------------------------------------------
    def _start_recording(self, batches: list[EvalBatch]) -> list[dict[str, Any]]:
        """One recording per (task, split): the first sub-env that plays an episode of it,
        until the end of that episode."""
        recording = []
        seen = set()
        for b in batches:
            for i, (t, s) in enumerate(zip(b.task_ids, b.splits, strict=True)):
                if (int(t), s) not in seen and b.targets[i] > 0:
                    seen.add((int(t), s))
                    recording.append(
                        {"batch": b, "index": i, "task_id": int(t), "split": s, "frames": []}
                    )
        self._record_frames(recording)
        return recording

    def _record_frames(self, recording: list[dict[str, Any]]) -> None:
        limit = getattr(self.video, "max_frames", None) or np.inf
        by_batch: dict[int, list[dict[str, Any]]] = {}
        for rec in recording:
            b = rec["batch"]
            if b.counts[rec["index"]] == 0 and len(rec["frames"]) < limit:  # episode running
                by_batch.setdefault(id(b), []).append(rec)
        for recs in by_batch.values():
            b = recs[0]["batch"]
            indices = [rec["index"] for rec in recs]
            if hasattr(b.env, "render_sub_envs"):
                frames = b.env.render_sub_envs(indices)
            else:
                everything = b.env.render()
                frames = [everything[i] for i in indices]
            for rec, frame in zip(recs, frames, strict=True):
                rec["frames"].append(np.asarray(frame))

    # -- beside training ----------------------------------------------------------------
    def submit(self, total_step: int, policy: Policy) -> None:
        """Evaluate at ``total_step`` in a background thread while the caller trains on
        (CORA instead stops its learners to evaluate: ``docs/fidelity.md``). ``policy``
        must not change meanwhile: pass one acting with a frozen copy of the network,
        greedy (a sampled policy would draw from torch's global generator beside
        training). One evaluation at a time: a second one
        waits for the first. The records are the ones :meth:`evaluate` would give, logged
        when the evaluation ends; :meth:`wait` (also called by ``state_dict`` and
        ``close``) waits for it and re-raises its error."""
        self.wait()
        self.next_eval_step = self.point_after(int(total_step))
        self._background.start(lambda: self.evaluate(total_step, policy))

    @property
    def evaluating(self) -> bool:
        """True while an evaluation submitted with :meth:`submit` runs."""
        return self._background.running

    def wait(self) -> None:
        """Wait for the evaluation in the background (if any); re-raise its error."""
        self._background.wait()

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self.wait()  # the records of an evaluation in the background belong before it
        return {
            "next_eval_step": self.next_eval_step,
            "last_eval_step": self.last_eval_step,
            "video": self.video.state_dict() if self.video is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_eval_step = int(state["next_eval_step"])
        self.last_eval_step = state.get("last_eval_step")
        if self.video is not None and state.get("video") is not None:
            self.video.load_state_dict(state["video"])

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.source.close()
