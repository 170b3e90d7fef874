"""The grid of a sweep: (suite, method, learner, seed) plus shared overrides, as data.

A grid comes from the command line (``--suite Procgen6 --methods ft,ewc --seeds 0-4``) or
from a TOML / YAML file read as data (``tomllib`` / ``yaml.safe_load``: nothing in it is
executed). ``SweepSpec.runs()`` expands it into ``RunSpec``s, one per run directory, named
``<suite>-<method>-<learner>-s<seed>`` (the learner resolved from the preset when the grid
leaves it open), so the same grid always gives the same directory names. ``seed_groups``
says which runs train together: the seeds of one MEAL configuration (learner ``ppo-jax``,
kitchens fixed by ``layout_seed``) in one program, each still writing its own directory.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cl_suites.errors import ConfigError, UnknownSuiteError
from cl_suites.job.learners import load_learner
from cl_suites.request import RunRequest
from cl_suites.suites import find_suite, short_name

GRID_KEYS: tuple[str, ...] = (
    "suites",
    "methods",
    "learners",
    "seeds",
    "preset",
    "num_envs",
    "overrides",
)
"""Keys of a sweep file's grid (``suite``, ``method``, ``learner``, ``seed`` are accepted
as singular aliases)."""
EXECUTION_KEYS: tuple[str, ...] = (
    "address",
    "cpus_per_run",
    "gpus_per_run",
    "num_cpus",
    "max_retries",
)
"""Keys of a sweep file's optional ``[ray]`` table (command-line flags override them)."""
_ALIASES = {"suite": "suites", "method": "methods", "learner": "learners", "seed": "seeds"}
_SEED_RANGE = re.compile(r"^\s*(-?\d+)\s*-\s*(-?\d+)\s*$")


class SweepError(ConfigError):
    """Bad sweep input (grid, sweep directory, cluster); the message names the value."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its request (what the worker resolves and runs) and its name.

    The request's ``suite`` is the short suite name (``"Procgen6"``, ``"MEAL-20"``) and its
    ``learner`` is resolved (never ``None``) so that the name says what ran.
    """

    request: RunRequest

    @property
    def name(self) -> str:
        """The run directory's name: ``<suite>-<method>-<learner>-s<seed>`` (an own
        method's ``package.module:Class`` as ``package.module.Class``)."""
        run = self.request
        return f"{run.suite}-{run.method.replace(':', '.')}-{run.learner}-s{run.seed}"


