"""Own continual-learning methods as plug-ins of the torch learners.

A plug-in is a :class:`~baselines_sb3.cl.base.ContinualMethod` subclass named by

* ``package.module:Class``: imported like ``python -m`` would (the current directory is
  searched too, as it is for ``python -m``), or
* the name of an entry point of the group :data:`ENTRY_POINT_GROUP` (``cl_suites.methods``)
  of an installed distribution, e.g. in its ``pyproject.toml``::

      [project.entry-points."cl_suites.methods"]
      l2-init = "my_package.methods:L2Init"

:func:`load_method_plugin` finds the class and checks that it is one; every failure is a
``MethodPluginError`` of one line naming the plug-in and what to fix. The job layer
(``cl_suites.job.method_options``) reads the options the plug-in declares in its
constructor.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from functools import cache

from baselines_sb3.cl.base import ContinualMethod
from cl_suites.declarations import (
    ENTRY_POINT_GROUP,
    installed_plugins,
    is_plugin_spec,
    unknown_method_error,
)
from cl_suites.errors import CLSuitesError, MethodPluginError, PluginHookError

__all__ = [
    "ENTRY_POINT_GROUP",
    "installed_plugins",
    "is_plugin_spec",
    "load_method_plugin",
    "unknown_method_error",
]


@cache
def load_method_plugin(name: str) -> type[ContinualMethod]:
    """The ``ContinualMethod`` subclass named ``name`` (``package.module:Class`` or an
    entry point of :data:`ENTRY_POINT_GROUP`); ``MethodPluginError`` when it cannot be
    imported or is not a ``ContinualMethod`` subclass."""
    if is_plugin_spec(name):
        module_name, _, attr = name.partition(":")
        if (
            not module_name
            or not attr
            or not all(part.isidentifier() for part in (*module_name.split("."), *attr.split(".")))
        ):
            raise MethodPluginError(
                f"method {name!r}: an own method is named package.module:Class "
                "(e.g. my_methods.l2_init:L2Init)"
            )
        obj = _import_attribute(name, module_name, attr)
    else:
        entry = installed_plugins().get(name)
        if entry is None:
            raise MethodPluginError(f"method {name!r}: no {ENTRY_POINT_GROUP} entry point {name!r}")
        try:
            obj = entry.load()
        except Exception as e:
            raise MethodPluginError(
                f"method {name!r}: its entry point {entry.value!r} does not load "
                f"({type(e).__name__}: {_one_line(e)})"
            ) from None
    if not (isinstance(obj, type) and issubclass(obj, ContinualMethod)):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise MethodPluginError(
            f"method {name!r} is {what}, not a ContinualMethod subclass (subclass "
            "baselines_sb3.ContinualMethod; docs/own-method.md)"
        )
    return obj


def _import_attribute(name: str, module_name: str, attr: str) -> object:
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:  # like ``python -m``: a module beside the command is found
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise MethodPluginError(
            f"method {name!r}: cannot import module {module_name!r} ({_one_line(e)}); "
            "install its package or run from the directory that holds it (or set PYTHONPATH)"
        ) from None
    except Exception as e:
        raise MethodPluginError(
            f"method {name!r}: importing {module_name!r} failed "
            f"({type(e).__name__}: {_one_line(e)})"
        ) from None
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise MethodPluginError(f"method {name!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


HOOKS: tuple[str, ...] = (
    "bind",
    "set_current_segment",
    "set_episode_source",
    "plan_storage",
    "load_state_dict",
    "on_rollout_end",
    "on_task_switch",
    "on_update_end",
    "start_update",
    "end_update",
    "penalty",
    "penalty_grad_",
    "extra_loss",
    "extra_rewards",
    "custom_update",
    "eval_policy_module",
    "state_dict",
)
"""The ``ContinualMethod`` hooks the job calls (``docs/own-method.md``)."""


def guard_hooks(method: ContinualMethod, name: str) -> ContinualMethod:
    """Make every hook of the plug-in ``method`` (named ``name`` on the command line)
    raise ``PluginHookError`` naming the plug-in, its class, the hook and the exception
    when it fails (cl-suites' own errors and interrupts pass through unchanged)."""
    for hook in HOOKS:
        bound = getattr(method, hook, None)
        if bound is None:
            continue

        @functools.wraps(bound)
        def guarded(*args, __hook=hook, __bound=bound, **kwargs):
            try:
                return __bound(*args, **kwargs)
            except CLSuitesError:
                raise
            except Exception as e:
                raise PluginHookError(
                    f"method plug-in {name} ({type(method).__qualname__}) failed in its "
                    f"{__hook} hook: {type(e).__name__}: {_one_line(e)}",
                    name,
                    __hook,
                ) from e

        setattr(method, hook, guarded)
    return method
