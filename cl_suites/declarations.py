"""The names every layer reads: the CL methods, MEAL's default learner and the random agent.

Declared once here, in plain data (no torch, no JAX), so that the command line parses and
prints ``--help`` without importing a learner family, and the families, the catalog and
the job read the same names. The classes behind the names live in their families
(``baselines_sb3.cl.METHODS``, ``baselines_sb3.factory``, ``baselines_jax``).
"""

from __future__ import annotations

import difflib
import importlib.metadata

from cl_suites.errors import MethodPluginError
from cl_suites.remedies import REMEDIES, split_method

RANDOM_METHOD = "random"
"""``--method random``: the random agent (``cl_suites.random_agent``), no learner."""
TORCH_METHODS: tuple[str, ...] = ("ft", "ewc", "online-ewc", "l2", "mas", "pnc", "clear")
"""The CL methods of the torch learners (``baselines_sb3.cl.METHODS`` holds their classes)."""
MEAL_PAPER_METHODS: tuple[str, ...] = ("ft", "ewc", "online-ewc", "mas", "l2")
"""The CL methods of MEAL's paper (Table 2): both MEAL learners run them, the JAX IPPO and
the torch ``ppo`` (their values: ``cl_suites.job.presets``)."""
MEAL_REPLAY_METHODS: tuple[str, ...] = ("agem", "er-ace", "packnet")
"""The CL methods MEAL's authors added after the paper (057f862 ``experiments/continual/``):
episodic-memory gradient projection, replayed behaviour cloning, pruning with a mask per
task; only the JAX learners run them."""
MEAL_METHODS: tuple[str, ...] = (*MEAL_PAPER_METHODS, *MEAL_REPLAY_METHODS)
"""Every CL method MEAL's code defines (the JAX learners compile these;
``baselines_jax.cl.METHODS`` holds their classes)."""
CL_METHODS: tuple[str, ...] = (*TORCH_METHODS, *MEAL_REPLAY_METHODS)
"""Every built-in CL method (each learner entry declares which it runs)."""
MEAL_NETWORKS: tuple[str, ...] = ("mlp", "mlp-packnet")
"""MEAL's MLP actor-critics (the JAX learners' ``network``): a LayerNorm after every hidden
layer (``model/mlp.py``), or after the first only (057f862 ``model/mlp_packnet.py``)."""
IMPORTANCE_MODES: tuple[str, ...] = ("multi", "online", "last")
"""How a task's new importance joins the old one (EWC, online EWC, MAS; MEAL 057f862
``--importance-mode``): summed, ``decay old + (1 - decay) new``, replaced."""
MAPPO_METHODS: tuple[str, ...] = MEAL_PAPER_METHODS
"""The CL methods ``mappo-jax`` trains with (MEAL 057f862 also runs AGEM, ER-ACE and
PackNet on MAPPO; not here yet)."""
JAX_LEARNER = "ppo-jax"
"""The JAX IPPO learner's name (``--learner ppo-jax``; ``baselines_jax``), MEAL's default."""

ENTRY_POINT_GROUP = "cl_suites.methods"
"""The entry-point group of installed own methods (``name = "package.module:Class"``)."""


def is_plugin_spec(name: str) -> bool:
    """``name`` has the form ``package.module:Class`` (an own method)."""
    return ":" in name


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of :data:`ENTRY_POINT_GROUP`, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def closest_name(name: str, known: tuple[str, ...]) -> str | None:
    """The name of ``known`` that ``name`` most likely meant: the same name in another
    case first, then the closest spelling (case ignored), or ``None``."""
    by_lower = {k.lower(): k for k in known}
    lowered = name.lower()
    if lowered in by_lower:
        return by_lower[lowered]
    close = difflib.get_close_matches(lowered, list(by_lower), n=1)
    return by_lower[close[0]] if close else None


def unknown_method_error(name: str, builtin: tuple[str, ...]) -> MethodPluginError:
    """The error for a ``--method`` that is neither built in nor a plug-in: the valid
    names, a did-you-mean, and how to name an own method."""
    installed = tuple(installed_plugins())
    known = (*builtin, *installed)
    close = closest_name(name, known)
    hint = f" (did you mean {close!r}?)" if close else ""
    own = f"; installed plug-ins: {', '.join(installed)}" if installed else ""
    return MethodPluginError(
        f"unknown method {name!r}{hint}; valid: {', '.join(builtin)}{own}, or an own "
        "ContinualMethod as package.module:Class"
    )


def base_method(name: str) -> str:
    """The CL method under a remedy (``ewc+redo`` -> ``ewc``, ``redo`` -> ``ft``; any other
    name unchanged); ``cl_suites.remedies.split_method``."""
    return split_method(name)[0]


def is_builtin_method(name: str) -> bool:
    """``name`` is a built-in CL method, alone or with a remedy (``ewc+redo``)."""
    if is_plugin_spec(name):
        return False
    try:
        return base_method(name) in CL_METHODS
    except ValueError:
        return False


def check_method_name(name: str) -> None:
    """``MethodPluginError`` (did-you-mean, the valid names) for a ``--method`` that is
    neither a built-in CL method (alone or with a remedy: ``redo``, ``ewc+redo``), nor
    ``package.module:Class``, nor an installed plug-in; ``ConfigError`` for a composition
    that cannot be (``cl_suites.remedies.split_method``)."""
    if is_plugin_spec(name) or name in installed_plugins():
        return
    if base_method(name) not in CL_METHODS:
        raise unknown_method_error(name, (*CL_METHODS, *REMEDIES))
