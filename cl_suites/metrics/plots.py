"""CORA-style figures with matplotlib (Agg backend).

* :func:`plot_continual_eval` - one panel per task: grey bands where the task is trained,
  one colour per method, solid line = test split, dashed = train split, shaded ± SEM
  (CORA section 6 / Figure 2).
* :func:`plot_heat_table` - an F or Z diagnostic table as a heat map, green = good (less
  forgetting, more transfer), red = bad, colour intensity proportional to magnitude
  (CORA section 6, "darker in proportion to the magnitude").
"""

from __future__ import annotations

import io
import math
import sys

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import EngFormatter

from cl_suites.metrics.cora import CoraTable

NAMES_AS_TEXT = matplotlib.rc_context({"text.parse_math": False})
"""Figures are drawn with mathtext off: task and method names with ``$`` print as written
(a name such as ``$x^$`` would otherwise stop the report with a parse error)."""

PALETTE = ["#4d6685", "#d6b254", "#6aa66e", "#98433f", "#d28cd9", "#3b9ab2", "#8c6d31", "#555555"]


@NAMES_AS_TEXT
def plot_continual_eval(
    curves: pd.DataFrame,
    schedule: pd.DataFrame,
    names: dict[int, str],
    title: str = "",
    ncols: int = 3,
    max_points: int = 400,
    step_unit: str = "agent steps",
    references: pd.DataFrame | None = None,
) -> Figure:
    """Continual-evaluation figure from :func:`~cl_suites.metrics.cora.continual_eval_curves`.

    Args:
        curves: ``method, task_id, split, total_step, mean, sem, n``.
        schedule: training segments (in ``step_unit``) for the grey bands.
        names: ``task_id -> name`` for panel titles.
        title: figure title.
        ncols: panels per row.
        max_points: curves longer than this are drawn with a stride (display only).
        step_unit: the x axis label, the runs' ``RunData.step_unit`` (MEAL: env steps).
        references: published final returns drawn as dotted horizontal lines
            (``method, task_id, split, value``; :func:`~cl_suites.metrics.published.
            reference_finals`), in the method's colour, black for a method not in
            ``curves``; the test split where a task has one.
    """
    tasks = sorted(names)
    methods = sorted(curves["method"].unique())
    colour = {m: PALETTE[k % len(PALETTE)] for k, m in enumerate(methods)}
    refs = references if references is not None else pd.DataFrame(columns=["task_id"])
    ncols = max(1, min(ncols, len(tasks)))
    nrows = math.ceil(len(tasks) / ncols)
    # fixed margins in inches (a layout engine would measure every tick label of every
    # panel several times); a standalone Figure keeps no pyplot state
    left, right, bottom, top = 0.75, 0.15, 0.95, (0.75 if title else 0.35)
    hspace_in, wspace_in = 0.5, 0.45
    panel_w, panel_h = 4.6 - wspace_in, 3.0 - hspace_in
    w = left + right + ncols * panel_w + (ncols - 1) * wspace_in
    h = bottom + top + nrows * panel_h + (nrows - 1) * hspace_in
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    axes = fig.subplots(
        nrows,
        ncols,
        squeeze=False,
        sharex=True,
        gridspec_kw={
            "left": left / w,
            "right": 1 - right / w,
            "bottom": bottom / h,
            "top": 1 - top / h,
            "wspace": wspace_in / panel_w,
            "hspace": hspace_in / panel_h,
        },
    )
    xmax = float(schedule["end_step"].max())
    # one pass over the curves frame instead of a boolean filter per panel and line
    groups = {
        (str(m), int(t), str(sp)): g
        for (m, t, sp), g in curves.groupby(["method", "task_id", "split"], observed=True)
    }
    spans = schedule[["task_id", "start_step", "end_step"]].to_numpy()
    has_test = "test" in set(curves["split"].astype(str))  # else train lines are solid
    for ax, tid in zip(axes.flat, tasks, strict=False):
        for _, start, end in spans[spans[:, 0] == tid]:
            ax.axvspan(start, end, color="0.88", zorder=0, lw=0)
        for m in methods:
            for split, style in (("train", "--" if has_test else "-"), ("test", "-")):
                c = groups.get((str(m), int(tid), split))
                if c is None or c.empty:
                    continue
                stride = max(1, len(c) // max_points)
                c = c.iloc[::stride]
                x = c["total_step"].to_numpy()
                y = c["mean"].to_numpy()
                ax.plot(
                    x, y, style, color=colour[m], lw=1.6, alpha=0.95 if split == "test" else 0.7
                )
                s = c["sem"].to_numpy()
                if np.isfinite(s).any():
                    ax.fill_between(x, y - s, y + s, color=colour[m], alpha=0.18, lw=0)
        task_refs = refs[refs["task_id"] == tid]
        if "test" in set(task_refs.get("split", ())):
            task_refs = task_refs[task_refs["split"] == "test"]
        for m, value in zip(task_refs.get("method", ()), task_refs.get("value", ()), strict=True):
            ax.axhline(value, ls=":", lw=1.3, color=colour.get(m, "k"), zorder=1)
        ax.set_title(f"{tid}-{names[tid]}", fontsize=10)
        ax.set_xlim(0, xmax)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3, lw=0.5)
    for ax in axes.flat[len(tasks) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("return", fontsize=9)
    for ax in axes[-1, :]:
        ax.set_xlabel(step_unit, fontsize=9)
    handles = [Line2D([], [], color=colour[m], lw=2, label=m) for m in methods]
    if has_test:  # the splits told apart only where a suite has a test split
        handles += [
            Line2D([], [], color="k", ls="-", label="test split"),
            Line2D([], [], color="k", ls="--", label="train split"),
        ]
    handles.append(Rectangle((0, 0), 1, 1, color="0.88", label="task trained"))
    if set(refs.get("method", ())) & set(methods):
        handles.append(Line2D([], [], color="0.4", ls=":", label="paper's final return"))
    handles += [
        Line2D([], [], color="k", ls=":", label=f"paper's {m} final return")
        for m in sorted(set(refs.get("method", ())) - set(methods))
    ]
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.05 / h),
        ncol=min(len(handles), 8),
        fontsize=9,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=12, y=1 - 0.12 / h, va="top")
    return fig


