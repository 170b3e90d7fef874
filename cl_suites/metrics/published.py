"""Published results of CORA and MEAL, and how a run compares with them.

The numbers are package data (``cl_suites/data/published/{cora,meal}.json``), taken from
the papers' tables with their protocol:

* CORA (Powers et al., 2022): Table 1 summary forgetting ``F`` and zero-shot transfer ``Z``
  (x10) for Atari6, Procgen6, MiniHack15 and the four CHORES sequences, and the final
  returns of Tables 5-10 per task and split; mean ± SEM over seeds.
* MEAL (Tomilin et al.): Table 2 ``A``, ``F``, ``P`` on the Level-1 20-task sequence
  (``MEAL-20``) and Table 3 AUC-loss / FPR / RAUC of FT on a 10-task sequence repeated 3 or
  10 times (``MEAL-10`` with ``cycles`` = repeats).

:func:`published` finds the values a paper reports for a suite and method (paper method
names map to ours: IMPALA -> ``ft``, P&C -> ``pnc``, ...). :func:`agreement` says whether a
run's value agrees with the paper's within the combined error, and
:func:`protocol_differences` lists where the runs' protocol (cycles, seeds, budgets, eval
cadence, learner, MEAL kitchens) differs from the paper's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd

from cl_suites.metrics.runs import RunData
from cl_suites.suites import short_name

PAPERS = ("cora", "meal")
AGREEMENT_Z = 2.0
"""A run agrees with a paper when ``|ours - paper| <= AGREEMENT_Z * combined error``."""


@dataclass(frozen=True)
class PublishedValue:
    """One number of a paper's table.

    Attributes:
        paper: ``"CORA"`` or ``"MEAL"``.
        table: the table it is from (``"Table 1(a)"``, ``"Table 6"``, ...).
        suite: our suite name (``"Procgen6"``, ``"MEAL-20"``).
        method: our method name (``"ft"``, ``"online-ewc"``, ...).
        metric: ``"F"``/``"Z"`` (CORA, x10), ``"final return"``, ``"A"``/``"F"``/``"P"``
            (MEAL), ``"AUC-loss"``/``"FPR"``/``"RAUC"`` (MEAL Table 3).
        mean: the published value.
        error: its ± as printed (CORA: SEM; MEAL Table 2: 95% confidence half-width),
            ``None`` when none is given.
        decimals: digits after the point of the value as printed.
        error_decimals: digits after the point of the error as printed (rounding is part
            of the error).
        error_kind: ``"sem"`` or ``"ci95"`` (1.96 SEM).
        task_name: our task name (final returns only).
        split: ``"train"``/``"test"`` (final returns only).
        repeats: repetitions of the sequence (MEAL Table 3 only).
        protocol: the protocol behind the table's numbers, where its authors have since
            said it differs from the paper's text (MEAL: TTomilin/MEAL#10, #11), else
            ``None``.
    """

    paper: str
    table: str
    suite: str
    method: str
    metric: str
    mean: float
    error: float | None
    decimals: int
    error_decimals: int
    error_kind: str = "sem"
    task_name: str | None = None
    split: str | None = None
    repeats: int | None = None
    protocol: str | None = None

    def display(self) -> str:
        """``"2.3 ± 0.1"`` as printed in the paper (no ± when none is given)."""
        text = f"{self.mean:.{self.decimals}f}"
        return text if self.error is None else f"{text} ± {self.error:.{self.error_decimals}f}"

    @property
    def sem(self) -> float | None:
        """The paper's standard error: the printed error, at least half a unit of its last
        digit (``± 0.00`` is rounded, not zero), divided by 1.96 for a 95% interval;
        ``None`` when the paper gives no error."""
        if self.error is None:
            return None
        err = max(self.error, 0.5 * 10.0 ** (-self.error_decimals))
        return err / 1.96 if self.error_kind == "ci95" else err


@cache
def paper_data(paper: str) -> dict[str, Any]:
    """The raw package data of ``paper`` (``"cora"`` or ``"meal"``): source, notes, error
    type, method names, protocols per suite, protocol notes per table and the value rows."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; known: {list(PAPERS)}")
    text = resources.files("cl_suites.data.published").joinpath(f"{paper}.json").read_text()
    return json.loads(text)


