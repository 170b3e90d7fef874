"""What an option's value must be (:class:`Opt`), an option's declaration
(:class:`Option`), and warnings about absurd run sizes.

Each option declares its :class:`Opt` once: the job options in ``cl_suites.job.run_spec``
(``JobOptions``' fields), the common suite options there too (``SUITE_OPTIONS``), each
learner's options in its wing (``cl_suites.job.torch.options``,
``cl_suites.job.jax.entry``); ``run_spec.resolve`` checks every value against it, so
every way to start a run (``cl-suites run --set`` / ``--config``, ``cl-suites sweep``,
library calls) refuses a bad value before anything is built, in one line naming the
option, its allowed range and the value.

:func:`size_warnings` names the settings of a run whose size is absurd for the machine
(budget, rollout memory, sub-envs per core); the run is warned about, not refused.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cl_suites.rundir.fsutil import format_bytes


@dataclass(frozen=True)
class Opt:
    """What an option's value must be.

    ``kind``: ``"int"``, ``"float"``, ``"bool"``, ``"str"``, ``"choice"`` (one of
    ``choices``), ``"bool|str"`` (a boolean or a non-empty string), ``"int-list"`` (a list
    of integers, each within ``low`` / ``high``: layer widths) or ``"pair"`` (``[low,
    high]``: two numbers, the first not above the second: a clipping range). ``low`` /
    ``high`` bound numbers (``low_open`` / ``high_open``: ``low`` / ``high`` itself
    excluded). ``none_ok``: ``None`` is allowed; ``callable_ok``: a callable is allowed
    (SB3's schedules, from library calls).
    """

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    none_ok: bool = False
    callable_ok: bool = False

    def describe(self) -> str:
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "str":
            text = "a string"
        elif self.kind == "bool|str":
            text = "true, false or a name"
        elif self.kind == "int-list":
            each = Opt("int", low=self.low, high=self.high, low_open=self.low_open)
            text = f"a list of integers, each {each.describe().removeprefix('an integer ')}"
            text = text if self.low is not None or self.high is not None else "a list of integers"
        elif self.kind == "pair":
            text = "a pair [low, high] of numbers with low <= high"
        elif self.kind == "choice":
            text = "one of " + ", ".join(
                str(c).lower() if isinstance(c, bool) else repr(c) for c in self.choices
            )
        else:
            what = "an integer" if self.kind == "int" else "a number"
            lo = "(" if self.low_open else "["
            hi = ")" if self.high_open else "]"
            if self.low is not None and self.high is not None:
                text = f"{what} in {lo}{self.low:g}, {self.high:g}{hi}"
            elif self.low is not None:
                text = f"{what} {'>' if self.low_open else '>='} {self.low:g}"
            else:
                text = what
        return text + (" or none" if self.none_ok else "")

    def check(self, name: str, value: Any) -> Any:
        """``value`` (an integral float as an ``int`` for integer options), or
        ``ValueError``: "NAME must be RANGE, got VALUE"."""
        if value is None and self.none_ok:
            return value
        if callable(value) and self.callable_ok:
            return value
        checked = self._checked(value)
        if checked is _BAD:
            raise ValueError(f"{name} must be {self.describe()}, got {value!r}")
        return checked

    def _checked(self, value: Any) -> Any:
        if self.kind == "bool":
            return value if isinstance(value, bool) else _BAD
        if self.kind == "str":
            return value if isinstance(value, str) else _BAD
        if self.kind == "bool|str":
            return value if isinstance(value, bool) or (isinstance(value, str) and value) else _BAD
        if self.kind == "choice":
            hits = [c for c in self.choices if c == value and type(c) is type(value)]
            return hits[0] if hits else _BAD
        if self.kind == "int-list":
            if not isinstance(value, list | tuple):
                return _BAD
            each = Opt("int", low=self.low, high=self.high, low_open=self.low_open)
            items = [each._checked(v) for v in value]
            return _BAD if any(v is _BAD for v in items) else type(value)(items)
        if self.kind == "pair":
            if not isinstance(value, list | tuple) or len(value) != 2:
                return _BAD
            low, high = (Opt("float")._checked(v) for v in value)
            if low is _BAD or high is _BAD or low > high:
                return _BAD
            return type(value)((low, high))
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            return _BAD
        if self.kind == "int":
            integral = isinstance(value, numbers.Integral)
            if not integral and not (math.isfinite(value) and float(value).is_integer()):
                return _BAD
            value = int(value)
        elif not math.isfinite(value):
            return _BAD
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return _BAD
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return _BAD
        return value


_BAD = object()


@dataclass(frozen=True)
class Option:
    """A hyperparameter or suite option: ``section`` (``learner``, ``method``, ``policy``,
    ``suite``), what its value must be (``check``; ``None``: free-form) and a one-line doc.
    Its default is the preset's (or the suite's) value for the run."""

    section: str
    check: Opt | None
    doc: str


def choice(choices: tuple[Any, ...] | list[Any]) -> Opt:
    """One of ``choices``."""
    return Opt("choice", choices=tuple(choices))


def integer(low: int | None = 1, **kw: Any) -> Opt:
    """An integer, at least ``low`` (``None``: unbounded)."""
    return Opt("int", low=low, **kw)


def number(low: float = 0.0, high: float | None = None, **kw: Any) -> Opt:
    """A real number within ``low`` / ``high``."""
    return Opt("float", low=low, high=high, **kw)


BOOL = Opt("bool")
UNIT = number(0.0, 1.0)
"""A number in [0, 1]: discounts, mixing ratios."""


# -- run size --------------------------------------------------------------------------------
MAX_REASONABLE_STEPS = 10**11
"""Budgets above this many steps (about 12 days at an optimistic 100,000 steps/s) are
warned about."""
ASSUMED_STEPS_PER_S = 100_000
MAX_ENVS_PER_CORE = 256
"""More sub-envs per CPU core than this are warned about (single-agent suites: their
sub-envs step on the CPU)."""


def physical_memory() -> int | None:
    """Bytes of RAM of this machine, or ``None`` when unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def observation_bytes(space: Any) -> int | None:
    """Bytes of one observation of ``space`` as SB3's rollout buffer stores it (float32),
    or ``None`` for a space without a fixed shape."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, Mapping):
        parts = [observation_bytes(s) for s in spaces.values()]
        return None if None in parts else sum(parts)  # type: ignore[arg-type]
    shape = getattr(space, "shape", None)
    return None if shape is None else 4 * math.prod(shape)


def job_size_warnings(spec: Any) -> list[str]:
    """:func:`size_warnings` of a resolved run (``run_spec.JobSpec``), and a line when
    ``env_workers`` is more than the cores the process may use."""
    from cl_suites.core.workers import usable_cores

    workers = spec.options.env_workers
    extra = []
    if spec.options.vectorization_mode == "workers" and workers and workers > usable_cores():
        extra.append(
            f"env_workers={workers} is more than the {usable_cores()} core(s) this process may "
            f"use; using {min(workers, spec.num_envs)} worker processes that share them"
        )
    return extra + size_warnings(
        total_steps=spec.schedule[-1].end_step,
        step_unit=spec.suite.step_unit.name,
        num_envs=spec.num_envs,
        agents=spec.num_agents,
        n_steps=spec.rollout_steps,
        obs_bytes=observation_bytes(spec.sequence.observation_space),
        cpu_bound=spec.suite.runtime.steps_on_cpu,
    )


def size_warnings(
    *,
    total_steps: int,
    step_unit: str,
    num_envs: int,
    agents: int,
    n_steps: int,
    obs_bytes: int | None,
    cpu_bound: bool,
    memory: int | None = None,
    cores: int | None = None,
) -> list[str]:
    """Lines naming each setting whose size is absurd for this machine: a budget beyond
    ``MAX_REASONABLE_STEPS``, a rollout buffer (``n_steps x num_envs x agents``
    observations as float32) beyond half the RAM, more than ``MAX_ENVS_PER_CORE`` CPU-bound
    sub-envs per core. Empty when the run looks sane."""
    out = []
    if total_steps > MAX_REASONABLE_STEPS:
        days = total_steps / ASSUMED_STEPS_PER_S / 86400
        out.append(
            f"the run's budget is {total_steps:.3g} {step_unit} (steps_per_task x tasks x "
            f"cycles): about {days:,.0f} days even at {ASSUMED_STEPS_PER_S:,} steps/s"
        )
    memory = physical_memory() if memory is None else memory
    if obs_bytes is not None and memory:
        rollout = n_steps * num_envs * agents * obs_bytes
        if rollout > memory / 2:
            out.append(
                f"num_envs {num_envs} x n_steps {n_steps}: the rollout buffer alone needs about "
                f"{format_bytes(rollout)} of observations, this machine has "
                f"{format_bytes(memory)} of RAM"
            )
    cores = (os.cpu_count() or 1) if cores is None else cores
    if cpu_bound and num_envs > MAX_ENVS_PER_CORE * cores:
        out.append(
            f"num_envs {num_envs} on {cores} CPU core(s): one rollout steps {num_envs} "
            f"sub-envs {n_steps} times ({n_steps * num_envs:,} {step_unit}) before the first "
            "update, and progress may look stalled"
        )
    return out
