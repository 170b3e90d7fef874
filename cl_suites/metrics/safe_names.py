"""Names that become paths, and text that goes into CSV cells, made harmless.

Run metadata (suite ids, method names, worker ids) ends up in file names of the report and
of the l2logger export, and in CSV cells that people open in spreadsheets. Both are
untrusted input:

* :func:`safe_name` turns a name into one path component (no separators, no leading dot,
  no ``..``), so a method called ``../../escape/pwned`` cannot write outside the report;
  :func:`path_inside` checks a final path against its root.
* :func:`neutralize_cell` defuses spreadsheet formulas (OWASP "CSV injection"): a text cell
  that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading
  ``'``, unless it is a lone ``-`` or one of the report's number displays (``"-0.3 ± 0.1"``,
  ``"-0.12 [-0.30, 0.05]"``), which contain no letters or function syntax.
* :func:`tex_escape` makes text inert in LaTeX (every special character escaped, so
  ``\\write18{...}`` or ``\\input{/etc/passwd}`` print as text and run nothing);
  :func:`md_escape` makes text inert in Markdown (HTML tags become entities, link,
  emphasis and table syntax is backslash-escaped). Both keep a value on one line.
  :func:`md_text` is the lighter form for prose (the report's ``notes.md``): it reads as
  written in the file (``>=``, ``[0, 1]``, ``score_normalizers``) and defuses only what
  would render as something else than text: HTML tags and entities, links, images and
  link definitions, a block marker at the start.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pandas as pd

from cl_suites.metrics.runs import MetricsInputError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_NAME = 80
"""Longest file-name component the report writes (longer names are cut and hashed)."""

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER_DISPLAY = re.compile(
    r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"
    r"(?: ± \d+(?:\.\d*)?(?:e[-+]?\d+)?)?"
    r"(?: \[[-+]?[\d.e+-]+, [-+]?[\d.e+-]+\])?"
)


_TEX = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "±": r"$\pm$",
}
_MD = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\\": "\\\\",
    "`": "\\`",
    "*": "\\*",
    "_": "\\_",
    "[": "\\[",
    "]": "\\]",
    "|": "\\|",
    "~": "\\~",
    "$": "\\$",  # math on GitHub
}


def _one_line(value: object) -> str:
    """``value`` as text with every control character (newlines included) a space."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in str(value))


def tex_escape(value: object) -> str:
    """``value`` as LaTeX text that typesets as written and runs nothing (``±`` as
    ``$\\pm$``); one line."""
    return "".join(_TEX.get(c, c) for c in _one_line(value))


def md_escape(value: object) -> str:
    """``value`` as Markdown text that renders as written: no HTML, links, images,
    emphasis, math or table cells come out of it; one line."""
    return "".join(_MD.get(c, c) for c in _one_line(value))


_TAG = re.compile(r"<[A-Za-z/!?][^<>]*>?")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_LINK_END = re.compile(r"\](?=[(\[:])")
_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")
_BLOCK_START = re.compile(r"^(\s*)([#>+*=-]|\d+(?=[.)]))")


def md_text(value: object) -> str:
    """``value`` as one line of Markdown prose that reads as written, in the file and
    rendered: only HTML tags (``<img ...>`` as ``&lt;img ...&gt;``), entities (``&amp;``
    shows as written), the ``]`` that would close a link, image or link definition, a
    backslash before punctuation and a block marker at the start (heading, quote, list)
    are escaped. Comparisons (``>=``), brackets (``[0, 1]``), underscores and code spans
    stay as they are."""
    text = _one_line(value)
    text = _BACKSLASH.sub(r"\\\\", text)
    text = _ENTITY.sub("&amp;", text)
    text = _TAG.sub(lambda m: "&lt;" + m.group(0)[1:].replace(">", "&gt;"), text)
    text = _LINK_END.sub(r"\\]", text)
    return _BLOCK_START.sub(_escape_block_start, text)


def _escape_block_start(m: re.Match[str]) -> str:
    """``# x`` -> ``\\# x``; ``1. x`` -> ``1\\. x``."""
    space, marker = m.group(1), m.group(2)
    return space + marker + "\\" if marker[0].isdigit() else space + "\\" + marker


def safe_name(name: object, *, what: str = "name") -> str:
    """``name`` as one safe path component.

    Characters outside ``[A-Za-z0-9._-]`` and leading dots become ``_``; when anything was
    changed (or the name is longer than :data:`MAX_NAME`), ``-`` plus 8 hex digits of the
    name's SHA-1 are appended, so two different names never share a file. Safe names are
    returned unchanged.

    Raises:
        MetricsInputError: an empty (or whitespace-only) name, which names nothing.
    """
    text = str(name)
    if not text.strip():
        raise MetricsInputError(f"{what} {text!r} is empty and cannot name a file")
    safe = _UNSAFE.sub("_", text)
    stripped = safe.lstrip(".")
    safe = "_" * (len(safe) - len(stripped)) + stripped
    if safe == text and len(safe) <= MAX_NAME:
        return safe
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[:MAX_NAME]}-{digest}"


def path_inside(root: str | os.PathLike[str], *parts: str) -> Path:
    """``root / parts...``, refusing a result that resolves outside ``root``.

    Raises:
        MetricsInputError: the joined path escapes ``root`` (names the path).
    """
    base = Path(root).resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise MetricsInputError(f"refusing to write {path}: it is outside {base}")
    return path


def neutralize_cell(value: object) -> object:
    """A CSV cell that a spreadsheet will not run as a formula (see the module docstring)."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    if value == "-" or _NUMBER_DISPLAY.fullmatch(value):  # "-": a cell the metric lacks
        return value
    return "'" + value


def neutralize_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with every text cell, index label and column label neutralised."""
    out = frame.map(neutralize_cell)
    if isinstance(out.index, pd.MultiIndex):
        out.index = pd.MultiIndex.from_tuples(
            [tuple(neutralize_cell(v) for v in t) for t in out.index], names=out.index.names
        )
    else:
        out.index = pd.Index([neutralize_cell(v) for v in out.index], name=out.index.name)
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = pd.MultiIndex.from_tuples(
            [tuple(neutralize_cell(v) for v in t) for t in out.columns]
        )
    else:
        out.columns = [neutralize_cell(c) for c in out.columns]
    return out
