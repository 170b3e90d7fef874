"""The container recipes (issue 55): ``docker/Dockerfile`` (CPU) and
``docker/Dockerfile.cuda`` install with the Makefile's own install target, so the same pip
lines and ``constraints.txt``, and run ``make demo`` by default. Checked on the files: no
container engine runs here. The pip lines are derived from the Makefile (``make -n``) with
each Dockerfile's variables, so a change to either that the other does not follow fails."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess

import pytest

from cl_suites.config import tomllib as toml
from tests.helpers import REPO

IMAGES = {"Dockerfile": "cpu", "Dockerfile.cuda": "cu12"}
"""Each recipe and the torch wheels' index it must name (``.../whl/cpu``, ``.../whl/cu12x``)."""


def instructions(name: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of ``docker/<name>``: continuation lines joined,
    comments and blank lines left out."""
    logical: list[str] = []
    pending = ""
    for line in (REPO / "docker" / name).read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        logical.append(" ".join(pending.split()))
        pending = ""
    assert not pending, f"docker/{name} ends in a continuation line"
    return [(text.split(" ", 1)[0].upper(), text.split(" ", 1)[1]) for text in logical]


def dry_run_install(*variables: str) -> list[str]:
    """The commands of the Makefile's install target with ``variables``, not run."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "-n", "-B", "install", *variables],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [" ".join(line.split()) for line in done.stdout.splitlines() if " pip install " in line]


def install_run(name: str) -> list[str]:
    """The one ``RUN`` of ``docker/<name>`` that installs: ``make install`` and its
    variables (nothing else in that command)."""
    runs = [args for kind, args in instructions(name) if kind == "RUN"]
    installs = [shlex.split(args) for args in runs if re.search(r"\bmake install\b", args)]
    assert len(installs) == 1, f"docker/{name}: one RUN make install, got {installs}"
    (argv,) = installs
    assert argv[:2] == ["make", "install"], argv
    assert all(re.fullmatch(r"[A-Z_]+=\S+", a) for a in argv[2:]), argv
    assert not [a for a in runs if re.search(r"\bpip\b", a)], f"docker/{name} runs pip itself"
    return argv[2:]


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_image_installs_with_the_makefiles_target_and_its_constraints(name):
    variables = install_run(name)
    steps = instructions(name)
    copy = next(i for i, (kind, args) in enumerate(steps) if kind == "COPY")
    install = next(i for i, (kind, args) in enumerate(steps) if args.startswith("make install"))
    assert steps[copy][1] == ". ." and copy < install  # the checkout, constraints.txt with it
    ignored = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    for needed in ("Makefile", "constraints.txt", "pyproject.toml", "cl_suites/__init__.py"):
        assert not any(fnmatch.fnmatch(needed, pattern) for pattern in ignored), needed

    plain, image = dry_run_install(), dry_run_install(*variables)
    assert len(plain) == len(image) >= 3
    given = dict(a.split("=", 1) for a in variables)
    index = given["TORCH_INDEX"]
    assert re.fullmatch(rf"https://download\.pytorch\.org/whl/{IMAGES[name]}\d*", index)
    constraints = (REPO / "constraints.txt").read_text()
    torch_pin = re.search(r"^torch==(\S+)$", constraints, re.M).group(1)
    for line, default in zip(image, plain, strict=True):
        # every pip line but pip's own upgrade takes the constraints, as `make install`
        assert "-c constraints.txt" in line or '--upgrade "pip' in line
        # the same line as the plain target's, but for the index and the extras
        assert line.replace(f" --extra-index-url {index}", "") == default.replace(
            '".[dev]"', f'".[{given.get("EXTRAS", "dev")}]"'
        )
    torch_line = next(line for line in image if '"torch==' in line)
    assert f'"torch=={torch_pin}"' in torch_line and f"--extra-index-url {index}" in torch_line

    extras = given.get("EXTRAS", "dev").split(",")
    declared = toml.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "dev" in extras and set(extras) <= set(declared["optional-dependencies"])
    assert ("meal-gpu" in extras) == (name == "Dockerfile.cuda")


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_image_runs_make_demo_on_python_311(name):
    steps = instructions(name)
    (cmd,) = [args for kind, args in steps if kind == "CMD"]
    assert json.loads(cmd) == ["make", "demo"]
    (base,) = [args for kind, args in steps if kind == "FROM"]
    makefile = (REPO / "Makefile").read_text()
    assert "command -v python3.11" in makefile  # what `make install` makes its venv with
    if name == "Dockerfile":
        assert base == "python:3.11-slim"
    else:
        assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu\d+\.\d+", base), base
        apt = next(args for kind, args in steps if kind == "RUN" and "apt-get install" in args)
        assert {"python3.11", "python3.11-venv", "python3.11-dev"} <= set(apt.split())
    apt = next(args for kind, args in steps if kind == "RUN" and "apt-get install" in args)
    assert {"make", "build-essential", "cmake", "libbz2-dev"} <= set(apt.split())
