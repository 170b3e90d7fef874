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
from dataclasses import dataclass, field, fields
from typing import Any, Literal

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


def _option(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class RemedyConfig:
    """The settings of every remedy (only the chosen remedy's are read). Defaults are
    Plasticine's (``RLE-Foundation/Plasticine@aa00b4b``) where it has the remedy, else the
    original paper's code; each is a row of the ledger."""

    remedy: str | None = _option(
        None, "Which remedy runs (one of :data:`REMEDIES`; ``None``: none). Set by ``--method``."
    )
    redo_tau: float = _option(
        0.025, "ReDo: a unit is dormant when its normalised score is <= tau, tau in (0, 1)."
    )
    redo_every: int | None = _option(
        None, "ReDo: updates between recycles; ``None``: a tenth of a task's updates (Plasticine)."
    )
    redo_reset_moments: bool = _option(
        True, "ReDo: zero the Adam moments of recycled weights (ReDo's code; Plasticine does not)."
    )
    snp_shrink: float = _option(
        0.999999, "Shrink-and-perturb: the factor the weights are multiplied by, in (0, 1]."
    )
    snp_perturb: float = _option(
        1e-6, "Shrink-and-perturb: the factor of the added initialisation, in [0, 1)."
    )
    snp_every: Literal["minibatch", "task"] = _option(
        "minibatch",
        "Shrink-and-perturb: after every optimizer step (Plasticine) or at each task switch.",
    )
    snp_noise: Literal["initial", "fresh"] = _option(
        "initial",
        "Shrink-and-perturb: add the initial weights (Plasticine) or a fresh draw (Ash & Adams).",
    )
    cbp_replacement_rate: float = _option(
        1e-4, "Continual backprop: mature units replaced per optimizer step, a fraction in (0, 1)."
    )
    cbp_maturity: int = _option(
        10000, "Continual backprop: optimizer steps a unit lives before it can be replaced."
    )
    cbp_decay: float = _option(0.99, "Continual backprop: decay of the running utility, in (0, 1).")
    reset_layers: Literal["heads", "all"] = _option(
        "heads", "Reset: what is re-initialised at each task switch (Plasticine: the output heads)."
    )
    injection_at: Literal["mid-and-end", "end", "mid"] = _option(
        "mid-and-end",
        "Plasticity injection: in the middle of each task and/or at its end (Plasticine: both).",
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
    def injects_at_end(self) -> bool:
        return self.injection_at in ("mid-and-end", "end")


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RemedyConfig) if f.name != "remedy")
"""The remedy options a run takes (``--set redo_tau=0.1``), beside the learner's own."""


def option_docs() -> dict[str, str]:
    """``{option: its one-line doc}``."""
    return {f.name: f.metadata["doc"] for f in fields(RemedyConfig) if f.name != "remedy"}


def _range(name: str, value: Any, low: float, high: float, low_open: bool, high_open: bool):
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):
        raise ConfigError(f"option {name!r} must be in {lo}{low:g}, {high:g}{hi}; got {value!r}")


def check(cfg: RemedyConfig) -> None:
    """``ConfigError`` (one line: the option, its allowed range, the value) for a setting
    out of range, before anything is built."""
    if cfg.remedy is not None and cfg.remedy not in REMEDIES:
        raise ConfigError(f"unknown remedy {cfg.remedy!r}; valid: {', '.join(REMEDIES)}")
    _range("redo_tau", cfg.redo_tau, 0.0, 1.0, True, True)
    if cfg.redo_every is not None and (isinstance(cfg.redo_every, bool) or cfg.redo_every < 1):
        raise ConfigError(
            f"option 'redo_every' (updates between recycles) must be an integer >= 1 or none; "
            f"got {cfg.redo_every!r}"
        )
    _range("snp_shrink", cfg.snp_shrink, 0.0, 1.0, True, False)
    _range("snp_perturb", cfg.snp_perturb, 0.0, 1.0, False, True)
    _range("cbp_replacement_rate", cfg.cbp_replacement_rate, 0.0, 1.0, True, True)
    _range("cbp_decay", cfg.cbp_decay, 0.0, 1.0, True, True)
    if isinstance(cfg.cbp_maturity, bool) or cfg.cbp_maturity < 1:
        raise ConfigError(
            f"option 'cbp_maturity' (optimizer steps) must be an integer >= 1; "
            f"got {cfg.cbp_maturity!r}"
        )
    for name, allowed in (
        ("snp_every", ("minibatch", "task")),
        ("snp_noise", ("initial", "fresh")),
        ("reset_layers", ("heads", "all")),
        ("injection_at", ("mid-and-end", "end", "mid")),
    ):
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(
                f"option {name!r} must be one of {', '.join(map(repr, allowed))}; got {value!r}"
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
