"""Rooms, arrows and the job layer's two wings, measured on the source (issue 49 item 5).

Rooms, arrows, arrows back up, arrows across and into the wings, family branches,
callbacks between the wings, torch on the ``ppo-jax`` path and a new learner's files to
touch.

Reads a checkout's ``cl_suites``, ``baselines_sb3`` and ``baselines_jax`` with ``ast``
only, nothing of the project imported (``--root`` measures another checkout, e.g.
``git worktree add /work/wt-base c5c7eb7 --detach``)::

    python -m benchmarks.structure.rooms [--root DIR] [--json] [--roots M,...]

The figures, and what each counts:

* **rooms**: the package directories of the three packages that hold ``.py`` files
  (``cl_suites.job``, ``cl_suites.meal``, ``baselines_sb3.cl`` ...; a sub-package is a
  room of its own). A module's room is the package its file sits in; a room's lines are
  the lines of its own ``.py`` files (sub-packages not included).
* **arrows**: the import graph below plus the entry-point strings: a string constant
  ``"module:attr"`` whose module is a module of the project is an arrow too (a lazy
  import: a registry names what it imports by such strings). *Module edges*: distinct
  ``a -> b`` pairs of modules (``a != b``); *room arrows*: distinct pairs of rooms
  (``room(a) != room(b)``) with at least one module edge between them.
* **the import graph** (shared with ``tests/project/test_import_cycles.py``, which
  imports it from here): top-level and function-level imports alike, relative imports
  resolved, ``from pkg import name`` counted as importing the submodule ``pkg.name`` when
  there is one (else ``pkg``), ``importlib.import_module("literal")`` and
  ``__import__("literal")`` counted as imports, imports under ``if TYPE_CHECKING:`` left
  out (they never run); an imported name that is not a module of the project resolves to
  its nearest enclosing module (``pkg.mod.attr`` -> ``pkg.mod``).
* **arrows back up**: module edges (entry points included) that go against the layer
  order of ``tests/project/test_import_cycles.py``'s docstring (:func:`layer`): the
  command line and the sweep > the job layer > the learner families (``baselines_sb3``,
  ``baselines_jax``, neither importing the other: an edge between them counts too) > the
  rest of ``cl_suites`` (the SB3 room ``cl_suites.sb3`` included) > ``cl_suites.core`` >
  ``cl_suites.rundir`` and ``cl_suites.errors``.
* **the wings** of the job layer: the torch wing is ``cl_suites.job.torch`` and the JAX
  wing ``cl_suites.job.jax`` (each package and everything under it). A tree without these
  packages (before issue 49) has its wings as modules: torch ``main_job``, ``checkpoint``,
  ``device``, ``tracking`` (the modules that import torch or SB3); JAX ``jax_job``,
  ``jax_checkpoint``, ``jax_options``. Every other module of ``cl_suites.job`` is
  *shared*.
* **cross-wing arrows**: module edges (imports or entry points) from a module of one wing
  to a module of the other.
* **arrows down into a wing**: module edges from a shared job module to a wing module,
  split in two: by import (what the registry should not need) and by entry-point string
  (the registry's way: fine).
* **family branches**: in every module under ``cl_suites/job``, each comparison
  (``==``, ``!=``, ``in``, ``not in``, ``is``, ``is not``; ``match`` values too) with an
  operand that names a learner family: ``"baselines_sb3"``, ``"baselines_jax"``,
  ``"ppo-jax"`` (the JAX family's one learner), a tuple/list/set holding one of them, the
  constants ``JAX_LEARNER`` / ``TORCH_LEARNERS``, or a family's class (``TorchLearner``,
  ``JaxLearner``, ``JaxIPPO``, any ``Torch...Learner``, ``Jax...Learner``,
  ``SB3...Learner``; not a registry's own ``Learner`` / ``LearnerEntry``); and each
  ``isinstance(x, C)`` / ``issubclass`` with ``C`` such a class. Listed as ``file:line``.
* **learner branches** (reported beside, not a family branch): the same comparisons
  against a torch learner's name (``"ppo"``, ``"vtrace"``, or a tuple of them) or class
  (``ContinualPPO``, ``VTrace``): a choice inside one family (the preset tables per
  learner).
* **callbacks between the wings** (a heuristic): in a module of family X (the torch wing
  or ``baselines_sb3``: torch; the JAX wing or ``baselines_jax``: JAX), a call of a
  function imported (at any level) from a module of the other family Y that is handed a
  function defined in the calling module (a ``def`` at any depth, a ``lambda``, or
  ``functools.partial`` of one), as a positional or keyword argument. Before issue 49:
  ``main_job._run_jax`` hands its nested ``open_run`` to ``jax_job.run_jax_job``. Bound
  methods (``self.f``) and functions reached through objects are not seen.
* **torch on the ppo-jax path**: the modules that importing the roots runs, statically:
  the roots (``--roots``: modules or packages, taken with everything under them; by
  default ``cl_suites.job.run_spec`` and the JAX wing's train module, ``jax_job`` before
  issue 49 and the package ``cl_suites.job.jax`` after; names absent from the tree are
  skipped), then, transitively, their module-level imports (function-level imports and
  entry points are lazy and left out; ``TYPE_CHECKING`` too) and every module's parent
  packages (their ``__init__`` runs first). Reported: whether ``torch`` and
  ``stable_baselines3`` are imported by a module so reached, with one shortest chain.
* **a new learner's files to touch** (a proxy: the files that name the learner today are
  the files a learner like it has to touch): the files under ``cl_suites/`` outside the
  learner's own modules (``ppo-jax``: the JAX wing) that name it. *In code*: a ``.py``
  file with a string literal that holds the name (as a whole word; docstrings and
  comments not counted), an identifier or imported module path with the name as a part
  (``vtrace``: ``CORA_VTRACE``, ``VTrace``, ``baselines_sb3.vtrace``), or the learner's
  constant (``ppo-jax``: ``JAX_LEARNER``). *Anywhere*: any file whose text holds the name
  or the constant (docstrings, comments and data files too).

The record is in ``benchmarks/results/LOG.md`` ("Issue 49: structure before/after").
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("cl_suites", "baselines_sb3", "baselines_jax")
CLI = ("cl_suites.cli", "cl_suites.__main__", "cl_suites.sweep")
JOB = ("cl_suites.job",)
FAMILIES = ("baselines_sb3", "baselines_jax")
CORE = ("cl_suites.core",)
BOTTOM = ("cl_suites.rundir", "cl_suites.errors")
SB3_ROOM = "cl_suites.sb3"
CORE_NEVER_IMPORTS = ("torch", "stable_baselines3")

WINGS = {"torch": "cl_suites.job.torch", "jax": "cl_suites.job.jax"}
"""The wings of the job layer: a package each."""
LEGACY_WINGS = {
    "torch": ("main_job", "checkpoint", "device", "tracking"),
    "jax": ("jax_job", "jax_checkpoint", "jax_options"),
}
"""The wings of a tree without the wing packages (before issue 49): modules of the job."""
FAMILY_OF_PACKAGE = {"baselines_sb3": "torch", "baselines_jax": "jax"}
DEFAULT_ROOTS = ("cl_suites.job.run_spec", "cl_suites.job.jax_job", "cl_suites.job.jax")
"""The ppo-jax path's roots; names absent from a tree are skipped."""
JAX_PATH_NEVER_IMPORTS = ("torch", "stable_baselines3")

