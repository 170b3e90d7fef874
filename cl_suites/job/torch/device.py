"""The torch device of a run, decided once when the run is resolved (before any env or
buffer is built).

* ``auto``: the first CUDA device for the convolutional policies (CORA's suites), the CPU
  for the small MLPs (Diagnostic, MEAL's torch learner), as SB3 advises: an MLP of a few
  thousand parameters waits on kernel launches and host syncs on a GPU, and MEAL's sparse
  first layer only runs on the CPU (``baselines_sb3.sparse``). Ask for ``cuda`` explicitly
  to train an MLP on a GPU.
* ``cpu``, ``cuda``, ``cuda:N``: used as given; a CUDA device that is not present is
  refused (SB3 would silently fall back to the CPU).
* anything else is refused: strings torch does not parse (``cdua``), and device types the
  learners cannot use (``mps`` has no float64, which the reward std and the penalties'
  sums need; ``meta``, ``xpu`` ... are untested).

Every refusal is a :class:`~cl_suites.errors.BadValueError`: one line naming the value and
the devices present.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch as th

from cl_suites.errors import BadValueError

AUTO = "auto"
_WHY_NOT = {
    "mps": "it has no float64, which the learners need (the reward std, the penalties' sums)",
    "meta": "it holds no data",
}


def devices_present() -> tuple[str, ...]:
    """The devices a run can use on this machine: ``cpu`` and each ``cuda:N``."""
    count = th.cuda.device_count() if th.cuda.is_available() else 0
    return ("cpu", *(f"cuda:{i}" for i in range(count)))


def _current_index() -> int:
    """torch's current CUDA device, without starting CUDA where it has not started (0 in
    a process that never chose one): a sweep's driver probes its local runs' devices and
    keeps no CUDA context on a GPU its runs use."""
    return th.cuda.current_device() if th.cuda.is_initialized() else 0


def _refuse(value: str, why: str) -> BadValueError:
    present = ", ".join(devices_present())
    return BadValueError(f"device {value!r} cannot be used: {why} (devices present: {present})")


def resolve_device(value: str, convolutional: bool, *, probe: bool = True) -> str:
    """The torch device a run with the job option ``device=value`` trains on (``"cpu"`` or
    ``"cuda:N"``; see the module docstring). ``convolutional``: the policy has a CNN
    (``auto`` then takes a GPU when one is present). ``probe=False`` checks the value only
    (a sweep's driver, whose runs may land on machines with other devices) and returns it
    unchanged."""
    text = str(value).strip().lower()
    if text == AUTO:
        if not probe:
            return AUTO
        cuda = convolutional and th.cuda.is_available()
        return f"cuda:{_current_index()}" if cuda else "cpu"
    try:
        device = th.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise _refuse(value, "not a torch device (e.g. auto, cpu, cuda, cuda:0)") from None
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        why = _WHY_NOT.get(device.type, "the learners run on cpu or cuda only")
        raise _refuse(value, f"{device.type}: {why}")
    if not probe:
        return text
    if not th.cuda.is_available():
        raise _refuse(value, "CUDA is not available here")
    index = _current_index() if device.index is None else device.index
    if index >= th.cuda.device_count():
        raise _refuse(value, f"there is no CUDA device {index}")
    return f"cuda:{index}"


JAX_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


def jax_beside_torch() -> None:
    """Keep JAX from taking 75% of a GPU's memory up front when it shares the process with
    torch (MEAL's JAX engine beside the torch learner): ``XLA_PYTHON_CLIENT_PREALLOCATE=
    false``, unless the environment sets it. It must be set before JAX starts its backends;
    a warning says so when they had already started (JAX used earlier in the process)."""
    if JAX_PREALLOCATE in os.environ:
        return
    os.environ[JAX_PREALLOCATE] = "false"
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and getattr(bridge, "_backends", None):
        warnings.warn(
            f"JAX started before {JAX_PREALLOCATE}=false was set: on a GPU it keeps 75% of "
            "the memory beside torch; set the variable before starting Python",
            stacklevel=2,
        )
