"""What restores plasticity: the remedies' names, their settings and how a ``--method``
names one (issue 54). Plain data, no torch, no JAX: both learner families read it.

A remedy changes the network to keep it trainable; it is not a regulariser, so it rides
on one: ``--method redo`` is fine-tuning with ReDo, ``--method ewc+redo`` EWC with ReDo
(:func:`split_method`). The torch learners run it through
``baselines_sb3.remedies`` (and ``baselines_sb3.cl.remedy.RemedyMethod``), ``ppo-jax``
through ``baselines_jax.remedies``; one ledger covers both (``docs/fidelity.md``,
"Plasticity remedies").

Units: an *update* is one PPO/V-trace update on one rollout; a *minibatch* one optimizer
step; ``cbp_maturity`` counts minibatches (generate-and-test runs after every optimizer
step, as ``lop/algos/rl/ppo.py`` calls it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from cl_suites.errors import ConfigError

REMEDIES: tuple[str, ...] = ("redo", "shrink-perturb", "cbp", "reset", "plasticity-injection")
"""The remedies, as ``--method`` names them."""

REMEDY_BASES: tuple[str, ...] = ("ft", "ewc", "online-ewc", "l2", "mas")
"""The methods a remedy composes with (``ewc+redo``): the regularisers and fine-tuning.
P&C and CLEAR change the network or the update themselves and are refused."""

COMPOSE = "+"


def split_method(name: str) -> tuple[str, str | None]:
    """``(base method, remedy or None)`` of a ``--method`` name: ``"redo"`` ->
    ``("ft", "redo")``, ``"ewc+redo"`` -> ``("ewc", "redo")``, ``"ewc"`` -> ``("ewc",
    None)``. Own methods (``package.module:Class``) pass through unchanged.

    Raises:
        ConfigError: an unknown remedy or base, or more than one ``+``; one line naming
            the value and the allowed ones.
    """
    if ":" in name:
        return name, None
    if name in REMEDIES:
        return "ft", name
    if COMPOSE not in name:
        return name, None
    parts = name.split(COMPOSE)
    if len(parts) != 2:
        raise ConfigError(
            f"method {name!r} composes more than two parts; use BASE+REMEDY with BASE one of "
            f"{', '.join(REMEDY_BASES)} and REMEDY one of {', '.join(REMEDIES)}"
        )
    base, remedy = parts
    if remedy not in REMEDIES:
        raise ConfigError(
            f"method {name!r}: unknown remedy {remedy!r}; valid: {', '.join(REMEDIES)}"
        )
    if base not in REMEDY_BASES:
        raise ConfigError(
            f"method {name!r}: remedy {remedy!r} composes with {', '.join(REMEDY_BASES)}, "
            f"not with {base!r}"
        )
    return base, remedy


def compose(base: str, remedy: str | None) -> str:
    """The ``--method`` name of ``base`` with ``remedy`` (inverse of :func:`split_method`)."""
    if remedy is None:
        return base
    return remedy if base == "ft" else f"{base}{COMPOSE}{remedy}"


def method_names(bases: tuple[str, ...]) -> tuple[str, ...]:
    """Every ``--method`` name a learner that runs ``bases`` and every remedy accepts: the
    bases, the remedies (on ``ft``), then each composable base with each remedy."""
    composed = tuple(
        compose(b, r) for b in bases if b in REMEDY_BASES and b != "ft" for r in REMEDIES
    )
    return (*bases, *(REMEDIES if "ft" in bases else ()), *composed)


@dataclass(frozen=True)
class OptionRule:
    """What a remedy option's value must be: ``kind`` ``"float"``, ``"int"``, ``"bool"``
    or ``"choice"``; numbers within ``low`` / ``high`` (``*_open``: the bound excluded);
    ``none_ok``: ``None`` allowed. The job turns it into its ``Opt``
    (``cl_suites.job.run_spec``), so every way to start a run checks it before anything is
    built."""

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    none_ok: bool = False


def _option(remedy: str | None, default: Any, rule: OptionRule | None, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc, "remedy": remedy, "rule": rule})


_UNIT_OPEN = OptionRule("float", 0.0, 1.0, True, True)


@dataclass(frozen=True)
class RemedyConfig:
    """The settings of every remedy (only the chosen remedy's are read). Defaults are
    Plasticine's (``RLE-Foundation/Plasticine@aa00b4b``) where it has the remedy, else the
    original paper's code; each is a row of the ledger."""

    remedy: str | None = _option(
        None, None, None, "Which remedy runs (one of REMEDIES; None: none). Set by --method."
    )
    redo_tau: float = _option(
        "redo", 0.025, _UNIT_OPEN, "ReDo: a unit is dormant when its normalised score is <= tau"
    )
    redo_every: int | None = _option(
        "redo",
        None,
        OptionRule("int", low=1, none_ok=True),
        "ReDo: updates between recycles; none: a tenth of a task's updates (Plasticine)",
    )
    redo_reset_moments: bool = _option(
        "redo",
        True,
        OptionRule("bool"),
        "ReDo: zero the Adam moments of recycled weights (ReDo's code; Plasticine does not)",
    )
    snp_shrink: float = _option(
        "shrink-perturb",
        0.999999,
        OptionRule("float", 0.0, 1.0, low_open=True),
        "shrink-and-perturb: the factor the weights are multiplied by",
    )
    snp_perturb: float | None = _option(
        "shrink-perturb",
        None,
        OptionRule("float", 0.0, 1.0, high_open=True, none_ok=True),
        "shrink-and-perturb: the factor of the added initialisation; none: 1 - snp_shrink "
        "(Plasticine)",
    )
    snp_every: str = _option(
        "shrink-perturb",
        "minibatch",
        OptionRule("choice", choices=("minibatch", "task")),
        "shrink-and-perturb: after every optimizer step (Plasticine) or at each task switch",
    )
    snp_noise: str = _option(
        "shrink-perturb",
        "initial",
        OptionRule("choice", choices=("initial", "fresh")),
        "shrink-and-perturb: add the initial weights (Plasticine) or a fresh draw (Ash & Adams)",
    )
    cbp_replacement_rate: float = _option(
        "cbp",
        1e-4,
        _UNIT_OPEN,
        "continual backprop: fraction of mature units replaced per optimizer step",
    )
    cbp_maturity: int = _option(
        "cbp",
        10000,
        OptionRule("int", low=1),
        "continual backprop: optimizer steps a unit lives before it can be replaced",
    )
    cbp_decay: float = _option(
        "cbp", 0.99, _UNIT_OPEN, "continual backprop: decay of the running utility"
    )
    cbp_reset_moments: bool = _option(
        "cbp",
        False,
        OptionRule("bool"),
        "continual backprop: zero the Adam moments of replaced weights (the paper's RL code "
        "does not: it steps torch's Adam, which GnT leaves alone)",
    )
    reset_layers: str = _option(
        "reset",
        "heads",
        OptionRule("choice", choices=("heads", "all")),
        "reset: what is re-initialised at each task switch (Plasticine: the output heads)",
    )
    injection_at: str = _option(
        "plasticity-injection",
        "mid-and-end",
        OptionRule("choice", choices=("mid-and-end", "end", "mid")),
        "plasticity injection: in the middle of each task and/or at its end (Plasticine: both)",
    )

    def __post_init__(self) -> None:
        check(self)

    @property
    def enabled(self) -> bool:
        return self.remedy is not None

    def redo_period(self, updates_per_task: int) -> int:
        """Updates between ReDo recycles: ``redo_every``, or Plasticine's
        ``num_iterations // 10`` (at least 1)."""
        if self.redo_every is not None:
            return int(self.redo_every)
        return max(1, int(updates_per_task) // 10)

    def injection_updates(self, updates_per_task: int) -> tuple[int, ...]:
        """The 1-based update counts within a task after which plasticity is injected in
        the middle of the task (Plasticine: ``iteration == num_iterations // 2``)."""
        if self.injection_at == "end":
            return ()
        return (max(1, int(updates_per_task) // 2),)

    @property
    def perturb(self) -> float:
        """Shrink-and-perturb's factor of the added weights: ``snp_perturb``, or
        Plasticine's ``1 - shrink`` (``perturb_p = 1.0 - shrink_p``)."""
        return 1.0 - self.snp_shrink if self.snp_perturb is None else float(self.snp_perturb)

    @property
    def injects_at_end(self) -> bool:
        return self.injection_at in ("mid-and-end", "end")


_OPTION_FIELDS = tuple(f for f in fields(RemedyConfig) if f.name != "remedy")

OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in _OPTION_FIELDS)
"""The remedy options a run takes (``--set redo_tau=0.1``), beside the learner's own."""

OPTION_REMEDY: dict[str, str] = {f.name: f.metadata["remedy"] for f in _OPTION_FIELDS}
"""Each option's remedy (``redo_tau`` -> ``redo``)."""

OPTION_RULES: dict[str, OptionRule] = {f.name: f.metadata["rule"] for f in _OPTION_FIELDS}
"""What each option's value must be."""


def option_docs() -> dict[str, str]:
    """``{option: its one-line doc}``."""
    return {f.name: f.metadata["doc"] for f in _OPTION_FIELDS}


def describe(rule: OptionRule) -> str:
    """``rule`` in words (``a number in (0, 1)``, ``one of 'heads', 'all'``)."""
    if rule.kind == "bool":
        text = "true or false"
    elif rule.kind == "choice":
        text = "one of " + ", ".join(map(repr, rule.choices))
    else:
        what = "an integer" if rule.kind == "int" else "a number"
        lo, hi = "(" if rule.low_open else "[", ")" if rule.high_open else "]"
        if rule.low is not None and rule.high is not None:
            text = f"{what} in {lo}{rule.low:g}, {rule.high:g}{hi}"
        elif rule.low is not None:
            text = f"{what} {'>' if rule.low_open else '>='} {rule.low:g}"
        else:
            text = what
    return text + (" or none" if rule.none_ok else "")


def _fits(rule: OptionRule, value: Any) -> bool:
    if value is None:
        return rule.none_ok
    if rule.kind == "bool":
        return isinstance(value, bool)
    if rule.kind == "choice":
        return value in rule.choices
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if rule.kind == "int" and value != int(value):
        return False
    if rule.low is not None and (value <= rule.low if rule.low_open else value < rule.low):
        return False
    return not (
        rule.high is not None and (value >= rule.high if rule.high_open else value > rule.high)
    )


def check(cfg: RemedyConfig) -> None:
    """``ConfigError`` (one line: the option, what it must be, the value) for a setting out
    of its rule, before anything is built."""
    if cfg.remedy is not None and cfg.remedy not in REMEDIES:
        raise ConfigError(f"unknown remedy {cfg.remedy!r}; valid: {', '.join(REMEDIES)}")
    for name, rule in OPTION_RULES.items():
        value = getattr(cfg, name)
        if not _fits(rule, value):
            raise ConfigError(f"option {name!r} must be {describe(rule)}; got {value!r}")


def check_options_for(remedy: str | None, names: Iterable[str]) -> None:
    """``ConfigError`` for a remedy option given to a run without that remedy (one line:
    the option, its remedy, how to choose it)."""
    for name in names:
        owner = OPTION_REMEDY.get(name)
        if owner is None or owner == remedy:
            continue
        now = f"remedy {remedy!r}" if remedy else "no remedy"
        raise ConfigError(
            f"option {name!r} belongs to the remedy {owner!r}, and the run has {now}; choose "
            f"it with --method {owner} or --method BASE+{owner}"
        )


def remedy_config(remedy: str | None, options: dict[str, Any] | None = None) -> RemedyConfig:
    """The :class:`RemedyConfig` of ``remedy`` with ``options`` (remedy option names only;
    ``ConfigError`` for another name)."""
    options = dict(options or {})
    unknown = sorted(k for k in options if k not in OPTION_NAMES)
    if unknown:
        raise ConfigError(
            f"unknown remedy option(s) {', '.join(map(repr, unknown))}; valid: "
            f"{', '.join(OPTION_NAMES)}"
        )
    return RemedyConfig(remedy=remedy, **options)


def as_dict(cfg: RemedyConfig) -> dict[str, Any]:
    """The settings as plain data (``metadata.json``, checkpoints)."""
    return dataclasses.asdict(cfg)
