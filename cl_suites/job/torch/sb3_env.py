"""The torch learner's view of a suite's training env: stable-baselines3's ``VecEnv``.

The suites know no learner: a suite's runtime builds its training env
(``SequenceVectorEnv``; MEAL: the batched JAX engine ``MealBatchedEnv``) and this module
turns it into the ``VecEnv`` SB3 trains on, with the observations where the torch learner
takes them (host numpy, or torch tensors on its device:
``cl_suites.job.torch.device_observations``).

Which view a suite gets comes from one table, :data:`SB3_VIEWS`, keyed by the catalog
entry's ``family`` (``SuiteInfo.family``): ``"meal"`` gets MEAL's view (one SB3 slot
per agent, parameter sharing, i.e. IPPO; observations on the device where JAX shares
torch's), every other family the single-agent view (``SB3VecEnv``, host numpy). A new
multi-agent family adds a row here, not an "is this MEAL?" test at a call site.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cl_suites.job.torch import device_observations as placement
from cl_suites.sb3.adapter import SB3VecEnv
from cl_suites.sb3.meal import MealSB3VecEnv
from cl_suites.suites import SuiteInfo
from cl_suites.suites.runtime import SuiteInstance


@dataclass(frozen=True)
class SB3View:
    """How the torch learner sees the training env of one suite family.

    Attributes:
        adapter: the SB3 ``VecEnv`` class over the training env: ``adapter(env)``, or
            ``adapter(env, observation_device)`` when ``device_observations``.
        device_observations: the adapter can hand the observations as torch tensors on
            the learner's device (decided per run by
            ``cl_suites.job.torch.device_observations``); otherwise they are host numpy.
    """

    adapter: type
    device_observations: bool = False


SINGLE_AGENT_VIEW = SB3View(SB3VecEnv)
"""Every gymnasium suite: ``SB3VecEnv`` over the ``SequenceVectorEnv``."""

SB3_VIEWS: Mapping[str, SB3View] = MappingProxyType(
    {"meal": SB3View(MealSB3VecEnv, device_observations=True)}
)
"""The views that differ from :data:`SINGLE_AGENT_VIEW`, by suite family."""


def view_of(info: SuiteInfo) -> SB3View:
    """The SB3 view of the suite ``info`` (its family's row of :data:`SB3_VIEWS`)."""
    return SB3_VIEWS.get(info.family, SINGLE_AGENT_VIEW)


def sb3_env(
    info: SuiteInfo, env: Any, device: str | None, device_observations: bool | None = None
) -> Any:
    """``env``, the training env the runtime of suite ``info`` built, as the ``VecEnv`` a
    torch learner on ``device`` trains on. ``device_observations``: the job option (may
    the observations stay on the learner's device; ``None``: where that is faster)."""
    view = view_of(info)
    if not view.device_observations:
        return view.adapter(env)
    space = env.sequence.observation_space
    return view.adapter(env, placement.observation_device(device, space, device_observations))


def observation_location(
    info: SuiteInfo,
    instance: SuiteInstance,
    device: str | None,
    device_observations: bool | None = None,
) -> str:
    """Where the training observations of suite ``info`` (built as ``instance``) live
    between the env and a torch learner on ``device``: ``"host"`` (numpy) or ``"device"``
    (torch tensors on it; ``metadata.json``'s ``observations``)."""
    if not view_of(info).device_observations:
        return placement.HOST
    space = instance.sequence.observation_space
    return placement.observation_location(device, space, device_observations)
