"""The fenced code blocks of README.md and of the documentation pages, and the rules by
which ``tests/project/test_readme.py`` runs them.

The pages are README.md, then every page of the documentation site in the order of its
navigation (``mkdocs.yml``'s ``nav``): the order a reader goes through them
(:func:`doc_pages`). Every fenced block is executed unless a
``<!-- readme-test: RULE [ARG] -->`` comment sits on the line right above its opening
fence (blank lines between are allowed):

* no comment, ``python``: executed as written, each block in a fresh namespace, all in one
  working directory in page order (as a reader following the pages). A top-level
  ``print(...)  # TEXT`` line states its output: the printed text must equal TEXT, where
  ``...`` stands for any text. Descriptive comments go on the line above the print.
* no comment, ``bash``: run with ``bash -e -o pipefail``, ``cl-suites`` on PATH.
* no comment, ``toml`` / ``yaml`` / ``json``: parsed; a first line ``# NAME.toml`` writes
  the block to ``NAME.toml`` for the blocks below it. ``text``: shown, never run.
* ``print-config``: bash; every ``cl-suites run`` command with a full-scale preset
  (``--preset paper`` or ``meal-authors``: days of training) is run with
  ``--print-config`` added, which resolves and validates every argument without
  training; the block's other commands run as written.
* ``install``: bash; nothing runs. ``pip install`` lines must pin torch as
  ``constraints.txt`` does and name only extras that ``pyproject.toml`` defines (a
  ``# extras: ...`` comment must list exactly those extras); ``python -c`` code is
  compiled.
* ``make``: bash; each ``make TARGET`` runs as ``make -n TARGET`` in the repository (a dry
  run: the target exists and its recipe expands; nothing is built).
* ``raises NAME``: python; the block must raise an exception of class ``NAME`` (or a
  subclass), e.g. a setup error that tells the user what to download.
* ``skip REASON``: not run; the test is reported as skipped with the reason.

An unannotated bash block that would install packages, run ``make`` or train with a
full-scale preset fails at once, asking for its rule.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tokenize
from dataclasses import dataclass
from pathlib import Path

import tomllib
import yaml

RULES = ("print-config", "install", "make", "raises", "skip")
RUN_LANGS = ("python", "bash")
DATA_LANGS = ("toml", "yaml", "json")
SHOWN_LANGS = ("text",)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^`\s]*)\s*$")
_CLOSE = re.compile(r"^[ \t]*```\s*$")
_ANNOTATION = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<rule>\S+)(?:\s+(?P<arg>.*?))?\s*-->\s*$")
_FILE_COMMENT = re.compile(r"^#\s*(?P<name>[\w.-]+\.(?:toml|ya?ml))(?:$|[\s:])")


@dataclass(frozen=True)
class Block:
    """One fenced block of the page ``page`` (its path from the repository root):
    ``line`` is the page line of its opening fence (1-based), so code line k of the block
    is page line ``line + k``; ``index`` counts the blocks of the page."""

    index: int
    line: int
    lang: str
    code: str
    rule: str | None = None
    arg: str = ""
    problem: str = ""
    page: str = "README.md"

    @property
    def where(self) -> str:
        """``page:line`` of the opening fence, as test ids and failures name a block."""
        return f"{self.page}:{self.line}"

    @property
    def id(self) -> str:
        rule = f"-{self.rule}" if self.rule else ""
        return f"{self.where}-{self.lang or 'nolang'}{rule}"


def doc_pages(root: Path) -> list[str]:
    """README.md, then the documentation pages in the order of ``mkdocs.yml``'s ``nav``
    (paths from ``root``). The strict site build refuses a page missing from the nav, so
    this is every page."""
    config = yaml.safe_load((root / "mkdocs.yml").read_text())
    docs_dir = config.get("docs_dir", "docs")

    def walk(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry] if entry.endswith(".md") else []
        if isinstance(entry, dict):
            return [p for value in entry.values() for p in walk(value)]
        if isinstance(entry, list):
            return [p for item in entry for p in walk(item)]
        return []

    return ["README.md"] + [f"{docs_dir}/{page}" for page in walk(config["nav"])]


def extract_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of a Markdown text, with the readme-test rule above it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.group("indent"), fence.group("lang").lower()
        end = i + 1
        while end < len(lines) and not _CLOSE.match(lines[end]):
            end += 1
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
        rule, arg, problem = _annotation(lines, i)
        if not problem:
            problem = _check_rule(lang, rule, arg) or _needs_rule(lang, rule, "\n".join(body))
        if end == len(lines):
            problem = "the block is never closed"
        code = "\n".join(body) + "\n"
        blocks.append(Block(len(blocks), i + 1, lang, code, rule, arg, problem, page))
        i = end + 1
    return blocks


def _annotation(lines: list[str], fence: int) -> tuple[str | None, str, str]:
    """The rule in the nearest non-blank line above the fence, if it is an annotation."""
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or "readme-test" not in lines[j]:
        return None, "", ""
    m = _ANNOTATION.match(lines[j])
    if not m:
        return None, "", f"line {j + 1}: malformed annotation (<!-- readme-test: RULE [ARG] -->)"
    return m.group("rule"), (m.group("arg") or "").strip(), ""


def _check_rule(lang: str, rule: str | None, arg: str) -> str:
    if rule is None:
        if lang in RUN_LANGS + DATA_LANGS + SHOWN_LANGS:
            return ""
        return (
            f"a block in language {lang or '(none)'!r} cannot run: use one of "
            f"{', '.join(RUN_LANGS + DATA_LANGS + SHOWN_LANGS)} or a readme-test rule"
        )
    if rule not in RULES:
        return f"unknown readme-test rule {rule!r}; rules: {', '.join(RULES)}"
    if rule in ("skip", "raises") and not arg:
        return f"readme-test: {rule} needs {'a reason' if rule == 'skip' else 'an exception'}"
    if rule in ("print-config", "install", "make") and lang != "bash":
        return f"readme-test: {rule} applies to bash blocks, not {lang!r}"
    if rule == "raises" and lang != "python":
        return f"readme-test: raises applies to python blocks, not {lang!r}"
    return ""


def _needs_rule(lang: str, rule: str | None, code: str) -> str:
    """Commands that must not run as written in an unannotated bash block: installs (they
    would change the test's environment), ``make`` (it builds a venv) and paper-preset
    training (days; ``cl-suites reproduce`` without ``--dry-run`` too)."""
    if lang != "bash" or rule is not None:
        return ""
    for _, _, text in commands(code):
        try:
            words = shlex.split(text)
        except ValueError as e:
            return f"cannot parse {text!r}: {e}"
        if "pip" in words and "install" in words:
            return f"{text!r} would install packages: add <!-- readme-test: install -->"
        if words[0] == "make":
            return f"{text!r} would build a venv: add <!-- readme-test: make -->"
        if words[:2] in (["cl-suites", "run"], ["cl-suites", "sweep"]) and _full_scale(words):
            return (
                f"{text!r} trains for days: add <!-- readme-test: print-config --> "
                "(cl-suites run) or <!-- readme-test: skip REASON -->"
            )
        if words[:2] == ["cl-suites", "reproduce"] and not {"--dry-run", "--list", "--help"} & {
            *words
        }:
            return f"{text!r} trains for days: add <!-- readme-test: skip REASON -->"
    return ""


# --- python: stated outputs -------------------------------------------------------------


def output_matches(expected: str, printed: str) -> bool:
    """``printed`` equals ``expected`` where each ``...`` of ``expected`` matches any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, printed, re.DOTALL) is not None


