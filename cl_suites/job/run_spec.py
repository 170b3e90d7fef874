"""One typed run specification, resolved in one place.

Every option of a run is declared once, with its type (an
:class:`~cl_suites.job.option_specs.Opt`), its default and a one-line doc:

* the job options: the fields of :class:`JobOptions` here (a frozen dataclass; the job
  reads its typed fields);
* the common suite options: :data:`SUITE_OPTIONS` here (the rest are the suite builders'
  keywords);
* the hyperparameters (learner, CL method, policy): each learner's entry declares its own
  (``LearnerEntry.options``, in its wing: ``cl_suites.job.torch.options``,
  ``cl_suites.job.jax.entry``); their defaults are the preset tables of
  ``cl_suites.job.presets``, composed by ``cl_suites.job.hyperparameters``.

:func:`resolve` turns a :class:`~cl_suites.request.RunRequest` (suite, method, learner,
preset, seeds, num_envs, overrides) into one frozen :class:`JobSpec` per seed, building no
env, in one pass: the option values are checked, the
suite's catalog entry and the learner's entry (``cl_suites.job.learners``) are looked up
once, the learner's entry gives the settings (presets, the run's overrides routed), the
left-over names are checked as suite options, the suite's runtime builds the instance.
``cl-suites run`` (``--print-config`` too), ``cl-suites sweep`` (its preflight and its
workers), config files and the library call ``run_main_job`` all go through it, so they
accept, refuse and convert every option alike:
each value is checked against its declaration, each name against the options the run's
suite, learner and method take (:func:`cl_suites.config.check_names`: did-you-mean and the
valid names by section).

Steps are agent steps (``env.step`` calls summed over sub-envs); MEAL counts env steps
(one joint action of all agents).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cl_suites.config import (
    argument_docs,
    check_names,
    check_seeds,
    declared_keywords,
    keyword_defaults,
)
from cl_suites.core.task import Schedule, TaskSequence
from cl_suites.core.vector import VECTORIZATION_MODES
from cl_suites.core.workers import check_env_splits
from cl_suites.declarations import (
    MEAL_REPLAY_METHODS,
    base_method,
    check_method_name,
    is_builtin_method,
)
from cl_suites.errors import BadValueError, ConfigError, MethodPluginError
from cl_suites.job import presets
from cl_suites.job.hyperparameters import POLICY_OPTIONS, Hyperparameters
from cl_suites.job.learners import (
    LearnerEntry,
    find_learner,
    learners_for,
    load_learner,
    seed_group_learners,
)
from cl_suites.job.method_options import MethodOption
from cl_suites.job.option_specs import BOOL, Opt, Option, integer
from cl_suites.job.vectorization import AUTO, VectorizationChoice
from cl_suites.job.vectorization import choose as choose_vectorization
from cl_suites.metrics.plasticity_tracker import PlasticitySettings
from cl_suites.remedies import OPTION_REMEDY, OPTION_RULES, check_options_for, split_method
from cl_suites.remedies import option_docs as remedy_option_docs
from cl_suites.request import RunRequest
from cl_suites.suites import COMMON_KWARGS, SuiteInfo, find_suite
from cl_suites.suites.runtime import SuiteInstance

TORCH_THREADS = 1
"""The default of ``torch_threads`` (and so of ``update_threads``) for every suite: the one
place the thread default is set. torch's own default is one intra-op thread per core, and
its OpenMP workers spin after each operation; next to other processes on the same cores
(a cluster node, a laptop) the spinning workers and the other processes take turns and a
run collapses: a Diagnostic small run took 438 s wall and 83 s CPU with torch's default
next to other jobs on 2 cores, 23 s and 6 s with 1 thread; a MEAL run that steps JAX and
torch in turn in one process was 5-10x slower with one thread per core
(``benchmarks/speed/bench_contention.py``, ``benchmarks/speed/bench_meal.py``). One thread costs at
most 1.1-1.25x on a quiet machine."""


def _check_policy_lag_threads(hp: Mapping[str, Any], job: JobOptions) -> None:
    """With ``policy_lag=1`` the update shares the process's torch threads with acting:
    an ``update_threads`` other than ``torch_threads`` is refused."""
    lag = hp.get("learner", {}).get("policy_lag", 0)
    if lag and job.update_threads not in (None, job.torch_threads):
        raise BadValueError(
            f"update_threads={job.update_threads} needs policy_lag 0: with policy_lag 1 the "
            f"update runs beside acting on torch_threads={job.torch_threads} threads; set "
            "torch_threads instead"
        )


def _check_env_splits(job: JobOptions, num_envs: int, info: SuiteInfo) -> None:
    """``env_splits`` must divide ``num_envs`` into equal blocks, leave every env worker a
    sub-env of each block, and apply to a suite whose sub-envs step on the CPU; one line
    naming the value and the allowed ones otherwise (before anything is built)."""
    splits = job.env_splits
    if splits == 1:
        return
    if not info.runtime.steps_on_cpu:
        raise BadValueError(
            f"env_splits={splits}: {info.name} batches its own simulators, there are no env "
            "workers to step one block while the policy acts on the next; use env_splits=1"
        )
    try:
        check_env_splits(splits, num_envs)
    except ValueError as e:
        raise BadValueError(str(e)) from None
    block = num_envs // splits
    if job.env_workers is not None and job.env_workers > block:
        raise BadValueError(
            f"env_workers={job.env_workers} cannot each step a share of every block of "
            f"{block} envs (num_envs={num_envs}, env_splits={splits}); use env_workers "
            f"from 1 to {block}"
        )


def _opt(default: Any, check: Opt, doc: str) -> Any:
    """A :class:`JobOptions` field: its default, its type and range, its one-line doc."""
    return field(default=default, metadata={"check": check, "doc": doc})


_BOOL = BOOL
_POSITIVE = Opt("int", low=1)
_POSITIVE_OR_NONE = Opt("int", low=1, none_ok=True)


@dataclass(frozen=True)
class JobOptions:
    """The options the job itself takes (``--set KEY=VALUE``, config files, ``overrides``).

    A ``None`` default whose doc says "default: the suite's" / "the preset's" /
    "torch_threads" is decided by the run; :func:`resolve` fills it, so a resolved run's
    fields hold the values it uses. ``checks`` are applied to the values a run sets.
    """

    checkpoint_every: int | None = _opt(
        None, _POSITIVE, "steps between checkpoints (default: the suite's eval_every)"
    )
    vectorization_mode: str = _opt(
        AUTO,
        Opt("choice", choices=(*VECTORIZATION_MODES, AUTO)),
        "batching of simulators without a native batched backend (torch learners): one "
        "process, a process per env, env_workers processes, or auto: workers where the cost "
        "model says they pay on this machine's cores and device",
    )
    env_workers: int | None = _opt(
        None,
        _POSITIVE_OR_NONE,
        "worker processes of vectorization_mode=workers (default: the usable cores)",
    )
    env_splits: int = _opt(
        1,
        _POSITIVE,
        "blocks of envs the torch learner acts on one at a time while the env workers step "
        "the block before (2: double-buffered acting; must divide num_envs)",
    )
    replay_on_disk: bool | str | None = _opt(
        None,
        Opt("choice", choices=(True, False, "auto"), none_ok=True),
        "replay buffers (CLEAR; EWC/online-EWC/P&C frames) on disk in RUN_DIR/replay: "
        "true, false or auto (default: RAM if it fits; torch learners)",
    )
    multi_head: bool | None = _opt(None, _BOOL, "one output head per task (default: the preset's)")
    task_id_input: bool | None = _opt(
        None, _BOOL, "the task id as a one-hot policy input (default: the preset's)"
    )
    progress: bool = _opt(
        False,
        _BOOL,
        "draw the progress bar (library calls stay quiet; the CLI asks); "
        "RUN_DIR/progress.json is written either way",
    )
    memory_growth_warn: float | None = _opt(
        0.25,
        Opt("float", low=0.0, none_ok=True),
        "warn when resident memory at a task's end exceeds the last task's end by more "
        "than this fraction (none: never)",
    )
    device: str = _opt(
        "auto",
        Opt("str"),
        "torch device: auto (a GPU for convolutional policies, else the CPU), cpu, cuda, "
        "cuda:N (torch learners)",
    )
    device_observations: bool | None = _opt(
        None,
        Opt("bool", none_ok=True),
        "MEAL's torch learner takes the observations on the device JAX shares with it "
        "(no host copy): default on a shared GPU only; true: on the CPU too (bit-identical)",
    )
    jax_cache_dir: str | None = _opt(
        None,
        Opt("str", none_ok=True),
        "JAX's persistent compilation cache: a directory where MEAL's compiled programs are "
        "kept for later runs of the same shapes (default: none)",
    )
    keep_task_policies: bool | None = _opt(
        None,
        Opt("bool", none_ok=True),
        "keep the policy of every task's end as RUN_DIR/checkpoint/task-NNN.* (the coordination "
        "matrix's input; default: the suite's, MEAL: yes; 1.5 MB each on MEAL's paper network, "
        "7-8 MB on CORA's CNNs)",
    )
    report: bool = _opt(True, _BOOL, "write the metrics report to RUN_DIR/report at the end")
    tensorboard: bool = _opt(False, _BOOL, "training scalars and eval returns to RUN_DIR/tb")
    wandb: bool | str | None = _opt(
        None,
        Opt("bool|str", none_ok=True),
        "the same scalars to Weights & Biases; a string names the project (ppo-jax: eval and "
        "episode returns only)",
    )
    capture_video: bool = _opt(
        False,
        _BOOL,
        "record one evaluation episode per task and split into RUN_DIR/videos at the first "
        "evaluation and after each task's training",
    )
    video_every: int | None = _opt(
        None, _POSITIVE_OR_NONE, "record videos every this many steps instead of per task"
    )
    video_length: int | None = _opt(
        None, _POSITIVE_OR_NONE, "frames per video at most (default: the whole episode)"
    )
    eval_at_start: bool | None = _opt(
        None, _BOOL, "evaluate before training (default: the suite's; MEAL: no)"
    )
    eval_per_task: bool | None = _opt(
        None,
        _BOOL,
        "count eval_every from the start of each task, not on the global grid "
        "(default: the suite's; MEAL: yes)",
    )
    eval_deterministic: bool = _opt(True, _BOOL, "greedy (true) or sampled evaluation actions")
    eval_beside_training: bool = _opt(
        False,
        _BOOL,
        "evaluate in a background thread with a copy of the network while training goes on "
        "(torch learners, greedy evaluation)",
    )
    eval_max_episode_steps: int | None = _opt(
        None,
        _POSITIVE_OR_NONE,
        "evaluation-only episode cap, in steps of one eval env (default: whole episodes)",
    )
    plasticity: bool = _opt(
        True,
        _BOOL,
        "plasticity diagnostics (dormant units, feature rank, weight and gradient change, "
        "churn) at every evaluation point into RUN_DIR/plasticity.csv",
    )
    plasticity_tau: float = _opt(
        0.025,
        Opt("float", low=0.0, high=1.0, low_open=True, high_open=True),
        "dormant threshold of ReDo's normalised unit score (a unit is dormant at or below it)",
    )
    plasticity_pooling: str = _opt(
        "redo",
        Opt("choice", choices=("redo", "plasticine")),
        "a network's dormant ratio: dormant units over all units (redo) or the mean of the "
        "layers' ratios (plasticine)",
    )
    plasticity_stable_rank: str = _opt(
        "srank",
        Opt("choice", choices=("srank", "frobenius")),
        "stable rank of the features: Kumar et al.'s srank (delta 0.01; Plasticine's) or "
        "sum(s^2)/max(s)^2",
    )
    plasticity_weight_scale: str = _opt(
        "rms",
        Opt("choice", choices=("rms", "l2")),
        "weight norm and change: root mean square over the weights (Plasticine's) or the "
        "Euclidean norm",
    )
    plasticity_probe_size: int = _opt(
        256, _POSITIVE, "probe observations per task seen (taken from its first steps)"
    )
    plasticity_probe_stride: int = _opt(
        4, _POSITIVE, "vector steps between two takes of probe observations"
    )
    torch_threads: int = _opt(
        TORCH_THREADS, _POSITIVE, "torch intra-op threads while training (torch learners)"
    )
    update_threads: int | None = _opt(
        None,
        _POSITIVE,
        "torch intra-op threads in the learner's updates (default: torch_threads)",
    )

    def plasticity_settings(self, probe_stride: int | None = None) -> PlasticitySettings:
        """The ``plasticity_*`` options as the tracker's settings (``probe_stride``: instead
        of ``plasticity_probe_stride``, for a learner that takes probe observations its
        own way)."""
        return PlasticitySettings(
            tau=self.plasticity_tau,
            pooling=self.plasticity_pooling,
            stable_rank=self.plasticity_stable_rank,
            weight_scale=self.plasticity_weight_scale,
            probe_size=self.plasticity_probe_size,
            probe_stride=self.plasticity_probe_stride if probe_stride is None else probe_stride,
        )

    def given(self, names: Sequence[str]) -> dict[str, Any]:
        """The values of ``names`` (the options a run set) as a dict."""
        return {name: getattr(self, name) for name in names}


JOB_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(JobOptions)}
JOB_OPTIONS: tuple[str, ...] = tuple(JOB_FIELDS)
"""The job options' names (the fields of :class:`JobOptions`)."""


