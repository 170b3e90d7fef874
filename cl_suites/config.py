"""Run configurations of ``cl-suites run``: config files, ``--set`` overrides, precedence.

A configuration is one flat mapping. The *run keys* choose what runs (the fields of
``cl_suites.request.RunRequest``: ``suite``, ``method``, ``learner``, ``seed``, ...),
``run_dir`` where it writes, and every other key is an *option*: a suite keyword
(``steps_per_task``, ``eval_every``, ``distribution_mode``, ...), a job option
(``device``, ``checkpoint_every``, ``replay_on_disk``, ``tensorboard``, ``wandb``, ...) or a
learner / method hyperparameter (``learning_rate``, ``lam``, ``buffer_size``, ...);
``cl_suites.job.run_spec.resolve`` declares each once and sends it to its place. A TOML file::

    suite = "Procgen6"
    method = "clear"
    learner = "vtrace"
    seed = 1
    steps_per_task = 100_000
    buffer_size = 200_000
    device = "cpu"
    tensorboard = true

or the same keys in YAML. Files are parsed as data (``tomllib`` / ``yaml.safe_load``);
nothing in them is executed. One value parser (:func:`parse_value`) reads ``--set`` values
of ``cl-suites run`` and ``cl-suites sweep`` and the strings of config and sweep files, one
loader (:func:`load_config_file`) reads both kinds of files, and one name check
(:func:`check_names`) refuses unknown options.

Precedence, lowest first: the suite's paper defaults < the preset (``paper`` / ``small``)
< the config file (``--config``) < ``--set key=value`` (in the order given) < explicit
flags (``--seed 3``, ``--steps-per-task 1000``, ...).
"""

from __future__ import annotations

import difflib
import inspect
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from cl_suites.errors import ConfigError, UnknownOptionError
from cl_suites.request import RUN_KEYS, RunRequest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

RUN_DEFAULTS: dict[str, Any] = {
    **{
        f.name: None if f.default is MISSING else f.default
        for f in fields(RunRequest)
        if f.name in RUN_KEYS
    },
    "run_dir": None,
}
"""The keys a configuration must or may leave out, with their defaults: the run keys
(:class:`~cl_suites.request.RunRequest`'s defaults; ``suite``: none) and ``run_dir``
(``None``: ``runs/<suite>-<method>-s<seed>``)."""

MAX_SEED = 2**32 - 1
"""Largest run seed (numpy's legacy seeding, which SB3 uses, takes 32-bit seeds)."""

PRECEDENCE = (
    "suite defaults (the paper's) < preset < --config FILE < --set KEY=VALUE (in order) "
    "< explicit flags"
)
_INT_EXPONENT = re.compile(r"[+-]?\d+[eE]\+?\d+")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


@dataclass(frozen=True)
class RunConfig:
    """A resolved ``cl-suites run`` configuration.

    Attributes:
        request: the run its run keys and options ask for.
        run_dir: where it writes (``None``: the run's default directory).
        sources: where each key's value came from (``"default"``, ``"run-dir"``,
            ``"config"``, ``"--set"`` or ``"flag"``).
    """

    request: RunRequest
    run_dir: str | None
    sources: dict[str, str]


def check_seed(value: Any) -> int:
    """``value`` as a run seed: an integer in ``[0, 2**32 - 1]`` (``ConfigError`` otherwise)."""
    seed = value
    if isinstance(value, str):
        try:
            seed = int(value.strip())
        except ValueError:
            seed = None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed must be an integer in [0, {MAX_SEED}], got {value!r}")
    return seed


def check_seeds(values: Any) -> list[int]:
    """``values`` as the seeds of a several-seed run (``--seeds``): distinct integers in
    ``[0, 2**32 - 1]``, at least one (``ConfigError`` naming the bad value otherwise)."""
    if isinstance(values, (str, int)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"seeds must be a list of integers, e.g. [0, 1, 2], got {values!r}")
    seeds = []
    for value in values:
        try:
            seeds.append(check_seed(value))
        except ConfigError:
            raise ConfigError(
                f"seeds must be integers in [0, {MAX_SEED}], got {value!r} in {list(values)}"
            ) from None
    if not seeds:
        raise ConfigError("seeds is empty; give at least one seed, e.g. --seeds 0 1 2")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(
            f"seeds {seeds} repeat {', '.join(map(str, repeated))}; give each seed once"
        )
    return seeds