def instrument(code: str, first_line: int, check_name: str) -> ast.Module:
    """Parse a python block with page line numbers (code line k is ``first_line + k``)
    and turn each top-level ``print(...)  # TEXT`` into ``check_name(line, TEXT, ...)``."""
    tree = ast.parse(code)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string[1:].strip()
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "print"
            and stmt.end_lineno in comments
        ):
            continue
        expected = comments[stmt.end_lineno]
        check = ast.Name(check_name, ast.Load())
        head = [ast.Constant(stmt.end_lineno + first_line), ast.Constant(expected)]
        stmt.value = ast.Call(check, head + call.args, call.keywords)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first_line)
    return tree


# --- bash: rules --------------------------------------------------------------------------


def _split_comment(line: str) -> tuple[str, str]:
    """``(command, comment)``: the comment starts at the first ``#`` after whitespace that
    is not inside quotes."""
    quote = ""
    for k, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k:]
    return line, ""


def commands(code: str) -> list[tuple[int, int, str]]:
    """``(first, last, text)`` of each command: 0-based physical line range (lines joined
    by a trailing backslash) and the command without comments."""
    out: list[tuple[int, int, str]] = []
    lines = code.splitlines()
    start, parts = 0, []
    for k, line in enumerate(lines):
        command = _split_comment(line)[0].rstrip()
        if not parts:
            start = k
        if command.endswith("\\"):
            parts.append(command[:-1])
            continue
        parts.append(command)
        text = " ".join(p.strip() for p in parts).strip()
        if text:
            out.append((start, k, text))
        parts = []
    return out


