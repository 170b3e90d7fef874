"""What the command line prints: the consoles, option tables and data frames that fit any
terminal (plain text when piped)."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()  # the terminal's width (COLUMNS when piped; rich wraps table cells)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def print_sections(title: str, sections: dict[str, list[tuple[str, Any, str]]]) -> None:
    """Options by section (``(name, default, doc)`` rows) under ``title``: a table per
    section on a terminal, aligned plain lines when piped."""
    if not console.is_terminal:  # piped or redirected: plain columns, one line per option
        print(f"options of {title}; set any with --set KEY=VALUE")
        for section, rows in sections.items():
            if rows:
                print("\n".join(["", f"{section} options", *_plain_rows(rows)]))
        return
    console.print(f"[bold]options of {escape(title)}[/bold]; set any with --set KEY=VALUE")
    for section, rows in sections.items():
        if not rows:
            continue
        table = Table(title=f"{section} options", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("option", no_wrap=True)
        table.add_column("default", overflow="fold")
        table.add_column("doc", ratio=1)
        for name, value, doc in rows:
            table.add_row(name, escape(json.dumps(value, default=str)), escape(doc))
        console.print(table)


def _plain_rows(rows: list[tuple[str, Any, str]]) -> list[str]:
    """``option  default  doc`` lines with aligned columns and no wrapping."""
    cells = [("option", "default", "doc")]
    cells += [(name, json.dumps(value, default=str), doc) for name, value, doc in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(2)]
    return [
        f"{name:<{widths[0]}}  {value:<{widths[1]}}  {doc}".rstrip() for name, value, doc in cells
    ]


def print_frame(table: Any, frame: Any, title: str) -> None:
    """``table`` (a rich table of ``frame``) when it fits the terminal; else, and when the
    output is piped, ``frame`` as plain text, one block per row (``index: column value``
    lines), which no width cuts."""
    from rich.measure import Measurement

    if (
        console.is_terminal
        and Measurement.get(console, console.options, table).maximum <= console.width
    ):
        console.print(table)
        return
    flat = frame.reset_index()
    keys = list(flat.columns[: frame.index.nlevels])
    columns = [c for c in flat.columns if c not in keys]
    width = max((len(str(c)) for c in columns), default=0)
    lines = [title]
    for _, row in flat.iterrows():
        lines.append("  " + " / ".join(str(row[k]) for k in keys))
        lines += [f"    {c!s:<{width}}  {row[c]}" for c in columns]
    print("\n".join(lines), flush=True)
