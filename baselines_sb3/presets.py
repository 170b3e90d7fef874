"""Hyperparameter presets, in one readable place.

``paper``: the values of the papers. CORA (Powers et al., 2022, appendix C.6) for the
V-trace (IMPALA) learner and the CL methods on Atari/Procgen/MiniHack/CHORES; MEAL
(Tomilin et al., appendix B.2) for PPO (IPPO). CORA has no PPO results: with
``learner=ppo`` on a CORA suite the PPO values are SB3/Procgen-style defaults and the CL
coefficients are CORA's.
``small``: shrunk budgets, networks and batches so that the Diagnostic suite or Procgen6
finishes in a few minutes on a 2-core CPU (for smoke tests, not for results).

All step counts are agent steps.
"""

from __future__ import annotations

import copy
from typing import Any

PRESETS: tuple[str, ...] = ("paper", "small")

# CORA appendix C.6, table 3 (Atari; shared by Procgen except the network and CLEAR size)
CORA_VTRACE: dict[str, Any] = {
    "learning_rate": 4e-4,
    "n_steps": 20,  # unroll length
    "gamma": 0.99,
    "ent_coef": 0.01,
    "vf_coef": 0.5,  # baseline cost
    "max_grad_norm": 40.0,
    "rms_prop_alpha": 0.99,
    "rms_prop_eps": 0.01,
    "loss_reduction": "sum",  # TorchBeast sums the losses over the batch
}
CORA_NUM_ENVS = 32  # batch size 32 unrolls (64 actors in the paper feed a batch of 32)
CORA_REWARD_CLIP = (-1.0, 1.0)

CORA_METHODS: dict[str, dict[str, Any]] = {
    "ft": {},
    "ewc": {"lam": 10_000.0, "num_samples": 100, "min_task_steps": 200_000},
    "online-ewc": {
        "lam": 175.0,
        "gamma": 0.99,
        "normalize": True,
        "num_samples": 100,
        "min_task_steps": 200_000,
    },
    "l2": {"lam": 10_000.0},  # not in CORA; EWC's strength as a starting point
    "mas": {"lam": 10_000.0, "num_samples": 100},  # not in CORA
    "pnc": {"lam": 3_000.0, "gamma": 0.99, "normalize": True, "num_samples": 100, "kl_cost": 1.0},
    "clear": {
        "buffer_size": 25_000_000,
        "policy_cloning": 0.01,
        "value_cloning": 0.005,
        "replay_ratio": 0.5,
    },
}
CORA_CLEAR_BUFFER = {"Atari6": 25_000_000, "Procgen6": 5_000_000, "MiniHack15": 10_000_000}
CORA_NETWORK = {"Procgen6": "deep"}  # others: "shallow"

# MEAL appendix B.2, table 4 (IPPO); used for learner=ppo
MEAL_PPO: dict[str, Any] = {
    "learning_rate": 3e-4,
    "lr_anneal": True,  # linear to 0
    "n_steps": 128,
    "batch_size": 256,  # 16 envs x 128 steps / 8 minibatches
    "n_epochs": 8,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
}
MEAL_NUM_ENVS = 16
MEAL_METHODS: dict[str, dict[str, Any]] = {
    "ft": {},
    "ewc": {"lam": 1e11, "num_samples": 500},
    "online-ewc": {"lam": 1e11, "gamma": 0.9, "normalize": False, "num_samples": 500},
    "mas": {"lam": 1e9, "num_samples": 500},
    "l2": {"lam": 1e7},
}

# ``small``: tiny networks and budgets; the CL strengths are tuned on Diagnostic-v0.
SMALL_SUITE: dict[str, Any] = {
    "steps_per_task": 4_000,
    "cycles": 1,
    "eval_every": 1_000,
    "eval_episodes": 5,
}
SMALL_SUITE_OVERRIDES: dict[str, dict[str, Any]] = {
    "Procgen6": {"steps_per_task": 2_000, "eval_every": 4_000, "eval_episodes": 2, "cycles": 1},
}
SMALL_PPO: dict[str, Any] = {
    "learning_rate": 3e-3,
    "n_steps": 16,
    "batch_size": 64,
    "n_epochs": 4,
    "gamma": 0.9,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.3,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantage": False,
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
}
SMALL_NUM_ENVS = 8
SMALL_METHODS: dict[str, dict[str, Any]] = {
    "ft": {},
    "ewc": {"lam": 5_000.0, "num_samples": 100, "min_task_steps": 0},
    "online-ewc": {
        "lam": 5_000.0,
        "gamma": 0.99,
        "normalize": False,
        "num_samples": 100,
        "min_task_steps": 0,
    },
    "l2": {"lam": 20.0},
    "mas": {"lam": 50.0, "num_samples": 100},
    "pnc": {"lam": 50_000.0, "gamma": 0.99, "normalize": True, "num_samples": 100, "kl_cost": 1.0},
    "clear": {
        "buffer_size": 20_000,
        "policy_cloning": 0.01,
        "value_cloning": 0.005,
        "replay_ratio": 0.5,
    },
}
SMALL_NET = {"net_arch": [64], "cnn_features_dim": 64}


def default_learner(suite: str, preset: str) -> str:
    """The learner a run of ``suite`` under ``preset`` uses when none is named."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    return "ppo"


def resolve(suite: str, learner: str, method: str, preset: str) -> dict[str, Any]:
    """The resolved hyperparameters of a run: ``learner``, ``method``, ``num_envs``,
    ``network``, ``net_arch``, ``reward_clip``, ``suite_defaults`` (suite kwargs the preset
    sets unless the user does), ``multi_head``, ``task_id_input``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    small = preset == "small"
    if learner == "vtrace":
        learner_kw = SMALL_VTRACE if small else CORA_VTRACE
    else:
        learner_kw = SMALL_PPO if small else MEAL_PPO
    table = SMALL_METHODS if small else CORA_METHODS
    method_kw = copy.deepcopy(table.get(method, {}))
    if method == "clear" and not small and suite in CORA_CLEAR_BUFFER:
        method_kw["buffer_size"] = CORA_CLEAR_BUFFER[suite]
    out: dict[str, Any] = {
        "learner": copy.deepcopy(learner_kw),
        "method": method_kw,
        "num_envs": SMALL_NUM_ENVS
        if small
        else (CORA_NUM_ENVS if learner == "vtrace" else MEAL_NUM_ENVS),
        "network": "shallow" if small else CORA_NETWORK.get(suite, "shallow"),
        "net_arch": SMALL_NET["net_arch"] if small else [],
        "cnn_features_dim": SMALL_NET["cnn_features_dim"] if small else None,
        "reward_clip": None if suite == "Diagnostic" else CORA_REWARD_CLIP,
        "suite_defaults": dict(SMALL_SUITE_OVERRIDES.get(suite, SMALL_SUITE)) if small else {},
        "multi_head": False,
        "task_id_input": False,
    }
    if suite == "Diagnostic" and not small:
        out["net_arch"] = [64]
    if suite == "MiniHack15" and not small:  # CORA table 4 (a)
        out["learner"].update(
            {"learning_rate": 2e-4, "ent_coef": 0.001, "gamma": 0.999, "rms_prop_eps": 1e-6}
        )
        out["reward_clip"] = None
    return out