SUITE_OPTIONS: dict[str, Option] = {
    "steps_per_task": Option("suite", integer(None), "training budget per task (agent/env steps)"),
    "cycles": Option("suite", integer(None), "passes over the task list"),
    "eval_every": Option("suite", integer(None), "evaluation cadence (agent/env steps)"),
    "eval_episodes": Option("suite", integer(None), "episodes per task and split"),
}
"""The common suite options (``COMMON_KWARGS``; the rest of a suite's options are its
builder's keywords): section, type and range, one-line doc. Each learner declares its own
options in its wing (``LearnerEntry.options``)."""
assert set(COMMON_KWARGS) == set(SUITE_OPTIONS)

OPTION_SPECS: dict[str, Opt] = {
    **{name: f.metadata["check"] for name, f in JOB_FIELDS.items()},
    **{name: o.check for name, o in SUITE_OPTIONS.items() if o.check is not None},
}
"""What the options every run takes must be (job options, common suite options)."""


REMEDY_OPTION_SPECS: dict[str, Opt] = {
    name: Opt(
        rule.kind,
        low=rule.low,
        high=rule.high,
        low_open=rule.low_open,
        high_open=rule.high_open,
        choices=rule.choices,
        none_ok=rule.none_ok,
    )
    for name, rule in OPTION_RULES.items()
}
"""What the remedies' options must be (``cl_suites.remedies``: declared there once)."""