def check_num_envs(value: Any) -> int:
    """``value`` as a number of sub-envs: a positive integer (``ConfigError`` otherwise)."""
    number = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {value!r}")
    return number


def parse_value(text: str) -> Any:
    """A ``--set`` value as data: a TOML value (``3``, ``1e-4``, ``true``, ``[64, 64]``,
    ``"cpu"``; ``1e5`` without a decimal point is the integer 100000),
    ``yes``/``no``/``on``/``off`` (any case) as booleans, ``none``/``null`` as ``None``,
    anything else as the plain string (``device=cuda:0``)."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in _BOOLS:
        return _BOOLS[lowered]
    if lowered in ("none", "null"):
        return None
    try:
        value = tomllib.loads(f"v = {stripped}")["v"]
    except tomllib.TOMLDecodeError:
        return stripped
    if (
        isinstance(value, float)
        and value.is_integer()
        and re.fullmatch(r"[+-]?\d+[eE]\+?\d+", stripped)
    ):
        return int(value)  # 1e5 means the integer 100000 (budgets, cadences)
    return value


def parse_set(item: str) -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value)``; dashes in the key become underscores."""
    key, sep, value = item.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not _KEY.match(key):
        raise ConfigError(f"--set takes KEY=VALUE (e.g. --set learning_rate=3e-4), got {item!r}")
    return key, parse_value(value)


MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB; a run's configuration is a few hundred bytes)."""


def read_limited(path: Path, what: str = "config file") -> bytes:
    """The bytes of the regular file ``path`` (at most ``MAX_CONFIG_BYTES``). A FIFO, a
    device (``/dev/zero``), a directory or a larger file is refused before it is opened
    (opening a FIFO would wait for a writer)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO, socket or device"
        raise ConfigError(f"{what} {path} is {kind}, not a regular file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{what} {path} is {info.st_size:,} bytes; a config file may have at most "
            f"{MAX_CONFIG_BYTES:,}"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # the file may have grown since the stat
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {path} has more than {MAX_CONFIG_BYTES:,} bytes")
    return raw


def load_config_file(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The mapping in a ``.toml``, ``.yaml`` or ``.yml`` file, parsed as data; files that
    are not regular or larger than ``MAX_CONFIG_BYTES`` are refused. String values (in
    nested tables too) are read by :func:`parse_value`, as ``--set`` reads its values, so
    ``tensorboard: off``, ``device = "none"`` and ``steps_per_task: 1e5`` mean the same in
    a file as on the command line. ``what`` names the file in errors (``sweep file``)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"{what} {path} must end in .toml, .yaml or .yml, got {suffix!r}")
    raw = read_limited(path, what)
    try:
        if suffix == ".toml":
            data = tomllib.loads(raw.decode())
        else:
            import yaml

            data = yaml.safe_load(raw)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} {path} is not valid TOML: {e}") from None
    except Exception as e:  # yaml.YAMLError and its subclasses
        message = " ".join(str(e).split())
        raise ConfigError(f"{what} {path} is not valid YAML: {message}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of key = value, got {type(data).__name__}")
    bad = [str(k) for k in data if not isinstance(k, str) or not _KEY.match(k)]
    if bad:
        raise ConfigError(f"{path}: invalid key(s) {', '.join(map(repr, bad))}")
    return _parsed_strings(data)


def _parsed_strings(value: Any) -> Any:
    """``value`` with every string (in mappings and lists too) read by ``parse_value``."""
    if isinstance(value, str):
        return parse_value(value)
    if isinstance(value, Mapping):
        return {k: _parsed_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_parsed_strings(v) for v in value]
    return value


def merge(
    file_config: Mapping[str, Any] | None,
    set_items: Iterable[str],
    flags: Mapping[str, Any],
    stored: Mapping[str, Any] | None = None,
) -> RunConfig:
    """Merge the layers (defaults < ``stored`` < config file < ``--set`` < explicit
    ``flags``) and check the run keys. ``flags`` holds only the flags the user gave
    (``None`` values ignored); ``stored``: the run keys and options of the run being
    resumed, read from its directory (source ``"run-dir"``)."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("default", {k: v for k, v in RUN_DEFAULTS.items() if v is not None}),
        ("run-dir", stored or {}),
        ("config", file_config or {}),
    ]
    layers += [("--set", dict([parse_set(item)])) for item in set_items]
    layers.append(("flag", {k: v for k, v in flags.items() if v is not None}))
    for source, layer in layers:
        for key, value in layer.items():
            if value is None:  # `--set key=none` falls back to the default
                merged.pop(key, None)
                sources.pop(key, None)
                continue
            merged[key] = value
            sources[key] = source
    run = {k: merged.pop(k, default) for k, default in RUN_DEFAULTS.items()}
    if not run["suite"]:
        raise ConfigError("no suite given: pass --suite NAME or set suite in the --config file")
    for key in ("suite", "method", "preset"):
        if not isinstance(run[key], str):
            raise ConfigError(f"{key} must be a string, got {run[key]!r}")
    run["seed"] = check_seed(run["seed"])
    for key, check in (("num_envs", check_num_envs), ("seeds", check_seeds)):
        if run[key] is not None:
            run[key] = check(run[key])
    run_dir = run.pop("run_dir")
    return RunConfig(
        RunRequest(**run, overrides=merged), None if run_dir is None else str(run_dir), sources
    )


