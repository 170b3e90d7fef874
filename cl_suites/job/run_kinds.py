"""The kinds of run ``cl-suites run`` starts, one entry each: a trained baseline (every
learner and CL method of the main job) and the random agent (``--method random``).

The command line asks the entry of its run (:func:`run_kind`) to resolve the request,
describe it (``--print-config``), list its options (``cl-suites options``), give its notes
and start it; it never asks which kind it holds. (A replay buffer that fits nowhere is
refused by the main job itself, before the run directory exists: ``build_method``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from cl_suites.config import ConfigError, argument_docs, check_names, keyword_defaults
from cl_suites.declarations import RANDOM_METHOD
from cl_suites.request import RunRequest
from cl_suites.suites import find_suite

Sections = dict[str, list[tuple[str, Any, str]]]
"""Options by section: ``(name, default, one-line doc)`` rows."""


class RunKind(Protocol):
    """A kind of run as the command line sees it.

    Attributes:
        name: what its messages call it.
        resumable: a killed run continues with ``--resume``.
    """

    name: str
    resumable: bool

    def check(self, request: RunRequest) -> None:
        """Refuse, from the request alone, what this kind cannot run (names, seeds)."""
        ...

    def resolve(self, request: RunRequest, progress: bool) -> Any:
        """The run's settings, everything checked, nothing built or written; ``progress``:
        draw the progress bar unless the request says otherwise."""
        ...

    def describe(self, resolved: Any, head: dict[str, Any]) -> dict[str, Any]:
        """What ``--print-config`` prints (``head``: the seed(s) and run directories)."""
        ...

    def notes(self, resolved: Any) -> list[str]:
        """Notes to print before the run starts."""
        ...

    def start(self, resolved: Any, run_dirs: Sequence[Path], resume: bool) -> None:
        """Train (or play) into ``run_dirs``."""
        ...

    def options(self, request: RunRequest) -> tuple[str, Sections]:
        """``(title, sections)`` of ``cl-suites options``."""
        ...


class TrainedRun:
    """A baseline trained by the main job (``cl_suites.job.main_job``)."""

    name = "trained"
    resumable = True

    def check(self, request: RunRequest) -> None:
        if request.seeds is not None and not _seed_group_learners(find_suite(request.suite)):
            raise _seeds_error(request)

    def resolve(self, request: RunRequest, progress: bool) -> tuple[RunRequest, list[Any]]:
        from cl_suites.job.run_spec import resolve

        watched = replace(request, overrides={"progress": progress, **request.overrides})
        return request, resolve(watched)

    def describe(self, resolved: Any, head: dict[str, Any]) -> dict[str, Any]:
        described = resolved[1][0].describe()
        return {
            **{k: described.pop(k) for k in ("suite", "method") if k in described},
            **head,
            **described,
        }

    def notes(self, resolved: Any) -> list[str]:
        request, specs = resolved
        if len(specs) > 1 and "layout_seed" not in request.overrides:
            return [_shared_kitchens_note(request.run_seeds, specs[0])]
        return []

    def start(self, resolved: Any, run_dirs: Sequence[Path], resume: bool) -> None:
        from cl_suites.job.main_job import run_resolved

        request, specs = resolved
        run_resolved(specs, request.run_seeds, run_dirs, resume)

    def options(self, request: RunRequest) -> tuple[str, Sections]:
        from cl_suites.job.run_spec import option_table, resolve

        (spec,) = resolve(request)
        title = (
            f"--suite {spec.suite.name} --method {spec.method} --learner {spec.learner} "
            f"--preset {spec.preset} (steps: {spec.step_unit})"
        )
        return title, option_table(spec)


RANDOM_JOB_OPTIONS = {
    "vectorization_mode": ("sync", "batching of the simulators"),
    "progress": (True, "draw the progress bar"),
}
"""Job options of a random-agent run, with their defaults and docs; every other option is
the suite's."""


def random_vectorization(job: dict[str, Any]) -> str:
    """A random-agent run's ``vectorization_mode``: the one it set; ``auto`` (no learner,
    no cost figures of its own) and unset step the envs in one process."""
    mode = job.get("vectorization_mode", RANDOM_JOB_OPTIONS["vectorization_mode"][0])
    return "sync" if mode == "auto" else mode


