"""Hyperparameter presets, in one readable place (every value has a row in
``docs/fidelity.md``).

``paper``: the values the reference code ran.

* CORA suites (Atari6, Procgen6, MiniHack15, CHORES-*): CORA's ``continual_rl`` configs
  (``configs/<suite>/*.json`` over the policy configs' defaults) for the IMPALA / V-trace
  learner and its CL methods; ``learner="ppo"`` takes CORA's own PPO config
  (``configs/atari/ppo_atari.json``). L2 and MAS, which CORA does not have, use MEAL's
  definitions on every parameter (CORA's network has one shared head).
* MEAL suites (``MEAL``, ``MEAL-<N>``): MEAL's IPPO (appendix B.2 Table 4, the paper-time
  ``baselines/IPPO_CL.py`` where the table is silent) and its CL methods.
* Diagnostic: not a paper suite; V-trace/PPO as above on a 64-unit MLP.

``small``: the same learner and methods shrunk (budgets, networks, batches, buffers) so
that Diagnostic, Procgen6 or MEAL-2 finish in minutes on a 2-core CPU: smoke tests, not
results. Procgen6's ``small`` uses the shallow CNN (CORA's configs' own network; the
paper's residual network is about 10x slower on a CPU). The CL strengths of ``small`` are
tuned on Diagnostic-v0.

All step counts are agent steps (MEAL: env steps).
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

from cl_suites.errors import UnknownOptionError

PRESETS: tuple[str, ...] = ("paper", "small")
CORA_SUITES: tuple[str, ...] = (
    "Atari6",
    "Procgen6",
    "MiniHack15",
    "CHORES-VaryRoom",
    "CHORES-VaryTask",
    "CHORES-VaryObject",
    "CHORES-MultiTraj",
)
MEAL_METHODS: tuple[str, ...] = ("ft", "ewc", "online-ewc", "mas", "l2")

# ----------------------------------------------------------------- CORA, IMPALA / V-trace
CORA_VTRACE: dict[str, Any] = {  # configs/atari/impala_atari.json over ImpalaPolicyConfig
    "learning_rate": 4e-4,
    "n_steps": 20,  # unroll length
    "gamma": 0.99,
    "ent_coef": 0.01,
    "vf_coef": 0.5,  # baseline cost
    "max_grad_norm": 40.0,
    "rms_prop_alpha": 0.99,
    "rms_prop_eps": 0.01,
    "loss_reduction": "sum",  # TorchBeast sums the losses over the batch
    "lr_schedule": "linear-per-task",  # use_scheduler=True, restarted by every train()
    "normalize_reward": False,
}
CORA_NUM_ENVS = 32  # batch size 32 unrolls (64 asynchronous actors in CORA)
CORA_REWARD_CLIP = (-1.0, 1.0)
CORA_NETWORK = {"Procgen6": "residual"}  # others: "shallow"
CORA_MINIHACK_VTRACE = {  # configs/minihack/impala_minihack_paperdefaults.json
    "learning_rate": 2e-4,
    "ent_coef": 0.001,
    "gamma": 0.999,
    "rms_prop_eps": 1e-6,
    "normalize_reward": True,
    "reward_std_count": "cora",  # nets.py update_running_moments adds T per (T, B) batch
}
CORA_CHORES_NUM_ENVS = 10  # configs/chores/*: num_actors 10, batch_size 10
CORA_CHORES_VTRACE = {"n_steps": 80, "learning_rate": 4.8e-4}  # ImpalaPolicyConfig default lr
CORA_CHORES_EWC_VTRACE = {"learning_rate": 6e-4, "rms_prop_eps": 0.1}  # EWCPolicyConfig

CORA_METHODS: dict[str, dict[str, Any]] = {
    "ft": {"variant": "cora"},
    "ewc": {  # configs/<suite>/ewc_<suite>.json
        "variant": "cora",
        "lam": 10_000.0,
        "fisher_batches": 100,
        "buffer_frames": 1_000_000,
        "min_task_steps": 200_000,
    },
    "online-ewc": {  # configs/<suite>/online_ewc_<suite>.json
        "variant": "cora",
        "lam": 175.0,
        "online_gamma": 0.99,
        "normalize": "row",
        "fisher_batches": 100,
        "buffer_frames": 1_000_000,
        "min_task_steps": 0,  # the code applies no gate to online EWC
    },
    "pnc": {  # configs/<suite>/pnc_<suite>.json
        "lam": 3_000.0,
        "online_gamma": 0.99,
        "normalize": "full",
        "kl_cost": 1.0,
        "fisher_batches": 100,
        "buffer_frames": 100_000,
        "progress_updates": None,
    },
    "clear": {  # configs/<suite>/clear_<suite>.json over ClearPolicyConfig
        "buffer_size": 25_000_000,
        "policy_cloning": 0.01,
        "value_cloning": 0.005,
        "replay_ratio": 0.5,  # batch_replay_ratio 1.0: as many replayed unrolls as new
        "clone_alignment": "cora",  # index i vs index i of TorchBeast's buffer layout
    },
    # not in CORA: MEAL's definitions, on every parameter (one shared head)
    "l2": {"variant": "meal", "lam": 1e7, "groups": "all"},
    "mas": {"variant": "meal", "lam": 1e9, "groups": "all"},
}
CORA_PROGRESS_UPDATES = {  # num_train_steps_of_progress (None: half of each task)
    "Atari6": 39_063,
    "Procgen6": 3_906,
    "MiniHack15": None,  # no CORA config: half the task, as every CORA config is
    "CHORES": 625,
}
CORA_CLEAR_BUFFER = {
    "Atari6": 25_000_000,
    "Procgen6": 5_000_000,
    "MiniHack15": 10_000_000,
    "CHORES": 1_500_000,
}
CORA_CHORES_EWC_MIN_STEPS = 20_000_000  # EWCPolicyConfig default, left by configs/chores
CORA_CHORES_PNC_BUFFER = 1_000_000  # EWCPolicyConfig default, left by configs/chores

# ----------------------------------------------------------------- CORA, PPO
CORA_PPO: dict[str, Any] = {  # configs/atari/ppo_atari.json over PPOPolicyConfig
    "learning_rate": 2.5e-4,
    "n_steps": 128,
    "n_minibatches": 4,
    "n_epochs": 4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.1,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "value_loss": "clipped-max",
    "advantage_normalization": "batch",
    "lr_schedule": "linear-steps",
    "lr_decay_steps": 10_000_000,  # decay_over_steps; clamped at 0 afterwards
}
CORA_PPO_NUM_ENVS = 8

# ----------------------------------------------------------------- MEAL, IPPO
MEAL_PPO: dict[str, Any] = {  # MEAL Table 4; IPPO_CL.py Config where it is silent
    "learning_rate": 3e-4,
    "lr_schedule": "linear-per-task",  # Table 4; the paper-time switch anneal_lr is off
    "reset_optimizer_at_switch": True,  # a new optax Adam per task
    "n_steps": 128,
    "n_minibatches": 8,
    "n_epochs": 8,
    "gamma": 0.99,
    "gae_lambda": 0.957,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "value_loss": "clipped-max",
    "advantage_normalization": "minibatch-biased",
}
MEAL_NUM_ENVS = 16
MEAL_NET_ARCH = [128, 128]
MEAL_METHOD_VALUES: dict[str, dict[str, Any]] = {
    "ft": {"variant": "meal"},
    "ewc": {"variant": "meal", "lam": 1e11, "mode": "multi", "episodes": 5, "max_steps": 500},
    "online-ewc": {
        "variant": "meal",
        "lam": 1e11,
        "mode": "online",
        "decay": 0.9,
        "episodes": 5,
        "max_steps": 500,
    },
    "mas": {"variant": "meal", "lam": 1e9, "episodes": 5, "max_steps": 500},
    "l2": {"variant": "meal", "lam": 1e7},
}

# ----------------------------------------------------------------- small
SMALL_SUITE: dict[str, Any] = {
    "steps_per_task": 4_000,
    "cycles": 1,
    "eval_every": 1_000,
    "eval_episodes": 5,
}
SMALL_SUITE_OVERRIDES: dict[str, dict[str, Any]] = {
    "Procgen6": {"steps_per_task": 2_000, "eval_every": 4_000, "eval_episodes": 2, "cycles": 1},
    # 64-step episodes (MEAL: 400): each of the 16 envs plays 128 steps per task, two
    # whole episodes, so the training-episode curves have points (400-step episodes
    # ended none); a longer budget would make the smoke run slower. 50 steps was too
    # short for some of MEAL's paper-time kitchens (a max-soup bound of 0: no score)
    "MEAL": {
        "steps_per_task": 2_048,
        "eval_every": 1_024,
        "eval_episodes": 2,
        "episode_len": 64,
    },
}
SMALL_PPO: dict[str, Any] = {
    "learning_rate": 3e-3,
    "n_steps": 16,
    "n_minibatches": 2,
    "n_epochs": 4,
    "gamma": 0.9,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.3,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "advantage_normalization": "none",
    "lr_schedule": "constant",
}
SMALL_VTRACE: dict[str, Any] = {
    "learning_rate": 3e-3,
    "n_steps": 16,
    "gamma": 0.9,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 40.0,
    "rms_prop_alpha": 0.99,
    "rms_prop_eps": 1e-5,
    "loss_reduction": "mean",
    "lr_schedule": "constant",
}
SMALL_NUM_ENVS = 8
SMALL_CORA_METHODS: dict[str, dict[str, Any]] = {
    "ft": {"variant": "cora"},
    "ewc": {
        "variant": "cora",
        "lam": 2_000.0,
        "fisher_batches": 20,
        "buffer_frames": 20_000,
        "min_task_steps": 0,
    },
    "online-ewc": {
        "variant": "cora",
        "lam": 2_000.0,
        "online_gamma": 0.99,
        "normalize": None,
        "fisher_batches": 20,
        "buffer_frames": 20_000,
        "min_task_steps": 0,
    },
    "l2": {"variant": "meal", "lam": 5_000.0, "groups": "all"},
    "mas": {"variant": "meal", "lam": 5e4, "groups": "all", "episodes": 1, "max_steps": 200},
    "pnc": {
        "lam": 5_000.0,
        "online_gamma": 0.99,
        "normalize": None,
        "kl_cost": 1.0,
        "fisher_batches": 20,
        "buffer_frames": 20_000,
        "progress_updates": None,
    },
    "clear": {
        "buffer_size": 20_000,
        "policy_cloning": 0.01,
        "value_cloning": 0.005,
        # tuned on Diagnostic-v0, whose consecutive frames want different actions: CORA's
        # alignment clones each frame towards the previous frame's output and forgets
        # task 0 entirely there (docs/fidelity.md, `small` preset)
        "replay_ratio": 0.75,
        "clone_alignment": "paper",
    },
}
SMALL_MEAL_METHODS: dict[str, dict[str, Any]] = {
    name: {**values, **({"episodes": 2, "max_steps": 100} if "episodes" in values else {})}
    for name, values in MEAL_METHOD_VALUES.items()
}
SMALL_NET = {"net_arch": [64], "cnn_features_dim": 64}

# ----------------------------------------------------------------- options by owner
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
"""Top-level keys of ``resolve``'s dict that a run may override."""


