"""Finding a local AI2-THOR Unity build without touching the network.

``ai2thor.controller.Controller`` downloads its Unity build (about 0.5 GB) on first use
and asks GitHub/S3 which build to use. cl-suites never lets it do that: before a
controller is built, ``resolve_thor_build`` looks for a build on disk only, in order:

1. ``thor_local_executable_path=`` / ``$CL_SUITES_THOR_BUILD``: the Unity executable
   of a build (or the build folder that holds it);
2. ai2thor's own cache, ``~/.ai2thor/releases/thor-<platform>-<commit>/``, for the
   commit pinned by the installed ai2thor (``CloudRendering`` first, then ``Linux64``
   on Linux; ``OSXIntel64`` on macOS).

If none exists it raises ``ThorBuildNotFoundError`` saying how to get one.

A build given by path is started with its own platform: ``thor-CloudRendering-<commit>``
runs headless through Vulkan, ``thor-Linux64-<commit>`` through an X server; a build
whose name says neither is taken as CloudRendering when no ``$DISPLAY`` is set. (A bare
``Controller(local_executable_path=...)`` always assumes Linux64, which on a headless
machine fails inside ai2thor with a ``TypeError``.)
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform as _platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cl_suites.envs.chores.errors import ThorBuildNotFoundError
from cl_suites.errors import require

BUILD_ENV_VAR = "CL_SUITES_THOR_BUILD"

ControllerFactory = Callable[..., Any]
"""``factory(**controller_kwargs) -> controller`` with ai2thor's ``Controller`` API
(``reset(scene=...)``, ``step(action=..., **kwargs) -> event``, ``last_event``, ``stop()``)."""


def _download_help(commit: str | None) -> str:
    return (
        "Get the build once on a machine with internet access (it lands in "
        "~/.ai2thor/releases/):\n"
        '  python -c "import ai2thor.platform as p; from ai2thor.controller import Controller; '
        'Controller(download_only=True, platform=p.CloudRendering)"\n'
        "(use p.Linux64 instead when you render through an X server), copy "
        f"~/.ai2thor/releases/thor-<platform>-{commit or '<commit>'} to the same place on "
        f"this machine, or point cl-suites at the Unity executable with "
        f"thor_local_executable_path=... or ${BUILD_ENV_VAR}=/path/to/executable."
    )


@dataclass(frozen=True)
class ThorBuild:
    """A build found on disk and how to start it offline.

    Attributes:
        executable_path: the Unity executable.
        controller_kwargs: ``Controller`` kwargs that select the build (cache builds).
        platform: ai2thor platform name (``"CloudRendering"``, ``"Linux64"``, ...).
        build_id: the build's commit when known, else a hash of its path (keys caches).
        external: given by path: started through ``ExternalBuildController``.
    """

    executable_path: Path
    controller_kwargs: dict[str, Any] = field(default_factory=dict)
    platform: str = "Linux64"
    build_id: str = ""
    external: bool = False


_BUILD_NAME = re.compile(r"thor-(?P<platform>CloudRendering|Linux64|OSXIntel64)-(?P<commit>\w+)")


def _external_platform(path: Path) -> str:
    match = _BUILD_NAME.fullmatch(path.name)
    if match:
        return match["platform"]
    if _platform.system() == "Darwin":
        return "OSXIntel64"
    return "Linux64" if os.environ.get("DISPLAY") else "CloudRendering"


def _external_build_id(path: Path) -> str:
    match = _BUILD_NAME.fullmatch(path.name)
    if match:
        return match["commit"]
    return "path-" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]


def _candidate_platforms() -> tuple[str, ...]:
    if _platform.system() == "Darwin":
        return ("OSXIntel64",)
    return ("CloudRendering", "Linux64")


def _external_build(raw: str, source: str, commit: str | None) -> ThorBuild:
    path = Path(raw).expanduser()
    if path.is_dir():  # a build folder: thor-<platform>-<commit>/thor-<platform>-<commit>
        path = path / path.name
    if not path.is_file():
        raise ThorBuildNotFoundError(
            f"no AI2-THOR build executable at {str(path)!r} (from {source}).\n"
            + _download_help(commit)
        )
    if not os.access(path, os.X_OK):
        raise ThorBuildNotFoundError(
            f"the AI2-THOR build {str(path)!r} (from {source}) is not executable; "
            f"run: chmod +x {path}"
        )
    return ThorBuild(
        path,
        platform=_external_platform(path),
        build_id=_external_build_id(path),
        external=True,
    )


def resolve_thor_build(
    local_executable_path: str | os.PathLike | None = None,
    *,
    releases_dir: str | os.PathLike | None = None,
) -> ThorBuild:
    """The local AI2-THOR build to use, found without any network access.

    Args:
        local_executable_path: the Unity executable (or its build folder); defaults to
            ``$CL_SUITES_THOR_BUILD``.
        releases_dir: ai2thor's build cache (default ``~/.ai2thor/releases``).

    Raises:
        ImportError: ai2thor is not installed (``pip install "cl-suites[chores]"``).
        ThorBuildNotFoundError: no build on disk; the message says how to get one.
    """
    build_mod = require("ai2thor.build", extra="chores")
    commit = build_mod.COMMIT_ID
    if local_executable_path is not None:
        return _external_build(
            os.fspath(local_executable_path), "thor_local_executable_path", commit
        )
    if os.environ.get(BUILD_ENV_VAR):
        return _external_build(os.environ[BUILD_ENV_VAR], f"${BUILD_ENV_VAR}", commit)

    releases = Path(releases_dir or Path.home() / ".ai2thor" / "releases").expanduser()
    looked: list[str] = []
    for plat in _candidate_platforms():
        build = build_mod.Build(plat, commit, False, str(releases))
        executable = Path(build.executable_path)
        looked.append(str(executable))
        if executable.is_file() and Path(build.metadata_path).is_file():
            # with an explicit platform and commit, ai2thor finds this folder on disk
            # and neither queries GitHub nor downloads anything
            kwargs = {"commit_id": commit, "platform": build_mod.STR_PLATFORM_MAP[plat]}
            return ThorBuild(executable, kwargs, platform=plat, build_id=commit)
    raise ThorBuildNotFoundError(
        f"CHORES needs the AI2-THOR Unity build for ai2thor {_ai2thor_version()} "
        f"(commit {commit}), and none was found: ${BUILD_ENV_VAR} is not set and "
        f"ai2thor's cache has no build (looked for: {', '.join(looked)}).\n"
        + _download_help(commit)
    )


def _ai2thor_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai2thor")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return "?"


@functools.cache
def external_build_controller_class() -> type:
    """``ai2thor.controller.Controller`` that starts a build given by path with the build's
    own platform (``ExternalBuildController(thor_build=ThorBuild, **controller_kwargs)``).

    ai2thor's ``local_executable_path`` wraps the path in an ``ExternalBuild`` that always
    claims Linux64; this subclass hands ``Controller`` a build with the right platform
    through ``find_build``, the hook ai2thor itself uses to pick cached builds.
    """
    controller_mod = require("ai2thor.controller", extra="chores")
    build_mod = require("ai2thor.build", extra="chores")

    class ExternalBuildController(controller_mod.Controller):
        def __init__(self, *, thor_build: ThorBuild, **kwargs: Any):
            build = build_mod.ExternalBuild(str(thor_build.executable_path))
            build.platform = build_mod.STR_PLATFORM_MAP[thor_build.platform]
            self._external_build = build
            super().__init__(**kwargs)

        def find_build(self, local_build, commit_id, branch, platform):
            return self._external_build

    return ExternalBuildController


def thor_controller_factory(
    local_executable_path: str | os.PathLike | None = None, **defaults: Any
) -> ControllerFactory:
    """A factory of real ai2thor controllers bound to a local build.

    The build is resolved now (``ThorBuildNotFoundError`` when absent), so a missing
    build fails when the env is constructed, never inside ai2thor's downloader. The
    factory carries the build as ``factory.build`` and its id as ``factory.build_id``.
    """
    build = resolve_thor_build(local_executable_path)
    if build.external:
        controller_cls = external_build_controller_class()

        def factory(**kwargs: Any) -> Any:
            return controller_cls(thor_build=build, **{**defaults, **kwargs})

    else:
        controller_mod = require("ai2thor.controller", extra="chores")

        def factory(**kwargs: Any) -> Any:
            return controller_mod.Controller(**{**defaults, **build.controller_kwargs, **kwargs})

    factory.build = build  # type: ignore[attr-defined]
    factory.build_id = build.build_id  # type: ignore[attr-defined]
    return factory