def _check_remedy_layers(method: str, remedy: str | None, hp: Mapping[str, Any]) -> None:
    """``ConfigError`` for a remedy that works on hidden units (ReDo, continual backprop)
    on a network without any (an MLP with ``net_arch=[]``): one line."""
    if remedy not in ("redo", "cbp"):
        return
    learner = hp.get("learner", {})
    if "hidden_sizes" in learner:
        hidden, name = learner["hidden_sizes"], "hidden_sizes"
    elif hp.get("network", "mlp") == "mlp":
        hidden, name = hp.get("net_arch"), "net_arch"
    else:
        return  # a convolutional network: its layers are there
    if not hidden:
        raise ConfigError(
            f"method {method!r}: {remedy} works on hidden units, and the network has none "
            f"({name}=[]); give it hidden layers (e.g. --set {name}=[64,64])"
        )


def run_option_specs(entry: LearnerEntry, own: Mapping[str, MethodOption]) -> dict[str, Opt]:
    """What each option of a run of learner ``entry`` must be: :data:`OPTION_SPECS`, the
    learner's declared options and the own method's (``own``). ``ConfigError`` for a
    learner that declares an option of the job or a common suite option."""
    declared = entry.options()
    taken = sorted(set(declared) & set(OPTION_SPECS))
    if taken:
        raise ConfigError(
            f"learner {entry.name!r} declares option(s) {', '.join(map(repr, taken))}, which "
            "the job or every suite takes first (job options, steps_per_task, ...): the "
            "learner would never get them; rename them in its entry"
        )
    learner = {name: o.check for name, o in declared.items() if o.check is not None}
    own_specs = {name: o.check for name, o in own.items()}
    return {**OPTION_SPECS, **REMEDY_OPTION_SPECS, **learner, **own_specs}