def suite_family(suite: str) -> str:
    """``"cora"``, ``"meal"`` or ``"diagnostic"`` for a suite name or id."""
    name = suite_name(suite)
    if name == "MEAL" or re.fullmatch(r"MEAL-\d+", name):
        return "meal"
    if name in CORA_SUITES:
        return "cora"
    if name == "Diagnostic":
        return "diagnostic"
    raise ValueError(
        f"no preset for suite {suite!r}; presets exist for {', '.join(CORA_SUITES)}, "
        "Diagnostic, MEAL and MEAL-<N>"
    )


def suite_name(suite: str) -> str:
    """``"CLSuite/Procgen6-v0"`` -> ``"Procgen6"`` (names pass through)."""
    name = str(suite).split(":")[-1].split("/")[-1]
    return name[: -len("-v0")] if name.endswith("-v0") else name


def _check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")


def default_learner(suite: str, preset: str) -> str:
    """The learner a run of ``suite`` under ``preset`` uses when none is named: V-trace
    (IMPALA) on the CORA suites, the JAX IPPO (``ppo-jax``, MEAL's design: rollout and
    PPO epochs in one compiled program) on MEAL, PPO on Diagnostic, under both presets
    (``small`` shrinks the paper's setup; Diagnostic's tests are tuned for PPO)."""
    _check_preset(preset)
    family = suite_family(suite)
    return {"cora": "vtrace", "meal": "ppo-jax"}.get(family, "ppo")