FAMILY_NAMES = ("baselines_sb3", "baselines_jax", "ppo-jax")
"""Strings that name a learner family (``ppo-jax`` is the JAX family's one learner)."""
FAMILY_CONSTANTS = ("JAX_LEARNER", "TORCH_LEARNERS")
FAMILY_CLASSES = ("TorchLearner", "JaxLearner", "JaxIPPO")
"""A family's classes (and any ``Torch...Learner``, ``Jax...Learner``, ``SB3...Learner``)."""
LEARNER_NAMES = ("ppo", "vtrace")
LEARNER_CLASSES = ("ContinualPPO", "VTrace")
"""A torch learner's name and class: a branch on one is a choice inside the family."""


@dataclass(frozen=True)
class LearnerMarks:
    """How a learner is named in the source: its name, its constants, the word that marks
    identifiers and module paths (``None``: none), and its own modules (``"@jax"``: the
    JAX wing), which do not count."""

    name: str
    constants: tuple[str, ...] = ()
    word: str | None = None
    own: tuple[str, ...] = ()


LEARNERS = (
    LearnerMarks("ppo-jax", constants=("JAX_LEARNER",), own=("@jax",)),
    LearnerMarks("vtrace", word="vtrace"),
)


# -- the graph -----------------------------------------------------------------------------
def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """``{module name: file}`` for every ``.py`` file of ``packages`` under ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


_ENTRY_POINT = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


@dataclass(frozen=True)
class Import:
    """One import in a module's code: the (dotted) name it imports, its line, whether it
    runs only when a function is called (``lazy``) and whether it is an entry-point string
    (``entry``, always lazy)."""

    name: str
    line: int
    lazy: bool
    entry: bool = False


def module_imports(
    module: str,
    is_package: bool,
    tree: ast.Module,
    modules: dict[str, Path],
    entry_points: bool = False,
) -> Iterator[Import]:
    """The imports of ``module``'s code (see the module docstring); ``from pkg import name``
    gives ``pkg.name`` when that is one of ``modules``, else ``pkg``. ``entry_points``:
    also the ``"module:attr"`` strings whose module is one of ``modules``."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, lazy = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend((n, lazy) for n in node.orelse)
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            yield from (Import(alias.name, line, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - (not is_package)]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield Import(submodule if submodule in modules else source, line, lazy)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            )
        ):
            yield Import(node.args[0].value, line, lazy)
        elif entry_points and isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _ENTRY_POINT.fullmatch(node.value)
            if match and match.group(1) in modules:
                yield Import(match.group(1), line, True, entry=True)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # decorators and defaults run when the ``def`` does; the body when it is called
            outer = [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]
            stack.extend((n, lazy) for n in outer if n is not None)
            stack.extend((n, True) for n in node.body)
        elif isinstance(node, ast.Lambda):
            stack.extend((n, lazy) for n in node.args.defaults)
            stack.append((node.body, True))
        else:
            stack.extend((n, lazy) for n in ast.iter_child_nodes(node))


