"""A runtime probe of tensors made without an explicit device (issue 39).

On a GPU every tensor the learners and CL methods build must land on the policy's device
(or on the CPU on purpose). A factory call without ``device=`` makes a CPU tensor, which
meets CUDA tensors only on a GPU: a CPU run cannot notice it. :class:`DeviceProbe` records
every such call made from the project's own code (``baselines_sb3``, ``cl_suites``) while
it is active: the torch factories through a ``TorchFunctionMode``, ``torch.Generator()``
through a recording subclass put in its place.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch as th
from torch.overrides import TorchFunctionMode

from tests.helpers import REPO

ROOT = REPO
PACKAGES = tuple(str(ROOT / name) + "/" for name in ("baselines_sb3", "cl_suites"))

FACTORIES = {
    th.zeros, th.ones, th.empty, th.full, th.tensor, th.as_tensor, th.arange, th.rand,
    th.randn, th.randint, th.randperm, th.eye, th.linspace, th.scalar_tensor,
}  # fmt: skip
"""Functions that make a tensor from nothing but sizes or data: the CPU unless told."""

Site = tuple[str, str]
"""``(path relative to the repository, function)`` of a call."""


def _caller() -> tuple[Site, int] | None:
    """The frame that made the call when it is the project's code, else ``None`` (SB3, or
    torch itself: e.g. ``nn.Linear`` making its weights on the CPU, which the learner
    then moves with the whole policy)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.startswith(PACKAGES):
        return None
    rel = str(Path(frame.f_code.co_filename).relative_to(ROOT))
    return (rel, frame.f_code.co_name), frame.f_lineno


class DeviceProbe(TorchFunctionMode):
    """Records ``(site, line, what)`` of each factory call without ``device=`` made by the
    project's code (``found``)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[Site, int, str]] = []

    def note(self, what: str) -> None:
        caller = _caller()
        if caller is not None:
            self.found.append((caller[0], caller[1], what))

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            self.note(func.__name__)
        return func(*args, **kwargs)


@contextmanager
def probing() -> Iterator[DeviceProbe]:
    """The probe, active (``torch.Generator`` replaced by a recording subclass)."""
    probe = DeviceProbe()
    original = th.Generator

    class RecordingGenerator(original):  # type: ignore[misc, valid-type]
        def __new__(cls, device: Any = None) -> Any:
            if device is None:
                probe.note("Generator")
            return original.__new__(cls, device if device is not None else "cpu")

    th.Generator = RecordingGenerator  # type: ignore[misc]
    try:
        with probe:
            yield probe
    finally:
        th.Generator = original  # type: ignore[misc]


def outside(found: list[tuple[Site, int, str]], allowed: dict[Site, str]) -> list[str]:
    """The recorded calls whose site is not in ``allowed`` (site -> why it may use the
    CPU; ``(path, "*")`` allows a whole file), as ``path:line function: factory`` lines."""
    return sorted(
        {
            f"{site[0]}:{line} {site[1]}: {what}"
            for site, line, what in found
            if site not in allowed and (site[0], "*") not in allowed
        }
    )


# -- the short jobs the probe and the GPU smoke tests run -----------------------------------
DIAGNOSTIC = {"n_tasks": 2, "steps_per_task": 256, "eval_every": 256, "report": False}
MEAL = {
    "steps_per_task": 128,
    "eval_every": 128,
    "eval_episodes": 1,
    "episode_len": 50,
    "report": False,
}
FRESH = {"episodes": 1, "max_steps": 20}  # MEAL's importance episodes, short
