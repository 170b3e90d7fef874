"""Save a running task environment, simulator included, and restore it bit for bit.

A task env is a chain of Python objects (wrappers, buffers, RNGs, counters) around one or
more native simulator handles that ``pickle`` cannot copy. ``save_env_state`` pickles the
whole chain and, in place of each handle, stores the state the simulator can export:

* ALE (``ale_py.ALEInterface``): ``cloneState(include_rng=True)``;
* procgen (``procgen.ProcgenGym3Env``, gym3): ``get_state()``, one buffer per game.

``load_env_state`` unpickles the chain against a *fresh* env built the same way: each
saved handle is replaced by the fresh env's handle at the same position, after
``restoreState`` / ``set_state``. It unpickles with an allow-list, so that a crafted
state cannot run code: the only globals (classes, functions) it resolves are those that
pickling the fresh env itself names, plus numpy's and the standard library's
reconstructors of plain values (``SAFE_GLOBALS``), never anything from ``DENIED_MODULES``;
any other name is refused with :class:`UnsafeEnvStateError` before its module is even
imported. Wrapper code needs no hooks, so any wrapper chain of
pure Python objects around these simulators resumes exactly. Objects that pickle as
"call my constructor again" (gymnasium's ``EzPickle``, e.g. ale-py's ``AtariEnv``) are
saved by their attributes instead, so their running state is kept.

Simulators whose state cannot be exported raise ``EnvStateError`` with the reason:
NetHack (NLE) runs the game inside its C library with no state export, and gymnasium's
``AsyncVectorEnv`` keeps its envs in worker processes. Callers then restart the task env
from a seed instead.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cl_suites.errors import CLSuitesError, RunFileError


class EnvStateError(CLSuitesError):
    """The env holds something whose state cannot be saved (the message says what)."""


class UnsafeEnvStateError(RunFileError):
    """A saved env state names a global outside the allow-list (a crafted or foreign
    state); nothing of it was run."""


SAFE_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("collections", "deque"),
        ("collections", "OrderedDict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("builtins", "complex"),
        ("ale_py._ale_py", "ALEState"),
        (__name__, "_new_object"),
        (__name__, "_set_attributes"),
    }
)
"""Reconstructors of plain values that any saved env may use (numpy arrays, scalars and
generators, containers, ALE's exported state, and this module's ``EzPickle`` path)."""

DENIED_MODULES: frozenset[str] = frozenset(
    {
        "builtins",
        "os",
        "posix",
        "nt",
        "sys",
        "subprocess",
        "shutil",
        "io",
        "importlib",
        "runpy",
        "pickle",
        "_pickle",
        "marshal",
        "operator",
        "types",
        "ctypes",
        "codecs",
        "code",
        "pty",
        "socket",
        "tempfile",
        "pathlib",
        "torch",
    }
)
"""Modules whose globals a saved env may never name (even if the fresh env does), except
the ``builtins`` containers in ``SAFE_GLOBALS``: their functions read or write files, run
commands or reach arbitrary attributes (``getattr``, ``operator.attrgetter``)."""


@dataclass(frozen=True)
class SimulatorHandle:
    """A kind of native simulator object, and how its state is exported and imported.

    ``save``/``restore`` are ``None`` for simulators that cannot export their state;
    ``reason`` then says why.
    """

    name: str
    module: str
    class_name: str
    save: Callable[[Any], Any] | None = None
    restore: Callable[[Any, Any], None] | None = None
    reason: str = ""

    def matches(self, cls: type) -> bool:
        return cls.__name__ == self.class_name and cls.__module__.split(".")[0] == self.module


def _ale_save(ale: Any) -> Any:
    return ale.cloneState(include_rng=True)


def _ale_restore(ale: Any, state: Any) -> None:
    ale.restoreState(state)


def _gym3_save(env: Any) -> list[bytes]:
    return env.get_state()


def _gym3_restore(env: Any, state: list[bytes]) -> None:
    env.set_state(state)


HANDLES: tuple[SimulatorHandle, ...] = (
    SimulatorHandle("ale", "ale_py", "ALEInterface", _ale_save, _ale_restore),
    SimulatorHandle("procgen", "procgen", "ProcgenGym3Env", _gym3_save, _gym3_restore),
    SimulatorHandle(
        "nethack",
        "nle",
        "Nethack",
        reason="NetHack (NLE) runs the game inside its C library, which cannot export or "
        "import its state",
    ),
    SimulatorHandle(
        "async-vector-env",
        "gymnasium",
        "AsyncVectorEnv",
        reason="gymnasium's AsyncVectorEnv keeps its envs in worker processes; use "
        "vectorization_mode='sync' for exact resume",
    ),
)

_HANDLE_OF_TYPE: dict[type, SimulatorHandle | None] = {}


def _handle_kind(obj: Any) -> SimulatorHandle | None:
    cls = type(obj)
    try:
        return _HANDLE_OF_TYPE[cls]
    except KeyError:
        kind = next((h for h in HANDLES if h.matches(cls)), None)
        _HANDLE_OF_TYPE[cls] = kind
        return kind


class _Discard:
    """A file that forgets what is written (to walk an env without keeping the bytes)."""

    def write(self, data: Any) -> int:
        # bytes, or a PickleBuffer: the pickler hands large arrays' buffers over directly
        return memoryview(data).nbytes


def _new_object(cls: type) -> Any:
    return cls.__new__(cls)


def _set_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    obj.__dict__.update(attributes)


_EZPICKLE: dict[type, bool] = {}


def _reinitialised_on_unpickle(cls: type) -> bool:
    """True for classes that pickle as constructor arguments (gymnasium's ``EzPickle``)."""
    if cls not in _EZPICKLE:
        _EZPICKLE[cls] = any(base.__name__ == "EzPickle" for base in cls.__mro__[1:])
    return _EZPICKLE[cls]


class _HandlePickler(pickle.Pickler):
    """Pickles an env with every simulator handle replaced by a numbered reference that
    carries the handle's exported state (``with_states``) or nothing, and ``EzPickle``
    objects by their attributes (not by constructor arguments)."""

    def __init__(self, file: Any, with_states: bool):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.with_states = with_states
        self.handles: list[Any] = []
        self._index: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> tuple[str, int, Any] | None:
        kind = _handle_kind(obj)
        if kind is None:
            return None
        if kind.save is None:
            raise EnvStateError(kind.reason)
        index = self._index.get(id(obj))
        if index is not None:  # the same handle again (e.g. a wrapper's `self.ale`)
            return (kind.name, index, None)
        index = self._index[id(obj)] = len(self.handles)
        self.handles.append(obj)
        return (kind.name, index, kind.save(obj) if self.with_states else None)

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if _reinitialised_on_unpickle(cls) and hasattr(obj, "__dict__"):
            return (_new_object, (cls,), obj.__dict__, None, None, _set_attributes)
        return NotImplemented


def _pickle(env: Any, file: Any, with_states: bool) -> list[Any]:
    pickler = _HandlePickler(file, with_states)
    try:
        pickler.dump(env)
    except EnvStateError:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, ValueError) as e:
        raise EnvStateError(f"the task env holds an object that cannot be saved: {e}") from e
    return pickler.handles


