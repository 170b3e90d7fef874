"""What a run is asked to do, as one frozen, typed object.

A :class:`RunRequest` is built once where a run is described (``cl-suites run`` from its
flags and config file, ``cl_suites.config.merge``; a sweep's grid,
``cl_suites.sweep.grid.SweepSpec.runs``; the library call ``run_main_job``) and handed
down unchanged to the one resolution, ``cl_suites.job.run_spec.resolve``, which turns it
into the run's full settings. Nothing below rebuilds it from loose arguments.

Its fields are the one declaration of the *run keys* (:data:`RUN_KEYS`) and of their
defaults: a configuration file, ``cl-suites run``'s flags, a sweep's runs and a run
directory's ``metadata.json`` name them as these fields do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

PROGRESS_OPTION = "progress"
"""How a run is watched, not what it computes: left out of :meth:`RunRequest.record`."""


@dataclass(frozen=True)
class RunRequest:
    """One run as asked for, before anything is checked against the catalog.

    Attributes:
        suite: suite name or id (``"Procgen6"``, ``"CLSuite/Diagnostic-v0"``, ``"MEAL-20"``).
        method: the CL method (``ft``, ``ewc``, ..., ``random``, or an own method).
        preset: the hyperparameter preset (``paper``, ``small``, ``meal-authors``).
        learner: the learner (``None``: the suite's default, the same under every preset).
        seed: the run seed of a one-seed run.
        seeds: several run seeds trained in one program (``None``: one run, ``seed``;
            MEAL with ``ppo-jax`` only).
        num_envs: envs of the training env (``None``: the preset's).
        overrides: every other option (suite kwargs, job options, hyperparameters);
            ``None`` values mean "the default" (``overrides=None``: none).
    """

    suite: str
    method: str = "ft"
    preset: str = "paper"
    learner: str | None = None
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    num_envs: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", dict(self.overrides or {}))
        if self.seeds is not None:
            object.__setattr__(self, "seeds", tuple(self.seeds))

    @property
    def run_seeds(self) -> tuple[int, ...]:
        """The seeds the run trains: ``seeds``, or ``(seed,)``."""
        return self.seeds if self.seeds is not None else (self.seed,)

    def record(self) -> dict[str, Any]:
        """The request as ``metadata.json`` keeps it: ``suite``, ``method``, ``learner``,
        ``preset``, ``num_envs`` and the overrides JSON can hold, without ``progress``
        (``cl-suites run --resume`` takes the rest of its command from there)."""
        overrides: dict[str, Any] = {}
        for key, value in self.overrides.items():
            if key == PROGRESS_OPTION:
                continue
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                continue
            overrides[key] = value
        return {
            "suite": self.suite,
            "method": self.method,
            "learner": self.learner,
            "preset": self.preset,
            "num_envs": self.num_envs,
            "overrides": overrides,
        }


RUN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(RunRequest) if f.name != "overrides")
"""The run keys: what a run is asked to run, every field of :class:`RunRequest` but its
``overrides`` (every other key of a configuration is an option)."""
METADATA_RUN_KEYS: tuple[str, ...] = tuple(key for key in RUN_KEYS if key != "seeds")
"""The run keys a run directory's ``metadata.json`` holds at its top level: all but
``seeds`` (a several-seed run writes one directory per seed, each with its ``seed``). A
resumed run takes them from there and must ask for the same."""
