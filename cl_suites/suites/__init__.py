"""The suite catalog: every benchmark of the package, as data.

Each entry names the module function that builds the suite's ``TaskSequence``; nothing
here imports a simulator, so the catalog can be listed on any machine.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any

from cl_suites.core.task import TaskSequence, check_positive_int

NAMESPACE = "CLSuite"
COMMON_KWARGS: tuple[str, ...] = ("steps_per_task", "cycles", "eval_every", "eval_episodes")
"""Keyword arguments every suite builder takes (all counts in agent steps or episodes)."""


@dataclass(frozen=True)
class SuiteInfo:
    """One registered suite.

    Attributes:
        name: short name (``"Procgen6"``); the gymnasium id is ``CLSuite/<name>-v0``.
        builder: ``"module:function"`` returning the ``TaskSequence`` for given kwargs.
        extra: the pip extra that installs the simulator.
        modules: modules that must be importable to run it.
        paper: where the benchmark is defined.
        description: one line for ``cl-suites list``.
        api: ``"gymnasium"`` (``gym.make``) or ``"pettingzoo"`` (``make_parallel``).
    """

    name: str
    builder: str
    extra: str
    modules: tuple[str, ...]
    paper: str
    description: str
    api: str = "gymnasium"

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v0"

    @property
    def installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    def build(self, **kwargs: Any) -> TaskSequence:
        """The suite's task sequence; ``kwargs`` override the paper defaults.

        The common overrides (``steps_per_task``, ``cycles``, ``eval_every``,
        ``eval_episodes``) must be positive integers (``ValueError`` naming the argument).
        """
        builder = self.builder_function()
        self.check_options(builder, kwargs)
        for name in COMMON_KWARGS:
            if name in kwargs:
                check_positive_int(name, kwargs[name])
        return builder(**kwargs)

    def builder_function(self) -> Any:
        module_name, func_name = self.builder.split(":")
        return getattr(importlib.import_module(module_name), func_name)

    def check_options(self, builder: Any, kwargs: dict[str, Any]) -> None:
        """``TypeError`` naming each keyword the builder does not take, with the valid ones
        (builders that forward any keyword to their simulator accept everything)."""
        params = inspect.signature(builder).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return
        valid = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for name in kwargs:
            if name not in valid:
                close = difflib.get_close_matches(name, valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(
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
        ),
        _chores("VaryRoom", "AI2-THOR: hand towel into bathtub in 3 bathrooms"),
        _chores("VaryTask", "AI2-THOR: 3 toilet-paper tasks in bathroom 402"),
        _chores("VaryObject", "AI2-THOR: clean fork, knife, spoon in kitchen 24"),
        _chores("MultiTraj", "AI2-THOR: cool-then-sink tasks, 3 train + 3 test trajectories"),
    )
}


def find_suite(suite: str) -> SuiteInfo:
    """The catalog entry of ``suite`` (``"Procgen6"``, ``"CLSuite/Procgen6-v0"`` or
    ``"cl_suites:CLSuite/Procgen6-v0"``); ``KeyError`` lists the valid ids otherwise."""
    name = suite.split(":", 1)[-1]
    if name.startswith(NAMESPACE + "/"):
        name = name[len(NAMESPACE) + 1 :]
    if name.endswith("-v0"):
        name = name[: -len("-v0")]
    if name in SUITES:
        return SUITES[name]
    raise KeyError(
        f"unknown suite {suite!r}; available: {', '.join(s.id for s in SUITES.values())}"
        " (and CLSuite/MEAL-<N>-v0 through cl_suites.make_parallel)"
    )
