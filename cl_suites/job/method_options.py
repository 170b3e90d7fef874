"""The options an own CL method (a plug-in, ``baselines_sb3.cl.plugins``) declares.

A plug-in declares its options once, in its constructor: each keyword parameter (``seed``
aside, which the job passes) has a type annotation, a default and a line in the class's
(or the constructor's) docstring ``Args:`` section::

    class L2Init(ContinualMethod):
        \"\"\"Pull towards the weights the previous task ended with.

        Args:
            lam: strength of the pull
            anchor: which weights to pull to
        \"\"\"

        def __init__(self, lam: float = 1.0, anchor: Literal["last", "init"] = "last"):
            ...

Types: ``bool``, ``int``, ``float``, ``str``, ``Literal[...]`` (a choice), ``X | None``
(``None`` allowed), and ``Annotated[X, Opt(...)]`` for a range
(``cl_suites.job.option_specs.Opt``, e.g. ``Annotated[float, Opt("float", low=0.0)]``).
:func:`plugin_options` turns the declaration into the run's :class:`MethodOption`\\ s, or
``MethodPluginError`` naming the first option declared badly, before anything is built.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cl_suites.config import argument_docs
from cl_suites.errors import MethodPluginError
from cl_suites.job.option_specs import Opt

PASSED_BY_JOB: tuple[str, ...] = ("seed", "disk_dir", "storage")
"""Constructor keywords the job passes itself (``seed``: the run seed; ``disk_dir`` and
``storage``: replay buffers of methods that ``keeps_replay``)."""


@dataclass(frozen=True)
class MethodOption:
    """One option of an own method: its check, its default and its one-line doc."""

    name: str
    check: Opt
    default: Any
    doc: str


_SIMPLE = {bool: Opt("bool"), int: Opt("int"), float: Opt("float"), str: Opt("str")}


def _opt_of(annotation: Any) -> Opt | None:
    """The ``Opt`` of a type annotation, or ``None`` when it is not one of the kinds."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        declared = [e for e in extras if isinstance(e, Opt)]
        if declared:
            inner = _opt_of(base)
            return replace(
                declared[0], none_ok=declared[0].none_ok or bool(inner and inner.none_ok)
            )
        return _opt_of(base)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _opt_of(rest[0])
            return None if inner is None else replace(inner, none_ok=True)
        return None
    if origin is typing.Literal:
        return Opt("choice", choices=typing.get_args(annotation))
    return _SIMPLE.get(annotation)


def plugin_options(
    name: str, cls: type, reserved: Mapping[str, str] | None = None
) -> dict[str, MethodOption]:
    """The options own method ``cls`` (``--method name``) declares, by name; see the module
    docstring. ``reserved``: names other parts of a run read first, with what they are
    (``run_spec.reserved_option_names``). ``MethodPluginError`` for an option without a
    type, default or doc, of a type outside the kinds, with a default its type refuses,
    or with a reserved name."""
    init = cls.__init__
    if init is object.__init__:
        return {}
    try:
        hints = typing.get_type_hints(init, include_extras=True)
    except Exception as e:
        raise MethodPluginError(
            f"method {name!r}: the type annotations of {cls.__name__}.__init__ do not resolve "
            f"({type(e).__name__}: {e})"
        ) from None
    docs = {**argument_docs(cls), **argument_docs(init)}
    reserved = reserved or {}
    out: dict[str, MethodOption] = {}
    for param in list(inspect.signature(init).parameters.values())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name in PASSED_BY_JOB:
            continue
        where = f"method {name!r} declares option {param.name!r}"
        if param.kind is param.POSITIONAL_ONLY:
            raise MethodPluginError(f"{where} positional-only; options are keywords")
        if param.name in reserved:
            raise MethodPluginError(
                f"{where}, which is {reserved[param.name]}: the run would never pass it to the "
                "method; rename it"
            )
        if param.default is param.empty:
            raise MethodPluginError(f"{where} without a default; give it one")
        if param.name not in hints:
            raise MethodPluginError(
                f"{where} without a type annotation (bool, int, float, str, Literal[...])"
            )
        check = _opt_of(hints[param.name])
        if check is None:
            raise MethodPluginError(
                f"{where} of type {hints[param.name]!r}; valid: bool, int, float, str, "
                "Literal[...], X | None, Annotated[X, Opt(...)]"
            )
        try:
            default = check.check(param.name, param.default)
        except ValueError as e:
            raise MethodPluginError(f"{where} with a default its type refuses: {e}") from None
        doc = docs.get(param.name, "").strip()
        if not doc:
            raise MethodPluginError(
                f"{where} without a doc; add '{param.name}: ...' to the Args: section of "
                f"{cls.__name__}'s docstring"
            )
        out[param.name] = MethodOption(param.name, check, default, doc)
    return out
