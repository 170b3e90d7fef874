"""The entry of the JAX IPPO learner (``ppo-jax``, package ``baselines_jax``): its name,
what it runs, its settings taken from the one preset table, its options and its job.

``ppo-jax`` is MEAL's default learner; ``ppo`` (SB3/torch ``ContinualPPO``) computes the
same algorithm. Both read their values from ``cl_suites.job.presets`` (one ledger,
``docs/fidelity.md``): :func:`jax_settings` translates the torch learner's resolved
settings, field by field, into ``baselines_jax.IPPOConfig`` keyword arguments
(``TORCH_TO_JAX``), so a preset change moves both learners. A run's overrides use the
``IPPOConfig`` field names (``--set clip_eps=0.1``); the torch learner's names are refused
on ``ppo-jax`` and the JAX names on ``ppo``, with the valid ones listed, before anything
compiles.

Nothing here imports JAX at module level (:func:`jax_api` imports ``baselines_jax`` on
first use), nor torch or stable-baselines3 at all: a ``ppo-jax`` run loads neither.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cl_suites.declarations import (
    IMPORTANCE_MODES,
    JAX_LEARNER,
    MAPPO_METHODS,
    MEAL_METHODS,
    MEAL_NETWORKS,
    is_builtin_method,
)
from cl_suites.errors import MethodPluginError, UnknownOptionError
from cl_suites.job import hyperparameters
from cl_suites.job.hyperparameters import POLICY_OPTIONS, Values
from cl_suites.job.option_specs import BOOL as _BOOL
from cl_suites.job.option_specs import UNIT as _UNIT
from cl_suites.job.option_specs import Opt, Option
from cl_suites.job.option_specs import choice as _choice
from cl_suites.job.option_specs import integer as _int
from cl_suites.job.option_specs import number as _num
from cl_suites.remedies import OPTION_NAMES as REMEDY_OPTIONS
from cl_suites.remedies import RemedyConfig, as_dict, split_method

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from cl_suites.job.run_spec import JobSpec
    from cl_suites.suites import SuiteInfo

_L = "learner"
OPTIONS: dict[str, Option] = {
    "anneal_lr": Option(_L, _BOOL, "linear learning-rate decay over each task"),
    "num_steps": Option(_L, _int(), "rollout length per env (env steps)"),
    "update_epochs": Option(_L, _int(), "PPO epochs per rollout"),
    "num_minibatches": Option(_L, _int(), "PPO minibatches per epoch"),
    "clip_eps": Option(_L, _num(0.0, low_open=True), "PPO clip"),
    "adam_eps": Option(_L, _num(0.0, low_open=True), "Adam epsilon"),
    "hidden_sizes": Option(_L, Opt("int-list", low=1), "hidden layer sizes of actor and critic"),
    "layer_norm": Option(_L, _BOOL, "layer norm in the trunk"),
    "network": Option(
        _L,
        Opt("choice", choices=MEAL_NETWORKS, none_ok=True),
        "MEAL's MLP: norms after every layer (mlp) or the first (mlp-packnet); none: the method's",
    ),
    "shared_backbone": Option(_L, _BOOL, "one trunk for actor and critic"),
    "reg_coef": Option(_L, _num(none_ok=True), "CL regularisation strength"),
    "ewc_decay": Option(_L, _UNIT, "decay of the running importance (online EWC)"),
    "importance_episodes": Option(_L, _int(), "fresh episodes of the importance estimate"),
    "importance_steps": Option(_L, _int(), "steps per importance episode"),
    "normalize_importance": Option(_L, _BOOL, "divide the importance by its mean"),
    "importance_mode": Option(
        _L,
        Opt("choice", choices=IMPORTANCE_MODES, none_ok=True),
        "how a task's importance joins the old one (EWC, MAS)",
    ),
    "agem_memory_size": Option(_L, _int(), "AGEM/ER-ACE memory (transitions, all tasks)"),
    "agem_sample_size": Option(_L, _int(), "AGEM/ER-ACE memory transitions per gradient"),
    "er_ace_coef": Option(_L, _num(0.0), "weight of ER-ACE's replayed gradient"),
    "packnet_finetune_steps": Option(_L, _int(0), "PackNet fine-tuning per task (env steps)"),
}
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "importance_mode": ("ewc", "online-ewc", "mas"),
    "agem_memory_size": ("agem", "er-ace"),
    "agem_sample_size": ("agem", "er-ace"),
    "er_ace_coef": ("er-ace",),
    "packnet_finetune_steps": ("packnet",),
}
"""Options only some CL methods read -> those methods (another method refuses them)."""
"""The options of ``ppo-jax`` that are not the torch learner's (its ``IPPOConfig`` fields
with a declared type; the others keep the torch learner's declarations through
``TORCH_TO_JAX``): section, type and range, one-line doc."""

TORCH_TO_JAX: dict[str, str] = {
    # learner (cl_suites.job.presets.MEAL_PPO / SMALL_PPO)
    "learning_rate": "learning_rate",
    "n_steps": "num_steps",
    "n_epochs": "update_epochs",
    "n_minibatches": "num_minibatches",
    "gamma": "gamma",
    "gae_lambda": "gae_lambda",
    "clip_range": "clip_eps",
    "ent_coef": "ent_coef",
    "vf_coef": "vf_coef",
    "max_grad_norm": "max_grad_norm",
    "advantage_normalization": "advantage_normalization",
    # policy
    "net_arch": "hidden_sizes",
    "activation": "activation",
    "trunk_layer_norm": "layer_norm",
    "multi_head": "multi_head",
    "task_id_input": "task_id_input",
    # method (cl_suites.job.presets.MEAL_METHOD_VALUES)
    "lam": "reg_coef",
    "decay": "ewc_decay",
    "episodes": "importance_episodes",
    "max_steps": "importance_steps",
}
"""Torch setting -> ``IPPOConfig`` field. A setting whose field ``IPPOConfig`` lacks keeps
the JAX learner's own default (``jax_fields`` lists what it has)."""

