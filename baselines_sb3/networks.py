"""Networks of the reference code as SB3 modules.

Feature extractors (SB3 ``BaseFeaturesExtractor``; channel-first images, already scaled to
[0, 1] by SB3's preprocessing), selected by name in ``FEATURE_EXTRACTORS``:

* ``"shallow"`` :class:`ImpalaShallowCNN`: IMPALA's shallow model as CORA builds it for
  Atari, MiniHack and CHORES (``common_nets.py`` ``ConvNet84x84`` arch ``"orig"``: conv
  32x8x8/4, 64x4x4/2, 64x3x3/1, each with ReLU, a 512-unit linear layer, and the ReLU
  that ``nets.py`` applies to the conv net's output).
* ``"residual"`` :class:`CoraResidualCNN`: CORA's only residual network
  (``common_nets.py`` arch ``"impala_res_cnn"``, added in 5508d5f): three stacks of
  conv3x3 (``padding="same"``) + unpadded max-pool 3x3/2 + two residual blocks with 32,
  64, 64 channels, flatten without a ReLU, a 512-unit linear layer and ``nets.py``'s ReLU.
  CORA's residual blocks start with an in-place ReLU on their input, so the skip
  connection adds ``relu(x)``, not ``x``: reproduced here.
* ``"impala-deep"`` :class:`ImpalaDeepCNN`: the residual network of the IMPALA paper as
  other libraries build it (16, 32, 32 channels, padded max-pool, ReLU before flatten,
  256 units). Neither CORA's code nor its paper's; kept as an option.
* ``"a2c-ppo"`` :class:`A2CPPOCNN`: the CNN of CORA's PPO (``a2c_ppo_acktr_gail``
  ``CNNBase``: conv 32x8x8/4, 64x4x4/2, 32x3x3/1, a 512-unit layer).
* ``"mlp"``: SB3's ``FlattenExtractor`` (vector observations, MEAL's grids).

:class:`SeparateTrunks` is MEAL's actor-critic body (``architectures/mlp.py``): two
independent MLPs (actor, critic) of Linear -> ReLU -> LayerNorm layers.

:class:`CReLU` (concatenated ReLU, Plasticine's ``CReLU4Linear``/``CReLU4Conv2d``) doubles
a layer's width; :func:`width_factor` says by how much an activation class widens, and the
trunks size the next layer by it.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch as th
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
    NatureCNN,
)
from torch import nn

from baselines_sb3.sparse import SparseRows, sparse_linear, sparse_rows


def _flat_size(cnn: nn.Module, observation_space: gym.Space) -> int:
    with th.no_grad():
        return int(cnn(th.zeros(1, *observation_space.shape)).shape[1])


class ImpalaShallowCNN(NatureCNN):
    """IMPALA's shallow (Nature-DQN) CNN; ``features_dim`` defaults to 512."""

    def __init__(self, observation_space: gym.Space, features_dim: int = 512):
        super().__init__(observation_space, features_dim=features_dim, normalized_image=False)


