"""The suite catalog: every benchmark of the package, as data.

Each entry (:class:`SuiteInfo`) names the module function that builds the suite's
``TaskSequence``; nothing here imports a simulator, so the catalog can be listed on any
machine. ``MEAL-<N>`` (any ``N >= 1``) is an entry like every other suite
(``cl_suites.meal.runtime:meal_suite``, named once in ``SUITE_TEMPLATES``): what makes
MEAL different is held in its fields, never in "is this MEAL?" branches of the code that
runs it:

===================  ===============================  ===================================
field                single-agent suites              ``MEAL-<N>``
===================  ===============================  ===================================
``family``           ``"cora"`` / ``"diagnostic"``    ``"meal"``
``api``              ``"gymnasium"``                  ``"pettingzoo"``
``step_unit``        ``AGENT_STEPS``                  ``ENV_STEPS`` (joint actions)
``evaluation``       at step 0, global grid           not at step 0, per task
``default_learner``  ``vtrace`` (Diagnostic: ``ppo``) ``ppo-jax``
``methods``          all                              ``ft ewc online-ewc mas l2``
``preset_key``       the name                         ``"MEAL"``
``task_policies``    no                               yes (the coordination matrix)
``runtime``          ``VectorRuntime``                ``MealRuntime`` (batched JAX engine)
===================  ===============================  ===================================

The runtime (``cl_suites.suites.runtime``) builds the suite's *instance* (its sequence,
agents per env, description and run metadata: MEAL's score normalisers and kitchens),
the training env and the evaluator's env source.

The catalog stands at the bottom: it imports no suite's code. Builders are named by
``"module:function"`` and imported when a suite is built; so are the entry functions of
ids with a parameter in :data:`SUITE_TEMPLATES` (``MEAL-<N>``:
``"cl_suites.meal.runtime:meal_suite"``), imported when such an id is looked up
(:func:`suite_template`). The entries of :data:`SUITES` are the one declaration of the
suites' names: :func:`parse_suite_id`, the one parser of suite ids, reads them there (the
form of an id and MEAL's ids are the leaf module ``cl_suites.suites.ids``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cl_suites.core.task import TaskSequence, check_positive_int
from cl_suites.errors import UnknownOptionError, UnknownSuiteError
from cl_suites.suites.ids import MEAL_ID, NAMESPACE, bare_name, meal_name
from cl_suites.suites.runtime import (
    AGENT_STEPS,
    EVAL_FROM_START,
    VECTOR_RUNTIME,
    EvalDefaults,
    StepUnit,
    SuiteInstance,
    SuiteRuntime,
)

COMMON_KWARGS: tuple[str, ...] = ("steps_per_task", "cycles", "eval_every", "eval_episodes")
"""Keyword arguments every suite builder takes (all counts in agent steps or episodes)."""


@dataclass(frozen=True)
class SuiteInfo:
    """One catalog entry: a suite as data, and the small pieces that make it run.

    Attributes:
        name: short name (``"Procgen6"``, ``"MEAL-20"``); the gymnasium id is
            ``CLSuite/<name>-v0``.
        builder: ``"module:function"`` returning the ``TaskSequence`` for given kwargs.
        extra: the pip extra that installs the simulator.
        modules: modules that must be importable to run it.
        paper: where the benchmark is defined.
        description: one line for ``cl-suites list`` / ``info``.
        api: ``"gymnasium"`` (``gym.make``) or ``"pettingzoo"`` (``make_parallel``).
        family: ``"cora"``, ``"meal"`` or ``"diagnostic"``: whose protocol (presets,
            metrics) the suite follows.
        step_unit: what one step of its budgets and cadences is (``AGENT_STEPS``;
            MEAL: ``ENV_STEPS``, one joint action of all agents).
        evaluation: evaluation defaults (MEAL: no step-0 evaluation, cadence per task).
        default_learner: the learner a run uses when it names none (under every preset;
            the learners that train a suite declare it: ``cl_suites.job.learners``).
        methods: the CL methods it supports (``None``: all of ``baselines_sb3.cl``).
        preset_key: the suite key of ``cl_suites.job.presets`` (``None``: ``name``;
            every ``MEAL-<N>`` shares ``"MEAL"``).
        runtime: builds its instance, training env and evaluation source
            (``cl_suites.suites.runtime``).
        task_policies: its runs keep the policy of every task's end by default (the job
            option ``keep_task_policies``; MEAL: its coordination matrix needs them).
    """

    name: str
    builder: str
    extra: str
    modules: tuple[str, ...]
    paper: str
    description: str
    api: str = "gymnasium"
    family: str = "cora"
    step_unit: StepUnit = AGENT_STEPS
    evaluation: EvalDefaults = EVAL_FROM_START
    default_learner: str = "vtrace"
    methods: tuple[str, ...] | None = None
    preset_name: str | None = None
    runtime: SuiteRuntime = field(default=VECTOR_RUNTIME, compare=False, repr=False)
    task_policies: bool = False

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v0"

    @property
    def preset_key(self) -> str:
        """The suite key of ``cl_suites.job.presets`` (``"MEAL"`` for every MEAL-N)."""
        return self.preset_name or self.name

    @property
    def installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    def build(self, **kwargs: Any) -> TaskSequence:
        """The suite's task sequence; ``kwargs`` override the paper defaults.

        The common overrides (``steps_per_task``, ``cycles``, ``eval_every``,
        ``eval_episodes``) must be positive integers (``ValueError`` naming the argument);
        an unknown keyword raises ``UnknownOptionError`` (a ``TypeError``).
        """
        return self.instance(**kwargs).sequence

    def instance(self, **kwargs: Any) -> SuiteInstance:
        """The suite built with ``kwargs``: its sequence, agents per env, description
        and run metadata (``SingleAgentSuite``; MEAL: ``MealSuite``)."""
        return self.runtime.instance(self, kwargs)

    def build_sequence(self, **kwargs: Any) -> TaskSequence:
        """The ``TaskSequence`` of ``builder`` (``kwargs`` checked first)."""
        builder = self.builder_function()
        self.check_options(builder, kwargs)
        for name in COMMON_KWARGS:
            if name in kwargs:
                check_positive_int(name, kwargs[name])
        return builder(**kwargs)

    def builder_function(self) -> Any:
        return _entry_point(self.builder)

    def check_options(self, builder: Any, kwargs: dict[str, Any]) -> None:
        """``UnknownOptionError`` (a ``TypeError``) naming each keyword the builder does
        not take, with the valid ones (builders that forward any keyword to their
        simulator accept everything)."""
        params = inspect.signature(builder).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return
        valid = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for name in kwargs:
            if name not in valid:
                close = difflib.get_close_matches(name, valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UnknownOptionError(
                    f"{self.id} has no option {name!r}{hint}; its options are: {', '.join(valid)}"
                )


def _chores(variant: str, description: str) -> SuiteInfo:
    return SuiteInfo(
        name=f"CHORES-{variant}",
        builder=f"cl_suites.suites.chores:build_{variant.lower()}",
        extra="chores",
        modules=("ai2thor",),
        paper="CORA (Powers et al., 2022), section 3.4",
        description=description,
    )


SUITES: dict[str, SuiteInfo] = {
    s.name: s
    for s in (
        SuiteInfo(
            name="Atari6",
            builder="cl_suites.suites.atari6:build",
            extra="atari",
            modules=("ale_py",),
            paper="CORA (Powers et al., 2022), section 3.1",
            description="6 Atari games through ale-py, 84x84x4 grayscale, 18 actions",
        ),
        SuiteInfo(
            name="Procgen6",
            builder="cl_suites.suites.procgen6:build",
            extra="procgen",
            modules=("procgen",),
            paper="CORA (Powers et al., 2022), section 3.2",
            description="6 procgen games (easy), 200 train levels, test on all levels",
        ),
        SuiteInfo(
            name="MiniHack15",
            builder="cl_suites.suites.minihack15:build",
            extra="minihack",
            modules=("minihack", "nle"),
            paper="CORA (Powers et al., 2022), section 3.3",
            description="15 MiniHack train->test pairs, 84x84x3 pixels, 11 actions masked per task",
        ),
        SuiteInfo(
            name="Diagnostic",
            builder="cl_suites.suites.diagnostic:build",
            extra="baselines",
            modules=(),
            paper="none: a diagnostic for testing CL code, not a paper benchmark",
            description="3 tiny conflicting cue->action tasks a CPU learns in seconds",
            family="diagnostic",
            default_learner="ppo",
        ),
        _chores("VaryRoom", "AI2-THOR: hand towel into bathtub in 3 bathrooms"),
        _chores("VaryTask", "AI2-THOR: 3 toilet-paper tasks in bathroom 402"),
        _chores("VaryObject", "AI2-THOR: clean fork, knife, spoon in kitchen 24"),
        _chores("MultiTraj", "AI2-THOR: cool-then-sink tasks, 3 train + 3 test trajectories"),
    )
}


def parse_suite_id(suite: object) -> str:
    """The catalog name of a suite id: the one suite-id parser of the package.

    Accepts the short name (``"Procgen6"``, ``"MEAL-20"``), the gymnasium id
    (``"CLSuite/Procgen6-v0"``, ``"CLSuite/MEAL-20-v0"``) and gymnasium's module-qualified
    form (``"cl_suites:CLSuite/Procgen6-v0"``). ``MEAL-<N>`` is any ``N >= 1``
    (``"MEAL-020"`` -> ``"MEAL-20"``). Anything else raises ``UnknownSuiteError`` (a
    ``KeyError`` and a ``ValueError``) listing the valid ids.
    """
    name = bare_name(suite)
    if name in SUITES:
        return name
    meal = meal_name(suite)
    if meal is not None:
        return meal
    raise UnknownSuiteError(
        f"unknown suite {suite!r}{_did_you_mean(name)}; available: "
        f"{', '.join(info.id for info in SUITES.values())} and {MEAL_ID} (N >= 1)"
    )


def _did_you_mean(name: str) -> str:
    """`` (did you mean 'Procgen6'?)`` for the catalog name closest to ``name`` (case
    and a missing number forgiven), or ``""``."""
    by_lower = {n.lower(): n for n in SUITES}
    lowered = name.lower()
    hits = [by_lower[lowered]] if lowered in by_lower else []
    hits = hits or [n for n in SUITES if n.lower().startswith(lowered) and lowered]
    hits = hits or [by_lower[m] for m in difflib.get_close_matches(lowered, list(by_lower), n=1)]
    return f" (did you mean {hits[0]!r}?)" if len(hits) >= 1 and hits[0] != name else ""


def short_name(suite: object) -> str:
    """The catalog name of ``suite`` (:func:`parse_suite_id`), or its text as given when
    the catalog does not know it (an own loop's suite; a name a later check reports)."""
    try:
        return parse_suite_id(suite)
    except UnknownSuiteError:
        return str(suite)


def find_suite(suite: str) -> SuiteInfo:
    """The catalog entry of ``suite`` (any id :func:`parse_suite_id` accepts, MEAL-N
    included); ``UnknownSuiteError`` (a ``KeyError``) lists the valid ids otherwise."""
    name = parse_suite_id(suite)
    if name in SUITES:
        return SUITES[name]
    return suite_template(MEAL_ID)(int(name.removeprefix("MEAL-")))


SUITE_TEMPLATES: dict[str, str] = {MEAL_ID: "cl_suites.meal.runtime:meal_suite"}
"""Ids with a parameter: ``"module:function"`` of the function that gives the catalog
entry of each value (``MEAL-<N>``: ``meal_suite(N)``), imported when one is looked up."""


def suite_template(suite_id: str) -> Callable[[int], SuiteInfo]:
    """The entry function of the parametrised id ``suite_id`` (a key of
    :data:`SUITE_TEMPLATES`), its module imported now."""
    return _entry_point(SUITE_TEMPLATES[suite_id])


def _entry_point(name: str) -> Any:
    """The function a ``"module:function"`` string names, its module imported now."""
    module_name, func_name = name.split(":")
    return getattr(importlib.import_module(module_name), func_name)


__all__ = [
    "COMMON_KWARGS",
    "MEAL_ID",
    "NAMESPACE",
    "SUITES",
    "SUITE_TEMPLATES",
    "SuiteInfo",
    "find_suite",
    "parse_suite_id",
    "short_name",
    "suite_template",
]
