"""Continual-learning methods for SB3 learners (one small interface, see ``base``).

Each CLI method name has the definitions of the reference code it comes from
(``variant``): CORA's (``continual_rl``) for EWC and online EWC on the CORA suites, MEAL's
for EWC, online EWC, MAS and L2 on MEAL (and for L2 and MAS everywhere: CORA has none).
"""

from __future__ import annotations

from typing import Any

from baselines_sb3.cl.base import (
    ContinualMethod,
    ContinualMethodCallback,
    EpisodeSource,
    FreshEpisodes,
    Rollout,
    attach_method,
    install_loss_hook,
)
from baselines_sb3.cl.clear import CLEAR, ReservoirBuffer
from baselines_sb3.cl.cora_regularizers import CoraEWC, CoraOnlineEWC
from baselines_sb3.cl.meal_regularizers import MealEWC, MealL2, MealMAS, MealOnlineEWC
from baselines_sb3.cl.plugins import (
    ENTRY_POINT_GROUP,
    installed_plugins,
    is_plugin_spec,
    load_method_plugin,
    unknown_method_error,
)
from baselines_sb3.cl.pnc import ProgressCompress
from baselines_sb3.cl.regularizer_base import QuadraticPenalty
from baselines_sb3.cl.remedy import RemedyMethod, with_remedy
from baselines_sb3.keywords import accepted_options, check_keywords
from cl_suites.declarations import is_builtin_method
from cl_suites.errors import UnknownOptionError
from cl_suites.remedies import split_method

METHODS: dict[str, dict[str, type[ContinualMethod]]] = {
    "ft": {"cora": ContinualMethod, "meal": ContinualMethod},
    "ewc": {"cora": CoraEWC, "meal": MealEWC},
    "online-ewc": {"cora": CoraOnlineEWC, "meal": MealOnlineEWC},
    "l2": {"meal": MealL2},
    "mas": {"meal": MealMAS},
    "pnc": {"cora": ProgressCompress},
    "clear": {"cora": CLEAR},
}
"""Method name -> ``{variant: class}``."""

VARIANTS: tuple[str, ...] = ("cora", "meal")


def is_builtin(name: str) -> bool:
    """``name`` is a method of this package (``METHODS``, alone or with a remedy:
    ``ewc+redo``), not an own method's plug-in."""
    return is_builtin_method(name)


def method_class(name: str, variant: str | None = None) -> type[ContinualMethod]:
    """The class of method ``name`` in ``variant`` (default: the method's first variant).

    ``name`` is one of ``METHODS``, an own method ``package.module:Class`` or an entry
    point of the ``cl_suites.methods`` group (``baselines_sb3.cl.plugins``; plug-ins have
    no variants). ``MethodPluginError`` (a ``ValueError``) for an unknown name or a
    plug-in that cannot be used. A method with a remedy (``redo``, ``ewc+redo``;
    ``cl_suites.remedies``) is its base method's class with the remedy
    (``baselines_sb3.cl.remedy.with_remedy``)."""
    if not is_plugin_spec(name):
        base, remedy = split_method(name)
        if remedy is not None:
            return with_remedy(method_class(base, variant), remedy)
    if name not in METHODS:
        if not is_plugin_spec(name) and name not in _installed_names():
            raise unknown_method_error(name, tuple(METHODS))
        if variant is not None:
            raise ValueError(f"own method {name!r} has no variants (got variant {variant!r})")
        return load_method_plugin(name)
    classes = METHODS[name]
    if variant is None:
        return next(iter(classes.values()))
    if variant not in classes:
        raise ValueError(f"method {name!r} has no {variant!r} variant; valid: {', '.join(classes)}")
    return classes[variant]


def make_method(
    name: str, seed: int = 0, variant: str | None = None, **kwargs: Any
) -> ContinualMethod:
    """The CL method ``name`` (one of ``METHODS``, or an own method's plug-in, see
    :func:`method_class`) of ``variant`` with its hyperparameters; ``seed`` goes to every
    constructor that takes one."""
    cls = method_class(name, variant)
    check_keywords("method", name, cls, kwargs)
    if cls is ContinualMethod:
        if kwargs:
            raise UnknownOptionError(f"method 'ft' takes no hyperparameters, got {sorted(kwargs)}")
        return ContinualMethod()
    if "seed" in accepted_options(cls):
        kwargs.setdefault("seed", seed)
    return cls(**kwargs)


def _installed_names() -> tuple[str, ...]:
    return tuple(installed_plugins())


__all__ = [
    "CLEAR",
    "ENTRY_POINT_GROUP",
    "METHODS",
    "VARIANTS",
    "ContinualMethod",
    "ContinualMethodCallback",
    "CoraEWC",
    "CoraOnlineEWC",
    "EpisodeSource",
    "FreshEpisodes",
    "MealEWC",
    "MealL2",
    "MealMAS",
    "MealOnlineEWC",
    "ProgressCompress",
    "QuadraticPenalty",
    "RemedyMethod",
    "ReservoirBuffer",
    "Rollout",
    "attach_method",
    "install_loss_hook",
    "is_builtin",
    "is_plugin_spec",
    "load_method_plugin",
    "make_method",
    "method_class",
    "with_remedy",
]