@dataclass
class Source:
    """A checkout's modules: their files, texts and syntax trees."""

    root: Path
    files: dict[str, Path]
    texts: dict[str, str] = field(default_factory=dict)
    trees: dict[str, ast.Module] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path, packages: Iterable[str] = PACKAGES) -> Source:
        source = cls(Path(root), module_files(Path(root), packages))
        for module, path in source.files.items():
            source.texts[module] = path.read_text()
            source.trees[module] = ast.parse(source.texts[module], filename=str(path))
        return source

    def imports(self, module: str, entry_points: bool = False) -> list[Import]:
        path = self.files[module]
        return list(
            module_imports(
                module, path.name == "__init__.py", self.trees[module], self.files, entry_points
            )
        )

    def known(self, name: str) -> str | None:
        """The module of the project ``name`` is or lies in, else ``None``."""
        while name and name not in self.files:
            name = name.rpartition(".")[0]
        return name or None

    def relative(self, module: str) -> str:
        return self.files[module].relative_to(self.root).as_posix()


def _imports(root: Path, packages: Iterable[str]) -> tuple[dict[str, Path], dict[str, set[str]]]:
    """The modules' files and ``{module: every (dotted) name its code imports}``."""
    source = Source.read(root, packages)
    return source.files, {m: {i.name for i in source.imports(m)} for m in source.files}


