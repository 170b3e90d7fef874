"""The grids behind the papers' published tables, declared once as data.

``cl-suites reproduce TABLE`` (``cl_suites.cli.reproduce``) runs one of :data:`TABLES` as
``cl-suites sweep`` runs a grid, one sweep per :class:`Part` (a table whose suites or
repeats need different suite options has several), and reports our rows beside the
published ones. The grids follow ``shared/results``' account of each paper's protocol:

* CORA (Powers et al., 2022), Table 1 and the final returns of Tables 5-10: Atari6 with
  2 cycles (the paper ran 2, the code's default is 5) and 5 seeds; Procgen6 with 5 cycles and
  20 seeds; MiniHack15 with 2 cycles and 10 seeds (IMPALA and CLEAR only); the CHORES
  sequences with 3 seeds (EWC, P&C, CLEAR), 2 cycles for VaryRoom and VaryTask, 1 for
  VaryObject and MultiTraj. "IMPALA" is ``ft`` on the V-trace learner (each suite's default).
* MEAL (Tomilin et al.) Table 2: ``MEAL-20`` (Level 1, easy), FT / Online EWC / EWC / MAS /
  L2, seeds 1-5 (each seed also generates the kitchens), 1e7 env steps per task (``paper``)
  and, as its authors say the numbers were produced (TTomilin/MEAL#10), the ``meal-authors``
  preset; Table 3: FT on ``MEAL-10`` repeated 3 and 10 times (``cycles`` = repeats).

Seeds of CORA's grids are ``0 .. s-1`` (CORA names none).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cl_suites.errors import CLIError, MissingSimulatorError
from cl_suites.metrics.published import protocol, protocol_notes, published
from cl_suites.suites import find_suite
from cl_suites.sweep.grid import RunSpec, SweepSpec

CORA_METHODS = ("ft", "ewc", "online-ewc", "pnc", "clear")
MEAL_METHODS = ("ft", "online-ewc", "ewc", "mas", "l2")
"""MEAL Table 2's methods in its row order (the names are ``declarations.MEAL_METHODS``;
``tests/sweep/test_reproduce.py`` checks each grid against the published rows)."""
MEAL_SEEDS = (1, 2, 3, 4, 5)
"""MEAL's seeds: each also generates the kitchens."""

PROTOCOL_JOB_OPTIONS = (
    "multi_head",
    "task_id_input",
    "eval_deterministic",
    "eval_max_episode_steps",
)
"""Job options that change what a run learns or how it is scored (every suite, learner,
method and policy option does too); the other job options (device, env workers,
checkpoints, tracking, ...) change where and how fast a run trains, not its numbers."""


@dataclass(frozen=True)
class Part:
    """One sweep of a table: a grid (one ``SweepSpec``) and its name (its sweep directory
    under the table's)."""

    name: str
    spec: SweepSpec

    @property
    def repeats(self) -> int | None:
        """The repetitions of the sequence a MEAL Table 3 row is matched on (``cycles``)."""
        return self.spec.overrides.get("cycles")


@dataclass(frozen=True)
class Table:
    """A published table as a named grid.

    Attributes:
        name: what ``cl-suites reproduce`` takes (``"cora-atari6"``).
        description: one line for ``--list``.
        paper: ``"CORA"`` or ``"MEAL"``.
        sources: the published tables it reproduces (``"Table 1(a)"``, ...).
        parts: its sweeps.
        protocol: the published protocol it follows, in words.
    """

    name: str
    description: str
    paper: str
    sources: tuple[str, ...]
    parts: tuple[Part, ...]
    protocol: str
    notes: tuple[str, ...] = field(default=())

    @property
    def suites(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for part in self.parts for s in part.spec.suites))


def _cora(name: str, suite: str, methods: Sequence[str], seeds: int, cycles: int) -> Part:
    return Part(
        name,
        SweepSpec(
            suites=(suite,),
            methods=tuple(methods),
            seeds=tuple(range(seeds)),
            preset="paper",
            overrides={"cycles": cycles},
        ),
    )