@cache
def _all_values() -> tuple[PublishedValue, ...]:
    out = []
    for paper in PAPERS:
        data = paper_data(paper)
        for key in ("summary", "final_return", "plasticity"):
            for row in data.get(key, []):
                out.append(
                    PublishedValue(
                        paper=paper.upper(),
                        table=row["table"],
                        suite=row["suite"],
                        method=row["method"],
                        metric=row.get("metric", "final return"),
                        mean=float(row["mean"]),
                        error=None if row["error"] is None else float(row["error"]),
                        decimals=int(row["decimals"]),
                        error_decimals=int(row.get("error_decimals", row["decimals"])),
                        error_kind=data.get("error_kind", "sem"),
                        task_name=row.get("task_name"),
                        split=row.get("split"),
                        repeats=row.get("repeats"),
                        protocol=data.get("protocol_notes", {}).get(row["table"]),
                    )
                )
    return tuple(out)


def published(
    suite: str, method: str, metric: str | None = None, *, repeats: int | None = None
) -> list[PublishedValue]:
    """The values the papers report for ``suite`` and ``method`` (empty when none do).

    Args:
        suite: our suite name as in run metadata (``"Procgen6"``; a gymnasium id such as
            ``"CLSuite/Procgen6-v0"`` works too).
        method: our method name (``"ft"``, ``"clear"``, ...).
        metric: keep only this metric (``None``: all).
        repeats: for MEAL Table 3, the run's repetitions (``cycles``).
    """
    name = short_name(suite)
    return [
        v
        for v in _all_values()
        if v.suite == name
        and v.method == method
        and (metric is None or v.metric == metric)
        and (v.repeats is None or v.repeats == repeats)
    ]


BASELINE_COLUMNS = ("paper", "table", "method", "metric", "task", "split", "published")


def suite_baselines(suite: str) -> pd.DataFrame:
    """Every value the papers report for ``suite``, whatever method a report holds: the
    reference rows of a report (a user's own method gets the published baselines beside
    it). Columns ``BASELINE_COLUMNS``; ``published`` as printed (``"2.3 ± 0.1"``); the
    paper's method names in brackets after ours (``"ft (IMPALA)"``). Empty when no paper
    reports the suite."""
    name = short_name(suite)
    rows = []
    for v in _all_values():
        if v.suite != name:
            continue
        paper_name = paper_data(v.paper.lower()).get("methods", {}).get(v.method)
        metric = v.metric if v.repeats is None else f"{v.metric} ({v.repeats} repeats)"
        rows.append(
            {
                "paper": v.paper,
                "table": v.table,
                "method": f"{v.method} ({paper_name})" if paper_name else v.method,
                "metric": metric,
                "task": v.task_name or "",
                "split": v.split or "",
                "published": v.display(),
            }
        )
    return pd.DataFrame(rows, columns=list(BASELINE_COLUMNS))


def table_protocols(suite: str) -> list[tuple[str, str]]:
    """``("MEAL Table 2", note)`` for every published table that reports ``suite`` and
    whose authors have described the protocol behind its numbers
    (:attr:`PublishedValue.protocol`), in the data's order."""
    notes = {
        f"{v.paper} {v.table}": v.protocol
        for v in _all_values()
        if v.suite == short_name(suite) and v.protocol
    }
    return list(notes.items())