@NAMES_AS_TEXT
def plot_heat_table(
    table: CoraTable, names: dict[int, str], title: str = "", digits: int = 1
) -> Figure:
    """Heat map of an F (negative = green) or Z (positive = green) table with ± SEM text."""
    order = [c for c in table.mean.columns if c != "Avg"]
    if table.metric == "F":
        rows, cols = order[:-1], order[1:]
    else:
        rows, cols = order[1:], order[:-1]
    rl, cl = [*rows, "Avg"], [*cols, "Avg"]
    mean = table.mean.loc[rl, cl].to_numpy(dtype=float)
    sem = table.sem.loc[rl, cl].to_numpy(dtype=float)
    goodness = -mean if table.metric == "F" else mean
    lim = np.nanmax(np.abs(goodness)) if np.isfinite(goodness).any() else 1.0
    lim = lim if lim > 0 else 1.0
    # fixed margins in inches around an axes sized by the cell count (tick labels up to
    # ~14 characters, title up to ~55): tight_layout would lay out every cell text once
    # more just to measure it
    left, right, bottom, top = 1.3, 0.2, 1.1, (0.7 if title else 0.45)
    ax_w = max(4.2, (0.95 if len(cl) <= 8 else 1.05) * len(cl))
    ax_h = max(1.2, 0.5 * len(rl))
    w, h = ax_w + left + right, ax_h + bottom + top
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)
    masked = np.ma.masked_invalid(goodness)
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="white")
    ax.imshow(masked, cmap=cmap, norm=TwoSlopeNorm(0.0, -lim * 1.6, lim * 1.6), aspect="auto")
    # cells without a value get a grey dash; all dashes are one marker artist (a text
    # artist per cell costs ~2 ms to lay out and rasterise)
    dash_r, dash_c = np.nonzero(~np.isfinite(mean))
    if dash_r.size:
        ax.plot(dash_c, dash_r, ls="", marker="_", ms=4, mew=0.9, color="0.5")
    for a in range(len(rl)):
        for b in range(len(cl)):
            m = mean[a, b]
            if not np.isfinite(m):
                continue
            s = sem[a, b]
            sep = "\n" if len(cl) <= 8 else " "
            txt = f"{m:.{digits}f}" + (f"{sep}±{s:.{digits}f}" if np.isfinite(s) else "")
            bold = "bold" if rl[a] == "Avg" or cl[b] == "Avg" else "normal"
            ax.text(b, a, txt, ha="center", va="center", fontsize=7.5, fontweight=bold)
    ax.axhline(len(rl) - 1.5, color="k", lw=1)
    ax.axvline(len(cl) - 1.5, color="k", lw=1)
    ax.set_xticks(range(len(cl)))
    ax.set_yticks(range(len(rl)))
    ax.set_xticklabels(
        [f"{c}-{names[c]}" if c != "Avg" else "Avg" for c in cl],
        rotation=35,
        ha="right",
        fontsize=8,
    )
    ax.set_yticklabels([f"{r}-{names[r]}" if r != "Avg" else "Avg" for r in rl], fontsize=8)
    ax.set_xlabel("trained task j", fontsize=9)
    ax.set_ylabel("evaluated task i", fontsize=9)
    label = (
        "Forgetting F (x10, red = forgetting)"
        if table.metric == "F"
        else ("Zero-shot transfer Z (x10, green = positive transfer)")
    )
    ax.set_title(f"{title}\n{label}" if title else label, fontsize=10)
    return fig


@NAMES_AS_TEXT
def plot_coordination_matrix(matrix: np.ndarray, names: dict[int, str], title: str = "") -> Figure:
    """MEAL's coordination matrix: ``M[i, j]`` (normalised score in [0, 1]) with agent 0
    on the policy of task ``i``'s end, agent 1 on task ``j``'s, on task ``i``'s kitchen;
    the diagonal (the ordinary evaluation) framed, a cell without a value left white."""
    m = np.asarray(matrix, dtype=float)
    n = len(m)
    left, right, bottom, top = 1.3, 0.9, 1.1, (0.7 if title else 0.45)
    side = max(2.5, 0.6 * n)
    w, h = side + left + right, side + bottom + top
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label="normalised score")
    for i in range(n):
        ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, ec="k", lw=1.2))
        for j in range(n):
            if np.isfinite(m[i, j]) and n <= 20:
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7)
    labels = [f"{t}-{names.get(t, t)}" for t in range(n)]
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("agent 1: policy at the end of task j", fontsize=9)
    ax.set_ylabel("kitchen i, agent 0: policy of task i", fontsize=9)
    label = "Coordination matrix (MEAL)"
    ax.set_title(f"{title}\n{label}" if title else label, fontsize=10)
    return fig


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    """Render a figure to PNG bytes (and close it when pyplot manages it)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close(fig)
    return buf.getvalue()