class _CoraResidualBlock(nn.Module):
    """``relu(x) + conv(relu(conv(relu(x))))``: CORA's block, whose first ReLU is in place."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding="same")
        self.conv1 = nn.Conv2d(channels, channels, 3, padding="same")

    def forward(self, x: th.Tensor) -> th.Tensor:
        x = th.relu(x)
        return x + self.conv1(th.relu(self.conv0(x)))


class CoraResidualCNN(BaseFeaturesExtractor):
    """CORA's residual CNN (see the module docstring).

    Args:
        observation_space: channel-first image Box ``(C, H, W)``.
        features_dim: units of the final layer (CORA: 512).
        channels: channels of the three stacks (CORA: ``hidden_dim=32`` -> 32, 64, 64).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        features_dim: int = 512,
        channels: tuple[int, ...] = (32, 64, 64),
    ):
        super().__init__(observation_space, features_dim)
        layers: list[nn.Module] = []
        in_channels = observation_space.shape[0]
        for out_channels in channels:
            layers += [
                nn.Conv2d(in_channels, out_channels, 3, padding="same"),
                nn.MaxPool2d(3, stride=2),
                _CoraResidualBlock(out_channels),
                _CoraResidualBlock(out_channels),
            ]
            in_channels = out_channels
        layers.append(nn.Flatten())
        self.cnn = nn.Sequential(*layers)
        self.linear = nn.Sequential(
            nn.Linear(_flat_size(self.cnn, observation_space), features_dim), nn.ReLU()
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        if not th.is_grad_enabled() and observations.device.type == "cpu":
            # acting and evaluation on the CPU: channels-last activations, for which
            # oneDNN's convolutions and max-pool take 1.8x less CPU time at 32 rows
            # (bench_cora.py); the flatten reads (C, H, W) order as before. Not where
            # gradients flow: the update's sums would come in another order (about 1e-4 of
            # an update apart from CORA's, the tolerance of parity_cora.py). Not on a GPU:
            # there it is one more copy of every acting batch, tuned for oneDNN only
            observations = observations.contiguous(memory_format=th.channels_last)
        return self.linear(self.cnn(observations))


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: th.Tensor) -> th.Tensor:
        return x + self.conv1(th.relu(self.conv0(th.relu(x))))


