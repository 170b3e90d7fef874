"""The fidelity ledger (docs/fidelity.md) is complete: every row names a test that pins it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "docs" / "fidelity.md"
COLUMNS = (
    "setting",
    "reference code",
    "paper",
    "ours (default)",
    "options",
    "why",
    "pinned by",
)
_TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")


def ledger_rows() -> list[tuple[str, dict[str, str]]]:
    """(section, row) for every data row of every ledger table with the standard columns."""
    rows: list[tuple[str, dict[str, str]]] = []
    section, header = "", None
    for line in LEDGER.read_text().splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = tuple(c.lower() for c in cells)
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue  # the separator row
        if header == COLUMNS:
            rows.append((section, dict(zip(COLUMNS, cells, strict=False))))
    return rows


def test_every_row_is_pinned_by_an_existing_test():
    problems = []
    for section, row in ledger_rows():
        refs = _TEST_REF.findall(row.get("pinned by", ""))
        if not refs:
            problems.append(f"{section} / {row['setting']}: no test named in 'pinned by'")
        for path, name in refs:
            file = ROOT / path
            if not file.exists():
                problems.append(f"{section} / {row['setting']}: {path} does not exist")
            elif not re.search(rf"^\s*(async )?def {name}\(", file.read_text(), re.M):
                problems.append(f"{section} / {row['setting']}: {path} has no test {name}")
    assert not problems, "\n".join(problems)


def test_rows_have_every_column_filled():
    empty = [
        f"{section} / {row['setting']}: empty {column!r}"
        for section, row in ledger_rows()
        for column in COLUMNS
        if not row.get(column)
    ]
    assert not empty, "\n".join(empty)
