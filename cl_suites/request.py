"""What a run is asked to do, as one frozen, typed object.

A :class:`RunRequest` is built once where a run is described (``cl-suites run`` from its
flags and config file, ``cl_suites.config.RunConfig.request``; a sweep's grid,
``cl_suites.sweep.grid.RunSpec.request``; the library call ``run_main_job``) and handed
down unchanged to the one resolution, ``cl_suites.job.run_spec.resolve``, which turns it
into the run's full settings. Nothing below rebuilds it from loose arguments.
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
        learner: the learner (``None``: the suite's default).
        seed: the run seed of a one-seed run.
        seeds: several run seeds trained in one program (``None``: one run, ``seed``).
        num_envs: envs of the training env (``None``: the preset's).
        overrides: every other option (suite kwargs, job options, hyperparameters);
            ``None`` values mean "the default" (``overrides=None``: none).
    """

    suite: str
    method: str
    preset: str
    learner: str | None = None
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    num_envs: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, run: Any, overrides: Mapping[str, Any] | None) -> RunRequest:
        """The request of ``run``, an object holding the run keys as attributes of these
        names (a run configuration, a sweep's run; a key it lacks keeps its default), with
        ``overrides``."""
        keys = [f.name for f in fields(cls) if f.name != "overrides" and hasattr(run, f.name)]
        return cls(**{key: getattr(run, key) for key in keys}, overrides=overrides)

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