def _meal(
    name: str, suite: str, methods: Sequence[str], preset: str, cycles: int | None = None
) -> Part:
    """A MEAL grid: ``ppo-jax`` over :data:`MEAL_SEEDS`, ``cycles`` repeats of the
    sequence when given."""
    return Part(
        name,
        SweepSpec(
            suites=(suite,),
            methods=tuple(methods),
            seeds=MEAL_SEEDS,
            learners=("ppo-jax",),
            preset=preset,
            overrides={} if cycles is None else {"cycles": cycles},
        ),
    )


CORA_PROTOCOL = (
    "CORA section 4 / appendix C: IMPALA (V-trace) learner, evaluation every n agent steps "
    "with 10 episodes per task and split, final returns smoothed over w points, mean ± SEM "
    "over s seeds"
)
CORA_SOURCES = ("Table 1(a)", "Table 1(b)")

TABLES: dict[str, Table] = {
    table.name: table
    for table in (
        Table(
            "cora-atari6",
            "CORA Tables 1 and 5: Atari6, IMPALA/EWC/Online EWC/P&C/CLEAR, 2 cycles, 5 seeds",
            "CORA",
            (*CORA_SOURCES, "Table 5"),
            (_cora("Atari6", "Atari6", CORA_METHODS, 5, 2),),
            CORA_PROTOCOL + "; Atari: 2 cycles (not the code's 5), s=5, n=250,000, w=20",
        ),
        Table(
            "cora-procgen6",
            "CORA Tables 1, 6 and 7: Procgen6, IMPALA/EWC/Online EWC/P&C/CLEAR, 5 cycles, 20 seeds",
            "CORA",
            (*CORA_SOURCES, "Table 6", "Table 7"),
            (_cora("Procgen6", "Procgen6", CORA_METHODS, 20, 5),),
            CORA_PROTOCOL + "; Procgen: 5 cycles, s=20, n=250,000, w=20, the residual network",
        ),
        Table(
            "cora-minihack15",
            "CORA Tables 1, 8 and 9: MiniHack15, IMPALA/CLEAR, 2 cycles, 10 seeds",
            "CORA",
            (*CORA_SOURCES, "Table 8", "Table 9"),
            (_cora("MiniHack15", "MiniHack15", ("ft", "clear"), 10, 2),),
            CORA_PROTOCOL + "; MiniHack: 2 cycles, s=10, n=1,000,000, w=20",
        ),
        Table(
            "cora-chores",
            "CORA Tables 1 and 10: the four CHORES sequences, EWC/P&C/CLEAR, 3 seeds",
            "CORA",
            (*CORA_SOURCES, "Table 10"),
            tuple(
                _cora(suite, suite, ("ewc", "pnc", "clear"), 3, cycles)
                for suite, cycles in (
                    ("CHORES-VaryRoom", 2),
                    ("CHORES-VaryTask", 2),
                    ("CHORES-VaryObject", 1),
                    ("CHORES-MultiTraj", 1),
                )
            ),
            CORA_PROTOCOL
            + "; CHORES: s=3, n=50,000, w=5, 2 cycles for VaryRoom and VaryTask, 1 for "
            "VaryObject and MultiTraj, returns clipped at -10",
        ),
        Table(
            "meal-table2",
            "MEAL Table 2 as the paper states it: MEAL-20 easy, FT/Online EWC/EWC/MAS/L2, "
            "5 seeds, 1e7 env steps per task",
            "MEAL",
            ("Table 2",),
            (_meal("MEAL-20", "MEAL-20", MEAL_METHODS, "paper"),),
            "MEAL section 5.1 / appendix B.2: Level 1 (easy) kitchens, 2 agents, IPPO "
            "(16 envs x 128 steps per update), 1e7 env steps per task, evaluation every 100 "
            "updates with 10 episodes, seeds 1-5",
        ),
        Table(
            "meal-table2-authors",
            "MEAL Table 2 as its authors say they ran it (preset meal-authors: 2048 envs x "
            "400 steps, 1e8 env steps per task)",
            "MEAL",
            ("Table 2",),
            (_meal("MEAL-20", "MEAL-20", MEAL_METHODS, "meal-authors"),),
            "TTomilin/MEAL#10 (the authors' answer): 1e8 env steps per task, 2048 envs x 400 "
            "steps per update, evaluation every 5 updates, shaping over half of each task, "
            "the later trainer's PPO values; the rest as the paper",
        ),
        Table(
            "meal-table3",
            "MEAL Table 3: FT on MEAL-10 easy repeated 3 and 10 times (cycles), 5 seeds",
            "MEAL",
            ("Table 3",),
            tuple(
                _meal(f"MEAL-10-repeats{repeats}", "MEAL-10", ("ft",), "paper", cycles=repeats)
                for repeats in (3, 10)
            ),
            "MEAL section 5.6: FT on a Level-1 10-task sequence repeated 3 or 10 times, "
            "1e7 env steps per task, every repetition trained",
        ),
    )
}
"""Every published table as a named grid, in ``--list`` order."""


