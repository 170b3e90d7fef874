"""The learners the main job trains, one entry per ``--learner`` name.

An entry holds what the run specification needs of a learner, so that the name is looked
up and checked once per run (:func:`find_learner`) and nothing after it asks "is this the
JAX learner?": the learner family that builds it (``family``: the package, and the job
that trains it), the preset learner its values come from (``preset``), where a run's
overrides go and which names it takes (``settings``, ``option_names``), the last check of
its settings (``finish``) and its constructor's defaults (``defaults``, for ``cl-suites
options``). :class:`TorchLearner` is the entry of the SB3/torch learners of
``baselines_sb3`` (``ppo``, ``vtrace``); ``cl_suites.job.jax_options.JaxLearner`` that of
MEAL's JAX IPPO of ``baselines_jax`` (``ppo-jax``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from baselines_sb3.cl import is_builtin, method_class
from baselines_sb3.factory import LEARNERS, learner_class
from baselines_sb3.keywords import accepted_options
from cl_suites.job import hyperparameters
from cl_suites.job.hyperparameters import Values
from cl_suites.job.jax_options import JAX_IPPO, JAX_LEARNER, check_no_jax_options
from cl_suites.suites import SuiteInfo


class LearnerEntry(Protocol):
    """A learner as the main job sees it (see the module docstring).

    Attributes:
        name: the ``--learner`` name.
        family: the package that builds it: ``"baselines_sb3"`` (the torch job) or
            ``"baselines_jax"`` (the JAX job, several seeds in one program).
        preset: the learner of the preset tables its values come from.
        refused_job_options: job options that mean nothing to it.
    """

    name: str
    family: str
    preset: str
    refused_job_options: tuple[str, ...]

    def settings(
        self, suite: SuiteInfo, method: str, preset: str, job: Values, overrides: Values
    ) -> tuple[Values, Values]:
        """``(hp, rest)``: its settings for ``suite`` and ``method`` under ``preset``
        (``cl_suites.job.hyperparameters``' keys) with the run's learner, method and
        policy ``overrides`` moved in; ``rest`` the overrides left (suite options).
        ``job``: the job options the run set."""
        ...

    def option_names(
        self, method: str, hp: Mapping[str, Any], job_options: tuple[str, ...]
    ) -> dict[str, tuple[str, ...]]:
        """The names its ``learner``, ``method`` and ``policy`` sections take (with the
        keywords the job sets itself; ``job_options``: the job options' names)."""
        ...

    def finish(self, hp: dict[str, Any], num_envs: int) -> Any:
        """Complete and check the resolved settings (``num_envs``: the run's); the
        learner's checked configuration object, if its family has one (``ppo-jax``: its
        ``IPPOConfig``), else ``None``."""
        ...

    def defaults(self, method: str, hp: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        """``(learner defaults, method defaults)``: its constructors' keyword defaults."""
        ...


def signature_defaults(cls: type) -> dict[str, Any]:
    """Keyword defaults of ``cls(...)`` through its bases."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.default is not p.empty:
                out[p.name] = p.default
    return out


@dataclass(frozen=True)
class TorchLearner:
    """An SB3/torch learner of ``baselines_sb3`` (``ppo``: ``ContinualPPO``; ``vtrace``:
    ``VTrace``), built by ``baselines_sb3.factory.build_model``."""

    name: str
    family: str = "baselines_sb3"
    refused_job_options: tuple[str, ...] = ()

    @property
    def preset(self) -> str:
        return self.name

    def settings(
        self, suite: SuiteInfo, method: str, preset: str, job: Values, overrides: Values
    ) -> tuple[Values, Values]:
        if JAX_LEARNER in suite.learners:  # the torch IPPO refuses the JAX IPPO's names
            check_no_jax_options(overrides, self.name)
        hp = hyperparameters.compose(suite.family, suite.preset_key, self.name, method, preset)
        return hp, hyperparameters.route_overrides(hp, self.name, method, overrides)

    def option_names(
        self, method: str, hp: Mapping[str, Any], job_options: tuple[str, ...]
    ) -> dict[str, tuple[str, ...]]:
        variant = hp["method"].get("variant")
        return {
            "learner": hyperparameters.LEARNER_OPTIONS[self.name],
            "method": (
                *(("variant",) if is_builtin(method) else ()),
                *accepted_options(method_class(method, variant)),
            ),
            "policy": hyperparameters.POLICY_OPTIONS,
        }

    def finish(self, hp: dict[str, Any], num_envs: int) -> None:
        return None  # the learner's keywords are hp["learner"], checked when it is built

    def defaults(self, method: str, hp: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        variant = hp["method"].get("variant")
        return (
            signature_defaults(learner_class(self.name)),
            signature_defaults(method_class(method, variant)),
        )


LEARNER_ENTRIES: dict[str, LearnerEntry] = {
    **{name: TorchLearner(name) for name in LEARNERS},
    JAX_LEARNER: JAX_IPPO,
}
"""Every learner the main job trains, by ``--learner`` name."""


def find_learner(name: str | None, suite: SuiteInfo) -> LearnerEntry:
    """The entry of learner ``name`` for a run of ``suite`` (``None``: the suite's default,
    the same under every preset). ``ValueError`` naming the valid ones for a learner the
    suite does not offer, or an unknown one."""
    name = name or suite.default_learner
    valid = suite.learners
    if name not in valid:
        if name in LEARNER_ENTRIES:
            raise ValueError(
                f"learner {name!r} is not available for {suite.name}; valid: {', '.join(valid)}"
            )
        raise ValueError(f"unknown learner {name!r}; valid: {', '.join(valid)}")
    return LEARNER_ENTRIES[name]