def source_graph(
    source: Source, entry_points: bool = False, eager_only: bool = False
) -> dict[str, set[str]]:
    """``{module: modules of the project it imports}``; ``entry_points``: the entry-point
    strings too; ``eager_only``: module-level imports only."""
    graph: dict[str, set[str]] = {}
    for module in source.files:
        imports = source.imports(module, entry_points)
        targets = {source.known(i.name) for i in imports if not (eager_only and i.lazy)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``{module: modules of the packages it imports}`` (see the module docstring; no
    entry points)."""
    return source_graph(Source.read(root, packages))


def outside_imports(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``{module: top-level names of the packages outside ``packages`` it imports}``."""
    packages = tuple(packages)
    _, imported = _imports(root, packages)
    tops = {m: {n.split(".")[0] for n in names if n} for m, names in imported.items()}
    return {m: {top for top in names if top not in packages} for m, names in tops.items()}


def forbidden_reaches(
    graph: dict[str, set[str]],
    outside: dict[str, set[str]],
    prefixes: Iterable[str],
    forbidden: Iterable[str],
) -> list[str]:
    """``"a -> b -> ... -> torch"``: for each module under ``prefixes`` that imports one of
    the ``forbidden`` packages, directly or through modules of the project it imports, one
    shortest such chain."""
    prefixes, forbidden = tuple(prefixes), set(forbidden)
    chains = []
    for start in sorted(m for m in graph if m.startswith(prefixes)):
        paths, queue = {start: [start]}, [start]
        while queue:
            v = queue.pop(0)
            if outside[v] & forbidden:
                chains.append(" -> ".join([*paths[v], min(outside[v] & forbidden)]))
                break
            for w in sorted(graph[v]):
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
    return chains


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for group in groups:
        start = min(group)
        paths = {start: [start]}
        queue = [start]
        while queue:  # the shortest way from start back to start inside the group
            v = queue.pop(0)
            if start in graph[v]:
                cycles.append([*paths[v], start])
                break
            for w in sorted(graph[v] & group):
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
    return cycles


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int:
    """0 the command line, 1 the job layer, 2 a learner family, 3 the rest of cl_suites
    (the SB3 room included), 4 the env machinery (core), 5 the run directory and errors."""
    for rank, prefixes in ((0, CLI), (1, JOB), (2, FAMILIES), (4, CORE), (5, BOTTOM)):
        if _under(module, prefixes):
            return rank
    return 3


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b"`` for every import that goes up the stack or across the families."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            across = layer(module) == layer(target) == 2
            if layer(target) < layer(module) or (
                across and module.split(".")[0] != target.split(".")[0]
            ):
                bad.append(f"{module} -> {target}")
    return bad


# -- rooms and wings -----------------------------------------------------------------------
def room_of(source: Source, module: str) -> str:
    """The package ``module``'s file sits in (a package is its own room)."""
    return module if source.files[module].name == "__init__.py" else module.rpartition(".")[0]


def rooms(source: Source) -> dict[str, dict[str, int]]:
    """``{room: {"modules": n, "lines": n}}``, sorted by name."""
    out: dict[str, dict[str, int]] = {}
    for module in sorted(source.files, key=lambda m: room_of(source, m)):
        room = out.setdefault(room_of(source, module), {"modules": 0, "lines": 0})
        room["modules"] += 1
        room["lines"] += len(source.texts[module].splitlines())
    return dict(sorted(out.items()))


def wings(source: Source) -> dict[str, set[str]]:
    """``{"torch": modules, "jax": modules}``: the wing packages and everything under them;
    in a tree without them, the legacy modules that exist (see the module docstring)."""
    if any(p in source.files for p in WINGS.values()):
        return {w: {m for m in source.files if _under(m, [p])} for w, p in WINGS.items()}
    return {
        w: {f"{JOB[0]}.{m}" for m in mods} & set(source.files) for w, mods in LEGACY_WINGS.items()
    }


def wing_of(wing_modules: dict[str, set[str]], module: str) -> str | None:
    return next((w for w, mods in wing_modules.items() if module in mods), None)


def family_of(wing_modules: dict[str, set[str]], module: str) -> str | None:
    """``torch`` / ``jax``: the module's wing, or its learner family package; else None."""
    return wing_of(wing_modules, module) or FAMILY_OF_PACKAGE.get(module.split(".")[0])


# -- the figures ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Edge:
    """A module edge: ``source -> target`` (``entry``: only by entry-point strings)."""

    source: str
    target: str
    entry: bool

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}" + (" (entry point)" if self.entry else "")


def edges(source: Source) -> list[Edge]:
    """Every module edge, imports and entry points (an edge both imported and named by an
    entry point counts as an import)."""
    out: dict[tuple[str, str], bool] = {}
    for module in source.files:
        for imp in source.imports(module, entry_points=True):
            target = source.known(imp.name)
            if target and target != module:
                key = (module, target)
                out[key] = out.get(key, True) and imp.entry
    return [Edge(a, b, entry) for (a, b), entry in sorted(out.items())]


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that stand alone as statements (docstrings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


_FAMILY_CLASS = re.compile(r"(Torch|Jax|JAX|Sb3|SB3)\w*Learner")


def _family_class(name: str) -> bool:
    return name in FAMILY_CLASSES or bool(_FAMILY_CLASS.fullmatch(name))


def _names_a(node: ast.AST, strings: tuple[str, ...], names: tuple[str, ...], family: bool) -> bool:
    """``node`` is one of ``strings``, a collection holding one, or a name in ``names``
    (``family``: also a family's class, see :func:`_family_class`)."""
    if isinstance(node, ast.Constant):
        return node.value in strings
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a(e, strings, names, family) for e in node.elts)
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name in names or (family and _family_class(name))
    return False


