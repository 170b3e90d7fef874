"""Running statistics the learners keep: the running reward standard deviation
V-trace divides rewards by (CORA's)."""

from __future__ import annotations

import torch as th
from torch import nn

REWARD_STD_COUNTS: tuple[str, ...] = ("cora", "true")


class RunningRewardStd(nn.Module):
    """Running standard deviation of rewards (CORA ``nets.py`` ``update_running_moments`` /
    ``get_running_std``, from MiniHack's polybeast): rewards are divided by it, not centred.
    Buffers, so it travels in the policy's state dict.

    ``count``: what a batch adds to the count.

    * ``"cora"`` (CORA's computation): a time-major ``(T, B)`` batch adds ``len(batch)`` =
      ``T``, while its sum and squared deviations run over all ``T * B`` rewards, and the
      batch "mean" is ``sum / T`` (``B`` times the mean). For one batch the result is
      ``sqrt(B * (var + (B - 1)^2 * mean^2))``: far larger than the rewards' std (3.7
      where it is 0.14 after 120k agent steps of MiniHack Room-Random;
      ``benchmarks/README.md``).
    * ``"true"``: every reward counts once (Chan et al.'s parallel variance update), so
      the std is the population std of all rewards seen.

    For a 1-D batch both agree.
    """

    def __init__(self, count: str = "cora") -> None:
        super().__init__()
        if count not in REWARD_STD_COUNTS:
            raise ValueError(
                f"unknown reward_std_count {count!r}; valid: {', '.join(REWARD_STD_COUNTS)}"
            )
        self.count = count
        self.register_buffer("reward_sum", th.zeros((), dtype=th.float64))
        self.register_buffer("reward_m2", th.zeros((), dtype=th.float64))
        self.register_buffer("reward_count", th.full((), 1e-8, dtype=th.float64))

    @th.no_grad()
    def update(self, rewards: th.Tensor) -> None:
        """Add a batch: time-major ``(T, B)`` (or 1-D ``(T,)``) rewards."""
        rewards = rewards.double()
        count = rewards.shape[0] if self.count == "cora" else rewards.numel()
        new_sum = rewards.sum()
        new_mean = new_sum / count
        mean = self.reward_sum / self.reward_count
        m2 = ((rewards - new_mean) ** 2).sum() + (self.reward_count * count) / (
            self.reward_count + count
        ) * (new_mean - mean) ** 2
        self.reward_count += count
        self.reward_sum += new_sum
        self.reward_m2 += m2

    def std(self) -> th.Tensor:
        return th.sqrt(self.reward_m2 / self.reward_count)
