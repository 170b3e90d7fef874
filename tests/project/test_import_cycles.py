"""No import cycle and a layer stack that reads top to bottom, checked on the source.

The module import graph of ``cl_suites`` (the job layer ``cl_suites.job`` included),
``baselines_sb3`` and ``baselines_jax`` is built from the files with ``ast``, nothing
imported: top-level and function-level imports alike (a cycle that happens to import in
the right order today is still a cycle), relative imports resolved, ``from pkg import
name`` counted as importing the submodule ``pkg.name`` when there is one (else ``pkg``),
``importlib.import_module("literal")`` counted as an import, imports under
``if TYPE_CHECKING:`` left out (they never run). The graph builder and the layers live in
``benchmarks/structure/rooms.py``, which also measures the rooms and arrows (issue 49).

The layers, top to bottom (a module imports its own layer or lower ones only):

1. the command line: ``cl_suites.cli``, ``cl_suites.__main__``, ``cl_suites.sweep``;
2. the job layer: ``cl_suites.job``;
3. the learner families: ``baselines_sb3`` (SB3/torch) and ``baselines_jax`` (JAX), which
   import neither each other nor anything above;
4. the rest of ``cl_suites`` (suites, envs, metrics, MEAL, the own-loop pieces, the package
   top) and the SB3 room ``cl_suites.sb3`` (SB3's view of the sequence envs), which
   imports the env machinery only;
5. the env machinery ``cl_suites.core``, which imports neither torch nor stable-baselines3,
   not even through a module of the project it imports;
6. the run directory ``cl_suites.rundir`` (run log, checkpoint files, lock, atomic writes,
   progress) beside ``cl_suites.errors``: they import nothing else of the project.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from benchmarks.structure.rooms import (
    BOTTOM,
    CORE,
    CORE_NEVER_IMPORTS,
    PACKAGES,
    SB3_ROOM,
    find_cycles,
    forbidden_reaches,
    import_graph,
    layer,
    layer_violations,
    outside_imports,
)
from tests.helpers import REPO

ROOT = REPO


def _report(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in cycles)


# -- the tests -----------------------------------------------------------------------------
def test_no_import_cycle():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 100 and "cl_suites.job.run_spec" in graph
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + _report(cycles)


def test_the_layer_stack_reads_top_to_bottom():
    """CLI and sweep -> job layer -> learner families -> suites/envs/metrics/core."""
    bad = layer_violations(import_graph(ROOT, PACKAGES))
    assert not bad, "imports up the stack or across the families:\n" + "\n".join(bad)


def test_the_families_import_neither_each_other_nor_the_job_layer():
    graph = import_graph(ROOT, PACKAGES)
    for family, others in (
        ("baselines_sb3", ("baselines_jax", "cl_suites.job")),
        ("baselines_jax", ("baselines_sb3", "cl_suites.job")),
    ):
        imported = {t for m, ts in graph.items() if m.split(".")[0] == family for t in ts}
        assert not {t for t in imported if t.startswith(others)}, family
        assert any(t.startswith("cl_suites.core") for t in imported)  # the graph sees them


def test_core_imports_neither_torch_nor_sb3():
    """The env machinery runs without torch and stable-baselines3: no ``cl_suites.core``
    module imports them, directly or through a module of the project it imports (the run
    directory's checkpoint files and the SB3 room, which need them, sit beside it)."""
    graph = import_graph(ROOT, PACKAGES)
    chains = forbidden_reaches(graph, outside_imports(ROOT, PACKAGES), CORE, CORE_NEVER_IMPORTS)
    assert not chains, "core reaches torch or SB3:\n" + "\n".join(chains)
    assert forbidden_reaches(graph, outside_imports(ROOT, PACKAGES), BOTTOM, ["torch"])


def test_the_sb3_room_wraps_the_env_machinery_only():
    """``cl_suites.sb3`` imports the env machinery and the errors, nothing of the suites,
    the job layer or a learner family (it is the view, not a learner)."""
    graph = import_graph(ROOT, PACKAGES)
    imported = {t for m, ts in graph.items() if m.startswith(SB3_ROOM) for t in ts}
    assert imported and all(layer(t) >= 4 or t.startswith(SB3_ROOM) for t in imported)


def test_the_benchmarks_import_the_package_never_the_tests():
    """What a benchmark shares with the tests (the CORA parity cases, the plasticity
    cases, the synthetic run writer) lives in ``benchmarks/``; the tests import it there."""
    outside = outside_imports(ROOT, ["benchmarks"])
    assert len(outside) > 20
    assert not sorted(m for m, tops in outside.items() if "tests" in tops)


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_planted_cycles(tmp_path):
    """Each form of import closes a cycle the check finds; ``TYPE_CHECKING`` ones do not."""
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    from pkg.b import g\n    return g\n",  # function level
            "pkg/b.py": "from . import c\n",  # relative; "from pkg import submodule"
            "pkg/c.py": "import importlib\nimportlib.import_module('pkg.a')\n",
            "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.e\n",
            "pkg/e.py": "from .sub.x import X\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/x.py": "from ..d import D\nX = 1\n",
        },
    )
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == set()
    assert graph["pkg.e"] == {"pkg.sub.x"} and graph["pkg.sub.x"] == {"pkg.d"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_the_check_finds_a_cycle_planted_in_the_package(tmp_path):
    """A copy of the packages with one function-level import that closes a cycle through
    the real modules (the suite-id parser importing the job layer) fails both checks."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package)
    ids = tmp_path / "cl_suites" / "suites" / "ids.py"
    ids.write_text(
        ids.read_text() + "\n\ndef planted():\n    from cl_suites.job.run_spec import resolve\n"
    )
    graph = import_graph(tmp_path, PACKAGES)
    cycles = find_cycles(graph)
    assert len(cycles) == 1 and "cl_suites.suites.ids" in cycles[0]
    assert "cl_suites.suites.ids -> cl_suites.job.run_spec" in layer_violations(graph)
    sb3 = tmp_path / "baselines_sb3" / "vtrace.py"
    sb3.write_text(sb3.read_text() + "\nimport baselines_jax.config\n")
    violations = layer_violations(import_graph(tmp_path, PACKAGES))
    assert "baselines_sb3.vtrace -> baselines_jax.config" in violations


def test_the_check_finds_imports_planted_across_the_new_rooms(tmp_path):
    """A copy of the packages where core reaches torch through the run directory, the run
    directory imports core and the SB3 room a learner family: each one is reported."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package)
    for path, planted in (
        ("cl_suites/core/video.py", "from cl_suites.rundir.checkpoint_files import X\n"),
        ("cl_suites/rundir/fsutil.py", "from cl_suites.core.task import Segment\n"),
        ("cl_suites/sb3/adapter.py", "import baselines_sb3.vtrace\n"),
    ):
        file = tmp_path / path
        file.write_text(file.read_text() + f"\n\ndef planted():\n    {planted}")
    graph = import_graph(tmp_path, PACKAGES)
    chains = forbidden_reaches(graph, outside_imports(tmp_path, PACKAGES), CORE, CORE_NEVER_IMPORTS)
    assert chains == ["cl_suites.core.video -> cl_suites.rundir.checkpoint_files -> torch"]
    violations = layer_violations(graph)
    assert "cl_suites.rundir.fsutil -> cl_suites.core.task" in violations
    assert "cl_suites.sb3.adapter -> baselines_sb3.vtrace" in violations


def test_presets_are_data():
    """``cl_suites/job/presets.py`` holds tables only: it imports nothing of the project and
    defines no function (composition and routing live in ``hyperparameters``)."""
    graph = import_graph(ROOT, PACKAGES)
    assert graph["cl_suites.job.presets"] == set()
    tree = ast.parse((ROOT / "cl_suites" / "job" / "presets.py").read_text())
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