def check_names(options: Iterable[str], known: Mapping[str, Iterable[str]], context: str) -> None:
    """The one option-name check: ``UnknownOptionError`` for the first name of ``options``
    in no section of ``known`` (``{"job": names, "learner": names, ...}``), with the closest
    valid name and the valid ones by section. ``context`` names the run (``--suite X
    --learner L --method M``). Every entry point gets this same message."""
    valid = {name for names in known.values() for name in names}
    unknown = [k for k in options if k not in valid]
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, sorted(valid), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    sections = "; ".join(f"{s}: {', '.join(sorted(n))}" for s, n in known.items() if n)
    raise UnknownOptionError(f"unknown option {key!r}{hint}; valid for {context}: {sections}")


def keyword_defaults(
    func: Any, skip: tuple[str, ...] = (), refuses_others: bool = False
) -> dict[str, Any] | None:
    """The keywords of ``func`` (a suite builder) and their defaults (``None`` for none),
    or ``None`` when it forwards any keyword (``**kwargs``) and so cannot list them;
    ``refuses_others``: its ``**kwargs`` only collects names it refuses (MEAL's builder),
    so its named keywords are all it takes."""
    params = inspect.signature(func).parameters.values()
    if not refuses_others and any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return declared_keywords(func, skip)


def declared_keywords(func: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keywords ``func`` names and their defaults (``None`` for none), without those
    in ``skip``; the other keywords a ``**kwargs`` of it may take are not listed."""
    params = inspect.signature(func).parameters.values()
    return {
        p.name: None if p.default is p.empty else p.default
        for p in params
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in skip
    }


def argument_docs(func: Any) -> dict[str, str]:
    """Each argument's entry in the ``Args:`` section of ``func``'s docstring, its lines
    joined (``a / b: text`` and ``a, b: text`` document ``a`` and ``b``)."""
    docs: dict[str, str] = {}
    names: list[str] = []
    inside = False
    for line in (inspect.getdoc(func) or "").splitlines():
        if line.strip() == "Args:":
            inside = True
        elif inside and line.strip() and not line.startswith(" "):
            break
        elif inside and line.startswith("    ") and not line.startswith("     "):
            head, sep, text = line.strip().partition(": ")
            names = [n.strip() for n in head.replace(" / ", ",").split(",")] if sep else []
            for name in names:
                docs[name] = text.strip()
        elif inside and names and line.startswith("     "):
            for name in names:
                docs[name] += " " + line.strip()
    return docs
