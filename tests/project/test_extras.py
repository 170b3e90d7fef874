"""Each extra installs alone (issue 43 item 6): every module a suite needs is provided by
the extra its error message names, read from ``pyproject.toml``; an unregistered-looking
``CLSuite/MEAL-<N>-v0`` given to ``gym.make`` points to ``make_parallel``.

The modules and extras come from where the messages do: the catalog entries
(``SuiteInfo.modules`` / ``extra``), each suite's ``TaskSequence.required_modules`` /
``extra`` (``MissingSimulatorError`` at env construction), and every
``require(module, extra=...)`` call in ``cl_suites`` (found with ``ast``). A module is
provided by an extra when the distribution that installs it (this environment's
``importlib.metadata``) is among the extra's requirements, the project's own dependencies
or what they require in turn. ``benchmarks/install/extras_alone.py`` checks the same in
fresh venvs, one extra at a time.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
from collections.abc import Iterable

import gymnasium as gym
import pytest
import tomllib
from packaging.requirements import Requirement

import cl_suites
from cl_suites.suites import SUITES, find_suite
from tests.helpers import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _installed_requirements(dist: str, extras: Iterable[str]) -> list[Requirement]:
    """``dist``'s own requirements (with ``extras``' ones), markers evaluated here."""
    try:
        raw = md.requires(dist) or []
    except md.PackageNotFoundError:  # not installed here: nothing further to follow
        return []
    found = []
    for line in raw:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            found.append(req)
    return found


def provided_by(extra: str) -> set[str]:
    """The distributions ``pip install "cl-suites[extra]"`` installs: the project's
    dependencies, the extra's (``cl-suites[...]`` expanded), and theirs in turn."""
    todo = [
        Requirement(r) for r in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"][extra]]
    ]
    seen: set[str] = set()
    extras_seen: set[str] = {extra}
    while todo:
        req = todo.pop()
        name = _name(req.name)
        if name == "cl-suites":
            for e in req.extras - extras_seen:
                extras_seen.add(e)
                todo += [Requirement(r) for r in PROJECT["optional-dependencies"][e]]
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if name in seen and not req.extras:
            continue
        seen.add(name)
        todo += _installed_requirements(req.name, req.extras)
    return seen


def _require_calls() -> set[tuple[str, str]]:
    """``(module, extra)`` of every ``require("module", extra="extra")`` in cl_suites."""
    pairs = set()
    for path in (REPO / "cl_suites").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "require"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                given = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "extra")]
                pairs.add((node.args[0].value, given[0].value))
    return pairs


def named_requirements() -> set[tuple[str, str, str]]:
    """``(where, module, extra)`` for every module an error message sends to an extra."""
    found = {("require()", m, e) for m, e in _require_calls()}
    for name in [*SUITES, "MEAL-2"]:
        info = find_suite(name)
        found |= {(f"{name} catalog", m, info.extra) for m in info.modules}
        sequence = info.build()
        if sequence.extra is not None:
            found |= {(f"{name} sequence", m, sequence.extra) for m in sequence.required_modules}
    return found


def test_every_module_an_error_names_is_installed_by_the_extra_it_names():
    distributions = md.packages_distributions()
    problems, unchecked = [], []
    for where, module, extra in sorted(named_requirements()):
        assert extra in PROJECT["optional-dependencies"], f"{where}: no extra {extra!r}"
        providers = {_name(d) for d in distributions.get(module.split(".")[0], [])}
        if not providers:
            unchecked.append(module)
            continue
        if not providers & provided_by(extra):
            problems.append(f"{where}: {module} ({', '.join(sorted(providers))}) not in [{extra}]")
    assert not problems, "\n".join(problems)
    assert not unchecked, f"not installed here, so not checked: {unchecked}"


def test_atari6_needs_no_stable_baselines3():
    """The Atari wrappers are the suite's own (``cl_suites.envs.atari``): ``[atari]`` alone
    builds it (issue 43: it asked for stable_baselines3, which ``[atari]`` does not hold)."""
    assert "stable_baselines3" not in SUITES["Atari6"].build().required_modules


@pytest.mark.parametrize("n", [1, 4, 20, 100])
def test_gym_make_on_a_meal_id_points_to_make_parallel(n):
    assert cl_suites.__name__ == "cl_suites"  # importing it registers the ids
    with pytest.raises(TypeError, match=rf'make_parallel\("CLSuite/MEAL-{n}-v0"'):
        gym.make(f"CLSuite/MEAL-{n}-v0")
