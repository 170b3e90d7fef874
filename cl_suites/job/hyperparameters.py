"""A run's hyperparameters from the preset tables.

:func:`preset_settings` composes ``cl_suites.job.presets``' tables (data only) into the settings of
one suite x learner x method x preset: ``learner`` kwargs, ``method`` kwargs, ``num_envs``,
the policy options and the suite kwargs the preset sets (:func:`compose` for a suite known
by its catalog entry). :class:`Hyperparameters` is the result, frozen, as a run
specification holds it. The learner entries (``cl_suites.job.learners``) call them for the
run specification (``cl_suites.job.run_spec``); each wing routes a run's overrides into
them (``cl_suites.job.torch.options.route_overrides``, ``cl_suites.job.jax.entry``).
Imports no learner family.

All step counts are agent steps (MEAL: env steps).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from cl_suites.declarations import CL_METHODS, MEAL_METHODS, base_method
from cl_suites.errors import UnknownSuiteError
from cl_suites.job import presets
from cl_suites.suites import SUITES, find_suite, parse_suite_id

Values = dict[str, Any]
"""Values by name: a run's options, or :func:`preset_settings`'s settings (``learner``, ``method``,
``net_arch``, ...)."""

POLICY_OPTIONS: tuple[str, ...] = (
    "network",
    "net_arch",
    "activation",
    "cnn_features_dim",
    "ortho_init",
    "trunk_layer_norm",
    "normalize_images",
    "action_mask_mode",
    "previous_action_reward",
    "reward_clip",
    "reward_sign",
    "time_limit_terminal",
)
"""Top-level keys of ``preset_settings``' dict that a run may override."""


def suite_family(suite: str) -> str:
    """``"cora"``, ``"meal"`` or ``"diagnostic"`` for a suite name or id: its catalog
    entry's ``family`` (``"MEAL"``, the presets' key of every ``MEAL-<N>``, is MEAL's)."""
    if suite == "MEAL":
        return "meal"
    try:
        return find_suite(suite).family
    except UnknownSuiteError:
        cora = [name for name, info in SUITES.items() if info.family == "cora"]
        raise UnknownSuiteError(
            f"no preset for suite {suite!r}; presets exist for {', '.join(cora)}, "
            "Diagnostic, MEAL and MEAL-<N>"
        ) from None


def suite_name(suite: str) -> str:
    """``"CLSuite/Procgen6-v0"`` -> ``"Procgen6"`` (``cl_suites.suites.parse_suite_id``;
    the presets' key ``"MEAL"`` passes through)."""
    return suite if suite == "MEAL" else parse_suite_id(suite)


def _check_preset(preset: str) -> None:
    if preset not in presets.PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(presets.PRESETS)}")


FAMILY_NAMES: dict[str, str] = {
    "cora": "the CORA suites",
    "meal": "the MEAL suites (MEAL-<N>)",
    "diagnostic": "Diagnostic",
}
"""A suite family as an error message names it."""


def presets_for(family: str) -> tuple[str, ...]:
    """The presets a suite of ``family`` (``"cora"``, ``"meal"``, ``"diagnostic"``) takes."""
    return tuple(p for p in presets.PRESETS if family in presets.PRESET_FAMILIES.get(p, (family,)))


def _check_preset_family(preset: str, family: str, name: str) -> None:
    """A ``ValueError`` naming the presets ``name`` takes when ``preset`` is not for its
    ``family`` (``meal-authors`` is MEAL's only)."""
    if preset not in presets_for(family):
        allowed = " and ".join(FAMILY_NAMES[f] for f in presets.PRESET_FAMILIES[preset])
        raise ValueError(
            f"preset {preset!r} is for {allowed} only; presets for {name}: "
            f"{', '.join(presets_for(family))}"
        )


def _chores(name: str) -> bool:
    return name.startswith("CHORES")


