"""No import cycle: every module of ``cl_suites``, ``baselines_sb3`` and ``baselines_jax``
imports when it is the first module of the project a fresh interpreter imports.

A cycle (``a`` imports ``b`` at module level, ``b`` imports ``a``) works or breaks depending
on which module comes first, so each module must be tried first in its own process. To
keep that fast, one helper process imports the third-party libraries once (torch, JAX,
SB3, ...: none of them imports the project) and forks a child per module; each child
starts with no module of the project loaded and imports just that one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cl_suites", "baselines_sb3", "baselines_jax")

CHILD = textwrap.dedent(
    """
    import importlib, os, sys, traceback, warnings
    warnings.simplefilter("ignore")
    for lib in ("numpy", "torch", "jax", "flax", "optax", "gymnasium", "stable_baselines3",
                "pandas", "rich", "scipy", "matplotlib"):
        try:
            importlib.import_module(lib)
        except ImportError:
            pass
    assert not [m for m in sys.modules if m.split(".")[0] in {packages!r}]
    failed = []
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                importlib.import_module(name)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
        if os.waitpid(pid, 0)[1] != 0:
            failed.append(name)
    print("FAILED:" + ",".join(failed))
    """
).format(packages=set(PACKAGES))


def modules() -> list[str]:
    """Every module of the packages, from their files (nothing is imported)."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_first_in_a_fresh_interpreter():
    names = modules()
    assert len(names) > 80 and "baselines_sb3.presets" in names
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    failed = result.stdout.rsplit("FAILED:", 1)[-1].strip()
    assert result.returncode == 0 and not failed, f"{failed}\n{result.stderr[-4000:]}"


def test_the_check_finds_a_cycle(tmp_path):
    """The check can fail: two modules that import names from each other at module level."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from cyc.a import A\nB = 2\n")
    child = CHILD.replace(repr(set(PACKAGES)), repr({"cyc"}))
    result = subprocess.run(
        [sys.executable, "-c", child, "cyc.a", "cyc.b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tmp_path), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.rsplit("FAILED:", 1)[-1].strip() == "cyc.a,cyc.b"
    assert "partially initialized module" in result.stderr


def test_presets_are_data():
    """``baselines_sb3/presets.py`` holds tables only: it imports nothing of the project and
    defines no function (composition and routing live in ``hyperparameters``)."""
    import ast

    tree = ast.parse((ROOT / "baselines_sb3" / "presets.py").read_text())
    imports = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    assert not [m for m in imports if m.split(".")[0] in PACKAGES], imports
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