JAX_ONLY_JOB_OPTIONS: tuple[str, ...] = ()
"""Job options only the JAX learner takes (none yet)."""
TORCH_ONLY_JOB_OPTIONS: tuple[str, ...] = (
    "device",
    "device_observations",
    "torch_threads",
    "update_threads",
    "vectorization_mode",
    "replay_on_disk",
)
"""Job options of the torch learner that mean nothing to ``ppo-jax`` (JAX picks its device
from ``JAX_PLATFORMS``; MEAL's envs are always batched in JAX)."""

_API: Any = None


def jax_api() -> Any:
    """The ``baselines_jax`` module (``IPPOConfig``, ``JaxIPPO``), imported on first use."""
    global _API
    if _API is None:
        _API = importlib.import_module("baselines_jax")
    return _API


def jax_fields(config_type: str = "IPPOConfig") -> tuple[str, ...]:
    """The field names of ``baselines_jax``'s ``config_type``: the options its learner
    accepts (``IPPOConfig``: ``ppo-jax``'s)."""
    return tuple(f.name for f in dataclasses.fields(getattr(jax_api(), config_type)))


def lr_anneal(schedule: str) -> bool:
    """Torch ``lr_schedule`` -> ``anneal_lr`` (linear decay over each task, or constant)."""
    if schedule not in ("linear-per-task", "constant"):
        raise ValueError(
            f"learner {JAX_LEARNER!r} anneals the learning rate per task or keeps it "
            f"constant; got lr_schedule {schedule!r}"
        )
    return schedule == "linear-per-task"


def jax_settings(
    torch_hp: dict[str, Any], method: str, config_type: str = "IPPOConfig"
) -> dict[str, Any]:
    """``config_type`` keyword arguments equal to the torch learner's resolved settings.

    Args:
        torch_hp: ``hyperparameters.preset_settings("MEAL", "ppo", method, preset)``.
        method: the CL method (``ft``, ``ewc``, ``online-ewc``, ``mas``, ``l2``).
        config_type: the ``baselines_jax`` config (``IPPOConfig``, ``MAPPOConfig``).

    Returns every field of the config: the preset's value where the torch settings
    have one, else the field's default; ``cl_method`` is ``method``.
    """
    config = getattr(jax_api(), config_type)
    values = {
        f.name: f.default
        for f in dataclasses.fields(config)
        if f.default is not dataclasses.MISSING
    }
    for f in dataclasses.fields(config):
        if f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    sources = {**torch_hp, **torch_hp["learner"], **torch_hp["method"]}
    for torch_key, jax_key in TORCH_TO_JAX.items():
        if jax_key in values and torch_key in sources:
            values[jax_key] = sources[torch_key]
    if "anneal_lr" in values and "lr_schedule" in torch_hp["learner"]:
        values["anneal_lr"] = lr_anneal(torch_hp["learner"]["lr_schedule"])
    for key, value in torch_hp["method"].items():  # MEAL's post-paper methods: JAX names
        if key in values and key not in TORCH_TO_JAX.values():
            values[key] = value
    base, remedy = split_method(method)
    if "cl_method" in values:
        values["cl_method"] = base
    if "remedy" in values:
        values["remedy"] = {"remedy": remedy}
    return values