def _cora_learner(name: str, learner: str, method: str, small: bool) -> dict[str, Any]:
    if learner == "ppo":
        out = copy.deepcopy(presets.SMALL_PPO if small else presets.CORA_PPO)
        return out
    out = copy.deepcopy(presets.SMALL_VTRACE if small else presets.CORA_VTRACE)
    if small:
        out["lr_schedule"] = "linear-per-task"
        return out
    if name == "MiniHack15":
        out.update(presets.CORA_MINIHACK_VTRACE)
    if _chores(name):
        out.update(presets.CORA_CHORES_VTRACE)
        if method in ("ewc", "online-ewc", "pnc"):
            out.update(presets.CORA_CHORES_EWC_VTRACE)
    return out


def _cora_method(name: str, method: str, small: bool) -> dict[str, Any]:
    out = copy.deepcopy(
        (presets.SMALL_CORA_METHODS if small else presets.CORA_METHODS).get(method, {})
    )
    if small:
        return out
    key = "CHORES" if _chores(name) else name
    if method == "clear" and key in presets.CORA_CLEAR_BUFFER:
        out["buffer_size"] = presets.CORA_CLEAR_BUFFER[key]
    if method == "pnc":
        out["progress_updates"] = presets.CORA_PROGRESS_UPDATES.get(key)
        if key == "CHORES":
            out["buffer_frames"] = presets.CORA_CHORES_PNC_BUFFER
    if method == "ewc" and key == "CHORES":
        out["min_task_steps"] = presets.CORA_CHORES_EWC_MIN_STEPS
    return out


def preset_settings(suite: str, learner: str, method: str, preset: str) -> dict[str, Any]:
    """The preset's settings of a run (before its overrides).

    Keys: ``learner`` (learner kwargs), ``method`` (method kwargs, ``variant`` included),
    ``num_envs``, the policy options of ``POLICY_OPTIONS`` (``network``, ``net_arch``,
    ``activation``, ``cnn_features_dim``, ``ortho_init``, ``trunk_layer_norm``,
    ``normalize_images``, ``action_mask_mode``, ``previous_action_reward``, ``reward_clip``,
    ``reward_sign``, ``time_limit_terminal``), ``multi_head``, ``task_id_input`` and
    ``suite_defaults``
    (suite kwargs the preset sets unless the run does).

    Raises ``ValueError`` for an unknown preset or learner, a suite without presets, and a
    method the suite's reference code does not run with that learner.
    """
    _check_preset(preset)
    if learner not in ("ppo", "vtrace"):
        raise ValueError(f"unknown learner {learner!r}; valid: ppo, vtrace")
    return compose(suite_family(suite), suite_name(suite), learner, method, preset)


