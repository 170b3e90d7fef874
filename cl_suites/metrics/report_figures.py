"""The report's figures: each suite's continual-evaluation plot and each method's CORA F/Z
heat maps, rendered to PNG (in worker processes when asked) and written next to its tables.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cl_suites.metrics import cora
from cl_suites.metrics.plasticity_report import render_plasticity, suite_tables
from cl_suites.metrics.plots import (
    figure_png,
    plot_continual_eval,
    plot_coordination_matrix,
    plot_heat_table,
)
from cl_suites.metrics.report_data import SuiteResult
from cl_suites.metrics.report_files import cora_stem


def _render_continual(
    curves: pd.DataFrame,
    schedule: pd.DataFrame,
    names: dict[int, str],
    title: str,
    step_unit: str,
    references: pd.DataFrame,
) -> bytes:
    return figure_png(
        plot_continual_eval(
            curves, schedule, names, title=title, step_unit=step_unit, references=references
        )
    )


def _render_heat(table: cora.CoraTable, names: dict[int, str], title: str) -> bytes:
    return figure_png(plot_heat_table(table, names, title=title))


def _render_coordination(matrix, names: dict[int, str], title: str) -> bytes:
    return figure_png(plot_coordination_matrix(matrix, names, title=title))


@dataclass
class PendingFigure:
    """A submitted figure: :meth:`png` waits for (or renders) it and writes ``path``."""

    path: Path
    alt: str
    job: Future | None
    render: Callable[[], bytes]
    _png: bytes | None = field(default=None, repr=False)

    def png(self) -> bytes:
        """The PNG bytes, written to ``path`` on the first call."""
        if self._png is None:
            self._png = self.job.result() if self.job is not None else self.render()
            self.path.write_bytes(self._png)
        return self._png


class FigureRenderer:
    """Renders the report's PNGs, in worker processes when ``workers > 1``.

    Figures are independent of each other and of the MEAL/L2M metrics, so rendering them
    in a process pool overlaps matplotlib's rasterisation with the metric computation.
    Without a pool a figure is rendered when its PNG is first asked for.
    """

    def __init__(self, workers: int) -> None:
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            # fork: the workers inherit the imported modules (no re-import of pandas and
            # matplotlib); the jobs only touch their own arguments
            self._pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork")
            )

    def submit(self, path: Path, alt: str, fn: Callable[..., bytes], *args) -> PendingFigure:
        job = self._pool.submit(fn, *args) if self._pool else None
        return PendingFigure(path, alt, job, lambda: fn(*args))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class SuiteFigures:
    """One suite's figures: the continual evaluation and, per method, ``"F"``/``"Z"``."""

    continual: PendingFigure
    heat: dict[str, dict[str, PendingFigure]]
    plasticity: PendingFigure | None = None
    plasticity_tables: dict = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        extra = [self.plasticity.path] if self.plasticity is not None else []
        return [
            self.continual.path,
            *(f.path for m in self.heat.values() for f in m.values()),
            *extra,
        ]


def suite_figures(renderer: FigureRenderer, res: SuiteResult, suite_dir: Path) -> SuiteFigures:
    """Submit a suite's figures (``suite_dir/continual_eval.png``,
    ``suite_dir/<method>_{F,Z}.png``, MEAL's ``suite_dir/<method>_coordination.png`` where
    runs stored a coordination matrix)."""
    continual = renderer.submit(
        suite_dir / "continual_eval.png",
        "continual evaluation",
        _render_continual,
        res.curves,
        res.schedule,
        res.names,
        f"{res.suite}: continual evaluation",
        res.step_unit,
        res.references,
    )
    heat = {
        m.method: {
            metric: renderer.submit(
                cora_stem(suite_dir, m.method, metric, ".png"),
                f"{m.method} {metric}",
                _render_heat,
                table,
                res.names,
                f"{res.suite} - {m.method}",
            )
            for metric, table in m.cora.items()
        }
        for m in res.methods
    }
    for m in res.methods:  # MEAL's coordination matrix beside the method's F/Z tables
        if m.coordination is not None:
            heat[m.method]["coordination"] = renderer.submit(
                cora_stem(suite_dir, m.method, "coordination", ".png"),
                f"{m.method} coordination matrix",
                _render_coordination,
                m.coordination,
                res.names,
                f"{res.suite} - {m.method}",
            )
    tables = suite_tables(res.runs, res.schedule, res.names)
    plasticity = None
    if not tables["frame"].empty:
        plasticity = renderer.submit(
            suite_dir / "plasticity.png",
            "plasticity diagnostics",
            render_plasticity,
            tables["frame"],
            res.schedule,
            res.names,
            f"{res.suite}: plasticity diagnostics",
            res.step_unit,
        )
    return SuiteFigures(continual, heat, plasticity, tables)