@dataclass(frozen=True)
class SweepSpec:
    """A grid of runs: every combination of ``suites x methods x learners x seeds``.

    Attributes:
        suites: suite names or ids (``"Procgen6"``, ``"CLSuite/Procgen6-v0"``, ``"MEAL-20"``).
        methods: CL method names (``ft``, ``ewc``, ..., or own methods:
            ``package.module:Class`` or a ``cl_suites.methods`` entry point).
        learners: learner names; ``(None,)`` takes each suite's default under ``preset``.
        seeds: run seeds.
        preset: ``paper``, ``small`` or ``meal-authors`` (MEAL only): a name of
            ``cl_suites.job.presets.PRESETS``.
        num_envs: sub-envs per run (``None``: the preset's).
        overrides: shared ``run_main_job`` overrides (suite kwargs such as
            ``steps_per_task`` in agent steps, job options, hyperparameters).
    """

    suites: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    learners: tuple[str | None, ...] = (None,)
    preset: str = "paper"
    num_envs: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for axis in ("suites", "methods", "learners", "seeds"):
            values = tuple(dict.fromkeys(getattr(self, axis)))  # drop repeats, keep order
            if not values:
                raise SweepError(
                    f"empty grid: no {axis} given (e.g. --{axis} on the command line or "
                    f"'{axis} = [...]' in the sweep file)"
                )
            object.__setattr__(self, axis, values)
        object.__setattr__(self, "overrides", dict(self.overrides))

    def runs(self) -> list[RunSpec]:
        """The runs of the grid in a fixed order (suite, method, learner, seed); a learner
        named and the suite's default learner give one run, not two."""
        runs: dict[str, RunSpec] = {}
        for suite, method, learner, seed in itertools.product(
            self.suites, self.methods, self.learners, self.seeds
        ):
            name = short_name(suite)
            request = RunRequest(
                suite=name,
                method=method,
                learner=learner or default_learner(name),
                seed=int(seed),
                preset=self.preset,
                num_envs=self.num_envs,
                overrides=self.overrides,
            )
            run = RunSpec(request)
            runs.setdefault(run.name, run)
        return list(runs.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``sweep.json`` stores and compares)."""
        return {
            "suites": list(self.suites),
            "methods": list(self.methods),
            "learners": list(self.learners),
            "seeds": list(self.seeds),
            "preset": self.preset,
            "num_envs": self.num_envs,
            "overrides": json.loads(json.dumps(dict(self.overrides), sort_keys=True)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        """Build a spec from plain data (a parsed sweep file or ``sweep.json``)."""
        data = {_ALIASES.get(k, k): v for k, v in data.items()}
        unknown = sorted(set(data) - set(GRID_KEYS))
        if unknown:
            raise SweepError(
                f"unknown sweep key(s) {', '.join(map(repr, unknown))}; valid: "
                f"{', '.join(GRID_KEYS)} (and a [ray] table with {', '.join(EXECUTION_KEYS)})"
            )
        overrides = data.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise SweepError(f"'overrides' must be a table of key = value, got {overrides!r}")
        learners = [
            None if lr in (None, "default") else str(lr)
            for lr in _as_list(data.get("learners"), "learners", default=[None])
        ]
        return cls(
            suites=tuple(str(s) for s in _as_list(data.get("suites"), "suites")),
            methods=tuple(str(m) for m in _as_list(data.get("methods"), "methods")),
            learners=tuple(learners),
            seeds=tuple(parse_seeds(data.get("seeds", []))),
            preset=str(data.get("preset", "paper")),
            num_envs=None if data.get("num_envs") is None else int(data["num_envs"]),
            overrides=dict(overrides),
        )


def seed_groups(runs: list[RunSpec]) -> list[tuple[RunSpec, ...]]:
    """The runs as they train: the seeds of one configuration whose learner trains seed
    groups (``LearnerEntry.seed_groups``: ``ppo-jax``) and whose overrides fix what the run
    seed would decide about the suite (MEAL: its kitchens, ``layout_seed``) train vmapped in
    one program (one request with ``seeds``: :func:`group_request`); every other run trains
    alone (seeds on different kitchens cannot share one program). Groups keep the grid's
    order."""
    groups: dict[str, list[RunSpec]] = {}
    for run in runs:
        request = run.request
        seeded = find_suite(request.suite).runtime.seeded_kwargs({}, 0)  # MEAL: layout_seed
        together = load_learner(request.learner).seed_groups and all(
            key in request.overrides for key in seeded
        )
        key = run.name
        if together:  # every run key and option but the seed
            configuration = dataclasses.asdict(dataclasses.replace(request, seed=0))
            key = json.dumps(configuration, sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    return [tuple(group) for group in groups.values()]


def group_request(group: Sequence[RunSpec]) -> RunRequest:
    """What the worker of a group of :func:`seed_groups` runs: its one run's request, or
    the request of its seeds trained in one program (``seeds``, one per run, in order)."""
    first = group[0].request
    if len(group) == 1:
        return first
    return dataclasses.replace(first, seeds=tuple(run.request.seed for run in group))


def _as_list(value: Any, key: str, default: list[Any] | None = None) -> list[Any]:
    if value is None:
        return list(default or [])
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return list(value)
    raise SweepError(f"'{key}' must be a list or a comma-separated string, got {value!r}")


def parse_seeds(value: str | int | Iterable[int | str]) -> list[int]:
    """Seeds from ``"0-4"``, ``"0,2,5"``, ``"0-2,7"``, ``3`` or a list of those."""
    if isinstance(value, bool):
        raise SweepError(f"bad seeds {value!r}; use e.g. 0-4, 0,2,5 or [0, 1, 2]")
    if isinstance(value, int):
        return [value]
    parts = value.split(",") if isinstance(value, str) else list(value)
    seeds: list[int] = []
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            seeds.append(part)
            continue
        text = str(part).strip()
        if not text:
            continue
        if m := _SEED_RANGE.match(text):
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise SweepError(f"bad seed range {text!r}: the end is before the start")
            seeds.extend(range(lo, hi + 1))
        elif re.fullmatch(r"-?\d+", text):
            seeds.append(int(text))
        else:
            raise SweepError(f"bad seed {text!r}; use e.g. 0-4, 0,2,5 or [0, 1, 2]")
    return seeds


def load_sweep_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) sweep file as data, through the
    run config files' loader (``cl_suites.config.load_config_file``: the same size limit
    and the same value parser).

    Returns ``(grid, execution)``: the grid keys and the ``[ray]`` table (``address``,
    ``cpus_per_run``, ...). Nothing in the file is executed.
    """
    from cl_suites.config import ConfigError, load_config_file

    try:
        data = load_config_file(path, "sweep file")
    except ConfigError as e:
        raise SweepError(str(e)) from None
    execution = data.pop("ray", None) or {}
    if not isinstance(execution, Mapping):
        raise SweepError(f"sweep file {str(path)!r}: [ray] must be a table")
    unknown = sorted(set(execution) - set(EXECUTION_KEYS))
    if unknown:
        raise SweepError(
            f"unknown [ray] key(s) {', '.join(map(repr, unknown))}; valid: "
            f"{', '.join(EXECUTION_KEYS)}"
        )
    return data, dict(execution)


def default_learner(suite: str) -> str:
    """The learner a run uses when the grid names none: the suite's catalog entry's
    ``default_learner`` (MEAL: the JAX IPPO, ``ppo-jax``), the same under every preset."""
    try:
        return find_suite(suite).default_learner
    except UnknownSuiteError:  # resolving the run reports it
        return "default"