def reference_finals(suite: str, methods: Sequence[str], names: Mapping[int, str]) -> pd.DataFrame:
    """The published final returns to draw as reference lines in a suite's continual
    evaluation figure: those of every method in ``methods`` and always the paper's
    fine-tuning baseline (``ft``), for each task id in ``names`` (``task_id -> our task
    name``). Columns ``method, task_id, split, value``; empty when no paper reports final
    returns for the suite."""
    ids = {task: tid for tid, task in names.items()}
    keep = {*methods, "ft"}
    rows = [
        {"method": v.method, "task_id": ids[v.task_name], "split": v.split, "value": v.mean}
        for v in _all_values()
        if v.suite == short_name(suite)
        and v.metric == "final return"
        and v.method in keep
        and v.task_name in ids
    ]
    return pd.DataFrame(rows, columns=["method", "task_id", "split", "value"])


def protocol(suite: str) -> tuple[str, dict[str, Any]] | None:
    """``(paper, protocol)`` of the paper that reports ``suite``, or ``None``."""
    name = short_name(suite)
    for paper in PAPERS:
        proto = paper_data(paper)["protocols"].get(name)
        if proto is not None:
            return paper.upper(), proto
    return None


def agreement(
    ours: float,
    ours_error: float | None,
    value: PublishedValue,
    z: float = AGREEMENT_Z,
) -> tuple[str, float]:
    """Whether a run's value agrees with a published one.

    The combined error is ``sqrt(ours_error**2 + paper_sem**2)`` with ``paper_sem`` the
    paper's standard error (:attr:`PublishedValue.sem`; half a unit of the value's last
    printed digit when the paper gives no error). ``ours_error`` is the SEM over seeds (NaN
    or ``None`` with one seed: only the paper's error counts).

    Returns:
        ``(verdict, combined_error)``: ``"agrees"`` when ``|ours - paper| <= z * combined``,
        ``"differs"`` otherwise, ``"n/a"`` when the run has no value or neither side has an
        error estimate.
    """
    ours_ok = ours_error is not None and math.isfinite(ours_error)
    paper_sem = value.sem if value.sem is not None else 0.5 * 10.0 ** (-value.decimals)
    combined = math.hypot(ours_error if ours_ok else 0.0, paper_sem)
    if ours is None or not math.isfinite(ours):
        return "n/a", combined
    if not ours_ok and value.error is None:
        return "n/a", combined
    return ("agrees" if abs(ours - value.mean) <= z * combined else "differs"), combined


def _first(values: list[Any]) -> str:
    seen = sorted({str(v) for v in values})
    return seen[0] if len(seen) == 1 else "/".join(seen)


def _budget(run: RunData) -> Any:
    steps = run.metadata.get("steps_per_task")
    if isinstance(steps, list | tuple):
        return steps[0] if len(set(steps)) == 1 else "/".join(str(s) for s in steps)
    return steps


