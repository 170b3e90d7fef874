"""Tasks, task sequences and the schedule they imply.

A *task* is a train environment (and optionally a held-out test environment) plus a
step budget. A *task sequence* is an ordered list of tasks played ``cycles`` times, with
an evaluation cadence. Everything here is plain data: simulators are only touched when
a factory is called, so schedules can be listed without any simulator installed.

Units: every budget, step and cadence here counts **agent steps** (calls of
``env.step`` summed over sub-environments), never emulator frames.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from cl_suites.errors import CLSuitesError, MissingSimulatorError

EnvFactory = Callable[..., gym.Env]
"""Builds one single-task environment (seeded later through ``reset(seed=...)``).
Called ``factory()``, or ``factory(render_mode="rgb_array")`` when frames are wanted."""

VecEnvFactory = Callable[..., gym.vector.VectorEnv]
"""Builds a batched single-task environment with the given number of sub-envs
(``factory(num_envs)``, plus ``render_mode=`` when frames are wanted). It must use
same-step autoreset (``AutoresetMode.SAME_STEP``)."""

SPLITS = ("train", "test")
RENDER_MODES: tuple[str, ...] = ("rgb_array",)
"""Render modes every sequence env offers (frames as ``uint8 (H, W, 3)`` arrays)."""
TASK_EPISODE_KEY = "task_episode"
"""Info key of a finished episode's statistics in every sequence env of every suite:
``{"r": return, "l": length in the suite's steps, "task_id": task it was played on}``
(vector envs: ``(N,)`` arrays ``r``, ``l``, ``t``, ``task_id`` with the bool ``(N,)`` mask
``"_task_episode"``). ``"episode"`` / ``"_episode"`` are never written by an env of ours:
they belong to gymnasium's ``RecordEpisodeStatistics`` (single and vector) and SB3's
``Monitor`` / ``VecMonitor``."""


class SequenceDoneError(CLSuitesError, RuntimeError):
    """A sequence env was stepped after its last task spent its budget."""


def check_render_mode(render_mode: str | None) -> str | None:
    """``render_mode`` when it is ``None`` or one of ``RENDER_MODES``, else ``ValueError``."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(
            f"render_mode {render_mode!r} is not supported; use one of {RENDER_MODES} or None"
        )
    return render_mode


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int, or a ``ValueError`` naming ``name`` when it is not a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a sequence.

    Attributes:
        name: human-readable task name (e.g. ``"climber"``).
        make_train: factory of the training environment.
        budget: training budget of this task in agent steps (per cycle).
        make_test: factory of the held-out test environment, ``None`` when the paper
            defines no test split (evaluation then uses the train split only).
        make_train_vec / make_test_vec: optional native batched factories
            (``num_envs -> VectorEnv``); when absent, the vector path batches
            ``make_train``/``make_test`` with gymnasium's vector envs.
        make_train_eval: factory of the train-split env used by evaluation when it must
            differ from the training env (Atari: no episodic-life termination);
            defaults to ``make_train``.
        records_episodes: the factory's env already reports true episode statistics
            in ``info["episode"]`` from a gymnasium ``RecordEpisodeStatistics`` (e.g.
            Atari, where a training "episode" ends at a life loss but the reported
            return is the whole game's); the sequence envs move them to
            ``info["task_episode"]``, and at a task switch read the cut game's return
            and length so far from that wrapper. Otherwise the sequence envs record
            them themselves.
        valid_actions: the actions of the sequence's ``Discrete`` action space this task
            accepts (sorted, e.g. ``(0, ..., 9)`` for MiniHack's KeyRoom), ``None`` when
            every action is valid. Sequence envs report them as ``info["action_mask"]``;
            what a task env does with another action is the suite's documented choice.
    """

    name: str
    make_train: EnvFactory
    budget: int
    make_test: EnvFactory | None = None
    make_train_vec: VecEnvFactory | None = None
    make_test_vec: VecEnvFactory | None = None
    make_train_eval: EnvFactory | None = None
    records_episodes: bool = False
    valid_actions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_positive_int(f"budget of task {self.name!r}", self.budget)
        if self.valid_actions is not None:
            actions = tuple(int(a) for a in self.valid_actions)
            if not actions or list(actions) != sorted(set(actions)) or actions[0] < 0:
                raise ValueError(
                    f"valid_actions of task {self.name!r} must be sorted, distinct, "
                    f"non-negative action indices, got {self.valid_actions!r}"
                )
            object.__setattr__(self, "valid_actions", actions)

    @property
    def splits(self) -> tuple[str, ...]:
        """The evaluation splits this task defines: ``("train",)`` or ``("train", "test")``."""
        return SPLITS if self.make_test is not None else SPLITS[:1]

    def env_factory(
        self, split: str, evaluation: bool = False, render_mode: str | None = None
    ) -> EnvFactory:
        """The single-env factory of ``split`` (``"train"`` or ``"test"``); with
        ``evaluation=True`` the train split's evaluation variant. With a ``render_mode``
        the factory is called with ``render_mode=`` (otherwise without it)."""
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {split!r}; it has {self.splits}")
        if split == "test":
            factory: EnvFactory = self.make_test  # type: ignore[assignment]
        elif evaluation and self.make_train_eval is not None:
            factory = self.make_train_eval
        else:
            factory = self.make_train
        return factory if render_mode is None else partial(factory, render_mode=render_mode)

    def vec_env_factory(self, split: str, render_mode: str | None = None) -> VecEnvFactory | None:
        """The native batched factory of ``split``, or ``None`` when there is none (with a
        ``render_mode`` it is called with ``render_mode=``)."""
        self.env_factory(split)  # validates split
        factory = self.make_train_vec if split == "train" else self.make_test_vec
        if factory is None or render_mode is None:
            return factory
        return partial(factory, render_mode=render_mode)


@dataclass(frozen=True)
class Segment:
    """One training interval of the schedule: task ``task_id`` during ``[start_step, end_step)``."""

    index: int
    cycle: int
    task_id: int
    task_name: str
    start_step: int
    end_step: int

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cycle": self.cycle,
            "task_id": self.task_id,
            "task_name": self.task_name,
            "start_step": self.start_step,
            "end_step": self.end_step,
        }


class Schedule(tuple):  # tuple[Segment, ...]
    """A task sequence cut for ``num_envs`` envs: its segments, in training order.

    A tuple of :class:`Segment` (it compares, indexes and serialises as one) that also
    knows the number of envs it was cut for, so that an env built from it follows it
    without cutting the sequence again (``TaskSequence.schedule`` makes them).
    """

    num_envs: int

    def __new__(cls, segments: Iterable[Segment] = (), num_envs: int = 1) -> Schedule:
        schedule = super().__new__(cls, segments)
        schedule.num_envs = int(num_envs)
        return schedule

    def __repr__(self) -> str:
        return f"Schedule({tuple(self)!r}, num_envs={self.num_envs})"


@dataclass(frozen=True)
class TaskSequence:
    """An ordered list of tasks, played ``cycles`` times, with an evaluation cadence.

    Attributes:
        name: sequence name (e.g. ``"Procgen6"``).
        tasks: the tasks in training order; task ids are their positions.
        observation_space / action_space: the spaces shared by every task.
        cycles: how many times the whole list is played.
        eval_every: evaluation cadence in agent steps.
        eval_episodes: episodes per task and split at each evaluation.
        extra: the ``pip install "cl-suites[<extra>]"`` extra that provides the simulator.
        required_modules: importable modules the simulator needs (checked at env construction).
        metric_settings: suite-level settings the metrics read (``smoothing_window``,
            ``return_clip_min``, ...).
        preflight: a cheap check run when a sequence env is constructed (after the
            module check), e.g. that CHORES' data and simulator build exist; it raises
            the suite's documented error. ``None``: no check.
        render_fps: frames per second of recorded videos (one frame per agent step).
        step_unit: what one step of the budgets and counters is, as axis labels and
            messages name it: ``"agent steps"`` (one ``step`` of one (sub-)env), MEAL's
            ``"env steps"`` (one joint action of all agents).
        preprocessing: what the task envs already do to the simulator's observations,
            said when a wrapper for raw simulators (gymnasium's ``AtariPreprocessing``,
            SB3's Atari wrappers) asks a sequence env for ``ale`` and friends;
            ``None``: nothing to say beyond "not a raw ALE env".
        eval_source: for tasks that are not single-agent gymnasium envs (MEAL's
            kitchens), ``eval_source()`` gives the ``EvalEnvSource`` that
            ``cl_suites.core.evaluation.Evaluator`` plays them with by default; ``None``:
            the tasks' own envs (``TaskEnvSource``).
    """

    name: str
    tasks: tuple[TaskSpec, ...]
    observation_space: gym.Space
    action_space: gym.Space
    cycles: int = 1
    eval_every: int = 1
    eval_episodes: int = 10
    extra: str | None = None
    required_modules: tuple[str, ...] = ()
    metric_settings: Mapping[str, Any] = field(default_factory=dict)
    preflight: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    render_fps: int = 30
    step_unit: str = "agent steps"
    preprocessing: str | None = field(default=None, compare=False, repr=False)
    eval_source: Callable[[], Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"task sequence {self.name!r} has no tasks")
        object.__setattr__(self, "tasks", tuple(self.tasks))
        check_positive_int("cycles", self.cycles)
        check_positive_int("eval_every", self.eval_every)
        check_positive_int("eval_episodes", self.eval_episodes)
        restricted = [t for t in self.tasks if t.valid_actions is not None]
        if restricted:
            if not isinstance(self.action_space, gym.spaces.Discrete):
                raise ValueError(
                    f"{self.name}: valid_actions need a Discrete action space, "
                    f"got {self.action_space}"
                )
            n = int(self.action_space.n)
            for task in restricted:
                if task.valid_actions[-1] >= n:
                    raise ValueError(
                        f"valid_actions {task.valid_actions} of task {task.name!r} are not "
                        f"all in the sequence's action space {self.action_space}"
                    )

    def action_masks(self) -> np.ndarray | None:
        """Which actions each task accepts: bool ``(num_tasks, n_actions)``, row = task id.

        ``None`` when no task restricts its actions (every action is valid everywhere).
        """
        if all(t.valid_actions is None for t in self.tasks):
            return None
        n = int(self.action_space.n)
        masks = np.zeros((len(self.tasks), n), dtype=bool)
        for task_id, task in enumerate(self.tasks):
            masks[task_id, list(task.valid_actions or range(n))] = True
        return masks

    def check_installed(self) -> None:
        """Raise ``ImportError`` naming the extra to install when a simulator module is
        missing, then run the suite's ``preflight`` check (if any)."""
        missing = [m for m in self.required_modules if importlib.util.find_spec(m) is None]
        if missing:
            hint = f'pip install "cl-suites[{self.extra}]"' if self.extra else "install them"
            raise MissingSimulatorError(
                f"{self.name} needs the module(s) {', '.join(missing)}, which are not installed; "
                f"run: {hint}"
            )
        if self.preflight is not None:
            self.preflight()

    def schedule(self, num_envs: int = 1) -> Schedule:
        """Which task trains over which agent-step range, in training order.

        With ``num_envs`` sub-environments the env counts ``num_envs`` agent steps per
        vector step and switches all of them together, at the first vector step that
        spends the task's budget, so a task can run up to ``num_envs - 1`` steps over
        its budget; the returned ranges are the exact ones the env will follow.
        """
        num_envs = check_positive_int("num_envs", num_envs)
        segments: list[Segment] = []
        start = 0
        for cycle in range(self.cycles):
            for task_id, task in enumerate(self.tasks):
                steps = math.ceil(task.budget / num_envs) * num_envs
                segments.append(
                    Segment(len(segments), cycle, task_id, task.name, start, start + steps)
                )
                start += steps
        return Schedule(segments, num_envs)

    def follow(self, num_envs: int | None = None, schedule: Schedule | None = None) -> Schedule:
        """The schedule an env of this sequence follows: ``schedule``, cut already (by the
        job, which needs it before any env exists), or the sequence cut for ``num_envs``;
        one of them, or both when they agree."""
        if schedule is None:
            if num_envs is None:
                raise ValueError(f"{self.name}: give num_envs or a schedule to follow")
            return self.schedule(num_envs)
        if not isinstance(schedule, Schedule):
            raise TypeError(
                f"schedule must be a Schedule (TaskSequence.schedule(num_envs)), got "
                f"{type(schedule).__name__}"
            )
        if num_envs is not None and num_envs != schedule.num_envs:
            raise ValueError(
                f"num_envs {num_envs!r} disagrees with the schedule's {schedule.num_envs} envs"
            )
        names = [t.name for t in self.tasks] * self.cycles
        if [segment.task_name for segment in schedule] != names:
            raise ValueError(
                f"the schedule ({len(schedule)} segments) is not one of {self.name} "
                f"({len(self.tasks)} tasks x {self.cycles} cycles)"
            )
        return schedule

    @property
    def total_steps(self) -> int:
        """Total training budget of the sequence for a single env, in agent steps."""
        return sum(task.budget for task in self.tasks) * self.cycles

    def describe(self) -> dict[str, Any]:
        """JSON-ready description of the sequence (used for run-log metadata)."""
        return {
            "suite": self.name,
            "tasks": [
                {"task_id": i, "task_name": t.name, "budget": t.budget, "splits": list(t.splits)}
                for i, t in enumerate(self.tasks)
            ],
            "cycles": self.cycles,
            "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes,
            "metric_settings": dict(self.metric_settings),
        }


def task_seed(seed: int, cycle: int, task_id: int) -> int:
    """Deterministic 31-bit seed of a task's environment, derived from the run seed."""
    return int(np.random.SeedSequence([seed, cycle, task_id]).generate_state(1)[0] >> 1)


@dataclass(frozen=True)
class TaskSwitch:
    """What subscribers receive when the sequence moves on.

    ``previous`` is the segment that just spent its budget, ``current`` the one that
    starts (``None`` when the sequence is over); ``total_step`` is the agent step at
    which it happened.
    """

    previous: Segment
    current: Segment | None
    total_step: int


TaskSwitchCallback = Callable[[TaskSwitch], None]


class SequenceCursor:
    """The position of a run in its schedule; one shared piece for every sequence env.

    ``advance(n)`` counts ``n`` agent steps in the current segment and reports whether
    its budget is spent; ``next_segment()`` moves on and notifies subscribers. It follows
    ``schedule`` (``sequence.follow(...)``), cut for ``schedule.num_envs`` envs.
    """

    def __init__(self, sequence: TaskSequence, schedule: Schedule):
        self.sequence = sequence
        self.segments = schedule
        self.num_envs = schedule.num_envs
        self._listeners: list[TaskSwitchCallback] = []
        self.run_seed: int | None = None
        self.restart()

    def restart(self) -> None:
        """Go back to the start of the schedule (listeners and run seed are kept)."""
        self.index = 0
        self.total_step = 0
        self.task_step = 0
        self.done = False
        self.switch_pending = False
        self._segment_end = self.segments[0].end_step

    def start(self, run_seed: int) -> None:
        """Start the run over from step 0 with ``run_seed`` (an integer >= 0)."""
        if (
            isinstance(run_seed, bool)
            or not isinstance(run_seed, (int, np.integer))
            or run_seed < 0
        ):
            raise ValueError(f"the seed must be an integer >= 0, got {run_seed!r}")
        self.run_seed = int(run_seed)
        self.restart()

    def begin_episode(self, seed: int | None, draw_seed: Callable[[], int]) -> bool:
        """What a ``reset(seed=...)`` of a sequence env starts; True when a task starts.

        With a seed, or on the very first reset (seed from ``draw_seed()``), the run
        starts over from step 0. After a segment spent its budget (``switch_pending``),
        the next task starts. Otherwise the current task just begins a new episode.
        """
        if seed is not None or self.run_seed is None:
            self.start(int(seed) if seed is not None else draw_seed())
            return True
        if self.switch_pending:
            if self.done:
                raise SequenceDoneError(
                    f"the {self.sequence.name} sequence is done; call reset(seed=...) to start over"
                )
            self.switch_pending = False
            return True
        return False

    def env_seed(self, segment: Segment) -> int:
        """The seed of ``segment``'s task env, derived from the run seed."""
        assert self.run_seed is not None, "start() the cursor first"
        return task_seed(self.run_seed, segment.cycle, segment.task_id)

    @property
    def segment(self) -> Segment:
        return self.segments[self.index]

    @property
    def task(self) -> TaskSpec:
        return self.sequence.tasks[self.segment.task_id]

    def subscribe(self, callback: TaskSwitchCallback) -> Callable[[], None]:
        """Call ``callback(TaskSwitch)`` at every switch; returns a function that unsubscribes."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def advance(self, agent_steps: int) -> bool:
        """Count ``agent_steps``; True when this spends the current segment's budget."""
        if self.done or self.total_step >= self._segment_end:
            self._refuse_advance()
        self.total_step += agent_steps
        self.task_step += agent_steps
        return self.total_step >= self._segment_end

    def _refuse_advance(self) -> None:
        if self.done:
            raise SequenceDoneError(
                f"the {self.sequence.name} sequence is done (all {len(self.segments)} "
                "segments played); create a new env or call reset(seed=...) to start over"
            )
        raise RuntimeError(
            f"task {self.segment.task_name!r} has spent its budget at step "
            f"{self.total_step}; call reset() to start the next task"
        )

    def next_segment(self) -> Segment | None:
        """Leave the spent segment; returns the new one, or ``None`` at the end of the sequence."""
        previous = self.segment
        if self.index + 1 < len(self.segments):
            self.index += 1
            self.task_step = 0
            self._segment_end = self.segment.end_step
            current: Segment | None = self.segment
        else:
            self.done = True
            current = None
        event = TaskSwitch(previous, current, self.total_step)
        for listener in list(self._listeners):
            listener(event)
        return current

    def info(self, task_switched: bool) -> dict[str, Any]:
        """The info keys every sequence env reports at every step and reset."""
        segment = self.segment
        return {
            "task_id": segment.task_id,
            "task_name": segment.task_name,
            "cycle": segment.cycle,
            "task_step": self.task_step,
            "total_step": self.total_step,
            "task_switched": task_switched,
            "sequence_done": self.done,
        }

    def state_dict(self) -> dict[str, int | bool | None]:
        """Position in the schedule and run seed, for checkpoints."""
        return {
            "index": self.index,
            "total_step": self.total_step,
            "task_step": self.task_step,
            "done": self.done,
            "switch_pending": self.switch_pending,
            "run_seed": self.run_seed,
        }

    def load_state_dict(self, state: Mapping[str, int | bool | None]) -> None:
        self.index = int(state["index"])
        self.total_step = int(state["total_step"])
        self.task_step = int(state["task_step"])
        self.done = bool(state["done"])
        self.switch_pending = bool(state["switch_pending"])
        self.run_seed = state["run_seed"]
        self._segment_end = self.segment.end_step


class ScheduleAccessors:
    """``schedule()``, ``on_task_switch()`` and ``current_task`` for any env that keeps
    its position in a ``self.cursor`` (a ``SequenceCursor``)."""

    cursor: SequenceCursor

    def schedule(self) -> tuple[Segment, ...]:
        """Exact step ranges of every segment (see ``TaskSequence.schedule``)."""
        return self.cursor.segments

    def on_task_switch(self, callback: TaskSwitchCallback) -> Callable[[], None]:
        """Subscribe ``callback(TaskSwitch)`` to task switches; returns an unsubscribe function."""
        return self.cursor.subscribe(callback)

    @property
    def current_task(self) -> Segment:
        """The segment being trained now."""
        return self.cursor.segment

    # The position as plain attributes, for ``VecEnv.get_attr("task_id")`` and friends.
    @property
    def task_id(self) -> int:
        """Id of the task being trained now (after the last step: the last task's)."""
        return self.cursor.segment.task_id

    @property
    def task_name(self) -> str:
        return self.cursor.segment.task_name

    @property
    def cycle(self) -> int:
        return self.cursor.segment.cycle

    @property
    def total_step(self) -> int:
        """Agent steps played so far in the whole sequence."""
        return self.cursor.total_step

    @property
    def step_unit(self) -> str:
        """The unit of ``total_step`` and the budgets (``TaskSequence.step_unit``)."""
        return self.cursor.sequence.step_unit

    @property
    def total_steps(self) -> int:
        """Agent steps of the whole schedule (pass it as SB3's ``total_timesteps``)."""
        return self.cursor.segments[-1].end_step

    @property
    def sequence_done(self) -> bool:
        """True once the last task has spent its budget."""
        return self.cursor.done
