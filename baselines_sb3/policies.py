"""The actor-critic policy of every baseline: SB3's ``ActorCriticPolicy`` with the inputs,
heads and action masks of the reference code.

:class:`ContinualPolicy` takes the plain observation space, or the ``Dict`` space that the
wrappers of :mod:`baselines_sb3.wrappers` build: ``{"obs": <observation>, "task_id":
Discrete(num_tasks), "prev_action": Discrete(n), "prev_reward": Box(-1, 1, (1,))}`` (each
key optional but ``"obs"``). Options:

* previous action and reward (present when the observation has the keys): the
  extracted features are followed by the previous reward clipped to [-1, 1] and the
  one-hot previous action, as CORA's ``nets.py`` builds IMPALA's core input.
* ``task_id_input``: the one-hot task id is concatenated to the extracted features
  (MEAL: to the flattened observation, before the trunks).
* ``multi_head``: the action and value layers hold one slice per task (``num_tasks * n``
  logits, ``num_tasks`` values) and each row uses its task's slice (MEAL's ``choose_head``).
  Discrete action spaces only.
* ``action_masks``: ``(num_tasks, n)`` bool, the valid actions of each task (MiniHack15).
  Each row's logits are masked by its task id. ``action_mask_mode="sampling"`` masks
  only where actions are chosen (sampling and argmax), as CORA's ``nets.py`` does (its
  learner computes the losses on the full logits); ``"full"`` masks the distribution the
  losses use too.
* ``trunk_layer_norm``: MEAL's separate actor and critic trunks with LayerNorm
  (:class:`~baselines_sb3.networks.SeparateTrunks`) instead of SB3's ``MlpExtractor``.
  A widening activation (``activation_fn=CReLU``) takes the same trunks without LayerNorm,
  as SB3's ``MlpExtractor`` cannot size a layer after it.

:meth:`ContinualPolicy.parameter_groups` names the parts that regularisers select
(``shared``, ``actor_trunk``, ``critic_trunk``, ``actor_head``, ``critic_head``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from stable_baselines3.common.torch_layers import FlattenExtractor
from torch import nn

from baselines_sb3.networks import SeparateTrunks, width_factor
from baselines_sb3.sparse import SparseRows

OBS_KEY = "obs"
TASK_KEY = "task_id"
SPARSE_ROWS_KEY = "_sparse_rows"
"""Minibatch observations may carry the policy's :class:`SparseRows` under this key
(:class:`~baselines_sb3.buffers.SparseRowsRolloutBuffer`); it is not an env key."""
PREV_ACTION_KEY = "prev_action"
PREV_REWARD_KEY = "prev_reward"
POLICY_INPUT_KEYS: tuple[str, ...] = (OBS_KEY, TASK_KEY, PREV_ACTION_KEY, PREV_REWARD_KEY)
ACTION_MASK_MODES: tuple[str, ...] = ("sampling", "full")
PARAMETER_GROUPS: tuple[str, ...] = (
    "shared",
    "actor_trunk",
    "critic_trunk",
    "actor_head",
    "critic_head",
)


_ARANGES: dict[tuple[int, str], th.Tensor] = {}


def _one_hot(ids: th.Tensor, n: int) -> th.Tensor:
    """``(B,)`` ids to ``(B, n)`` float one-hots (a comparison, so ``vmap`` can batch it)."""
    key = (n, str(ids.device))
    if key not in _ARANGES:
        _ARANGES[key] = th.arange(n, device=ids.device)
    return (ids.unsqueeze(-1) == _ARANGES[key]).float()


def _keys(space: spaces.Space) -> tuple[str, ...]:
    return tuple(space.spaces) if isinstance(space, spaces.Dict) else ()


class ContinualPolicy(ActorCriticPolicy):
    """See the module docstring.

    Extra args: ``num_tasks``, ``multi_head``, ``task_id_input``, ``action_masks``
    (``(num_tasks, n_actions)`` bool or ``None``), ``action_mask_mode``
    (``"sampling"`` or ``"full"``), ``trunk_layer_norm``.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Any,
        *,
        num_tasks: int = 1,
        multi_head: bool = False,
        task_id_input: bool = False,
        action_masks: np.ndarray | None = None,
        action_mask_mode: str = "sampling",
        trunk_layer_norm: bool = False,
        **kwargs: Any,
    ):
        keys = _keys(observation_space)
        if keys and OBS_KEY not in keys:
            raise ValueError(
                f"ContinualPolicy needs a plain observation space or a Dict with key {OBS_KEY!r} "
                f"(the baselines_sb3.wrappers layout); got keys {keys}"
            )
        unknown = [k for k in keys if k not in POLICY_INPUT_KEYS]
        if unknown:
            raise ValueError(
                f"unknown observation keys {unknown}; valid: {', '.join(POLICY_INPUT_KEYS)}"
            )
        self.task_aware = TASK_KEY in keys
        self.previous_action_reward = PREV_ACTION_KEY in keys and PREV_REWARD_KEY in keys
        if (PREV_ACTION_KEY in keys) != (PREV_REWARD_KEY in keys):
            raise ValueError(f"{PREV_ACTION_KEY!r} and {PREV_REWARD_KEY!r} come together")
        needs_task = [
            name
            for name, on in (
                ("multi_head", multi_head),
                ("task_id_input", task_id_input),
                ("action_masks", action_masks is not None),
            )
            if on
        ]
        if needs_task and not self.task_aware:
            raise ValueError(
                f"{', '.join(needs_task)} need the task id in the observation: wrap the env "
                "with baselines_sb3.wrappers.TaskIdObservation (Dict observation with keys "
                f"{OBS_KEY!r}, {TASK_KEY!r}); got observation space {observation_space}"
            )
        discrete = isinstance(action_space, spaces.Discrete)
        if (multi_head or action_masks is not None or self.previous_action_reward) and not discrete:
            raise ValueError(
                "multi_head, action_masks and previous-action inputs need a Discrete action "
                f"space, got {action_space}"
            )
        if action_mask_mode not in ACTION_MASK_MODES:
            raise ValueError(
                f"unknown action_mask_mode {action_mask_mode!r}; valid: "
                f"{', '.join(ACTION_MASK_MODES)}"
            )
        if not kwargs.get("share_features_extractor", True):
            raise ValueError("ContinualPolicy needs share_features_extractor=True")
        self.num_tasks = int(num_tasks)
        self.multi_head = bool(multi_head)
        self.task_id_input = bool(task_id_input)
        self.action_mask_mode = action_mask_mode
        self.trunk_layer_norm = bool(trunk_layer_norm)
        masks = None
        if action_masks is not None:
            masks = np.asarray(action_masks, dtype=bool)
            expected = (self.num_tasks, int(action_space.n))
            if masks.shape != expected:
                raise ValueError(f"action_masks must have shape {expected}, got {masks.shape}")
            if not masks.any(axis=1).all():
                raise ValueError("every task needs at least one valid action in action_masks")
        self._action_masks_np = masks
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)
        if masks is not None:
            self.register_buffer("action_mask", th.as_tensor(masks), persistent=False)

    # -- construction ----------------------------------------------------------------
    @property
    def inner_observation_space(self) -> spaces.Space:
        """The simulator's observation space (the ``"obs"`` key of a Dict layout)."""
        keys = _keys(self.observation_space)
        return self.observation_space[OBS_KEY] if keys else self.observation_space

    @property
    def n_actions(self) -> int:
        return int(self.action_space.n)

    def make_features_extractor(self):
        return self.features_extractor_class(
            self.inner_observation_space, **self.features_extractor_kwargs
        )

    def extra_features_dim(self) -> int:
        """Inputs appended to the extracted features (task one-hot, reward, action one-hot)."""
        return (self.num_tasks if self.task_id_input else 0) + (
            1 + self.n_actions if self.previous_action_reward else 0
        )

    def _build_mlp_extractor(self) -> None:
        self.features_dim = self.features_extractor.features_dim + self.extra_features_dim()
        if self.trunk_layer_norm:
            self.mlp_extractor = SeparateTrunks(
                self.features_dim, list(self.net_arch), True, self.activation_fn
            )
        elif width_factor(self.activation_fn) != 1:
            # SB3's MlpExtractor sizes each layer by the previous width: a widening
            # activation (CReLU) takes the same two trunks, without LayerNorm
            if not isinstance(self.net_arch, list | tuple):
                raise ValueError(
                    f"activation {self.activation_fn.__name__} needs net_arch as a list of "
                    f"widths (both trunks), got {self.net_arch!r}"
                )
            self.mlp_extractor = SeparateTrunks(
                self.features_dim, list(self.net_arch), False, self.activation_fn, False
            )
        else:
            super()._build_mlp_extractor()
        inner = self.inner_observation_space
        self._sparse_features = (
            isinstance(self.mlp_extractor, SeparateTrunks)
            and isinstance(self.features_extractor, FlattenExtractor)
            and isinstance(inner, spaces.Box)
            and not (self.normalize_images and is_image_space(inner, check_channels=False))
            and not self.previous_action_reward
        )

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        if self.multi_head:
            n = self.n_actions
            self.action_net = nn.Linear(self.mlp_extractor.latent_dim_pi, n * self.num_tasks)
            self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, self.num_tasks)
            if self.ortho_init:
                self.action_net.apply(lambda m: self.init_weights(m, gain=0.01))
                self.value_net.apply(lambda m: self.init_weights(m, gain=1.0))
            self.optimizer = self.optimizer_class(
                self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
            )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            num_tasks=self.num_tasks,
            multi_head=self.multi_head,
            task_id_input=self.task_id_input,
            action_masks=self._action_masks_np,
            action_mask_mode=self.action_mask_mode,
            trunk_layer_norm=self.trunk_layer_norm,
        )
        return data

    # -- parameter groups (interface 12) -----------------------------------------------
    def parameter_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """Trainable parameters by part (see :func:`parameter_groups`); subclasses add keys."""
        return parameter_groups(self)

    def build_observation(
        self,
        obs: np.ndarray,
        task_ids: np.ndarray | None = None,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
    ) -> Any:
        """The policy's observation layout from its parts (for evaluation loops that step
        bare simulators): task ids, previous actions and rewards (clipped to [-1, 1] here;
        zeros when not given) as the wrappers would add them."""
        if not _keys(self.observation_space):
            return obs
        n = len(obs)
        out: dict[str, Any] = {OBS_KEY: obs}
        if self.task_aware:
            out[TASK_KEY] = np.asarray(task_ids if task_ids is not None else np.zeros(n), np.int64)
        if self.previous_action_reward:
            actions = np.zeros(n, np.int64) if prev_actions is None else prev_actions
            rewards = np.zeros(n, np.float32) if prev_rewards is None else prev_rewards
            out[PREV_ACTION_KEY] = np.asarray(actions, np.int64).reshape(n)
            out[PREV_REWARD_KEY] = np.clip(np.asarray(rewards, np.float32), -1, 1).reshape(n, 1)
        return out

    # -- core computation --------------------------------------------------------------
    def task_ids(self, obs: Any) -> th.Tensor | None:
        """Task id of each row ``(B,)`` long, or ``None`` for task-agnostic layouts."""
        if not self.task_aware:
            return None
        return obs[TASK_KEY].reshape(-1).long()

    def features(self, obs: Any, extractor: nn.Module | None = None) -> th.Tensor:
        """Extracted features followed by the extra inputs (see the module docstring)."""
        x = obs[OBS_KEY] if _keys(self.observation_space) else obs
        x = preprocess_obs(x, self.inner_observation_space, normalize_images=self.normalize_images)
        parts = [(extractor or self.features_extractor)(x)]
        if self.task_id_input:
            parts.append(_one_hot(self.task_ids(obs), self.num_tasks))
        if self.previous_action_reward:
            reward = obs[PREV_REWARD_KEY].reshape(-1, 1).float().clamp(-1.0, 1.0)
            parts += [reward, _one_hot(obs[PREV_ACTION_KEY].reshape(-1).long(), self.n_actions)]
        return parts[0] if len(parts) == 1 else th.cat(parts, dim=1)

    def latents(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        rows = self.sparse_features(obs)
        if rows is not None:
            return self.mlp_extractor.forward_rows(rows)
        return self.mlp_extractor(self.features(obs))

    def sparse_features(self, obs: Any) -> SparseRows | None:
        """``features(obs)`` as :class:`~baselines_sb3.sparse.SparseRows`, built from the raw
        observation without a dense float copy, when the trunks take sparse input (MEAL's
        :class:`~baselines_sb3.networks.SeparateTrunks`), the features are the flattened
        observation (plus the task one-hot) and that pays off; else ``None``."""
        if not self._sparse_features:
            return None
        if isinstance(obs, dict) and SPARSE_ROWS_KEY in obs:  # found once per rollout
            return obs[SPARSE_ROWS_KEY]
        x = obs[OBS_KEY] if _keys(self.observation_space) else obs
        one_hots = [(self.task_ids(obs), self.num_tasks)] if self.task_id_input else []
        return self.mlp_extractor.sparse_rows(x.reshape(x.shape[0], -1), one_hots)

    def heads(
        self,
        latent_pi: th.Tensor,
        latent_vf: th.Tensor,
        task_ids: th.Tensor | None,
        action_net: nn.Module | None = None,
        value_net: nn.Module | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """(action-distribution parameters ``(B, n)``, values ``(B, 1)``) of each row's head."""
        out = (action_net or self.action_net)(latent_pi)
        values = (value_net or self.value_net)(latent_vf)
        if self.multi_head:  # gather, not fancy indexing: per-sample gradients vmap it
            n = out.shape[1] // self.num_tasks
            index = task_ids.view(-1, 1, 1).expand(-1, 1, n)
            out = out.view(-1, self.num_tasks, n).gather(1, index).squeeze(1)
            values = values.gather(1, task_ids.view(-1, 1))
        return out, values

    def outputs(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """(distribution parameters, values ``(B, 1)``, task ids) in one pass."""
        latent_pi, latent_vf = self.latents(obs)
        task_ids = self.task_ids(obs)
        params, values = self.heads(latent_pi, latent_vf, task_ids)
        return params, values, task_ids

    def mask_logits(self, logits: th.Tensor, task_ids: th.Tensor | None) -> th.Tensor:
        """``logits`` with each row's invalid actions set to the lowest float (no-op without
        masks)."""
        if self._action_masks_np is None:
            return logits
        valid = self.action_mask[task_ids]
        return logits.masked_fill(~valid, th.finfo(logits.dtype).min)

    def _distribution(self, params: th.Tensor) -> Distribution:
        # SB3's distribution objects hold their parameters: one fresh object per call
        dist = copy.copy(self.action_dist)
        if isinstance(dist, DiagGaussianDistribution):
            return dist.proba_distribution(params, self.log_std)
        return dist.proba_distribution(action_logits=params)

    def loss_and_acting_distributions(
        self, obs: Any
    ) -> tuple[Distribution, Distribution, th.Tensor]:
        """(distribution of the losses, distribution actions are chosen from, values)."""
        params, values, task_ids = self.outputs(obs)
        if self._action_masks_np is None:
            dist = self._distribution(params)
            return dist, dist, values
        masked = self._distribution(self.mask_logits(params, task_ids))
        loss_dist = masked if self.action_mask_mode == "full" else self._distribution(params)
        return loss_dist, masked, values

    def logits_and_values(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        """Action logits ``(B, n)`` as the losses see them and values ``(B,)``."""
        params, values, task_ids = self.outputs(obs)
        if self.action_mask_mode == "full":
            params = self.mask_logits(params, task_ids)
        return params, values.flatten()

    # -- SB3 API -----------------------------------------------------------------------
    def forward(self, obs: Any, deterministic: bool = False):
        loss_dist, acting, values = self.loss_and_acting_distributions(obs)
        actions = acting.get_actions(deterministic=deterministic)
        log_prob = loss_dist.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob

    def evaluate_actions(self, obs: Any, actions: th.Tensor):
        loss_dist, _, values = self.loss_and_acting_distributions(obs)
        return values, loss_dist.log_prob(actions), loss_dist.entropy()

    def get_distribution(self, obs: Any) -> Distribution:
        """The distribution actions are chosen from (masked when the task has masks)."""
        return self.loss_and_acting_distributions(obs)[1]

    def _predict(self, observation: Any, deterministic: bool = False) -> th.Tensor:
        return self.get_distribution(observation).get_actions(deterministic=deterministic)

    def predict_values(self, obs: Any) -> th.Tensor:
        latent_pi, latent_vf = self.latents(obs)
        return self.heads(latent_pi, latent_vf, self.task_ids(obs))[1]

    @contextlib.contextmanager
    def evaluation_mode(self) -> Iterator[None]:
        """Act as evaluation should (here: unchanged; P&C: with the knowledge base)."""
        yield


_GROUP_PREFIXES = {
    "shared": "features_extractor.",
    "actor_trunk": "mlp_extractor.policy_net.",
    "critic_trunk": "mlp_extractor.value_net.",
    "actor_head": "action_net.",
    "critic_head": "value_net.",
}


def parameter_groups(policy: ActorCriticPolicy) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Trainable parameters of any SB3 ``ActorCriticPolicy`` by part, with their
    ``named_parameters`` names (interface 12): ``shared`` (features extractor),
    ``actor_trunk`` / ``critic_trunk`` (the MLP extractor's policy / value nets),
    ``actor_head`` (``action_net``), ``critic_head`` (``value_net``)."""
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {k: [] for k in _GROUP_PREFIXES}
    for name, param in policy.named_parameters():
        if not param.requires_grad:
            continue
        for group, prefix in _GROUP_PREFIXES.items():
            if name.startswith(prefix):
                groups[group].append((name, param))
                break
    return groups