class ImpalaDeepCNN(BaseFeaturesExtractor):
    """The IMPALA paper's deep residual CNN (16/32/32 channels, 256 units)."""

    def __init__(
        self,
        observation_space: gym.Space,
        features_dim: int = 256,
        channels: tuple[int, ...] = (16, 32, 32),
    ):
        super().__init__(observation_space, features_dim)
        in_channels = observation_space.shape[0]
        layers: list[nn.Module] = []
        for out_channels in channels:
            layers += [
                nn.Conv2d(in_channels, out_channels, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                _ResidualBlock(out_channels),
                _ResidualBlock(out_channels),
            ]
            in_channels = out_channels
        layers += [nn.ReLU(), nn.Flatten()]
        self.cnn = nn.Sequential(*layers)
        self.linear = nn.Sequential(
            nn.Linear(_flat_size(self.cnn, observation_space), features_dim), nn.ReLU()
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(observations))


class A2CPPOCNN(BaseFeaturesExtractor):
    """CORA's PPO CNN (``a2c_ppo_acktr_gail`` ``CNNBase``): 32/64/32 channels, 512 units.
    The flattened size is computed from the input (CORA hard-codes 84x84 inputs)."""

    def __init__(self, observation_space: gym.Space, features_dim: int = 512):
        super().__init__(observation_space, features_dim)
        self.cnn = nn.Sequential(
            nn.Conv2d(observation_space.shape[0], 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 32, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.linear = nn.Sequential(
            nn.Linear(_flat_size(self.cnn, observation_space), features_dim), nn.ReLU()
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(observations))


FEATURE_EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {
    "shallow": ImpalaShallowCNN,
    "residual": CoraResidualCNN,
    "impala-deep": ImpalaDeepCNN,
    "a2c-ppo": A2CPPOCNN,
    "mlp": FlattenExtractor,
}
"""Feature extractors by the name the presets and ``--network`` use."""


class CReLU(nn.Module):
    """Concatenated ReLU: ``cat(relu(x), relu(-x))`` along the unit axis, so the output has
    twice the units of the input (Plasticine's ``CReLU4Linear`` / ``CReLU4Conv2d``,
    ``plasticine/utils.py``; Shang et al. 2016, Abbas et al. 2023).

    Args:
        dim: the unit axis; ``None`` (default): the channel axis 1 of a 4-d ``(B, C, H, W)``
            input, else the last axis.

    Shapes: ``(..., n)`` -> ``(..., 2n)``; ``(B, C, H, W)`` -> ``(B, 2C, H, W)``. Unit ``j`` of
    the input becomes output units ``j`` (its positive part) and ``n + j`` (its negative part).
    """

    width_factor = 2
    """Output units per input unit (:func:`width_factor`)."""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: th.Tensor) -> th.Tensor:
        dim = self.dim if self.dim is not None else (1 if x.ndim == 4 else -1)
        return th.cat((th.relu(x), th.relu(-x)), dim=dim)

    def extra_repr(self) -> str:
        return "" if self.dim is None else f"dim={self.dim}"


def width_factor(activation: type[nn.Module] | nn.Module) -> int:
    """Output units per input unit of an activation (class or module): 2 for
    :class:`CReLU`, 1 for the elementwise ones."""
    return int(getattr(activation, "width_factor", 1))


class SeparateTrunks(nn.Module):
    """MEAL's actor-critic body: independent actor and critic MLPs, each layer
    ``Linear -> activation -> LayerNorm(eps=1e-5)`` (LayerNorm optional).

    Same interface as SB3's ``MlpExtractor`` (``policy_net``, ``value_net``,
    ``latent_dim_pi``, ``latent_dim_vf``, ``forward_actor``, ``forward_critic``).

    Args:
        feature_dim: input size (flattened observation, plus the task one-hot).
        net_arch: hidden sizes, shared by both trunks (MEAL: ``[128, 128]``).
        layer_norm: apply LayerNorm after each activation (MEAL: True).
        activation_fn: activation class (MEAL: ReLU). A widening one (:class:`CReLU`) makes
            the LayerNorm, the next layer and the latent ``width_factor`` times as wide.
        sparse_input: compute the first layer of both trunks from the input's non-zero
            entries when that is faster (:mod:`baselines_sb3.sparse`: the same function,
            float32 summation order aside; MEAL's observations are 97% zeros).
    """

    def __init__(
        self,
        feature_dim: int,
        net_arch: list[int],
        layer_norm: bool = True,
        activation_fn: type[nn.Module] = nn.ReLU,
        sparse_input: bool = True,
    ):
        super().__init__()
        self.sparse_input = bool(sparse_input)

        factor = width_factor(activation_fn)

        def trunk() -> nn.Sequential:
            layers: list[nn.Module] = []
            size = feature_dim
            for width in net_arch:
                layers += [nn.Linear(size, width), activation_fn()]
                size = width * factor
                if layer_norm:
                    layers.append(nn.LayerNorm(size, eps=1e-5))
            return nn.Sequential(*layers)

        self.policy_net = trunk()
        self.value_net = trunk()
        self.latent_dim_pi = self.latent_dim_vf = net_arch[-1] * factor if net_arch else feature_dim

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        rows = self.sparse_rows(features)
        if rows is not None:
            return self.forward_rows(rows)
        return self.policy_net(features), self.value_net(features)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        rows = self.sparse_rows(features)
        return self.policy_net(features) if rows is None else self._trunk(self.policy_net, rows)

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        rows = self.sparse_rows(features)
        return self.value_net(features) if rows is None else self._trunk(self.value_net, rows)

    def sparse_rows(
        self, x: th.Tensor, one_hots: Sequence[tuple[th.Tensor, int]] = ()
    ) -> SparseRows | None:
        """The input rows ``[x, one-hots]`` in sparse form when this module takes sparse
        input and that pays off (:func:`baselines_sb3.sparse.sparse_rows`), else ``None``."""
        if not self.sparse_input or not len(self.policy_net):
            return None
        return sparse_rows(x, self.policy_net[0].weight, one_hots)

    def forward_rows(self, rows: SparseRows) -> tuple[th.Tensor, th.Tensor]:
        """``forward`` of the input that ``rows`` holds."""
        return self._trunk(self.policy_net, rows), self._trunk(self.value_net, rows)

    @staticmethod
    def _trunk(trunk: nn.Sequential, rows: SparseRows) -> th.Tensor:
        first, *rest = trunk
        x = sparse_linear(rows, first.weight, first.bias)
        for layer in rest:
            x = layer(x)
        return x