def make_config(values: dict[str, Any], config_type: str = "IPPOConfig") -> Any:
    """``config_type(**values)`` (``baselines_jax``'s ``IPPOConfig`` or ``MAPPOConfig``),
    lists (from JSON, TOML or ``--set``) as tuples."""
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if isinstance(fixed.get("remedy"), Mapping):  # plain data in the run's settings
        fixed["remedy"] = RemedyConfig(**fixed["remedy"])
    return getattr(jax_api(), config_type)(**fixed)


def torch_only_options(torch_hp: dict[str, Any], config_type: str = "IPPOConfig") -> set[str]:
    """Option names that belong to the torch learner (its preset's learner, method and
    policy settings, its job options) and are not fields of ``config_type``."""
    names = set(torch_hp["learner"]) | set(torch_hp["method"]) | set(POLICY_OPTIONS)
    names |= set(TORCH_TO_JAX) | set(TORCH_ONLY_JOB_OPTIONS)
    return names - set(jax_fields(config_type))


def route_jax_overrides(
    values: dict[str, Any],
    overrides: dict[str, Any],
    torch_only: set[str],
    learner: str = JAX_LEARNER,
) -> dict[str, Any]:
    """Move the config fields of ``overrides`` into ``values`` (in place); return the rest
    (suite kwargs). A torch learner option raises ``ValueError`` naming it and the options
    ``learner`` takes."""
    rest: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in values:
            values[key] = value
        elif key in torch_only:
            raise UnknownOptionError(
                f"option {key!r} belongs to the torch learner 'ppo', not to learner "
                f"{learner!r}; valid {learner} options: {', '.join(sorted(values))} "
                "(or run with --learner ppo)"
            )
        else:
            rest[key] = value
    return rest


def check_no_jax_options(overrides: dict[str, Any], learner: str) -> None:
    """``ValueError`` when a torch run of MEAL is given an ``IPPOConfig``-only option: a
    field of ``IPPOConfig`` that is neither a torch setting it translates, nor a policy
    option, nor an option the torch learner declares (``torch_names``)."""
    from cl_suites.job.learners import load_learner

    shared = set(load_learner(learner).options()) | set(POLICY_OPTIONS) | set(TORCH_TO_JAX)
    jax_only = sorted(k for k in overrides if k in set(jax_fields()) - shared)
    if jax_only:
        raise UnknownOptionError(
            f"option(s) {', '.join(map(repr, jax_only))} belong to learner {JAX_LEARNER!r}, "
            f"not to learner {learner!r}; run with --learner {JAX_LEARNER} or use the torch "
            f"names ({', '.join(f'{t}={j}' for t, j in TORCH_TO_JAX.items() if j in jax_only)})"
        )