_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def branches(source: Source, family: bool = True) -> list[str]:
    """``"file:line: code"`` for each branch on a learner family (``family``), else on a
    torch learner's name or class, in ``cl_suites/job`` (see the module docstring)."""
    if family:
        strings, names = FAMILY_NAMES, (*FAMILY_CONSTANTS, *FAMILY_CLASSES)
    else:
        strings, names = LEARNER_NAMES, LEARNER_CLASSES
    found = []
    for module in sorted(m for m in source.files if _under(m, JOB)):
        lines = source.texts[module].splitlines()
        for node in ast.walk(source.trees[module]):
            hit = False
            if isinstance(node, ast.Compare):
                hit = any(isinstance(op, _COMPARE_OPS) for op in node.ops) and any(
                    _names_a(n, strings, names, family) for n in [node.left, *node.comparators]
                )
            elif isinstance(node, ast.MatchValue):
                hit = _names_a(node.value, strings, names, family)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                hit = _names_a(node.args[1], (), names, family)
            if hit:
                text = lines[node.lineno - 1].strip()
                found.append((source.relative(module), node.lineno, text))
    return [f"{f}:{n}: {t}" for f, n, t in sorted(set(found))]


def family_branches(source: Source) -> list[str]:
    """The family branches in ``cl_suites/job`` (see the module docstring)."""
    return branches(source, family=True)