def protocol_differences(
    suite: str, runs: Sequence[RunData], *, repeats: int | None = None, window: Any = None
) -> list[str]:
    """Where the runs' protocol differs from the paper's for ``suite`` (empty: none).

    Compares seeds (number of runs), cycles (``repeats`` for MEAL Table 3), steps per task,
    evaluation cadence and episodes, CORA's smoothing window and learner (IMPALA = V-trace),
    and MEAL's difficulty and number of agents. Values missing from a run's metadata are
    said to be unknown.
    """
    found = protocol(suite)
    if found is None:
        return []
    _paper, proto = found
    out = []

    def check(label: str, ours: Any, theirs: Any) -> None:
        if theirs is None:
            return
        if ours in (None, "None"):
            out.append(f"{label}: not recorded (paper {_fmt(theirs)})")
        elif str(ours) != str(theirs):
            out.append(f"{label} {_fmt(ours)} vs paper {_fmt(theirs)}")

    check("seeds", len(runs), proto.get("seeds"))
    cycles = proto.get("cycles", repeats)  # MEAL Table 3: the repeats of the matched row
    check("cycles", _first([r.metadata.get("cycles") for r in runs]), cycles)
    check("steps/task", _first([_budget(r) for r in runs]), proto.get("steps_per_task"))
    check(
        "eval every", _first([r.metadata.get("eval_every") for r in runs]), proto.get("eval_every")
    )
    check(
        "eval episodes",
        _first([r.metadata.get("eval_episodes") for r in runs]),
        proto.get("eval_episodes"),
    )
    check(
        "smoothing window",
        window if window is not None else _first([r.smoothing_window for r in runs]),
        proto.get("smoothing_window"),
    )
    if proto.get("learner") == "vtrace":
        learners = _first([r.metadata.get("learner") for r in runs])
        if learners != "vtrace":
            out.append(f"learner {learners} vs paper IMPALA (V-trace)")
    if "difficulty" in proto:
        kw = [r.metadata.get("env_kwargs") or {} for r in runs]
        check("difficulty", _first([k.get("difficulty", "easy") for k in kw]), proto["difficulty"])
        agents = [
            r.metadata.get("num_agents", k.get("num_agents", 2))
            for r, k in zip(runs, kw, strict=True)
        ]
        check("agents", _first(agents), proto["num_agents"])
    return out


def _fmt(value: Any) -> str:
    """Integers with thousands separators (``"50,000,000"``), anything else as text."""
    try:
        return f"{int(value):,}" if str(int(value)) == str(value) else str(value)
    except (TypeError, ValueError):
        return str(value)


COMPARISON_COLUMNS = (
    "suite",
    "method",
    "metric",
    "task",
    "split",
    "source",
    "paper protocol",
    "paper",
    "ours",
    "difference",
    "tolerance",
    "agreement",
    "final window",
    "protocol differences",
)
"""Columns of :func:`compare`: ``tolerance`` is ``AGREEMENT_Z`` times the combined error;
``paper protocol`` the published value's :attr:`PublishedValue.protocol` (``"-"``: the
paper's text); ``final window`` says over how many of the last evaluations each side's
final returns are averaged (CORA's smoothing window; ``"-"`` for other metrics)."""


def compare(
    suite: str,
    method: str,
    runs: Sequence[RunData],
    summary: Mapping[str, tuple[float, float]],
    final: pd.DataFrame | None = None,
    *,
    repeats: int | None = None,
    window: int | None = None,
) -> pd.DataFrame:
    """A run's values next to every published value for its suite and method.

    Args:
        suite: our suite name.
        method: our method name.
        runs: the runs (seeds) behind the values (for the protocol differences).
        summary: ``metric -> (mean, SEM)`` in the paper's units: CORA ``"F"``/``"Z"`` (x10),
            MEAL ``"A"``/``"F"``/``"P"`` and ``"AUC-loss"``/``"FPR"``/``"RAUC"``.
        final: final returns (CORA Tables 5-10): frame ``task_name, split, mean, sem``.
        repeats: repetitions of the sequence (MEAL Table 3).
        window: the evaluations our final returns average (the report's smoothing
            window; default: the runs' own).

    Returns:
        Frame with :data:`COMPARISON_COLUMNS` (text cells), one row per published value;
        empty when no paper reports the suite and method.
    """
    values = published(suite, method, repeats=repeats)
    if not values:
        return pd.DataFrame(columns=list(COMPARISON_COLUMNS))
    window = window or runs[0].smoothing_window
    differences = protocol_differences(suite, runs, repeats=repeats, window=window)
    differences = "; ".join(differences) or "none"
    final_window = _final_window(suite, runs, window)
    finals = {}
    if final is not None:
        for row in final.itertuples(index=False):
            finals[(str(row.task_name), str(row.split))] = (float(row.mean), float(row.sem))
    rows = []
    for v in values:
        if v.metric == "final return":
            mean, sem = finals.get((str(v.task_name), str(v.split)), (float("nan"), float("nan")))
        else:
            mean, sem = summary.get(v.metric, (float("nan"), float("nan")))
        verdict, combined = agreement(mean, sem, v)
        d = v.decimals
        ours = _display(mean, sem, d)
        diff = f"{mean - v.mean:+.{d}f}" if math.isfinite(mean) else "n/a"
        rows.append(
            {
                "suite": short_name(suite),
                "method": method,
                "metric": v.metric + (" (x10)" if v.paper == "CORA" and v.metric in "FZ" else ""),
                "task": v.task_name or "-",
                "split": v.split or "-",
                "source": f"{v.paper} {v.table}",
                "paper protocol": v.protocol or "-",
                "paper": v.display(),
                "ours": ours,
                "difference": diff,
                "tolerance": f"{AGREEMENT_Z * combined:.{d}f}",
                "agreement": verdict,
                "final window": final_window if v.metric == "final return" else "-",
                "protocol differences": differences,
            }
        )
    return pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))