def _chores(name: str) -> bool:
    return name.startswith("CHORES")


def _cora_learner(name: str, learner: str, method: str, small: bool) -> dict[str, Any]:
    if learner == "ppo":
        out = copy.deepcopy(SMALL_PPO if small else CORA_PPO)
        return out
    out = copy.deepcopy(SMALL_VTRACE if small else CORA_VTRACE)
    if small:
        out["lr_schedule"] = "linear-per-task"
        return out
    if name == "MiniHack15":
        out.update(CORA_MINIHACK_VTRACE)
    if _chores(name):
        out.update(CORA_CHORES_VTRACE)
        if method in ("ewc", "online-ewc", "pnc"):
            out.update(CORA_CHORES_EWC_VTRACE)
    return out


def _cora_method(name: str, method: str, small: bool) -> dict[str, Any]:
    out = copy.deepcopy((SMALL_CORA_METHODS if small else CORA_METHODS).get(method, {}))
    if small:
        return out
    key = "CHORES" if _chores(name) else name
    if method == "clear" and key in CORA_CLEAR_BUFFER:
        out["buffer_size"] = CORA_CLEAR_BUFFER[key]
    if method == "pnc":
        out["progress_updates"] = CORA_PROGRESS_UPDATES.get(key)
        if key == "CHORES":
            out["buffer_frames"] = CORA_CHORES_PNC_BUFFER
    if method == "ewc" and key == "CHORES":
        out["min_task_steps"] = CORA_CHORES_EWC_MIN_STEPS
    return out


