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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import EngFormatter

from cl_suites.metrics.cora import CoraTable

PALETTE = ["#4d6685", "#d6b254", "#6aa66e", "#98433f", "#d28cd9", "#3b9ab2", "#8c6d31", "#555555"]


def plot_continual_eval(
    curves: pd.DataFrame,
    schedule: pd.DataFrame,
    names: dict[int, str],
    title: str = "",
    ncols: int = 3,
    max_points: int = 400,
) -> plt.Figure:
    """Continual-evaluation figure from :func:`~cl_suites.metrics.cora.continual_eval_curves`.

    Args:
        curves: ``method, task_id, split, total_step, mean, sem, n``.
        schedule: training segments (agent steps) for the grey bands.
        names: ``task_id -> name`` for panel titles.
        title: figure title.
        ncols: panels per row.
        max_points: curves longer than this are drawn with a stride (display only).
    """
    tasks = sorted(names)
    methods = sorted(curves["method"].unique())
    colour = {m: PALETTE[k % len(PALETTE)] for k, m in enumerate(methods)}
    ncols = max(1, min(ncols, len(tasks)))
    nrows = math.ceil(len(tasks) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(4.6 * ncols, 3.0 * nrows + 0.9),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    xmax = float(schedule["end_step"].max())
    for ax, tid in zip(axes.flat, tasks, strict=False):
        for _, seg in schedule[schedule["task_id"] == tid].iterrows():
            ax.axvspan(seg["start_step"], seg["end_step"], color="0.88", zorder=0, lw=0)
        sub = curves[curves["task_id"] == tid]
        for m in methods:
            for split, style in (("train", "--"), ("test", "-")):
                c = sub[(sub["method"] == m) & (sub["split"] == split)]
                if c.empty:
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
        ax.set_xlabel("agent steps", fontsize=9)
    handles = [plt.Line2D([], [], color=colour[m], lw=2, label=m) for m in methods]
    handles += [
        plt.Line2D([], [], color="k", ls="-", label="test split"),
        plt.Line2D([], [], color="k", ls="--", label="train split"),
        plt.Rectangle((0, 0), 1, 1, color="0.88", label="task trained"),
    ]
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=min(len(handles), 8),
        fontsize=9,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=12)
    return fig


def plot_heat_table(
    table: CoraTable, names: dict[int, str], title: str = "", digits: int = 1
) -> plt.Figure:
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
    w = max(5.0, (0.95 if len(cl) <= 8 else 1.05) * len(cl) + 2.2)
    h = max(3.0, 0.5 * len(rl) + 1.6)
    fig, ax = plt.subplots(figsize=(w, h))
    masked = np.ma.masked_invalid(goodness)
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="white")
    ax.imshow(masked, cmap=cmap, norm=TwoSlopeNorm(0.0, -lim * 1.6, lim * 1.6), aspect="auto")
    for a in range(len(rl)):
        for b in range(len(cl)):
            m = mean[a, b]
            if not np.isfinite(m):
                ax.text(b, a, "-", ha="center", va="center", fontsize=8, color="0.5")
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
    fig.tight_layout()
    return fig


def figure_png(fig: plt.Figure, dpi: int = 110) -> bytes:
    """Render a figure to PNG bytes and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