RANDOM_NUM_ENVS = 8
"""Sub-envs of a random-agent run unless it gives ``num_envs``."""


class RandomAgent:
    """Uniformly random actions over a whole sequence (``cl_suites.random_agent``): no
    learner, no method, not resumable."""

    name = "random-agent"
    resumable = False

    def check(self, request: RunRequest) -> None:
        info = find_suite(request.suite)
        suite = keyword_defaults(info.builder_function())
        if suite is not None:
            known = {"job": tuple(RANDOM_JOB_OPTIONS), "suite": tuple(suite)}
            check_names(request.overrides, known, f"--suite {info.name} --method random")
        if request.seeds is not None:
            raise _seeds_error(request)

    def resolve(self, request: RunRequest, progress: bool) -> dict[str, Any]:
        options = dict(request.overrides)
        job = {k: options.pop(k) for k in RANDOM_JOB_OPTIONS if k in options}
        return {
            "suite": find_suite(request.suite).id,
            "seed": request.seed,
            "num_envs": request.num_envs or RANDOM_NUM_ENVS,
            "suite_kwargs": options,
            "job": job,
            "progress": job.get("progress", progress),
        }

    def describe(self, resolved: Any, head: dict[str, Any]) -> dict[str, Any]:
        return {
            "suite": resolved["suite"],
            "method": RANDOM_METHOD,
            **head,
            **{k: resolved[k] for k in ("num_envs", "suite_kwargs", "job")},
        }

    def notes(self, resolved: Any) -> list[str]:
        return []

    def start(self, resolved: Any, run_dirs: Sequence[Path], resume: bool) -> None:
        from cl_suites.random_agent import run_random_agent

        run_random_agent(
            resolved["suite"],
            seed=resolved["seed"],
            run_dir=run_dirs[0],
            num_envs=resolved["num_envs"],
            vectorization_mode=random_vectorization(resolved["job"]),
            progress=resolved["progress"],
            **resolved["suite_kwargs"],
        )

    def options(self, request: RunRequest) -> tuple[str, Sections]:
        from cl_suites.job.run_spec import declared_suite_options

        info = find_suite(request.suite)
        suite = declared_suite_options(info)
        docs = argument_docs(info.builder_function())
        sections = {
            "job": [(k, default, doc) for k, (default, doc) in RANDOM_JOB_OPTIONS.items()],
            "suite": [(name, value, docs.get(name, "")) for name, value in suite.items()],
        }
        return f"--suite {info.name} --method random", sections


RUN_KINDS: dict[str, RunKind] = {RANDOM_METHOD: RandomAgent()}
"""Methods that are a run kind of their own; every other method is a trained run."""
TRAINED_RUN = TrainedRun()


def run_kind(method: str) -> RunKind:
    """The entry of a run of ``method``."""
    return RUN_KINDS.get(method, TRAINED_RUN)


def _default(option: str) -> Any:
    return RANDOM_JOB_OPTIONS[option][0]


def _seed_group_learners(info: Any) -> tuple[str, ...]:
    """The learners that train several seeds of a run of suite ``info`` in one program."""
    from cl_suites.job.learners import learners_for, load_learner

    return tuple(n for n in learners_for(info) if load_learner(n).seed_groups)


def _seeds_error(request: RunRequest) -> ConfigError:
    from cl_suites.job.learners import seed_group_learners

    return ConfigError(
        f"--seeds trains several seeds in one program with {seed_group_learners()}; for "
        f"--suite {request.suite} --method {request.method} run the seeds one by one "
        "(cl-suites sweep --seeds 0-4 runs them in parallel)"
    )


def _shared_kitchens_note(seeds: Sequence[int], spec: Any) -> str:
    """The line a several-seed run prints when it chose the kitchens itself."""
    return (
        f"note: seeds {' '.join(map(str, seeds))} train in one program on one set of kitchens "
        f"(layout_seed={spec.suite_kwargs['layout_seed']}, the first seed's); MEAL's protocol "
        "gives each seed its own kitchens: for that, run them one by one (cl-suites sweep "
        "--seeds)"
    )