def simulator_handles(env: Any) -> list[Any]:
    """The simulator handles of ``env`` in pickling order; ``EnvStateError`` when ``env``
    cannot be saved. Cheap: it exports no simulator state."""
    return _pickle(env, _Discard(), with_states=False)


def save_env_state(env: Any) -> bytes:
    """``env`` (any object graph: wrapper chain, vector env) with its simulators' states.

    Raises ``EnvStateError`` naming the reason when it cannot be saved.
    """
    buffer = io.BytesIO()
    _pickle(env, buffer, with_states=True)
    return buffer.getvalue()


def pickled_globals(data: bytes) -> set[tuple[str, str]]:
    """The ``(module, qualified name)`` of every global that the pickle ``data`` (written
    by ``pickle.Pickler``) names, found by reading its opcodes: nothing is imported or run."""
    found: set[tuple[str, str]] = set()
    memo: dict[int, Any] = {}
    pushed: list[Any] = []  # what each op pushed (strings; None for anything else)
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name == "GLOBAL":
            module, qualname = arg.split(" ", 1)
            found.add((module, qualname))
            pushed.append(None)
        elif name == "STACK_GLOBAL":
            found.add((pushed[-2], pushed[-1]))
            pushed.append(None)
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1]
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(arg))
        elif name not in ("PROTO", "FRAME"):
            pushed.append(arg if "UNICODE" in name else None)
    return found


def _allowed(module: str, qualname: str, fresh_globals: set[tuple[str, str]]) -> bool:
    if (module, qualname) in SAFE_GLOBALS:
        return True
    root = module.split(".")[0]
    return root not in DENIED_MODULES and (module, qualname) in fresh_globals


def load_env_state(data: bytes, fresh: Any) -> Any:
    """The env saved in ``data``, rebuilt around the simulator handles of ``fresh``.

    ``fresh`` must be built the same way as the saved env (same factory and options); its
    handles are restored to the saved states and adopted by the returned env, so
    ``fresh`` itself must be dropped without closing it. Raises ``EnvStateError`` when
    the two do not match, and :class:`UnsafeEnvStateError` when ``data`` names a global
    outside the allow-list (see the module docstring).
    """
    buffer = io.BytesIO()
    handles = _pickle(fresh, buffer, with_states=False)
    fresh_globals = pickled_globals(buffer.getvalue())

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if not _allowed(module, name, fresh_globals):
                raise UnsafeEnvStateError(
                    f"the saved task env names {module}.{name}, which is not part of this "
                    "run's env; it is not loaded (a crafted or foreign state)"
                )
            return super().find_class(module, name)

        def persistent_load(self, pid: tuple[str, int, Any]) -> Any:
            name, index, state = pid
            if index >= len(handles) or _handle_kind(handles[index]).name != name:
                raise EnvStateError(
                    f"the saved env's simulator {name} #{index} has no counterpart in the "
                    f"fresh env ({len(handles)} simulator handles)"
                )
            handle = handles[index]
            if state is not None:
                _handle_kind(handle).restore(handle, state)
            return handle

    try:
        return _Unpickler(io.BytesIO(data)).load()
    except (EnvStateError, UnsafeEnvStateError):
        raise
    except Exception as e:  # the checkpoint's checksum matched: not a torn file
        raise UnsafeEnvStateError(
            f"the saved task env cannot be loaded ({type(e).__name__}: {e})"
        ) from e
