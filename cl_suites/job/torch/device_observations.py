"""Whether MEAL's torch learner takes its observations on the device, decided once per run.

The torch learner's choice, so it lives in the torch wing of the job layer (the suites
know no learner; ``cl_suites.job.torch.sb3_env`` applies it). MEAL's kitchens step in JAX
(``MealBatchedEnv``); the torch learner (``--learner ppo``) reads their observations
through the SB3 view (``cl_suites.sb3.meal.MealSB3VecEnv``). When JAX and torch hold
their arrays on the same device (both on the CPU, or both on CUDA device ``N``), the view
hands the engine's observation arrays to torch with ``torch.from_dlpack`` (no copy) and
the learner keeps them in a device-side rollout buffer (``baselines_sb3.device_rollout``):
no observation passes through host memory per step.
The values are the same ``uint8`` either way, so training is bit-identical to the host
path (``tests/meal/test_device_observations.py``).

The job option ``device_observations`` decides: ``None`` (default) on a GPU shared by JAX
and torch only (on the CPU the host path measured faster: ``benchmarks/README.md``),
``True`` on the CPU too, ``False`` never. It is off whatever the option (host numpy, as
SB3 expects) when the devices differ (JAX on the CPU beside a CUDA torch, or the reverse),
and when SB3 would transpose the observations to channels first (``VecTransposeImage``
works on numpy): a kitchen view taller than wide.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

DEVICE = "device"
HOST = "host"


def _jax_device() -> tuple[str, int]:
    """(platform, id) of the device JAX puts the engine's arrays on."""
    import jax

    device = jax.devices()[0]
    return str(device.platform), int(device.id)


def _transposed_by_sb3(space: spaces.Space) -> bool:
    """SB3 wraps the env in ``VecTransposeImage`` (``OnPolicyAlgorithm._wrap_env``): a
    ``uint8`` image whose smallest axis is not the first."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3 or space.dtype != np.uint8:
        return False
    image = bool(np.all(space.low == 0) and np.all(space.high == 255))
    return image and int(np.argmin(space.shape)) != 0


def observation_device(
    torch_device: str | None, observation_space: Any, wanted: bool | None = None
) -> str | None:
    """The torch device (``"cpu"``, ``"cuda:N"``) MEAL's SB3 view hands observations on,
    or ``None`` for host numpy arrays. ``torch_device``: the run's resolved device
    (``cl_suites.job.torch.device.resolve_device``), ``None`` outside a torch learner's job;
    ``wanted``: the job option ``device_observations`` (see the module docstring)."""
    if torch_device is None or wanted is False or _transposed_by_sb3(observation_space):
        return None
    platform, index = _jax_device()
    kind, _, number = str(torch_device).partition(":")
    if kind == "cpu" and platform == "cpu":
        return "cpu" if wanted else None
    if kind == "cuda" and platform in ("gpu", "cuda") and int(number or 0) == index:
        return f"cuda:{index}"
    return None


def observation_location(
    torch_device: str | None, observation_space: Any, wanted: bool | None = None
) -> str:
    """``"device"`` or ``"host"``: where a run's training observations live between the
    engine and the learner (``metadata.json``'s ``observations``)."""
    return DEVICE if observation_device(torch_device, observation_space, wanted) else HOST