def compose(family: str, name: str, learner: str, method: str, preset: str) -> dict[str, Any]:
    """:func:`preset_settings`' settings for a suite known by its catalog entry: ``family``
    (``"cora"``, ``"meal"``, ``"diagnostic"``), ``name`` its presets' key (``"MEAL"`` for
    every ``MEAL-<N>``), ``learner`` ``"ppo"`` or ``"vtrace"``. The values are checked by
    the caller (``preset_settings``; the run specification, which has the catalog entry).
    A method with a remedy (``ewc+redo``) takes its base method's values; the remedy's
    defaults are ``cl_suites.remedies.RemedyConfig``'s."""
    method = base_method(method)
    _check_preset_family(preset, family, name)
    small = preset == "small"
    if family == "meal":
        return _compose_meal(learner, method, preset)
    image = family == "cora"
    out: dict[str, Any] = {
        "learner": _cora_learner(name, learner, method, small),
        "method": _cora_method(name, method, small),
        "num_envs": presets.SMALL_NUM_ENVS if small else presets.CORA_NUM_ENVS,
        "network": presets.CORA_NETWORK.get(name, "shallow") if image else "mlp",
        "net_arch": [],
        "activation": "relu",
        "cnn_features_dim": None,
        "ortho_init": False,  # CORA's networks keep PyTorch's default init
        "trunk_layer_norm": False,
        "normalize_images": True,
        "action_mask_mode": "sampling",
        "previous_action_reward": True,
        "reward_clip": presets.CORA_REWARD_CLIP if image else None,
        "reward_sign": False,
        "time_limit_terminal": True,
        "multi_head": False,
        "task_id_input": False,
        "suite_defaults": {},
    }
    if learner == "ppo":  # CORA's PPO: a2c_ppo_acktr_gail's CNNBase, sign rewards
        out.update(
            num_envs=presets.SMALL_NUM_ENVS if small else presets.CORA_PPO_NUM_ENVS,
            network="a2c-ppo" if image else "mlp",
            ortho_init=True,
            previous_action_reward=False,
            reward_clip=None,
            reward_sign=image,
        )
    if name == "MiniHack15" and not small:
        out["reward_clip"] = None  # Table 4 (a): no clipping, running-std normalisation
    if _chores(name) and learner == "vtrace" and not small:
        out["num_envs"] = presets.CORA_CHORES_NUM_ENVS
    if family == "diagnostic":
        out.update(
            net_arch=[64],
            activation="tanh",
            time_limit_terminal=False,
            previous_action_reward=False,
        )
    if small:
        out.update(presets.SMALL_NET)
        if out.get("network") == "residual":
            out["network"] = "shallow"
        out["suite_defaults"] = dict(presets.SMALL_SUITE_OVERRIDES.get(name, presets.SMALL_SUITE))
        if family == "diagnostic":
            out["learner"]["lr_schedule"] = "constant"
    if not image:
        out["cnn_features_dim"] = None
    return out


def _compose_meal(learner: str, method: str, preset: str) -> dict[str, Any]:
    if learner != "ppo":
        raise ValueError(f"MEAL's baselines use IPPO (learner 'ppo'), got learner {learner!r}")
    if method not in MEAL_METHODS and method in CL_METHODS:  # own methods: their own defaults
        raise ValueError(f"unknown method {method!r} for MEAL; valid: {', '.join(MEAL_METHODS)}")
    small = preset == "small"
    authors = preset == "meal-authors"
    learner_kw = copy.deepcopy(presets.MEAL_PPO)
    methods = presets.SMALL_MEAL_METHODS if small else presets.MEAL_METHOD_VALUES
    if small:
        learner_kw.update({k: v for k, v in presets.SMALL_PPO.items() if k != "lr_schedule"})
        learner_kw["n_minibatches"] = 8
    if authors:
        learner_kw.update(presets.MEAL_AUTHORS_PPO)
    suite_defaults: dict[str, Any] = {}
    if small:
        suite_defaults = dict(presets.SMALL_SUITE_OVERRIDES["MEAL"])
    elif authors:
        suite_defaults = dict(presets.MEAL_AUTHORS_SUITE)
    return {
        "learner": learner_kw,
        "method": copy.deepcopy(methods.get(method, {})),
        "num_envs": presets.MEAL_AUTHORS_NUM_ENVS if authors else presets.MEAL_NUM_ENVS,
        "network": "mlp",
        "net_arch": list(presets.SMALL_NET["net_arch"] if small else presets.MEAL_NET_ARCH),
        "activation": "relu",
        "cnn_features_dim": None,
        "ortho_init": True,
        "trunk_layer_norm": True,
        # optax's Adam eps as SB3's default; fused: one kernel per step (same update)
        "optimizer_kwargs": {"eps": 1e-5, "fused": True},
        "normalize_images": False,  # counts and flags, not pixels
        "action_mask_mode": "sampling",
        "previous_action_reward": False,
        "reward_clip": None,
        "reward_sign": False,
        "time_limit_terminal": True,  # MEAL's done at 400 steps: no bootstrap
        "multi_head": True,
        "task_id_input": True,
        "suite_defaults": suite_defaults,
    }