def resolve(suite: str, learner: str, method: str, preset: str) -> dict[str, Any]:
    """The resolved settings of a run.

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
    family, name, small = suite_family(suite), suite_name(suite), preset == "small"
    if family == "meal":
        return _resolve_meal(learner, method, small)
    image = family == "cora"
    out: dict[str, Any] = {
        "learner": _cora_learner(name, learner, method, small),
        "method": _cora_method(name, method, small),
        "num_envs": SMALL_NUM_ENVS if small else CORA_NUM_ENVS,
        "network": CORA_NETWORK.get(name, "shallow") if image else "mlp",
        "net_arch": [],
        "activation": "relu",
        "cnn_features_dim": None,
        "ortho_init": False,  # CORA's networks keep PyTorch's default init
        "trunk_layer_norm": False,
        "normalize_images": True,
        "action_mask_mode": "sampling",
        "previous_action_reward": True,
        "reward_clip": CORA_REWARD_CLIP if image else None,
        "reward_sign": False,
        "time_limit_terminal": True,
        "multi_head": False,
        "task_id_input": False,
        "suite_defaults": {},
    }
    if learner == "ppo":  # CORA's PPO: a2c_ppo_acktr_gail's CNNBase, sign rewards
        out.update(
            num_envs=SMALL_NUM_ENVS if small else CORA_PPO_NUM_ENVS,
            network="a2c-ppo" if image else "mlp",
            ortho_init=True,
            previous_action_reward=False,
            reward_clip=None,
            reward_sign=image,
        )
    if name == "MiniHack15" and not small:
        out["reward_clip"] = None  # Table 4 (a): no clipping, running-std normalisation
    if _chores(name) and learner == "vtrace" and not small:
        out["num_envs"] = CORA_CHORES_NUM_ENVS
    if family == "diagnostic":
        out.update(
            net_arch=[64],
            activation="tanh",
            time_limit_terminal=False,
            previous_action_reward=False,
        )
    if small:
        out.update(SMALL_NET)
        if out.get("network") == "residual":
            out["network"] = "shallow"
        out["suite_defaults"] = dict(SMALL_SUITE_OVERRIDES.get(name, SMALL_SUITE))
        if family == "diagnostic":
            out["learner"]["lr_schedule"] = "constant"
    if not image:
        out["cnn_features_dim"] = None
    return out


def _resolve_meal(learner: str, method: str, small: bool) -> dict[str, Any]:
    if learner != "ppo":
        raise ValueError(f"MEAL's baselines use IPPO (learner 'ppo'), got learner {learner!r}")
    if method not in MEAL_METHODS:
        raise ValueError(f"unknown method {method!r} for MEAL; valid: {', '.join(MEAL_METHODS)}")
    learner_kw = copy.deepcopy(MEAL_PPO)
    if small:
        learner_kw.update({k: v for k, v in SMALL_PPO.items() if k != "lr_schedule"})
        learner_kw["n_minibatches"] = 8
    return {
        "learner": learner_kw,
        "method": copy.deepcopy((SMALL_MEAL_METHODS if small else MEAL_METHOD_VALUES)[method]),
        "num_envs": MEAL_NUM_ENVS,
        "network": "mlp",
        "net_arch": list(SMALL_NET["net_arch"] if small else MEAL_NET_ARCH),
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
        "suite_defaults": dict(SMALL_SUITE_OVERRIDES["MEAL"]) if small else {},
    }


def accepted_options(cls: type) -> tuple[str, ...]:
    """Keyword arguments ``cls(...)`` accepts (through ``**kwargs`` to its bases)."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names += [
            p.name
            for p in params
            if p.kind is p.KEYWORD_ONLY
            or (p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "policy", "env"))
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return tuple(dict.fromkeys(n for n in names if not n.startswith("_")))


