"""The path of an option from ``cl-suites run`` to the constructed learner (issue 30 item 3).

Runs ``cl-suites run ...`` in this process under ``sys.settrace`` until the learner's
constructor is entered (``ContinualPPO``, ``VTrace`` or ``JaxIPPO``; the run stops there),
and lists, for ``learner``, ``num_envs`` and ``lam`` (``reg_coef`` for ``ppo-jax``), the
modules of the project the option passes through, in order:

* a *stop* is a call of a project function that is handed the option: an argument named
  like it that holds its value (``learner``; ``num_envs``/``n_envs``; ``lam``/``reg_coef``),
  the option's name itself (a lookup by name, ``check_option("lam", v)``), a mapping
  holding its value under its name (``overrides``, the method's keywords), or an object of
  the project that the option was resolved into (``.name`` equal to it: a learner entry).
  A bundle of everything (the run specification) does not count. With ``--lines``, also
  every executed line that reads the option (a variable or ``obj.attribute`` of that name
  holding its value). Consecutive stops in one module are one; the last stop is the
  learner's constructor.
* *returns*: stops in a module visited before (stops minus modules).

``--where`` also prints the function of each stop (``module:qualname``), which tells why
the option came back to a module. The record of issues 30 and 43 is in
``benchmarks/results/LOG.md``.

Every module of the project is imported before tracing starts (import-time code is not a
stop). Example (the numbers of issue 30's closing note; ``--root`` measures another
checkout, e.g. ``git worktree add /tmp/oldtree f56fd38``)::

    PYTHONPATH=. python -m benchmarks.structure.option_path -- run --suite MEAL-2 --method ewc \\
        --learner ppo --num-envs 3 --set lam=0.25 --preset small
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import linecache
import os
import pkgutil
import sys
import tempfile
import threading
import tokenize
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PACKAGES = ("cl_suites", "baselines_sb3", "baselines_jax")
NAMES = {"learner": ("learner",), "num_envs": ("num_envs", "n_envs"), "lam": ("lam", "reg_coef")}
"""The names each option goes by (``reg_coef``: ``lam`` as ``ppo-jax`` calls it)."""
KEYS = {"learner": (), "num_envs": ("num_envs",), "lam": ("lam", "reg_coef")}
"""Its names as mapping keys and lookups (``hp["learner"]`` is the learner's settings)."""
CONSTRUCTORS = {"ContinualPPO.__init__", "VTrace.__init__", "JaxIPPO.__init__"}


class _Built(BaseException):
    """The learner's constructor was entered: the path ends."""


class Tracer:
    def __init__(self, root: Path, values: dict[str, Any], lines: bool):
        self.root, self.values, self.lines = root, values, lines
        self.where: dict[str, list[str]] = {option: [] for option in values}
        """The function of each stop (``module:qualname``), for ``--where``."""
        self._tokens: dict[tuple[str, int], set[Any]] = {}

    def module(self, filename: str) -> str | None:
        try:
            rel = Path(filename).resolve().relative_to(self.root)
        except ValueError:
            return None
        if not rel.parts or rel.parts[0] not in PACKAGES or rel.suffix != ".py":
            return None
        parts = rel.with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def same(self, value: Any, option: str) -> bool:
        try:
            return type(value) is not bool and bool(value == self.values[option])
        except Exception:  # arrays, odd types: not the option
            return False

    def handed(self, name: str, obj: Any, option: str) -> bool:
        """The argument ``name=obj`` hands the option on (see the module docstring)."""
        if name in NAMES[option] and self.same(obj, option):
            return True
        if isinstance(obj, str):
            return obj in KEYS[option]
        if isinstance(obj, Mapping):
            try:
                items = list(obj.items())[:200]
            except Exception:
                return False
            return any(k in KEYS[option] and self.same(v, option) for k, v in items)
        package = (type(obj).__module__ or "").split(".")[0]
        return package in PACKAGES and self.same(getattr(obj, "name", None), option)

    def names(self, filename: str, lineno: int) -> set[Any]:
        """The line's names: ``name``, or ``(object, attribute)`` for ``object.attribute``
        (``(None, attribute)`` after a bracket or call)."""
        key = (filename, lineno)
        if key not in self._tokens:
            found: set[Any] = set()
            line = linecache.getline(filename, lineno)
            try:
                tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
            except (tokenize.TokenError, IndentationError, SyntaxError):
                tokens = []
            for i, tok in enumerate(tokens):
                if tok.type != tokenize.NAME:
                    continue
                if i >= 1 and tokens[i - 1].string == ".":
                    owner = tokens[i - 2] if i >= 2 else None
                    named = owner is not None and owner.type == tokenize.NAME
                    found.add((owner.string if named else None, tok.string))
                else:
                    found.add(tok.string)
            self._tokens[key] = found
        return self._tokens[key]

    def reads(self, frame: Any, name: Any, option: str) -> bool:
        local = frame.f_locals
        if not isinstance(name, tuple):
            return name in NAMES[option] and name in local and self.same(local[name], option)
        owner, attribute = name
        if attribute not in NAMES[option]:
            return False
        if owner is not None:
            return owner in local and self.same(getattr(local[owner], attribute, None), option)
        holders = list(local.values())
        holders += [v for h in holders if isinstance(h, (list, tuple)) and len(h) <= 16 for v in h]
        return any(self.same(getattr(h, attribute, None), option) for h in holders)

    def on_line(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and self.lines:
            names = self.names(frame.f_code.co_filename, frame.f_lineno)
            for option in self.values:
                if any(self.reads(frame, name, option) for name in names):
                    self.stop(option, self.module(frame.f_code.co_filename), frame)
        return self.on_line

    @property
    def stops(self) -> dict[str, list[str]]:
        """``{option: the module of each stop}``."""
        return {o: [w.split(":")[0] for w in where] for o, where in self.where.items()}

    def stop(self, option: str, module: str, frame: Any) -> None:
        qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        self.where[option].append(f"{module}:{qualname}")

    def on_call(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        module = self.module(frame.f_code.co_filename)
        if module is None or frame.f_code.co_name == "<module>":
            return None
        if not frame.f_code.co_name.startswith("<"):  # comprehensions: the caller's reads
            arguments = [(k, v) for k, v in frame.f_locals.items() if k != "self"]
            for option in self.values:
                if any(self.handed(k, v, option) for k, v in arguments):
                    self.stop(option, module, frame)
        if getattr(frame.f_code, "co_qualname", "") in CONSTRUCTORS:  # Python >= 3.11
            for option in self.values:
                self.stop(option, module, frame)
            raise _Built
        return self.on_line


def trace(root: Path, argv: list[str], values: dict[str, Any], lines: bool) -> Tracer:
    """The tracer after ``cl-suites <argv>``: ``.stops`` is ``{option: modules of its
    stops}`` (see the docstring), ``.where`` the function of each stop."""
    sys.path.insert(0, str(root))
    for package in PACKAGES:
        importlib.import_module(package)
        for info in pkgutil.walk_packages([str(root / package)], package + "."):
            if not info.name.endswith("__main__"):
                with contextlib.suppress(Exception):  # an optional simulator: not traced
                    importlib.import_module(info.name)
    from cl_suites import cli

    tracer = Tracer(root, values, lines)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        sys.settrace(tracer.on_call)
        threading.settrace(tracer.on_call)
        try:
            cli.main(argv)
        except _Built:
            pass
        finally:
            sys.settrace(None)
            threading.settrace(None)
    return tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--lines", action="store_true", help="also lines that read it")
    parser.add_argument("--where", action="store_true", help="also print each stop's function")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- run --suite ... (the CLI)")
    args = parser.parse_args()
    argv = [a for a in args.argv if a != "--"]
    key, value = argv[argv.index("--set") + 1].split("=")
    values = {
        "learner": argv[argv.index("--learner") + 1],
        "num_envs": int(argv[argv.index("--num-envs") + 1]),
        "lam": float(value),
    }
    assert key in NAMES["lam"], "--set lam=X (or reg_coef=X for ppo-jax)"
    tracer = trace(args.root.resolve(), argv, values, args.lines)
    for option, modules in tracer.stops.items():
        path = [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]
        print(
            f"{option}: {len(path)} stops in {len(set(path))} modules, "
            f"{len(path) - len(set(path))} returns\n    " + " > ".join(path)
        )
        if args.where:
            where = tracer.where[option]
            functions = [w for i, w in enumerate(where) if i == 0 or where[i - 1] != w]
            print("    " + "\n    ".join(functions))


if __name__ == "__main__":
    main()