def _read_only(value: Any) -> Any:
    """``value`` with every mapping inside it read-only (lists stay lists)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _read_only(v) for k, v in value.items()})
    return value


def _plain(value: Any) -> Any:
    """``value`` with every mapping inside it a ``dict`` again (JSON-ready)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return copy.deepcopy(value)


@dataclass(frozen=True)
class PolicyOptions:
    """The policy and env-wrapper options of a torch-learner run
    (``cl_suites.job.torch.options.OPTIONS``' ``policy`` section documents each; the
    preset's values after the run's overrides)."""

    network: str
    net_arch: list[int]
    activation: str
    cnn_features_dim: int | None
    ortho_init: bool
    trunk_layer_norm: bool
    normalize_images: bool
    action_mask_mode: str
    previous_action_reward: bool
    reward_clip: tuple[float, float] | list[float] | None
    reward_sign: bool
    time_limit_terminal: bool
    optimizer_kwargs: Mapping[str, Any] | None = None
    """Extra optimizer keywords (MEAL: Adam's ``eps``); not a run option."""


@dataclass(frozen=True)
class Hyperparameters(Mapping):
    """The resolved learner, method and policy settings of a run, frozen.

    Attributes:
        learner: the learner's constructor keywords (``n_steps`` and other step counts in
            agent steps; MEAL: env steps); ``ppo-jax``: every ``IPPOConfig`` field.
        method: the CL method's keywords (``variant`` included; ``ppo-jax``: empty, its
            CL settings are ``IPPOConfig`` fields).
        policy: ``PolicyOptions`` (``None`` for ``ppo-jax``, whose network settings are
            ``IPPOConfig`` fields).
        num_envs: the preset's number of envs (the run's is ``JobSpec.num_envs``).
        multi_head / task_id_input: the preset's policy heads and task-id input.
        suite_defaults: suite options the preset sets unless the run does.

    Also a read-only mapping with ``hyperparameters.preset_settings``'s keys (``hp["learner"]``,
    ``hp["net_arch"]``, ...), what the learner factory and the env wrappers read.
    """

    learner: Mapping[str, Any]
    method: Mapping[str, Any]
    policy: PolicyOptions | None
    num_envs: int
    multi_head: bool
    task_id_input: bool
    suite_defaults: Mapping[str, Any]

    @classmethod
    def from_dict(cls, hp: Mapping[str, Any]) -> Hyperparameters:
        """Freeze the dict of ``hyperparameters.preset_settings`` (after the overrides)."""
        fields = {f.name for f in dataclasses.fields(PolicyOptions)}
        policy = {k: _read_only(v) for k, v in hp.items() if k in fields}
        return cls(
            learner=_read_only(hp["learner"]),
            method=_read_only(hp["method"]),
            policy=PolicyOptions(**policy) if policy else None,
            num_envs=int(hp["num_envs"]),
            multi_head=bool(hp["multi_head"]),
            task_id_input=bool(hp["task_id_input"]),
            suite_defaults=_read_only(hp["suite_defaults"]),
        )

    def __post_init__(self) -> None:
        # the JSON-ready copy, made once with the settings (they are frozen)
        object.__setattr__(self, "_plain_items", _plain(self._items))

    @cached_property
    def _items(self) -> dict[str, Any]:
        """The mapping view, built once (the fields are frozen)."""
        policy = {}
        if self.policy is not None:
            policy = {f.name: getattr(self.policy, f.name) for f in dataclasses.fields(self.policy)}
            if policy["optimizer_kwargs"] is None:
                del policy["optimizer_kwargs"]
        return {
            "learner": self.learner,
            "method": self.method,
            "num_envs": self.num_envs,
            **policy,
            "multi_head": self.multi_head,
            "task_id_input": self.task_id_input,
            "suite_defaults": self.suite_defaults,
        }

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready data (``dict`` copies)."""
        return copy.deepcopy(self._plain_items)