def check_options(kind: str, name: str, cls: type, options: dict[str, Any]) -> None:
    """``ValueError`` naming any key of ``options`` that ``cls`` does not accept."""
    valid = accepted_options(cls)
    bad = sorted(k for k in options if k not in valid)
    if bad:
        raise UnknownOptionError(
            f"{kind} {name!r} does not support option(s) {', '.join(map(repr, bad))}; "
            f"valid: {', '.join(sorted(valid))}"
        )


def route_overrides(
    hp: dict[str, Any], learner: str, method: str, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Move the run's hyperparameter overrides into ``hp`` (in place) and return the rest
    (suite kwargs and job options).

    A key goes to ``hp["learner"]`` when the learner accepts it, to ``hp["method"]`` when
    the method accepts it, to ``hp`` itself when it is a policy option; a key that only
    another learner or method accepts raises ``ValueError`` naming it and the valid ones.
    """
    from baselines_sb3.cl import METHODS, method_class
    from baselines_sb3.factory import learner_class

    learner_opts = accepted_options(learner_class(learner))
    method_cls = method_class(method, hp["method"].get("variant"))
    method_opts = set(accepted_options(method_cls)) | {"variant"}
    foreign: dict[str, str] = {}
    for other in ("ppo", "vtrace"):
        if other != learner:
            foreign.update(
                {k: f"learner {other!r}" for k in accepted_options(learner_class(other))}
            )
    for other, classes in METHODS.items():
        for cls in classes.values():
            if other != method:
                foreign.update({k: f"method {other!r}" for k in accepted_options(cls)})
    job_owned = ("cl_method", "policy_kwargs", "seed", "device")  # set by the job itself
    learner_opts = tuple(k for k in learner_opts if k not in job_owned)
    method_opts -= set(job_owned)
    rest: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in learner_opts:
            hp["learner"][key] = value
        elif key in method_opts:
            hp["method"][key] = value
        elif key in POLICY_OPTIONS or key in ("multi_head", "task_id_input", "num_envs"):
            hp[key] = value
        elif key in foreign and key not in job_owned:
            raise UnknownOptionError(
                f"option {key!r} belongs to {foreign[key]}, not to learner {learner!r} / method "
                f"{method!r}; valid learner options: {', '.join(sorted(learner_opts))}; valid "
                f"method options: {', '.join(sorted(method_opts))}"
            )
        else:
            rest[key] = value
    return rest