def check_option(name: str, value: Any, specs: Mapping[str, Opt] | None = None) -> Any:
    """``value`` checked against the declaration of ``name`` in ``specs`` (default:
    ``OPTION_SPECS``; unchanged for an undeclared option; an integral float as an ``int``
    for an integer option); ``BadValueError`` naming the option, its range and the value."""
    spec = (OPTION_SPECS if specs is None else specs).get(name)
    if spec is None:
        return value
    try:
        return spec.check(name, value)
    except ValueError as e:
        raise BadValueError(str(e)) from None


@dataclass(frozen=True)
class JobSpec:
    """A main-job run resolved from its arguments, before any env is built.

    Attributes:
        suite: the catalog entry; ``sequence`` the suite's task sequence with the run's
            kwargs (``suite_kwargs``), built without touching a simulator.
        method / learner / preset: the resolved names (``learner`` never ``None``).
        hp: the frozen ``Hyperparameters`` after the overrides (``hp.learner``,
            ``hp.method``, ``hp.policy``; also read as ``hyperparameters.preset_settings``'s keys).
        options: the job options, typed, every field resolved.
        options_set: the job options the run set (what ``config()`` lists).
        num_envs: envs of the training env (MEAL: envs, each with ``num_agents`` agents).
        multi_head / task_id_input: policy options.
        instance: the suite as built for this run by its catalog entry's runtime
            (``SingleAgentSuite``; MEAL: the ``MealSuite``, its kitchens and agents).
        learner_entry: the learner's entry (``cl_suites.job.learners``): its family
            and how its settings were routed.
        learner_config: the learner's checked configuration (``ppo-jax``: its
            ``IPPOConfig``; ``None`` for the torch learners, whose keywords are
            ``hp.learner``).
        device: the torch device the run trains on (``cl_suites.job.torch.device``: ``cpu``
            or ``cuda:N``, decided here from the job option ``device``; ``None`` for
            ``ppo-jax``, where JAX picks its platform).
    """

    suite: SuiteInfo
    method: str
    learner: str
    preset: str
    hp: Hyperparameters
    options: JobOptions
    options_set: tuple[str, ...]
    suite_kwargs: dict[str, Any]
    sequence: TaskSequence
    num_envs: int
    multi_head: bool
    task_id_input: bool
    instance: SuiteInstance
    learner_entry: LearnerEntry = field(repr=False)
    learner_config: Any = field(default=None, repr=False)
    device: str | None = None
    vectorization: VectorizationChoice | None = None
    """How ``options.vectorization_mode`` was decided (``auto``: the cost model's choice and
    reason, ``cl_suites.job.vectorization``); ``None`` when the run set it."""
    request: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The run as asked for: ``suite``, ``method``, ``learner``, ``preset``, ``num_envs``
    and the ``overrides`` given (checked; values JSON cannot hold, such as callables,
    left out). ``metadata.json`` keeps it, so that ``cl-suites run --resume --run-dir DIR``
    can take the rest of the command from the run directory."""

    @property
    def meal(self) -> Any:
        """The ``MealSuite`` of a MEAL run (what ``baselines_jax`` trains on), else
        ``None``."""
        return self.instance if self.suite.family == "meal" else None

    @cached_property
    def schedule(self) -> Schedule:
        """The run's schedule: ``sequence`` cut for ``num_envs`` envs (computed once; the
        training env follows it, ``runtime.vector_env``), each task longer by the
        learner's extra steps of a task (``extra_task_steps``: ``ppo-jax`` with PackNet,
        the fine-tune phase after each task's budget, MEAL's ``finetune_timesteps``)."""
        schedule = self.sequence.schedule(self.num_envs)
        extra_of = getattr(self.learner_entry, "extra_task_steps", None)
        extra = int(extra_of(self.learner_config)) if extra_of is not None else 0
        return stretch_schedule(schedule, extra) if extra else schedule

    @property
    def rollout_steps(self) -> int:
        """Steps per env of one learner update (torch ``n_steps``, JAX ``num_steps``)."""
        return self.learner_entry.rollout_steps(self.hp)

    @property
    def job(self) -> dict[str, Any]:
        """The job options the run set, as given (after their checks)."""
        return self.options.given(self.options_set)

    @property
    def num_agents(self) -> int:
        """Agents per env: SB3 slots per env (1 for single-agent suites)."""
        return self.instance.num_agents

    @property
    def step_unit(self) -> str:
        """The run metadata's ``step_unit`` (the catalog entry's)."""
        return self.suite.step_unit.text

    def config(self) -> dict[str, Any]:
        """The resolved configuration as JSON-ready data, the job options the run set
        (the golden file's form; ``describe`` lists every job option)."""
        return {
            "suite": self.suite.id,
            "method": self.method,
            "learner": self.learner,
            "preset": self.preset,
            "num_envs": self.num_envs,
            "suite_kwargs": dict(self.suite_kwargs),
            "job": self.job,
            "hyperparameters": self.hyperparameters(),
        }

    def describe(self) -> dict[str, Any]:
        """``config()`` with every job option's resolved value and the torch device the
        run would train on (``--print-config``)."""
        return {**self.config(), "job": dataclasses.asdict(self.options), "device": self.device}

    def hyperparameters(self) -> dict[str, Any]:
        return {
            **{
                k: v
                for k, v in self.hp.to_dict().items()
                if k not in ("suite_defaults", "num_envs")
            },
            "multi_head": self.multi_head,
            "task_id_input": self.task_id_input,
        }


def stretch_schedule(schedule: Schedule, extra: int) -> Schedule:
    """``schedule`` with every segment ``extra`` steps longer (the later ones shifted)."""
    segments = [
        dataclasses.replace(
            seg, start_step=seg.start_step + i * extra, end_step=seg.end_step + (i + 1) * extra
        )
        for i, seg in enumerate(schedule)
    ]
    return Schedule(segments, schedule.num_envs)


def cadence_note(spec: JobSpec) -> str | None:
    """One line when the run's evaluation or checkpoint cadence alone would leave a task's
    end out (Procgen6 small with ``--steps-per-task 2000``: ``eval_every=4000``), else
    ``None``. The job then evaluates and checkpoints at every task's end besides the
    cadence (``Evaluator(task_ends=...)``, the checkpoint callbacks), so that the
    end-of-task rows the metrics read (MEAL's P and F, forgetting) always exist and a run
    killed late in a task resumes from that task's start at worst; the note is printed
    once and recorded in ``metadata.json`` (``evaluation.cadence_note``)."""
    job, every = spec.options, int(spec.sequence.eval_every)
    ckpt = int(job.checkpoint_every or every)
    ends = spec.schedule[:-1]  # the sequence's end is always both
    if job.eval_per_task:
        eval_missed = [s.end_step for s in ends if (s.end_step - s.start_step) % every]
    else:
        eval_missed = [s.end_step for s in ends if s.end_step % every]
    ckpt_missed = [s.end_step for s in ends if s.end_step % ckpt]
    if not eval_missed and not ckpt_missed:
        return None
    missed = sorted({*eval_missed, *ckpt_missed})
    shown = ", ".join(str(e) for e in missed[:3]) + (", ..." if len(missed) > 3 else "")
    what = [
        *([f"eval_every={every}"] if eval_missed else []),
        *([f"checkpoint_every={ckpt}"] if ckpt_missed else []),
    ]
    return (
        f"{' and '.join(what)} miss task ends (steps {shown}): every task's end is "
        "evaluated and checkpointed too"
    )


def _check_own_options(method: str, own: Mapping[str, MethodOption], info: SuiteInfo) -> None:
    """Refuse an own method's option named like an option of this run's suite: the run
    gives a method its options before the suite (``LearnerEntry.settings``), so
    the suite would never get the value (``reserved_option_names`` covers every suite's
    common options; this, the suite's own)."""
    suite = declared_suite_options(info)
    for name in own:
        if name in suite:
            raise MethodPluginError(
                f"method {method!r} declares option {name!r}, which is also an option of "
                f"suite {info.name}: the run would never pass it to the suite; rename it"
            )


def _check_choice(kind: str, value: str, valid: tuple[str, ...] | list[str]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(valid)}")


def resolve(request: RunRequest, *, probe_device: bool = True) -> list[JobSpec]:
    """The one resolution: ``request`` into the run's full settings, one ``JobSpec`` per
    seed (``request.run_seeds``), building no env.

    ``request.learner=None`` takes the suite's default learner (its catalog entry's
    ``default_learner``, the same under every preset). The run seed generates MEAL's
    kitchens unless the overrides fix ``layout_seed``; the seeds of a several-seed request
    (``request.seeds``) train on one set of kitchens: ``layout_seed`` when the overrides
    give it, else the first seed's (seed ``s`` of the group equals the one-seed run
    ``--seed s --set layout_seed=<that>``), and only MEAL with ``ppo-jax`` trains seeds in
    one program. MEAL budgets are whole PPO updates, as in MEAL's code: each task trains
    ``steps_per_task // (n_steps * num_envs)`` updates. ``None`` values in the overrides
    mean "the default".

    The torch device is decided here (``cl_suites.job.torch.device.resolve_device``);
    ``probe_device=False`` only checks the value (a sweep's driver: its runs may train
    on other machines).

    Raises ``ValueError`` naming an unknown method, learner or preset and the valid
    ones; ``UnknownOptionError`` for an option no part of the run takes (did-you-mean,
    the valid names by section); ``BadValueError`` for a value outside its declared type
    and range, or a device that cannot be used; ``KeyError`` for an unknown suite;
    ``ConfigError`` for duplicate or bad seeds and a group no learner can train together.
    """
    if request.seeds is None:
        return [_resolve_seed(request, request.seed, probe_device)]
    seeds = check_seeds(request.seeds)
    overrides = {k: v for k, v in request.overrides.items() if v is not None}
    overrides = find_suite(request.suite).runtime.seeded_kwargs(overrides, seeds[0])
    group = dataclasses.replace(request, overrides=overrides)
    specs = [_resolve_seed(group, s, probe_device) for s in seeds]
    spec = specs[0]
    if not spec.learner_entry.seed_groups:
        raise ConfigError(
            f"several seeds in one program need {seed_group_learners()}; got suite "
            f"{spec.suite.name} with learner {spec.learner!r} (train its seeds one by one, "
            "e.g. with cl-suites sweep --seeds)"
        )
    return specs


def resolve_job(*, probe_device: bool = True, **request: Any) -> JobSpec:
    """The library's keyword form of :func:`resolve` for a one-seed run:
    ``resolve(RunRequest(**request))[0]`` (``suite``, ``method``, ``preset``, ``learner``,
    ``seed``, ``num_envs``, ``overrides``)."""
    return resolve(RunRequest(**request), probe_device=probe_device)[0]


def _resolve_seed(request: RunRequest, seed: int, probe_device: bool) -> JobSpec:
    """``request``'s ``JobSpec`` for run seed ``seed`` (see :func:`resolve`)."""
    method, preset = request.method, request.preset
    check_method_name(method)
    remedy = None if ":" in method else split_method(method)[1]
    check_options_for(remedy, request.overrides)
    _check_choice("preset", preset, presets.PRESETS)
    # what differs between suites comes from the catalog entry (cl_suites.suites)
    info = find_suite(request.suite)
    builtin, base = is_builtin_method(method), base_method(method)
    if builtin and info.methods is not None:
        _check_choice(f"method for {info.preset_key}", base, info.methods)
    entry = find_learner(request.learner, info)  # the default: the same under every preset
    if builtin and entry.methods is not None and base not in entry.methods:
        takers = [n for n in learners_for(info) if base in (load_learner(n).methods or ())]
        elsewhere = f"; {base!r} runs on --learner {' or '.join(takers)}" if takers else ""
        if not takers and base in MEAL_REPLAY_METHODS:
            elsewhere = f"; {base!r} is one of MEAL's methods: MEAL suites, --learner ppo-jax"
        raise ValueError(
            f"learner {entry.name!r} does not run method {base!r}; valid: "
            f"{', '.join(entry.methods)}{elsewhere}"
        )
    own = entry.own_method_options(method, info)  # an own method: imported, options read
    specs = run_option_specs(entry, own)
    overrides = {
        k: check_option(k, v, specs) for k, v in request.overrides.items() if v is not None
    }
    asked = dict(overrides)
    _check_own_options(method, own, info)
    given = {k: overrides.pop(k) for k in JOB_OPTIONS if k in overrides}
    for other in learners_for(info):
        if other != entry.name:
            load_learner(other).refuse_foreign(overrides, entry.name)
    hp, rest = entry.settings(info, method, preset, given, overrides)
    hp["method"] = {**{name: o.default for name, o in own.items()}, **hp["method"]}
    _check_remedy_layers(method, remedy, hp)
    device = entry.device(given, hp, info, probe_device)  # before any env or buffer is built
    _check_suite_names(info, rest, entry, method, hp)
    suite_kwargs = {**hp["suite_defaults"], **rest}
    n_envs = int(request.num_envs or hp["num_envs"])
    learner_config = entry.finish(hp, n_envs)
    # MEAL: kitchens from the run seed, budgets in whole PPO updates (its runtime)
    instance, suite_kwargs = info.runtime.run_instance(
        info, suite_kwargs, seed=seed, rollout=entry.rollout_steps(hp) * n_envs
    )
    sequence = instance.sequence
    entry.check_sequence(hp, sequence)
    job = JobOptions(**given)  # then the defaults the run decides (None in JobOptions)
    _check_policy_lag_threads(hp, job)
    _check_env_splits(job, n_envs, info)
    if job.eval_beside_training and not job.eval_deterministic:
        raise BadValueError(
            "eval_beside_training needs eval_deterministic=true: sampled evaluation actions "
            "would draw from torch's global generator beside training"
        )
    multi_head = bool(hp["multi_head"] if job.multi_head is None else job.multi_head)
    task_id_input = bool(hp["task_id_input"] if job.task_id_input is None else job.task_id_input)
    options = dataclasses.replace(
        job,
        checkpoint_every=job.checkpoint_every or sequence.eval_every,
        multi_head=multi_head,
        task_id_input=task_id_input,
        eval_at_start=info.evaluation.at_start if job.eval_at_start is None else job.eval_at_start,
        eval_per_task=info.evaluation.per_task if job.eval_per_task is None else job.eval_per_task,
        update_threads=job.update_threads or job.torch_threads,
        keep_task_policies=(
            info.task_policies if job.keep_task_policies is None else job.keep_task_policies
        ),
    )
    vectorization = None
    if options.vectorization_mode == AUTO:
        vectorization = choose_vectorization(
            info.name,
            steps_on_cpu=info.runtime.steps_on_cpu,
            gpu=str(device or "").startswith("cuda"),
            policy_lag=int(hp.get("learner", {}).get("policy_lag", 0) or 0),
            num_envs=n_envs,
            env_workers=options.env_workers,
            env_splits=options.env_splits,
        )
        options = vectorization.apply(options)
    return JobSpec(
        suite=info,
        method=method,
        learner=entry.name,
        preset=preset,
        hp=Hyperparameters.from_dict(hp),
        options=options,
        options_set=tuple(given),
        suite_kwargs=suite_kwargs,
        sequence=sequence,
        num_envs=n_envs,
        multi_head=multi_head,
        task_id_input=task_id_input,
        instance=instance,
        learner_entry=entry,
        learner_config=learner_config,
        device=device,
        vectorization=vectorization,
        request=dataclasses.replace(request, overrides=asked).record(),
    )


def suite_options(info: SuiteInfo) -> dict[str, Any] | None:
    """The suite's options and their defaults (its builder's keywords), or ``None`` for a
    builder that forwards any keyword to its simulator."""
    builder = info.builder_function()
    if info.family == "meal":  # the suite id first; other names are refused by the builder
        return keyword_defaults(builder, skip=("id_or_n",), refuses_others=True)
    return keyword_defaults(builder)


def declared_suite_options(info: SuiteInfo) -> dict[str, Any]:
    """The keywords the suite's builder names and their defaults: :func:`suite_options`,
    or, for a builder that also forwards any other keyword to its simulator (MiniHack15,
    CHORES), the ones it names (what ``cl-suites options`` lists)."""
    options = suite_options(info)
    return declared_keywords(info.builder_function()) if options is None else options


def valid_options(
    info: SuiteInfo, learner: LearnerEntry, method: str, hp: Mapping[str, Any]
) -> dict[str, tuple[str, ...]]:
    """The option names a run takes, by section (``job``, ``learner``, ``method``,
    ``policy``, ``suite``); ``suite``: the keywords the builder names, also where it
    forwards any other keyword (:func:`declared_suite_options`)."""
    job_owned = ("cl_method", "policy_kwargs", "seed", "device", "disk_dir", "storage")
    names = learner.option_names(method, hp, JOB_OPTIONS)
    suite = declared_suite_options(info)
    seeded = info.runtime.seeded_kwargs({}, 0)  # MEAL: the run seed decides the kitchens
    return {
        "job": tuple(n for n in JOB_OPTIONS if n not in learner.refused_job_options),
        "learner": tuple(n for n in names["learner"] if n not in job_owned),
        "method": tuple(dict.fromkeys(n for n in names["method"] if n not in job_owned)),
        "policy": names["policy"],
        "suite": tuple(n for n in suite if n != "seed" or not seeded),
    }


def _check_suite_names(
    info: SuiteInfo,
    rest: Mapping[str, Any],
    learner: LearnerEntry,
    method: str,
    hp: dict[str, Any],
) -> None:
    """The one name check: every option left after the job, learner, method and policy
    took theirs must be a suite option (``UnknownOptionError`` otherwise)."""
    if suite_options(info) is None:
        return  # the builder forwards any keyword to its simulator, which checks them
    if "seed" in rest and info.runtime.seeded_kwargs({}, 0):
        return  # refused with its own message by the runtime (MEAL: use layout_seed)
    known = valid_options(info, learner, method, hp)
    check_names(rest, known, f"--suite {info.name} --learner {learner.name} --method {method}")


def option_table(spec: JobSpec) -> dict[str, list[tuple[str, Any, str]]]:
    """Every option of the resolved run ``spec`` with its value and one-line doc, by
    section (what ``cl-suites options`` prints)."""
    entry = spec.learner_entry
    known = valid_options(spec.suite, entry, spec.method, spec.hp)
    learner_defaults, method_defaults = entry.defaults(spec.method, spec.hp)
    own_docs = {
        name: o.doc for name, o in entry.own_method_options(spec.method, spec.suite).items()
    }
    docs = {name: o.doc for name, o in {**SUITE_OPTIONS, **entry.options()}.items()}
    suite_defaults = {**declared_suite_options(spec.suite), **spec.suite_kwargs}
    suite_docs = argument_docs(spec.suite.builder_function())
    sources = {
        "job": dataclasses.asdict(spec.options),
        "learner": {**learner_defaults, **spec.hp["learner"]},
        "method": {**method_defaults, **spec.hp["method"]},
        "policy": {k: spec.hp.get(k) for k in POLICY_OPTIONS},
        "suite": suite_defaults,
    }
    table: dict[str, list[tuple[str, Any, str]]] = {}
    for section, names in known.items():
        rows = []
        for name in names:
            if section == "job":
                doc = JOB_FIELDS[name].metadata["doc"]
            elif section == "suite":  # the builder's doc, never a learner's same name
                doc = suite_docs.get(name) or (o.doc if (o := SUITE_OPTIONS.get(name)) else "")
            elif section == "method" and name in own_docs:
                doc = own_docs[name]
            else:
                doc = docs.get(name, "")
            rows.append((name, sources[section].get(name), doc))
        table[section] = [row for row in rows if row[0] not in OPTION_REMEDY]
    remedy = None if ":" in spec.method else split_method(spec.method)[1]
    if remedy is not None:  # the remedy's own section, whatever the learner keeps them in
        values = {**spec.hp["method"], **(spec.hp["learner"].get("remedy") or {})}
        table["remedy"] = [
            (name, values.get(name), doc)
            for name, doc in remedy_option_docs().items()
            if OPTION_REMEDY[name] == remedy
        ]
    return table