def find_table(name: str) -> Table:
    """The table called ``name``; an unknown name is one line with the closest name and
    every valid one (``CLIError``)."""
    if name in TABLES:
        return TABLES[name]
    lowered = {t.lower(): t for t in TABLES}
    if name.lower() in lowered:
        return TABLES[lowered[name.lower()]]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    raise CLIError(
        f"unknown table {name!r}{hint}; valid: {', '.join(TABLES)} "
        "(cl-suites reproduce --list describes them)"
    )


def check_installed(table: Table) -> None:
    """Refuse a table whose suites' extra is not installed, naming the extra."""
    for suite in table.suites:
        info = find_suite(suite)
        if not info.installed:
            raise MissingSimulatorError(
                f"{table.name} needs {info.id}, whose simulator is not installed; install "
                f'it with: pip install "cl-suites[{info.extra}]"'
            )


# ----------------------------------------------------------------- overrides and protocol
def _same(a: Any, b: Any) -> bool:
    """Whether an override's value is the run's own (``10000`` is ``10000.0``; a list is
    the tuple it sets)."""

    def plain(x: Any) -> Any:
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return x
        if isinstance(x, int | float):
            return float(x)
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        if isinstance(x, Mapping):
            return {str(k): plain(v) for k, v in x.items()}
        return str(x)

    return json.dumps(plain(a), sort_keys=True) == json.dumps(plain(b), sort_keys=True)


def _defaults(part: Part, method: str) -> dict[str, tuple[str, Any]]:
    """``option -> (section, value)`` of one run of ``part`` with ``method``."""
    from cl_suites.job.run_kinds import run_kind

    run = part.spec.runs()
    request = next(r.request for r in run if r.request.method == method)
    _title, sections = run_kind(method).options(request)
    return {name: (sec, value) for sec, rows in sections.items() for name, value, _ in rows}


def published_rows(part: Part, method: str, suite: str) -> list[str]:
    """``"CORA Table 1(a) F"``-style names of the published values a run reproduces."""
    seen: dict[str, list[str]] = {}
    for v in published(suite, method, repeats=part.repeats):
        label = v.metric if v.repeats is None else f"{v.metric} ({v.repeats} repeats)"
        if v.metric == "final return":
            label = f"final return {v.split}"
        key = f"{v.paper} {v.table}"
        if label not in seen.setdefault(key, []):
            seen[key].append(label)
    return [f"{key} ({', '.join(labels)})" for key, labels in seen.items()]