def _final_window(suite: str, runs: Sequence[RunData], window: Any) -> str:
    """``"ours: last 20 evals (100,000 steps); paper: last 20 (5,000,000)"``: the evaluations
    each side's final returns average, and the steps they span."""
    everies = {r.metadata.get("eval_every") for r in runs}
    every = everies.pop() if len(everies) == 1 else None
    ours = f"ours: last {window} eval(s)"
    if isinstance(every, int) and isinstance(window, int):
        ours += f" ({window * every:,} steps)"
    found = protocol(suite)
    proto = found[1] if found is not None else {}
    theirs = proto.get("smoothing_window")
    if theirs is None:
        return f"{ours}; paper: not stated"
    paper = f"paper: last {theirs}"
    if proto.get("eval_every"):
        paper += f" ({int(theirs) * int(proto['eval_every']):,} steps)"
    return f"{ours}; {paper}"


def _display(mean: float, sem: float, digits: int) -> str:
    if not math.isfinite(mean):
        return "n/a"
    if not math.isfinite(sem):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sem:.{digits}f}"


def protocol_notes(comparison: pd.DataFrame) -> list[tuple[str, str]]:
    """``(source, note)`` of every table in ``comparison`` whose authors have said how its
    numbers were produced (``paper protocol`` other than ``"-"``), once per table."""
    if comparison.empty or "paper protocol" not in comparison:
        return []
    rows = comparison.reset_index().drop_duplicates("source")
    return [(s, p) for s, p in zip(rows["source"], rows["paper protocol"], strict=True) if p != "-"]


def comparison_summary(comparison: pd.DataFrame) -> pd.DataFrame:
    """The comparison with the per-task final returns folded into one row per (suite,
    method, source table): ``"k/n agree"`` (for the console and the summary table)."""
    if comparison.empty:
        return comparison
    finals = comparison["metric"] == "final return"
    rows = [comparison[~finals]]
    for (suite, method, source, split), grp in comparison[finals].groupby(
        ["suite", "method", "source", "split"], sort=False
    ):
        known = grp[grp["agreement"] != "n/a"]
        agree = int((known["agreement"] == "agrees").sum())
        verdict = f"{agree}/{len(known)} agree"
        if len(known) < len(grp):
            verdict += f", {len(grp) - len(known)} n/a"
        rows.append(
            pd.DataFrame(
                [
                    {
                        "suite": suite,
                        "method": method,
                        "metric": f"final return, {split} ({len(grp)} tasks)",
                        "task": "all",
                        "split": split,
                        "source": source,
                        "paper protocol": grp["paper protocol"].iloc[0],
                        "paper": "per task",
                        "ours": "per task",
                        "difference": "-",
                        "tolerance": "-",
                        "agreement": verdict,
                        "final window": grp["final window"].iloc[0],
                        "protocol differences": grp["protocol differences"].iloc[0],
                    }
                ]
            )
        )
    return pd.concat(rows, ignore_index=True)