def _aliases(source: Source, module: str) -> dict[str, str]:
    """``{local name: the project module or module.attr it stands for}`` from every import
    of ``module`` (any scope)."""
    is_package = source.files[module].name == "__init__.py"
    out = {}
    for node in ast.walk(source.trees[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = alias.name
                else:
                    out[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - (not is_package)]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            for alias in node.names:
                out[alias.asname or alias.name] = f"{origin}.{alias.name}"
    return out


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _local_function(node: ast.AST, defined: set[str]) -> str | None:
    """The name of the calling module's own function ``node`` passes, if it passes one."""
    if isinstance(node, ast.Lambda):
        return "lambda"
    if isinstance(node, ast.Name) and node.id in defined:
        return node.id
    if isinstance(node, ast.Call) and (_dotted(node.func) or "").split(".")[-1] == "partial":
        return next((f for f in (_local_function(a, defined) for a in node.args[:1]) if f), None)
    return None


def callbacks(source: Source, wing_modules: dict[str, set[str]]) -> list[str]:
    """``"file:line: f passed to module.g"`` for each function of a module of one family
    handed to a function of the other family (see the module docstring)."""
    found = []
    for module in sorted(source.files):
        family = family_of(wing_modules, module)
        if family is None:
            continue
        tree = source.trees[module]
        aliases = _aliases(source, module)
        defined = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _dotted(node.func)
            if called is None or called.split(".")[0] not in aliases:
                continue
            head, _, rest = called.partition(".")
            full = ".".join(filter(None, [aliases[head], rest]))
            target = source.known(full)
            other = family_of(wing_modules, target) if target else None
            if other is None or other == family:
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                passed = _local_function(arg, defined)
                if passed:
                    found.append(
                        f"{source.relative(module)}:{node.lineno}: {passed} ({family}) "
                        f"passed to {full} ({other})"
                    )
    return found


def expand_roots(source: Source, roots: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(modules, missing)``: each root with everything under it; roots not in the tree."""
    modules, missing = [], []
    for root in roots:
        found = sorted(m for m in source.files if _under(m, [root]))
        modules.extend(m for m in found if m not in modules)
        if not found:
            missing.append(root)
    return modules, missing


def _parents(source: Source, module: str) -> list[str]:
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in source.files]


def eager_reach(
    source: Source, roots: Iterable[str], forbidden: Iterable[str]
) -> tuple[set[str], dict[str, str | None]]:
    """``(modules reached, {forbidden package: one shortest chain, or None})`` from the
    roots through module-level imports and parent packages (see the module docstring)."""
    graph = source_graph(source, eager_only=True)
    outside: dict[str, set[str]] = {}
    for module in source.files:
        names = {i.name.split(".")[0] for i in source.imports(module) if not i.lazy and i.name}
        outside[module] = names - set(PACKAGES)
    paths = {r: [r] for r in roots}
    queue = list(paths)
    while queue:
        v = queue.pop(0)
        for w in [*_parents(source, v), *sorted(graph[v])]:
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    chains: dict[str, str | None] = {}
    for name in forbidden:
        importers = [m for m in paths if name in outside[m]]
        best = min(importers, key=lambda m: (len(paths[m]), m), default=None)
        chains[name] = " -> ".join([*paths[best], name]) if best else None
    return set(paths), chains


_WORD = r"(?<![\w-]){}(?![\w-])"


def files_to_touch(
    source: Source, learner: LearnerMarks, wing_modules: dict[str, set[str]]
) -> dict[str, list[str]]:
    """``{"code": files, "anywhere": files}`` under ``cl_suites/`` that name ``learner``,
    its own modules left out (see the module docstring)."""
    own = set()
    for prefix in learner.own:
        own |= (
            wing_modules[prefix[1:]]
            if prefix.startswith("@")
            else set(m for m in source.files if _under(m, [prefix]))
        )
    own_files = {source.files[m].resolve() for m in own}
    word = re.compile(_WORD.format(re.escape(learner.name)))
    text_marks = [word, *(re.compile(rf"\b{c}\b") for c in learner.constants)]
    by_path = {p.resolve(): m for m, p in source.files.items()}
    code, anywhere = [], []
    for path in sorted((source.root / "cl_suites").rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.resolve() in own_files:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        name = path.relative_to(source.root).as_posix()
        if any(mark.search(text) for mark in text_marks):
            anywhere.append(name)
        module = by_path.get(path.resolve())
        if module is not None and _names_in_code(source.trees[module], learner, word):
            code.append(name)
    return {"code": code, "anywhere": anywhere}


def _identifiers(node: ast.AST) -> list[str]:
    """The names ``node`` spells: a variable, attribute, imported module or name, or the
    name of a function or class it defines."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.alias):
        return [node.name, *([node.asname] if node.asname else [])]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    return []


def _names_in_code(tree: ast.Module, learner: LearnerMarks, word: re.Pattern[str]) -> bool:
    docs = _docstrings(tree)

    def marked(identifier: str) -> bool:
        if identifier in learner.constants:
            return True
        return bool(learner.word) and any(
            part.lower() == learner.word for part in re.split(r"[._]", identifier)
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and word.search(node.value):
                return True
        elif any(marked(name) for name in _identifiers(node)):
            return True
    return False


def measure(root: Path, roots: Iterable[str] = DEFAULT_ROOTS) -> dict:
    """Every figure of the module docstring for the checkout at ``root``, with its lists."""
    source = Source.read(root)
    wing_modules = wings(source)
    all_edges = edges(source)
    graph: dict[str, set[str]] = {m: set() for m in source.files}
    for e in all_edges:
        graph[e.source].add(e.target)
    room_table = rooms(source)
    room_arrows = sorted(
        {(room_of(source, e.source), room_of(source, e.target)) for e in all_edges}
        - {(r, r) for r in room_table}
    )
    back_up = layer_violations(graph)
    cross = [
        str(e)
        for e in all_edges
        if {wing_of(wing_modules, e.source), wing_of(wing_modules, e.target)} == {"torch", "jax"}
    ]
    down = [
        e
        for e in all_edges
        if _under(e.source, JOB)
        and wing_of(wing_modules, e.source) is None
        and wing_of(wing_modules, e.target) is not None
    ]
    modules, missing = expand_roots(source, roots)
    reached, chains = eager_reach(source, modules, JAX_PATH_NEVER_IMPORTS)
    return {
        "root": str(Path(root).resolve()),
        "rooms": room_table,
        "room_count": len(room_table),
        "job_rooms": [r for r in room_table if _under(r, JOB)],
        "wings": {w: sorted(m) for w, m in wing_modules.items()},
        "module_edges": len(all_edges),
        "module_edges_between_rooms": sum(
            room_of(source, e.source) != room_of(source, e.target) for e in all_edges
        ),
        "entry_point_edges": [str(e) for e in all_edges if e.entry],
        "room_arrows": [f"{a} -> {b}" for a, b in room_arrows],
        "arrows_back_up": back_up,
        "cross_wing_arrows": cross,
        "down_into_wing_by_import": [str(e) for e in down if not e.entry],
        "down_into_wing_by_entry_point": [str(e) for e in down if e.entry],
        "family_branches": family_branches(source),
        "learner_branches": branches(source, family=False),
        "callbacks_between_wings": callbacks(source, wing_modules),
        "jax_path": {
            "roots": modules,
            "missing_roots": missing,
            "modules_reached": len(reached),
            "chains": chains,
        },
        "files_to_touch": {
            learner.name: files_to_touch(source, learner, wing_modules) for learner in LEARNERS
        },
    }


def summary(figures: dict) -> list[tuple[str, str]]:
    """``(figure, value)`` rows, as LOG.md records them."""
    jax = figures["jax_path"]
    touch = figures["files_to_touch"]
    rows = [
        ("rooms (packages with .py files)", str(figures["room_count"])),
        ("rooms of the job layer", ", ".join(figures["job_rooms"])),
        (
            "lines of the job layer's rooms",
            " / ".join(f"{figures['rooms'][r]['lines']}" for r in figures["job_rooms"]),
        ),
        ("room arrows (distinct room -> room)", str(len(figures["room_arrows"]))),
        (
            "module edges (between rooms; by entry point)",
            f"{figures['module_edges']} ({figures['module_edges_between_rooms']}; "
            f"{len(figures['entry_point_edges'])})",
        ),
        ("arrows back up (against the layer order)", str(len(figures["arrows_back_up"]))),
        ("cross-wing arrows (job torch <-> job jax)", str(len(figures["cross_wing_arrows"]))),
        (
            "arrows down into a wing: by import / by entry point",
            f"{len(figures['down_into_wing_by_import'])} / "
            f"{len(figures['down_into_wing_by_entry_point'])}",
        ),
        ("family branches in cl_suites/job", str(len(figures["family_branches"]))),
        ("learner branches (ppo / vtrace) in cl_suites/job", str(len(figures["learner_branches"]))),
        ("callbacks between the wings", str(len(figures["callbacks_between_wings"]))),
    ]
    for name, chain in jax["chains"].items():
        rows.append((f"ppo-jax path reaches {name}", "no" if chain is None else "yes"))
    rows.append(("ppo-jax path: project modules imported", str(jax["modules_reached"])))
    for learner, files in touch.items():
        rows.append(
            (
                f"files to touch for {learner}: in code / anywhere",
                f"{len(files['code'])} / {len(files['anywhere'])}",
            )
        )
    return rows


def _print(figures: dict) -> None:
    print(f"# {figures['root']}\n")
    print("| room | modules | lines |\n|---|---|---|")
    for room, row in figures["rooms"].items():
        print(f"| `{room}` | {row['modules']} | {row['lines']} |")
    print("\n| figure | value |\n|---|---|")
    for name, value in summary(figures):
        print(f"| {name} | {value} |")
    jax = figures["jax_path"]
    lists = {
        "wings": [f"{w}: {', '.join(m)}" for w, m in figures["wings"].items()],
        "arrows back up": figures["arrows_back_up"],
        "cross-wing arrows": figures["cross_wing_arrows"],
        "arrows down into a wing by import": figures["down_into_wing_by_import"],
        "arrows down into a wing by entry point": figures["down_into_wing_by_entry_point"],
        "entry-point arrows": figures["entry_point_edges"],
        "family branches": figures["family_branches"],
        "learner branches": figures["learner_branches"],
        "callbacks between the wings": figures["callbacks_between_wings"],
        "ppo-jax path roots (missing: " + (", ".join(jax["missing_roots"]) or "none") + ")": (
            jax["roots"]
        ),
        "ppo-jax path chains": [f"{k}: {v}" for k, v in jax["chains"].items()],
    }
    for learner, files in figures["files_to_touch"].items():
        lists[f"files to touch for {learner}, in code"] = files["code"]
        lists[f"files to touch for {learner}, anywhere only"] = [
            f for f in files["anywhere"] if f not in files["code"]
        ]
    for title, items in lists.items():
        print(f"\n{title} ({len(items)}):")
        for item in items:
            print(f"    {item}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--roots",
        default=",".join(DEFAULT_ROOTS),
        help="the ppo-jax path's roots, modules or packages, comma separated "
        "(absent ones skipped; default %(default)s)",
    )
    args = parser.parse_args()
    figures = measure(args.root, [r for r in args.roots.split(",") if r])
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        _print(figures)


if __name__ == "__main__":
    main()