def protocol_changes(table: Table, overrides: Mapping[str, Any]) -> list[str]:
    """One line per override that changes ``table``'s protocol, naming the published rows
    its runs would no longer reproduce (empty: every override leaves the protocol)."""
    out = []
    for key, value in overrides.items():
        hit: dict[str, list[str]] = {}
        for part in table.parts:
            for method in part.spec.methods:
                section, default = _defaults(part, method).get(key, (None, None))
                if section is None:  # an option this run does not take: resolution says so
                    continue
                if section == "job" and key not in PROTOCOL_JOB_OPTIONS:
                    continue
                if _same(value, default):
                    continue
                for suite in part.spec.suites:
                    hit[f"{suite} {method} ({key} {default!r})"] = published_rows(
                        part, method, suite
                    )
        if hit:
            rows = "; ".join(
                f"{run}: {', '.join(rows) or 'no published row'}" for run, rows in hit.items()
            )
            out.append(
                f"--set {key}={value!r} changes the protocol of {table.name}: it would no "
                f"longer reproduce {rows}. Run a changed grid with cl-suites sweep"
            )
    return out


def with_overrides(table: Table, overrides: Mapping[str, Any]) -> tuple[Part, ...]:
    """The table's parts with ``overrides`` (options that leave the protocol) added."""
    if not overrides:
        return table.parts
    parts = []
    for part in table.parts:
        data = part.spec.to_dict()
        data["overrides"] = {**data["overrides"], **overrides}
        parts.append(Part(part.name, SweepSpec.from_dict(data)))
    return tuple(parts)


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class PlannedRun:
    """One run of a table, resolved as the sweep resolves it."""

    part: str
    run: RunSpec
    tasks: int
    cycles: int
    steps_per_task: int
    steps: int
    unit: str


def plan(parts: Sequence[Part]) -> list[PlannedRun]:
    """Every run of ``parts`` resolved as the main job resolves it (building nothing): its
    tasks, cycles, steps per task (MEAL: whole PPO updates, as MEAL's code) and steps."""
    from cl_suites.job.run_spec import resolve

    out = []
    for part in parts:
        for run in part.spec.runs():
            job = resolve(run.request, probe_device=False)[0]
            sequence = job.sequence
            budgets = [task.budget for task in sequence.tasks]
            out.append(
                PlannedRun(
                    part=part.name,
                    run=run,
                    tasks=len(budgets),
                    cycles=sequence.cycles,
                    steps_per_task=budgets[0],
                    steps=sum(budgets) * sequence.cycles,
                    unit=job.suite.step_unit.name,
                )
            )
    return out


def hours(runs: Sequence[PlannedRun], cores: int, gpu: bool) -> tuple[float, list[str]]:
    """Hours to train ``runs`` one after another, each with the whole machine (``cores``
    cores, a GPU or not), at the rates of :mod:`cl_suites.sweep.costs`; NaN when a suite has
    no measured rate. Also one line per suite saying which rate it used."""
    from cl_suites.sweep.costs import rate

    total, basis = 0.0, {}
    for planned in runs:
        suite = planned.run.request.suite
        found = rate(suite, cores, gpu)
        if found is None:
            basis[suite] = f"{suite}: no measured rate"
            total = math.nan
            continue
        basis[suite] = f"{suite}: {found.steps_per_s:,.0f} {planned.unit}/s per run ({found.basis})"
        total += planned.steps / found.steps_per_s / 3600.0
    return total, list(basis.values())


def paper_protocols(table: Table) -> list[str]:
    """The published protocol of each suite of ``table`` and the authors' notes on it."""
    lines = []
    for suite in table.suites:
        found = protocol(suite)
        if found is not None:
            paper, proto = found
            text = ", ".join(
                f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in proto.items()
            )
            lines.append(f"{paper} {suite}: {text}")
    sources = {f"{table.paper} {s}" for s in table.sources}
    for source, note in _notes(table):
        if source in sources:
            lines.append(f"{source}: {note}")
    return lines


def _notes(table: Table) -> list[tuple[str, str]]:
    import pandas as pd

    rows = [
        {"source": f"{v.paper} {v.table}", "paper protocol": v.protocol or "-"}
        for suite in table.suites
        for part in table.parts
        for method in part.spec.methods
        for v in published(suite, method, repeats=part.repeats)
    ]
    return protocol_notes(pd.DataFrame(rows)) if rows else []
