"""The learner registry: one entry per ``--learner`` name, like gymnasium's ``EnvSpec``.

A learner is registered by name and a ``"module:attr"`` entry point (:func:`register`);
the entry object behind it is imported on first use (:func:`load_learner`), so naming,
listing and resolving a run load only the learner asked for, and a learner's training
code only when it trains. Each entry (:class:`LearnerEntry`) declares what it can run
(suite families, CL methods, own methods), its options and their routing, the last check
of its settings, its device, and owns its training (``train``). The job layer asks the
entry and never "which family is this?".

The two wings of the job layer hold the entries: ``cl_suites.job.torch`` (the
stable-baselines3/torch learners of ``baselines_sb3``: ``ppo``, ``vtrace``) and
``cl_suites.job.jax`` (MEAL's JAX IPPO of ``baselines_jax``: ``ppo-jax``). A new learner
is one folder with its entry and one :func:`register` line (``docs/own-method.md``
shows a learner registered from a user's package).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cl_suites.errors import ConfigError
from cl_suites.job.hyperparameters import Values

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cl_suites.job.option_specs import Option
    from cl_suites.job.run_spec import JobSpec
    from cl_suites.suites import SuiteInfo


class LearnerEntry(Protocol):
    """A learner as the job sees it.

    Attributes:
        name: the ``--learner`` name.
        suites: the suite families it trains (``SuiteInfo.family``: ``"cora"``,
            ``"diagnostic"``, ``"meal"``).
        methods: the built-in CL methods it runs (``None``: every one the suite takes).
        own_methods: it runs own CL methods (``--method package.module:Class``).
        seed_groups: it trains several seeds of one configuration in one program
            (``--seeds``).
        refused_job_options: job options that mean nothing to it.
    """

    name: str
    suites: tuple[str, ...]
    methods: tuple[str, ...] | None
    own_methods: bool
    seed_groups: bool
    refused_job_options: tuple[str, ...]

    def options(self) -> Mapping[str, Option]:
        """Its options (learner, method and policy sections) with their checks and docs."""
        ...

    def settings(
        self, suite: SuiteInfo, method: str, preset: str, job: Values, overrides: Values
    ) -> tuple[Values, Values]:
        """``(hp, rest)``: its settings for ``suite`` and ``method`` under ``preset``
        (``cl_suites.job.hyperparameters``' keys) with the run's learner, method and
        policy ``overrides`` moved in; ``rest`` the overrides left (suite options).
        ``job``: the job options the run set."""
        ...

    def refuse_foreign(self, overrides: Values, learner: str) -> None:
        """Refuse ``overrides`` that only this learner takes, given to a run of
        ``learner`` on a suite both train (one line naming them and what to do)."""
        ...

    def own_method_options(self, method: str, info: SuiteInfo) -> Mapping[str, Any]:
        """The options own method ``method`` declares (``{}`` for a built-in one)."""
        ...

    def option_names(
        self, method: str, hp: Mapping[str, Any], job_options: tuple[str, ...]
    ) -> dict[str, tuple[str, ...]]:
        """The names its ``learner``, ``method`` and ``policy`` sections take (with the
        keywords the job sets itself; ``job_options``: the job options' names)."""
        ...

    def device(self, job: Values, hp: Mapping[str, Any], suite: SuiteInfo, probe: bool) -> Any:
        """The device the run trains on, decided before any env or buffer is built
        (torch: ``cpu`` or ``cuda:N``; ``None`` where the learner's framework picks its
        own platform). ``probe=False`` only checks the value (a sweep's driver)."""
        ...

    def rollout_steps(self, hp: Mapping[str, Any]) -> int:
        """Steps per env of one learner update."""
        ...

    def finish(self, hp: dict[str, Any], num_envs: int) -> Any:
        """Complete and check the resolved settings (``num_envs``: the run's), before the
        suite is built; the learner's checked configuration object if it has one
        (``ppo-jax``: its ``IPPOConfig``), else ``None``."""
        ...

    def check_sequence(self, hp: Mapping[str, Any], sequence: Any) -> None:
        """Refuse settings the run's task ``sequence`` cannot take (a CNN over flat
        observations), once the suite is built."""
        ...

    def defaults(self, method: str, hp: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        """``(learner defaults, method defaults)``: its constructors' keyword defaults."""
        ...

    def train(
        self, specs: Sequence[JobSpec], seeds: Sequence[int], run_dirs: Sequence[Path], resume: bool
    ) -> None:
        """Train the resolved runs: one (``specs[0]`` with ``seeds[0]`` into
        ``run_dirs[0]``), or a seed group (``seed_groups``)."""
        ...

    def load_task_policy(self, spec: JobSpec, path: Path) -> Any:
        """The greedy ``policy(obs, task_ids) -> actions`` of the task policy its run of
        ``spec`` kept in ``path`` (``keep_task_policies``). Optional: a learner without it
        keeps none that can be loaded (``cl_suites.job.task_policies``)."""
        ...


@dataclass(frozen=True)
class LearnerSpec:
    """A registered learner: its ``--learner`` name and the ``"module:attr"`` of its entry."""

    name: str
    entry_point: str

    def load(self) -> LearnerEntry:
        """The entry object (its module imported on first use)."""
        module, _, attr = self.entry_point.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        if entry.name != self.name:
            raise ConfigError(
                f"learner {self.name!r} is registered with entry point {self.entry_point!r}, "
                f"whose entry is named {entry.name!r}"
            )
        return entry


REGISTRY: dict[str, LearnerSpec] = {}
"""Every registered learner by ``--learner`` name, in registration order."""


def register(name: str, entry_point: str) -> None:
    """Register learner ``name`` with the entry object at ``entry_point``
    (``"package.module:ATTR"``). Registering a name twice with another entry point is
    refused."""
    if ":" not in entry_point:
        raise ConfigError(f"learner entry point {entry_point!r} must read 'package.module:attr'")
    old = REGISTRY.get(name)
    if old is not None and old.entry_point != entry_point:
        raise ConfigError(
            f"learner {name!r} is already registered with entry point {old.entry_point!r}"
        )
    REGISTRY[name] = LearnerSpec(name, entry_point)


def unregister(name: str) -> None:
    """Remove learner ``name`` from the registry (a test's toy learner)."""
    REGISTRY.pop(name, None)


register("ppo-jax", "cl_suites.job.jax.entry:PPO_JAX")
register("mappo-jax", "cl_suites.job.jax.entry:MAPPO_JAX")
register("ppo", "cl_suites.job.torch.entry:PPO")
register("vtrace", "cl_suites.job.torch.entry:VTRACE")


def load_learner(name: str) -> LearnerEntry:
    """The entry of learner ``name``; ``ValueError`` naming the registered ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown learner {name!r}; valid: {', '.join(REGISTRY)}")
    return REGISTRY[name].load()


def learners_for(suite: SuiteInfo) -> tuple[str, ...]:
    """The learners that train ``suite`` (their entries declare its family), in
    registration order. A registered learner whose entry cannot be loaded (its package
    missing or broken) is left out with one warning line: it must not stop the others'
    runs; asked for by name (:func:`load_learner`), it fails with its own error."""
    names = []
    for name in REGISTRY:
        try:
            entry = load_learner(name)
        except (ImportError, AttributeError, ConfigError) as e:
            warnings.warn(f"learner {name!r} left out: {e}", stacklevel=2)
            continue
        if suite.family in entry.suites:
            names.append(name)
    return tuple(names)


def find_learner(name: str | None, suite: SuiteInfo) -> LearnerEntry:
    """The entry of learner ``name`` for a run of ``suite`` (``None``: the suite's default,
    the same under every preset). ``ValueError`` naming the valid ones for a learner that
    does not train the suite, or an unknown one."""
    name = name or suite.default_learner
    valid = learners_for(suite)
    if name not in valid:
        if name in REGISTRY:
            raise ValueError(
                f"learner {name!r} is not available for {suite.name}; valid: {', '.join(valid)}"
            )
        raise ValueError(f"unknown learner {name!r}; valid: {', '.join(valid)}")
    return load_learner(name)


def seed_group_learners() -> str:
    """The learners that train several seeds in one program and the suites they train, as
    an error message names them (``a MEAL suite and learner 'ppo-jax'``)."""
    parts = []
    for name in REGISTRY:
        entry = load_learner(name)
        if entry.seed_groups:
            families = " or ".join(f.upper() for f in entry.suites)
            parts.append(f"a {families} suite and learner {name!r}")
    return " or ".join(parts) or "a learner that trains seed groups (none is registered)"
