"""``IPPOConfig``: the settings of the JAX IPPO learner, defaults = MEAL's (paper Table 4,
then the paper-time trainer ``baselines/IPPO_CL.py`` at 7d81858 where the paper is silent).

Step units: ``num_steps`` is env steps per env per update (one joint action of all agents
is one env step); an update consumes ``num_envs * num_steps`` env steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cl_suites.declarations import IMPORTANCE_MODES, MEAL_METHODS, MEAL_NETWORKS
from cl_suites.remedies import RemedyConfig

ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "crelu")
ADVANTAGE_NORMALIZATIONS: tuple[str, ...] = ("minibatch-biased", "none")
DEFAULT_REG_COEF: dict[str, float] = {  # Table 4 (online EWC: IPPO_CL.py's "ewc" default)
    "ft": 0.0,
    "ewc": 1e11,
    "online-ewc": 1e11,
    "mas": 1e9,
    "l2": 1e7,
    "agem": 0.0,
    "er-ace": 0.0,
    "packnet": 0.0,
}
DEFAULT_IMPORTANCE_MODE: dict[str, str] = {"ewc": "multi", "online-ewc": "online", "mas": "last"}
NETWORKS: dict[str, tuple[str, float]] = dict(
    zip(MEAL_NETWORKS, (("each", 1e-5), ("first", 1e-6)), strict=True)
)
"""MEAL's two MLP actor-critics -> (the trunk layers that end in a LayerNorm, its epsilon):
``mlp`` (``model/mlp.py``; the paper-time ``architectures/mlp.py``), ``mlp-packnet``
(057f862 ``experiments/model/mlp_packnet.py:63-86``: the first layer's norm only)."""
DEFAULT_NETWORK: dict[str, str] = {"packnet": "mlp-packnet"}
"""The network of a CL method when ``network`` is ``None`` (else ``mlp``): MEAL 057f862's
IPPO builds ``mlp_packnet`` whenever ``cl_method == "packnet"`` (``algos/ippo.py:69-70``)."""


@dataclass(frozen=True)
class IPPOConfig:
    """MEAL's IPPO (Table 4; IPPO_CL.py ``Config`` where the paper is silent)."""

    learning_rate: float = 3e-4
    """Adam step size at the start of every task (Table 4)."""
    anneal_lr: bool = True
    """Linear decay to 0 over each task's updates, restarting per task (Table 4)."""
    num_envs: int = 16
    """Parallel envs per seed (Table 4)."""
    num_steps: int = 128
    """Env steps per env per update (rollout length T, Table 4)."""
    update_epochs: int = 8
    """PPO epochs per update (Table 4)."""
    num_minibatches: int = 8
    """Minibatches per epoch (Table 4)."""
    gamma: float = 0.99
    """Discount (Table 4)."""
    gae_lambda: float = 0.957
    """GAE lambda (Table 4)."""
    clip_eps: float = 0.2
    """PPO ratio clip, also the value clip (Table 4; IPPO_CL.py clips both)."""
    ent_coef: float = 0.01
    """Entropy coefficient (Table 4)."""
    vf_coef: float = 0.5
    """Value-loss coefficient (Table 4)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (Table 4)."""
    advantage_normalization: str = "minibatch-biased"
    """``minibatch-biased``: advantages normalised per minibatch with the biased std + 1e-8
    (IPPO_CL.py:799; MEAL has no other); ``none``: raw advantages (our option, the torch
    learner's value of the same name: the ``small`` preset's)."""
    adam_eps: float = 1e-5
    """Adam epsilon (IPPO_CL.py)."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of each trunk's layers (B.1: 2 layers of 128; ``big_network``: 3 of 256)."""
    activation: str = "relu"
    """Hidden activation, ``relu``, ``tanh`` (IPPO_CL.py default relu) or ``crelu``
    (``concat(relu(x), relu(-x))``: each layer's output twice its width; Plasticine's
    CReLU, ours for MEAL)."""
    layer_norm: bool = True
    """LayerNorm after the hidden activations (IPPO_CL.py ``use_layer_norm``): where, and
    its epsilon, is ``network``'s."""
    network: str | None = None
    """``mlp``: a LayerNorm (eps 1e-5) after every hidden layer; ``mlp-packnet``: one
    LayerNorm (eps 1e-6) after the first hidden layer only (:data:`NETWORKS`); ``None``:
    the CL method's own (``mlp-packnet`` for PackNet, else ``mlp``: :data:`DEFAULT_NETWORK`,
    as MEAL 057f862's IPPO). ``layer_norm=False`` drops the norms of either."""
    shared_backbone: bool = False
    """One trunk for actor and critic (IPPO_CL.py default: separate trunks)."""
    multi_head: bool = True
    """One action/value head slice per task (IPPO_CL.py ``use_multihead``)."""
    task_id_input: bool = True
    """One-hot task id appended to the flattened observation (IPPO_CL.py ``use_task_id``)."""
    cl_method: str = "ft"
    """``ft``, ``ewc``, ``online-ewc``, ``mas``, ``l2`` (MEAL's paper), ``agem``,
    ``er-ace`` or ``packnet`` (MEAL 057f862 ``experiments/continual/``)."""
    reg_coef: float | None = None
    """Penalty strength lambda; ``None``: Table 4's value for ``cl_method``."""
    ewc_decay: float = 0.9
    """Online EWC: ``F = decay F + (1 - decay) F_new`` (Table 4)."""
    importance_mode: str | None = None
    """How a task's new importance joins the old one (EWC, online EWC, MAS; MEAL 057f862
    ``--importance-mode``): ``multi`` (summed), ``online`` (``decay old + (1 - decay)
    new``), ``last`` (replaced); ``None``: the method's own (``ewc`` multi, ``online-ewc``
    online, ``mas`` last: the paper-time code's)."""
    agem_memory_size: int = 100_000
    """AGEM / ER-ACE: transitions in the episodic memory, split evenly over the sequence's
    tasks (``memory_size // num_tasks`` each; MEAL 057f862 ``algos/base.py:61``)."""
    agem_sample_size: int = 1024
    """AGEM / ER-ACE: memory transitions per gradient (``sample_size // num_tasks`` from
    each task's slot), also the transitions stored after each update (``base.py:62``)."""
    er_ace_coef: float = 1.0
    """ER-ACE: weight of the replayed behaviour-cloning gradient (``base.py:63``)."""
    packnet_finetune_steps: int = 10_000_000
    """PackNet: env steps of fine-tuning after each task's pruning, beyond the task's budget
    (MEAL 057f862 ``finetune_timesteps``, ``base.py:68``); whole updates: MEAL's
    ``finetune_timesteps // num_steps // num_envs`` (:attr:`finetune_updates`), as the
    task budgets; 0: prune without fine-tuning."""
    importance_episodes: int = 5
    """Fresh episodes per importance estimate (Table 4)."""
    importance_steps: int = 500
    """Env steps per importance episode (Table 4; EWC runs on through the episode end)."""
    normalize_importance: bool = False
    """Divide a new importance by its mean absolute value over the whole parameter tree
    (IPPO_CL.py ``normalize_importance``, off)."""
    regularize_critic: bool = False
    """Also regularise the critic (Table 4: No)."""
    regularize_heads: bool = False
    """Also regularise the actor/critic heads (Table 4: No)."""
    remedy: RemedyConfig = field(default_factory=RemedyConfig)
    """The plasticity remedy and its settings (``cl_suites.remedies``; set by ``--method``:
    ``redo``, ``ewc+redo``); none by default. ``JaxIPPO`` runs it inside its programs
    (``baselines_jax.remedies``); it checks its own values."""

    def __post_init__(self) -> None:
        if self.cl_method not in MEAL_METHODS:
            raise ValueError(
                f"unknown cl_method {self.cl_method!r}; valid: {', '.join(MEAL_METHODS)}"
            )
        if self.importance_mode is not None and self.importance_mode not in IMPORTANCE_MODES:
            raise ValueError(
                f"unknown importance_mode {self.importance_mode!r}; valid: "
                f"{', '.join(IMPORTANCE_MODES)} (or None: the method's own)"
            )
        if self.network is not None and self.network not in NETWORKS:
            raise ValueError(
                f"unknown network {self.network!r}; valid: {', '.join(NETWORKS)} "
                "(or None: the method's own)"
            )
        if self.advantage_normalization not in ADVANTAGE_NORMALIZATIONS:
            raise ValueError(
                f"unknown advantage_normalization {self.advantage_normalization!r}; valid: "
                f"{', '.join(ADVANTAGE_NORMALIZATIONS)}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}; valid: {', '.join(ACTIVATIONS)}"
            )
        for name in (
            "num_envs",
            "num_steps",
            "update_epochs",
            "num_minibatches",
            "importance_episodes",
            "importance_steps",
            "agem_memory_size",
            "agem_sample_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide num_envs * num_steps "
                f"({self.num_envs * self.num_steps})"
            )
        if not self.hidden_sizes:
            raise ValueError("hidden_sizes must name at least one layer width")
        steps = self.packnet_finetune_steps
        if isinstance(steps, float) and steps.is_integer():  # 1e7, MEAL's float
            steps = int(steps)
            object.__setattr__(self, "packnet_finetune_steps", steps)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(
                f"packnet_finetune_steps must be a non-negative int (env steps), got {steps!r}"
            )
        if self.cl_method == "packnet" and 0 < steps < self.env_steps_per_update:
            raise ValueError(
                f"packnet_finetune_steps={steps} is less than one update (num_envs * "
                f"num_steps = {self.env_steps_per_update} env steps): 0 for no fine-tuning, "
                f"or at least {self.env_steps_per_update}"
            )

    @property
    def central_critic(self) -> bool:
        """The critic reads every agent's observation of the env (MAPPO); IPPO's does not."""
        return False

    @property
    def lam(self) -> float:
        """The penalty strength in effect."""
        return DEFAULT_REG_COEF[self.cl_method] if self.reg_coef is None else float(self.reg_coef)

    @property
    def mode(self) -> str:
        """The importance mode in effect (``importance_mode`` or the method's own)."""
        return self.importance_mode or DEFAULT_IMPORTANCE_MODE.get(self.cl_method, "multi")

    @property
    def architecture(self) -> str:
        """The network in effect (``network`` or the method's own, :data:`NETWORKS`)."""
        return self.network or DEFAULT_NETWORK.get(self.cl_method, "mlp")

    @property
    def env_steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def finetune_updates(self) -> int:
        """PackNet's fine-tune updates per task (MEAL's ``finetune_updates``:
        ``packnet_finetune_steps // num_steps // num_envs``); 0 for other methods."""
        if self.cl_method != "packnet":
            return 0
        return self.packnet_finetune_steps // self.num_steps // self.num_envs