def with_print_config(code: str) -> str:
    """The block with ``--print-config`` added to every ``cl-suites run`` command that uses
    a full-scale preset (``FULL_SCALE_PRESETS``)."""
    lines = code.splitlines()
    for _, last, text in commands(code):
        words = shlex.split(text)
        if words[:2] == ["cl-suites", "run"] and _full_scale(words):
            command, comment = _split_comment(lines[last])
            lines[last] = f"{command.rstrip()} --print-config  {comment}".rstrip()
    return "\n".join(lines) + "\n"


FULL_SCALE_PRESETS = ("paper", "meal-authors")
"""Presets whose runs train for days (every preset but ``small``)."""


def _full_scale(words: list[str]) -> bool:
    """Whether a command's ``--preset`` names a full-scale preset."""
    return any(value in FULL_SCALE_PRESETS for value in _flag_values(words, "--preset"))


def _flag_values(words: list[str], flag: str) -> list[str]:
    values = [w.split("=", 1)[1] for w in words if w.startswith(flag + "=")]
    values += [words[k + 1] for k, w in enumerate(words[:-1]) if w == flag]
    return values


def make_dry_runs(code: str) -> list[list[str]]:
    """``make -n TARGET ...`` for every ``make`` command of the block."""
    runs = []
    for _, _, text in commands(code):
        words = shlex.split(text)
        if words[0] != "make":
            raise ValueError(f"readme-test: make blocks hold only make commands, not {text!r}")
        runs.append(["make", "-n", *words[1:]])
    return runs


def install_problems(code: str, root: Path) -> list[str]:
    """What an install block gets wrong: an unpinned torch, an unknown extra, an extras
    list that is not pyproject.toml's, a ``python -c`` that does not compile."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    pins = re.findall(r"^torch==(\S+)", (root / "constraints.txt").read_text(), re.M)
    torch = f"torch=={pins[0]}" if pins else "torch==<pinned in constraints.txt>"
    problems: list[str] = []
    for line in code.splitlines():
        comment = _split_comment(line)[1]
        listed = re.match(r"#\s*extras:\s*(.*)", comment)
        if listed and set(listed.group(1).split()) != extras:
            problems.append(
                f"the extras comment lists {sorted(set(listed.group(1).split()))}, "
                f"pyproject.toml defines {sorted(extras)}"
            )
    for _, _, text in commands(code):
        words = shlex.split(text)
        if "pip" in words and "install" in words:
            for word in words:
                if re.match(r"torch\b", word) and word != torch:
                    problems.append(f"{text!r}: torch must be installed as {torch!r}")
                bracket = re.match(r"^(?:\.|cl-suites)\[(.*)\]$", word)
                for extra in bracket.group(1).split(",") if bracket else ():
                    if extra not in extras:
                        problems.append(f"{text!r}: unknown extra {extra!r}")
        if words[0].startswith("python") and "-c" in words:
            try:
                compile(words[words.index("-c") + 1], "<python -c>", "exec")
            except SyntaxError as e:
                problems.append(f"{text!r}: python -c does not compile: {e}")
    return problems


# --- data blocks ---------------------------------------------------------------------------


def parse_data(block: Block) -> str | None:
    """Parse a toml/yaml/json block (raising on bad syntax); returns the file name its first
    line names (``# sweep.toml``), if any."""
    if block.lang == "toml":
        tomllib.loads(block.code)
    elif block.lang == "yaml":
        yaml.safe_load(block.code)
    else:
        import json

        json.loads(block.code)
        return None
    first = block.code.splitlines()[0].strip() if block.code.strip() else ""
    named = _FILE_COMMENT.match(first)
    return named.group("name") if named else None
