"""Actor-critic policies with optional task-id input and multi-head outputs.

:class:`ContinualPolicy` is an SB3 ``ActorCriticPolicy`` that accepts either the plain
observation space, or (when the env is wrapped with
:class:`baselines_sb3.wrappers.TaskIdObservation`) a ``Dict`` space
``{"obs": <observation space>, "task_id": Discrete(num_tasks)}``. Options:

* ``task_id_input``: concatenate the one-hot task id to the extracted features, before
  the actor/critic MLPs.
* ``multi_head``: the action and value layers have one slice per task
  (``num_tasks * n_actions`` logits, ``num_tasks`` values); each row uses the slice of
  its task id. Discrete action spaces only.

Both need the task id, so both need the ``Dict`` observation; both are off by default
(CORA suites use a single head, MEAL turns both on).
:class:`ProgressCompressPolicy` adds the knowledge base of Progress & Compress.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from torch import nn

OBS_KEY = "obs"
TASK_KEY = "task_id"


class ContinualPolicy(ActorCriticPolicy):
    """See the module docstring. Extra args: ``num_tasks``, ``multi_head``, ``task_id_input``."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Any,
        *,
        num_tasks: int = 1,
        multi_head: bool = False,
        task_id_input: bool = False,
        **kwargs: Any,
    ):
        self.task_aware = (
            isinstance(observation_space, spaces.Dict) and TASK_KEY in observation_space.spaces
        )
        if (multi_head or task_id_input) and not self.task_aware:
            raise ValueError(
                "multi_head and task_id_input need the task id in the observation: wrap the "
                "env with baselines_sb3.wrappers.TaskIdObservation (Dict observation with "
                f"keys {OBS_KEY!r}, {TASK_KEY!r}); got observation space {observation_space}"
            )
        if multi_head and not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"multi_head needs a Discrete action space, got {action_space}")
        if not kwargs.get("share_features_extractor", True):
            raise ValueError("ContinualPolicy needs share_features_extractor=True")
        self.num_tasks = int(num_tasks)
        self.multi_head = bool(multi_head)
        self.task_id_input = bool(task_id_input)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    # -- construction ----------------------------------------------------------------
    @property
    def inner_observation_space(self) -> spaces.Space:
        return self.observation_space[OBS_KEY] if self.task_aware else self.observation_space

    def make_features_extractor(self):
        return self.features_extractor_class(
            self.inner_observation_space, **self.features_extractor_kwargs
        )

    def _build_mlp_extractor(self) -> None:
        self.features_dim = self.features_extractor.features_dim + (
            self.num_tasks if self.task_id_input else 0
        )
        super()._build_mlp_extractor()

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        if self.multi_head:
            n = int(self.action_space.n)
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
            num_tasks=self.num_tasks, multi_head=self.multi_head, task_id_input=self.task_id_input
        )
        return data

    # -- core computation --------------------------------------------------------------
    def split_obs(self, obs: Any) -> tuple[th.Tensor, th.Tensor | None]:
        """(observation tensor, task ids ``(B,)`` long or ``None``)."""
        if self.task_aware:
            return obs[OBS_KEY], obs[TASK_KEY].reshape(-1).long()
        return obs, None

    def features(self, obs: Any) -> tuple[th.Tensor, th.Tensor | None]:
        """Extracted features (with the task one-hot when ``task_id_input``) and task ids."""
        x, task_ids = self.split_obs(obs)
        x = preprocess_obs(x, self.inner_observation_space, normalize_images=self.normalize_images)
        feats = self.features_extractor(x)
        if self.task_id_input:
            feats = th.cat([feats, nn.functional.one_hot(task_ids, self.num_tasks).float()], dim=1)
        return feats, task_ids

    def latents(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        feats, task_ids = self.features(obs)
        latent_pi, latent_vf = self.mlp_extractor(feats)
        return latent_pi, latent_vf, task_ids

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
        if self.multi_head:
            rows = th.arange(out.shape[0], device=out.device)
            out = out.view(out.shape[0], self.num_tasks, -1)[rows, task_ids]
            values = values[rows, task_ids].unsqueeze(-1)
        return out, values

    def _dist(self, params: th.Tensor, latent_pi: th.Tensor) -> Distribution:
        if self.multi_head:
            return self.action_dist.proba_distribution(action_logits=params)
        return self._get_action_dist_from_latent(latent_pi)

    def dist_and_values(self, obs: Any) -> tuple[Distribution, th.Tensor]:
        latent_pi, latent_vf, task_ids = self.latents(obs)
        params, values = self.heads(latent_pi, latent_vf, task_ids)
        return self._dist(params, latent_pi), values

    def logits_and_values(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        """Action logits ``(B, n)`` and values ``(B,)`` (Discrete action spaces)."""
        latent_pi, latent_vf, task_ids = self.latents(obs)
        logits, values = self.heads(latent_pi, latent_vf, task_ids)
        return logits, values.flatten()

    # -- SB3 API -----------------------------------------------------------------------
    def forward(self, obs: Any, deterministic: bool = False):
        dist, values = self.dist_and_values(obs)
        actions = dist.get_actions(deterministic=deterministic)
        log_prob = dist.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob

    def evaluate_actions(self, obs: Any, actions: th.Tensor):
        dist, values = self.dist_and_values(obs)
        return values, dist.log_prob(actions), dist.entropy()

    def get_distribution(self, obs: Any) -> Distribution:
        return self.dist_and_values(obs)[0]

    def predict_values(self, obs: Any) -> th.Tensor:
        # no action distribution: SB3 calls this on every truncated episode and at each rollout end
        return self.heads(*self.latents(obs))[1]

    @contextlib.contextmanager
    def evaluation_mode(self) -> Iterator[None]:
        """Act as evaluation should (here: unchanged; P&C: with the knowledge base)."""
        yield


class ProgressCompressPolicy(ContinualPolicy):
    """Active column (the SB3 policy itself) plus a knowledge base (KB) of the same shape.

    The active column receives the KB's last hidden layers through lateral adapters
    (a linear layer from the KB's actor/critic latent to the column's, added before the
    output layers; the KB features are detached so RL gradients never reach the KB).
    ``kb_logits_and_values`` evaluates the KB alone; inside ``evaluation_mode()`` the
    policy acts with the KB (CORA evaluates P&C with its knowledge base).
    Simplification: one adapter at the last hidden layer, not one per layer.
    """

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.kb = nn.ModuleDict(
            {
                "features_extractor": copy.deepcopy(self.features_extractor),
                "mlp_extractor": copy.deepcopy(self.mlp_extractor),
                "action_net": copy.deepcopy(self.action_net),
                "value_net": copy.deepcopy(self.value_net),
            }
        )
        self.adapter_pi = nn.Linear(
            self.mlp_extractor.latent_dim_pi, self.mlp_extractor.latent_dim_pi
        )
        self.adapter_vf = nn.Linear(
            self.mlp_extractor.latent_dim_vf, self.mlp_extractor.latent_dim_vf
        )
        for adapter in (self.adapter_pi, self.adapter_vf):
            nn.init.zeros_(adapter.weight)
            nn.init.zeros_(adapter.bias)
        self._act_with_kb = False
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def kb_parameters(self) -> list[nn.Parameter]:
        return list(self.kb.parameters())

    def active_parameters(self) -> list[nn.Parameter]:
        kb = {id(p) for p in self.kb.parameters()}
        return [p for p in self.parameters() if id(p) not in kb]

    def kb_latents(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        x, task_ids = self.split_obs(obs)
        x = preprocess_obs(x, self.inner_observation_space, normalize_images=self.normalize_images)
        feats = self.kb["features_extractor"](x)
        if self.task_id_input:
            feats = th.cat([feats, nn.functional.one_hot(task_ids, self.num_tasks).float()], dim=1)
        latent_pi, latent_vf = self.kb["mlp_extractor"](feats)
        return latent_pi, latent_vf, task_ids

    def kb_logits_and_values(self, obs: Any) -> tuple[th.Tensor, th.Tensor]:
        latent_pi, latent_vf, task_ids = self.kb_latents(obs)
        logits, values = self.heads(
            latent_pi, latent_vf, task_ids, self.kb["action_net"], self.kb["value_net"]
        )
        return logits, values.flatten()

    def latents(self, obs: Any):
        if self._act_with_kb:
            return self.kb_latents(obs)
        latent_pi, latent_vf, task_ids = super().latents(obs)
        with th.no_grad():
            kb_pi, kb_vf, _ = self.kb_latents(obs)
        return latent_pi + self.adapter_pi(kb_pi), latent_vf + self.adapter_vf(kb_vf), task_ids

    def heads(self, latent_pi, latent_vf, task_ids, action_net=None, value_net=None):
        if self._act_with_kb and action_net is None:
            action_net, value_net = self.kb["action_net"], self.kb["value_net"]
        return super().heads(latent_pi, latent_vf, task_ids, action_net, value_net)

    def _dist(self, params: th.Tensor, latent_pi: th.Tensor) -> Distribution:
        return self.action_dist.proba_distribution(action_logits=params)

    @contextlib.contextmanager
    def evaluation_mode(self) -> Iterator[None]:
        previous, self._act_with_kb = self._act_with_kb, True
        try:
            yield
        finally:
            self._act_with_kb = previous
