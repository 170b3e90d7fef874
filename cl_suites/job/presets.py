"""Hyperparameter presets as data: the tables, in one readable place (every value has a row
in ``docs/fidelity.md``). How a run's settings are composed from them, and where a run's
options go, is ``cl_suites.job.hyperparameters``; this module imports nothing of the package.

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

``meal-authors`` (MEAL suites only): the protocol MEAL's authors say produced their
reported results (TTomilin/MEAL#10, their answer of 2026-08-06, and the reproduction
script ``scripts/baseline_comparison.sh`` at ``057f862``, which leaves MEAL's later trainer
defaults in place): 2048 envs x 400 steps per PPO update, 1e8 env steps per task,
evaluation every 5 updates with 10 episodes, shaping over half of each task's budget and
the later trainer's PPO values; everything else as ``paper`` (``docs/fidelity.md``,
"MEAL as its authors now say they ran it").

All step counts are agent steps (MEAL: env steps).
"""

from __future__ import annotations

from typing import Any

PRESETS: tuple[str, ...] = ("paper", "small", "meal-authors")
PRESET_FAMILIES: dict[str, tuple[str, ...]] = {"meal-authors": ("meal",)}
"""The suite families (``SuiteInfo.family``) a preset is for; a preset not named here is for
every family."""

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
    # CORA's actors act with parameters one or more updates old (monobeast.py:445); ours: the
    # update of rollout k runs while rollout k+1 is collected (exactly one update of lag).
    # ``small`` keeps lockstep (0), as do the update-parity checks (benchmarks/parity/cora_ours.py)
    "policy_lag": 1,
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
    # MEAL 057f862 experiments/algos/base.py:61-68 (the paper has none of these three;
    # IPPOConfig field names: only the JAX learners run them)
    "agem": {"variant": "meal", "agem_memory_size": 100_000, "agem_sample_size": 1024},
    "er-ace": {
        "variant": "meal",
        "agem_memory_size": 100_000,
        "agem_sample_size": 1024,
        "er_ace_coef": 1.0,
    },
    "packnet": {"variant": "meal", "packnet_finetune_steps": 10_000_000},
}

# ----------------------------------------------------------------- meal-authors
MEAL_AUTHORS_PPO: dict[str, Any] = {  # over MEAL_PPO; TTomilin/MEAL@057f862 on_policy.py:24-39
    "learning_rate": 1e-3,
    "n_steps": 400,
    "n_minibatches": 16,
    "gae_lambda": 0.95,
    "max_grad_norm": 1.0,
}
MEAL_AUTHORS_NUM_ENVS = 2048
MEAL_AUTHORS_UPDATE = MEAL_AUTHORS_NUM_ENVS * 400
"""Env steps of one PPO update in the authors' protocol (819,200)."""
MEAL_AUTHORS_SUITE: dict[str, Any] = {
    "steps_per_task": 100_000_000,  # 122 whole updates, as MEAL's num_updates
    "eval_every": 5 * MEAL_AUTHORS_UPDATE,  # every 5 updates (MEAL#10 point 1)
    "eval_episodes": 10,
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
SMALL_MEAL_METHODS["packnet"] = {
    "variant": "meal",
    # one update of the small preset (16 envs x 16 steps), an eighth of the task's 2,048
    # steps (MEAL: 1e7 of 1e8, a tenth; fine-tuning is whole updates)
    "packnet_finetune_steps": 256,
}
SMALL_NET = {"net_arch": [64], "cnn_features_dim": 64}