@dataclass(frozen=True)
class JaxLearner:
    """The learner entry of ``ppo-jax`` (``cl_suites.job.learners.LearnerEntry``): MEAL's
    JAX IPPO (``baselines_jax.JaxIPPO``), trained by this wing's job
    (``cl_suites.job.jax.train``: several seeds in one program); its settings are the torch
    ``ppo`` preset's, translated (``jax_settings``)."""

    name: str = JAX_LEARNER
    suites: tuple[str, ...] = ("meal",)
    methods: tuple[str, ...] | None = MEAL_METHODS
    own_methods: bool = False
    seed_groups: bool = True
    preset: str = "ppo"
    refused_job_options: tuple[str, ...] = TORCH_ONLY_JOB_OPTIONS
    config_type: str = "IPPOConfig"
    """Its settings: this ``baselines_jax`` config class."""
    learner_type: str = "JaxIPPO"
    """Its learner: this ``baselines_jax`` class (``JaxIPPO``'s API)."""
    pairs_agents: bool = True
    """One agent's policy can play beside another run's agent (MEAL's coordination
    matrix); not for a central critic's agents (their own ids, every agent's rows)."""
    own_options: tuple[tuple[str, Option], ...] = ()
    """Options of its config's own fields, beside :data:`OPTIONS`."""
    own_values: tuple[tuple[str, Any], ...] = ()
    """``(field, value)`` pairs over the translated preset, under every preset but
    ``small`` (MAPPO: MEAL 057f862's on-policy values, as ``MAPPOConfig``'s defaults);
    ``num_envs`` among them sets the run's envs."""

    def options(self) -> Mapping[str, Option]:
        """:data:`OPTIONS` and the ``IPPOConfig`` fields named like the torch learner's,
        declared with ``IPPOConfig``'s own choices."""
        config = importlib.import_module("baselines_jax.config")
        shared = {
            "learning_rate": Option(_L, _num(0.0, 1.0, low_open=True), "Adam step size"),
            "gamma": Option(_L, _UNIT, "discount"),
            "gae_lambda": Option(_L, _UNIT, "GAE lambda"),
            "ent_coef": Option(_L, _num(), "entropy bonus coefficient"),
            "vf_coef": Option(_L, _num(), "value loss coefficient"),
            "max_grad_norm": Option(_L, _num(0.0, low_open=True), "gradient clipping norm"),
            "activation": Option(_L, _choice(config.ACTIVATIONS), "hidden activation"),
            "advantage_normalization": Option(
                _L, _choice(config.ADVANTAGE_NORMALIZATIONS), "minibatch-biased or none"
            ),
        }
        return {**shared, **OPTIONS, **dict(self.own_options)}

    def settings(
        self, suite: SuiteInfo, method: str, preset: str, job: Values, overrides: Values
    ) -> tuple[Values, Values]:
        """``(hp, suite overrides)``: ``hp["learner"]`` holds every ``IPPOConfig`` field
        (the ``ppo`` preset's values translated, then the run's overrides)."""
        hp = hyperparameters.compose(suite.family, suite.preset_key, self.preset, method, preset)
        torch_job = sorted(k for k in job if k in TORCH_ONLY_JOB_OPTIONS)
        if torch_job:
            raise ValueError(
                f"option(s) {', '.join(map(repr, torch_job))} belong to the torch learner "
                f"'ppo', not to learner {JAX_LEARNER!r}; run with --learner ppo or drop them"
            )
        torch_only = torch_only_options(hp, self.config_type)
        values = jax_settings(hp, method, self.config_type)
        num_envs = hp["num_envs"]
        if preset != "small":
            own = dict(self.own_values)
            num_envs = own.pop("num_envs", num_envs)
            values.update(own)
        for owned in ("cl_method", "remedy"):
            if owned in overrides:
                raise ValueError(f"set the {owned} with --method, not with the option {owned}")
        if "remedy" in values:  # the remedy's options, under its settings
            chosen = {k: overrides.pop(k) for k in list(overrides) if k in REMEDY_OPTIONS}
            defaults = as_dict(RemedyConfig(remedy=values["remedy"]["remedy"]))
            values["remedy"] = {**defaults, **chosen}
        base = split_method(method)[0]
        foreign = sorted(k for k in overrides if base not in METHOD_OPTIONS.get(k, (base,)))
        if foreign:
            raise ValueError(
                f"option(s) {', '.join(map(repr, foreign))} mean nothing to method {base!r}: "
                + "; ".join(f"{k} is read by {', '.join(METHOD_OPTIONS[k])}" for k in foreign)
            )
        overrides = route_jax_overrides(values, overrides, torch_only, self.name)
        for key in ("multi_head", "task_id_input"):
            if key in job and key in values:
                values[key] = bool(job[key])
        jax_hp = {
            "learner": values,
            "method": {},
            "num_envs": num_envs,
            "multi_head": bool(values.get("multi_head", hp["multi_head"])),
            "task_id_input": bool(values.get("task_id_input", hp["task_id_input"])),
            "suite_defaults": hp["suite_defaults"],
        }
        return jax_hp, overrides

    def refuse_foreign(self, overrides: Values, learner: str) -> None:
        check_no_jax_options(overrides, learner)

    def own_method_options(self, method: str, info: SuiteInfo) -> Mapping[str, Any]:
        """``{}`` for a built-in method; an own method is refused: the CL methods are
        compiled into the one JAX program, which a ``ContinualMethod`` cannot join."""
        if is_builtin_method(method):
            return {}
        from cl_suites.job.learners import learners_for, load_learner

        others = [n for n in learners_for(info) if load_learner(n).own_methods]
        raise MethodPluginError(
            f"own method {method!r} needs a torch learner (--learner {' or '.join(others)}); "
            f"learner {self.name!r} compiles its CL methods into one JAX program, which a "
            "ContinualMethod cannot join (docs/own-method.md)"
        )

    def option_names(
        self, method: str, hp: Mapping[str, Any], job_options: tuple[str, ...]
    ) -> dict[str, tuple[str, ...]]:
        """``IPPOConfig``'s fields, less the ones the job sets (``cl_method``, ``num_envs``,
        and ``multi_head``, ...: job options); no method or policy section (the CL and
        network settings are ``IPPOConfig`` fields too)."""
        owned = ("cl_method", "remedy", "num_envs", *job_options)
        return {
            "learner": tuple(n for n in jax_fields(self.config_type) if n not in owned),
            "method": (),
            "policy": (),
        }

    def device(self, job: Values, hp: Mapping[str, Any], suite: SuiteInfo, probe: bool) -> None:
        """``None``: JAX picks its platform (``JAX_PLATFORMS``)."""
        return None

    def rollout_steps(self, hp: Mapping[str, Any]) -> int:
        return int(hp["learner"]["num_steps"])

    def finish(self, hp: dict[str, Any], num_envs: int) -> Any:
        """The run's ``num_envs`` into the settings, and the ``IPPOConfig`` the JAX job
        trains with: it checks its values (bad ones fail here, before anything compiles)."""
        hp["learner"]["num_envs"] = num_envs
        return make_config(hp["learner"], self.config_type)

    def check_sequence(self, hp: Mapping[str, Any], sequence: Any) -> None:
        """MEAL's observations are what its network takes; the CL method's limits on the
        sequence (PackNet: one pass, a prunable layer of at least as many weights as
        tasks) fail here, in one line, before anything compiles."""
        from baselines_jax.learner import check_method

        config = make_config(dict(hp["learner"]), self.config_type)
        obs_dim = int(np.prod(sequence.observation_space.shape))
        check_method(config, len(sequence.tasks), obs_dim, int(sequence.cycles))

    def extra_task_steps(self, config: Any) -> int:
        """Env steps each task trains beyond its budget: PackNet's fine-tune phase
        (``IPPOConfig.finetune_updates`` whole updates; 0 for the other methods)."""
        return int(config.finetune_updates) * int(config.env_steps_per_update)

    def defaults(self, method: str, hp: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        fields = dataclasses.fields(getattr(jax_api(), self.config_type))
        return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}, {}

    def train(
        self, specs: Sequence[JobSpec], seeds: Sequence[int], run_dirs: Sequence[Path], resume: bool
    ) -> None:
        from cl_suites.job.jax.train import run_jax

        run_jax(list(specs), [int(s) for s in seeds], list(run_dirs), resume)

    def load_task_policy(self, spec: JobSpec, path: Path) -> Any:
        """Greedy ``policy(obs, task_ids) -> actions`` of a run's task policy
        (``cl_suites.job.jax.task_policies``)."""
        from cl_suites.job.jax.task_policies import load_task_policy

        return load_task_policy(path, spec)


PPO_JAX = JaxLearner()
"""The entry of ``ppo-jax``."""

MAPPO_JAX = JaxLearner(
    name="mappo-jax",
    methods=MAPPO_METHODS,
    config_type="MAPPOConfig",
    learner_type="JaxMAPPO",
    pairs_agents=False,
    own_options=(
        ("lr_end", Option(_L, _num(0.0), "step size at a task's end, with anneal_lr")),
        ("agent_id_input", Option(_L, _BOOL, "the agent's one-hot id in the actor's input")),
        ("importance_stride", Option(_L, _int(), "MAS: importance from every k-th step")),
    ),
    own_values=(  # MEAL 057f862 algos/on_policy.py:24-38 (MAPPOConfig's defaults)
        ("learning_rate", 1e-3),
        ("anneal_lr", False),
        ("num_steps", 400),
        ("num_minibatches", 16),
        ("gae_lambda", 0.95),
        ("max_grad_norm", 1.0),
        ("num_envs", 2048),
    ),
)
"""The entry of ``mappo-jax``: MEAL 057f862's MAPPO (``baselines_jax.JaxMAPPO``); the
suite's protocol of the preset, MAPPO's own PPO values (``small``: the smoke test's)."""
