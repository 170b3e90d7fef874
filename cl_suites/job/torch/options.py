"""The torch learners' options: their declarations, names and routing.

Every option of the stable-baselines3/torch learners (``ppo``: ``ContinualPPO``,
``vtrace``: ``VTrace``), of the CL methods of ``baselines_sb3.cl`` and of the policy is
declared once here (:data:`OPTIONS`: section, type and range, one-line doc; defaults are
the presets', ``cl_suites.job.presets``). :func:`route_overrides` moves a run's overrides
into its settings; :func:`reserved_option_names` lists what an own method may not declare.

This module imports the torch family (its choices and constructors' keywords); the wing's
entry (``cl_suites.job.torch.entry``) imports it on first use, so resolving a ``ppo-jax``
run never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baselines_sb3.cl import METHODS, VARIANTS, is_builtin, method_class
from baselines_sb3.cl.clear import CLONE_ALIGNMENTS
from baselines_sb3.cl.importance import FISHER_AGENTS
from baselines_sb3.cl.pnc import RESETS
from baselines_sb3.factory import ACTIVATIONS, LEARNERS, learner_class
from baselines_sb3.keywords import accepted_options
from baselines_sb3.learners import ADVANTAGE_NORMALIZATIONS, LR_SCHEDULES, VALUE_LOSSES
from baselines_sb3.networks import FEATURE_EXTRACTORS
from baselines_sb3.policies import ACTION_MASK_MODES
from baselines_sb3.running_stats import REWARD_STD_COUNTS
from cl_suites.errors import UnknownOptionError
from cl_suites.job.hyperparameters import POLICY_OPTIONS
from cl_suites.job.option_specs import BOOL as _BOOL
from cl_suites.job.option_specs import UNIT as _UNIT
from cl_suites.job.option_specs import Opt, Option
from cl_suites.job.option_specs import choice as _choice
from cl_suites.job.option_specs import integer as _int
from cl_suites.job.option_specs import number as _num

NETWORKS: tuple[str, ...] = tuple(dict.fromkeys(("mlp", *FEATURE_EXTRACTORS)))
"""``network`` values: an MLP over flat observations, or a CNN of
``baselines_sb3.networks.FEATURE_EXTRACTORS``."""

_L, _M, _P = "learner", "method", "policy"

OPTIONS: dict[str, Option] = {
    "learning_rate": Option(_L, _num(0.0, 1.0, low_open=True, callable_ok=True), "step size"),
    "lr_schedule": Option(
        _L, _choice(LR_SCHEDULES), "constant, linear, linear-per-task, linear-steps"
    ),
    "lr_decay_steps": Option(_L, _int(none_ok=True), "steps of the linear-steps decay"),
    "reset_optimizer_at_switch": Option(_L, _BOOL, "a new optimizer at every task switch"),
    "n_steps": Option(_L, _int(), "rollout (unroll) length per env"),
    "batch_size": Option(_L, _int(), "PPO minibatch size (or n_minibatches)"),
    "n_minibatches": Option(_L, _int(), "PPO minibatches per epoch"),
    "n_epochs": Option(_L, _int(), "PPO epochs per rollout"),
    "gamma": Option(_L, _UNIT, "discount"),
    "gae_lambda": Option(_L, _UNIT, "GAE lambda (PPO)"),
    "clip_range": Option(_L, _num(0.0, 1.0, low_open=True, callable_ok=True), "PPO clip"),
    "clip_range_vf": Option(
        _L, _num(0.0, low_open=True, none_ok=True, callable_ok=True), "PPO value clip"
    ),
    "normalize_advantage": Option(_L, _BOOL, "SB3's advantage normalisation switch"),
    "advantage_normalization": Option(
        _L, _choice(ADVANTAGE_NORMALIZATIONS), "none, batch, minibatch, minibatch-biased"
    ),
    "value_loss": Option(_L, _choice(VALUE_LOSSES), "PPO value loss: mse or clipped-max"),
    "ent_coef": Option(_L, _num(), "entropy bonus coefficient"),
    "vf_coef": Option(_L, _num(), "value loss coefficient"),
    "max_grad_norm": Option(_L, _num(0.0, low_open=True), "gradient clipping norm"),
    "target_kl": Option(_L, _num(0.0, low_open=True, none_ok=True), "PPO early-stop KL"),
    "rho_bar": Option(_L, _num(0.0, low_open=True), "V-trace importance-weight clip"),
    "c_bar": Option(_L, _num(0.0, low_open=True), "V-trace trace clip"),
    "policy_lag": Option(
        _L,
        Opt("choice", choices=(0, 1)),
        "V-trace: 0 lockstep (collect, then update), 1 the update overlaps the next rollout",
    ),
    "use_rms_prop": Option(_L, _BOOL, "RMSprop (true) or Adam (V-trace)"),
    "rms_prop_alpha": Option(_L, _UNIT, "RMSprop smoothing"),
    "rms_prop_eps": Option(_L, _num(0.0, low_open=True), "RMSprop epsilon"),
    "loss_reduction": Option(
        _L, _choice(("mean", "sum")), "V-trace loss over the batch: sum or mean"
    ),
    "normalize_reward": Option(_L, _BOOL, "running-std reward normalisation (V-trace)"),
    "reward_std_count": Option(
        _L, _choice(REWARD_STD_COUNTS), "how the reward std counts samples: cora or true"
    ),
    "use_sde": Option(_L, None, "SB3 keyword: state-dependent exploration (unused here)"),
    "sde_sample_freq": Option(_L, None, "SB3 keyword: gSDE noise resampling (unused here)"),
    "rollout_buffer_class": Option(_L, None, "SB3 keyword: the rollout buffer class"),
    "rollout_buffer_kwargs": Option(_L, None, "SB3 keyword: rollout buffer arguments"),
    "stats_window_size": Option(_L, None, "SB3 keyword: episodes in the logged means"),
    "tensorboard_log": Option(_L, None, "SB3 keyword; use the job option tensorboard"),
    "verbose": Option(_L, None, "SB3 keyword: log verbosity"),
    "monitor_wrapper": Option(_L, None, "SB3 keyword: wrap envs in Monitor"),
    "supported_action_spaces": Option(_L, None, "SB3 keyword: allowed action spaces"),
    # -- CL methods
    "variant": Option(_M, _choice(VARIANTS), "the method's reference definition: cora or meal"),
    "lam": Option(_M, _num(), "regularisation strength"),
    "online_gamma": Option(_M, _UNIT, "decay of the running importance (online EWC, P&C)"),
    "decay": Option(_M, _UNIT, "decay of the running importance (MEAL's online EWC, MAS)"),
    "mode": Option(
        _M, _choice(("multi", "online", "last")), "importance bookkeeping: multi, online, last"
    ),
    "normalize": Option(_M, None, "importance normalisation: none, row, full, max"),
    "groups": Option(_M, None, "parameter groups regularised: all, shared, ..."),
    "fisher_batches": Option(_M, _int(), "batches of the Fisher estimate"),
    "batch_unrolls": Option(_M, _int(), "unrolls per Fisher batch"),
    "buffer_frames": Option(_M, _int(), "frames kept per task for the Fisher"),
    "min_task_steps": Option(_M, _int(0), "steps a task trains before it is consolidated"),
    "episodes": Option(_M, _int(), "fresh episodes of the importance estimate (MEAL)"),
    "max_steps": Option(_M, _int(), "steps per importance episode (MEAL)"),
    "stride": Option(_M, _int(), "MAS: every stride-th state"),
    "kl_cost": Option(_M, _num(), "P&C distillation weight"),
    "progress_updates": Option(_M, _int(), "P&C progress updates per task (none: half)"),
    "buffer_size": Option(_M, _int(), "CLEAR replay buffer, frames"),
    "policy_cloning": Option(_M, _num(), "CLEAR policy cloning weight"),
    "value_cloning": Option(_M, _num(), "CLEAR value cloning weight"),
    "replay_ratio": Option(_M, _UNIT, "CLEAR share of replayed unrolls"),
    "replay_unroll": Option(_M, _int(none_ok=True), "CLEAR replayed unroll length"),
    "clone_alignment": Option(
        _M, _choice(CLONE_ALIGNMENTS), "CLEAR cloning targets: cora or paper"
    ),
    "fisher_agents": Option(
        _M, _choice(FISHER_AGENTS), "agents whose states enter the Fisher (MEAL): first or joint"
    ),
    "regularize_critic": Option(_M, _BOOL, "also regularise the critic trunk"),
    "regularize_heads": Option(_M, _BOOL, "also regularise the output heads"),
    "fallback_states": Option(_M, _int(), "states kept when no fresh episodes can be played"),
    "normalize_task": Option(_M, _BOOL, "MAS: normalise each task's importance"),
    "agent_mean": Option(_M, _BOOL, "MAS: mean over agents instead of sum"),
    "reset": Option(_M, _choice(RESETS), "P&C: what a new task resets: column or column+adapters"),
    "kb_listed_twice": Option(_M, _BOOL, "P&C: the KB's parameters twice in the optimizer"),
    # -- policy
    "network": Option(_P, _choice(NETWORKS), "mlp, or a CNN: " + ", ".join(NETWORKS[1:])),
    "net_arch": Option(_P, Opt("int-list", low=1), "hidden layer sizes, e.g. [64, 64]"),
    "activation": Option(_P, _choice(tuple(ACTIVATIONS)), "relu, tanh or crelu (MLP trunks)"),
    "cnn_features_dim": Option(_P, _int(), "CNN output features"),
    "ortho_init": Option(_P, _BOOL, "orthogonal initialisation"),
    "trunk_layer_norm": Option(_P, _BOOL, "layer norm in the trunk"),
    "normalize_images": Option(_P, _BOOL, "divide pixels by 255"),
    "action_mask_mode": Option(
        _P, _choice(ACTION_MASK_MODES), "how invalid actions are masked: sampling or full"
    ),
    "previous_action_reward": Option(_P, _BOOL, "previous action and reward as inputs"),
    "reward_clip": Option(_P, Opt("pair", none_ok=True), "[low, high] reward clipping or none"),
    "reward_sign": Option(_P, _BOOL, "train on the sign of rewards"),
    "time_limit_terminal": Option(_P, _BOOL, "a time limit ends the episode (no bootstrap)"),
}
"""Each option of the torch learners, their CL methods and policy: section, type and
range, one-line doc."""

LEARNER_OPTIONS: dict[str, tuple[str, ...]] = {
    name: accepted_options(learner_class(name)) for name in LEARNERS
}
"""The keywords each torch learner's class accepts (``ppo``: ``ContinualPPO``, ``vtrace``:
``VTrace``), read once."""

JOB_OWNED: tuple[str, ...] = ("cl_method", "policy_kwargs", "seed", "device")
"""Constructor keywords the job sets itself (never a run's option)."""


def _foreign_owners(learner: str, method: str) -> dict[str, str]:
    """Each option of the other learners and methods, with every one of them that takes
    it (``learner 'vtrace'``, ``methods 'ewc', 'pnc'``), in declaration order."""
    owners: dict[str, dict[str, list[str]]] = {}
    for other, options in LEARNER_OPTIONS.items():
        if other != learner:
            for k in options:
                owners.setdefault(k, {}).setdefault("learner", []).append(other)
    for other, classes in METHODS.items():
        if other == method:
            continue
        for k in dict.fromkeys(k for cls in classes.values() for k in accepted_options(cls)):
            owners.setdefault(k, {}).setdefault("method", []).append(other)
    return {
        key: " and ".join(
            f"{kind}{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"
            for kind, names in by_kind.items()
        )
        for key, by_kind in owners.items()
    }


def route_overrides(
    hp: dict[str, Any], learner: str, method: str, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Move the run's hyperparameter overrides into ``hp`` (in place) and return the rest
    (suite kwargs and job options).

    A key goes to ``hp["learner"]`` when the learner accepts it, to ``hp["method"]`` when
    the method accepts it, to ``hp`` itself when it is a policy option; a key that only
    another learner or method accepts raises ``ValueError`` naming it and the valid ones.
    """
    learner_opts = LEARNER_OPTIONS[learner]
    method_cls = method_class(method, hp["method"].get("variant"))
    method_opts = set(accepted_options(method_cls)) | ({"variant"} if is_builtin(method) else set())
    foreign = _foreign_owners(learner, method)
    learner_opts = tuple(k for k in learner_opts if k not in JOB_OWNED)
    method_opts -= set(JOB_OWNED)
    rest: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in learner_opts:
            hp["learner"][key] = value
        elif key in method_opts:
            hp["method"][key] = value
        elif key in POLICY_OPTIONS or key in ("multi_head", "task_id_input", "num_envs"):
            hp[key] = value
        elif key in foreign and key not in JOB_OWNED:
            raise UnknownOptionError(
                f"option {key!r} belongs to {foreign[key]}, not to learner {learner!r} / method "
                f"{method!r}; valid learner options: {', '.join(sorted(learner_opts))}; valid "
                f"method options: {', '.join(sorted(method_opts))}"
            )
        else:
            rest[key] = value
    return rest


def reserved_option_names(
    job_options: tuple[str, ...], suite_options: tuple[str, ...]
) -> dict[str, str]:
    """Option names an own method may not declare, with what they are: the job's
    (``job_options``), every torch learner's, the policy's and the common suite options
    (``suite_options``; the run routes them before the method's, so the method would
    never get them)."""
    out = {name: "a job option" for name in (*job_options, "multi_head", "task_id_input")}
    for learner, names in LEARNER_OPTIONS.items():
        out.update({n: f"an option of learner {learner!r}" for n in names})
    out.update({n: "a policy option" for n in POLICY_OPTIONS})
    out.update({n: "a suite option" for n in (*suite_options, "num_envs")})
    out["variant"] = "the built-in methods' variant"
    return out


def option_checks(options: Mapping[str, Option]) -> dict[str, Opt]:
    """What each declared option's value must be (the declared ones with a check)."""
    return {name: o.check for name, o in options.items() if o.check is not None}
