"""Feature extractors (SB3 ``BaseFeaturesExtractor``) of the IMPALA paper.

Inputs are channel-first images (SB3 transposes channel-last image observations with
``VecTransposeImage`` and scales uint8 images to [0, 1] before the extractor).

* :class:`ImpalaShallowCNN`: the "shallow" model CORA uses for Atari, MiniHack and
  CHORES, i.e. the Nature-DQN CNN of TorchBeast's AtariNet (conv 32x8x8/4, 64x4x4/2,
  64x3x3/1, then a 512-unit ReLU layer).
* :class:`ImpalaDeepCNN`: the "deep" residual model CORA uses for Procgen (three stacks of
  conv3x3 + max-pool 3x3/2 + two residual blocks with 16, 32, 32 channels, then a
  256-unit ReLU layer).
"""

from __future__ import annotations

import gymnasium as gym
import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN
from torch import nn


class ImpalaShallowCNN(NatureCNN):
    """IMPALA's shallow (Nature-DQN) CNN; ``features_dim`` defaults to 512."""

    def __init__(self, observation_space: gym.Space, features_dim: int = 512):
        super().__init__(observation_space, features_dim=features_dim, normalized_image=False)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: th.Tensor) -> th.Tensor:
        out = self.conv0(th.relu(x))
        out = self.conv1(th.relu(out))
        return x + out


class ImpalaDeepCNN(BaseFeaturesExtractor):
    """IMPALA's deep residual CNN.

    Args:
        observation_space: channel-first image Box ``(C, H, W)``.
        features_dim: size of the final ReLU layer (256 in the paper).
        channels: channels of the three stacks.
    """

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
        with th.no_grad():
            n_flat = self.cnn(th.zeros(1, *observation_space.shape)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(observations))


FEATURE_EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {
    "shallow": ImpalaShallowCNN,
    "deep": ImpalaDeepCNN,
}
