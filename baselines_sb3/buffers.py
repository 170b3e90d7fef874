"""The learners' rollout buffers (SB3's ``RolloutBuffer`` family): V-trace's, which keep
the bootstrap values and skip SB3's GAE, and PPO's with the policy's sparse input rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer

from baselines_sb3.policies import SPARSE_ROWS_KEY
from baselines_sb3.sparse import MIN_ROWS, SparseRows


class _BootstrapMixin:
    """Keeps the bootstrap values and skips SB3's GAE loop (V-trace computes its own targets)."""

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        self.last_values = last_values.clone().cpu().numpy().flatten()
        self.last_dones = np.asarray(dones, dtype=np.float32).copy()


class VTraceRolloutBuffer(_BootstrapMixin, RolloutBuffer):
    """Rollout buffer for V-trace (plain observations)."""


class VTraceDictRolloutBuffer(_BootstrapMixin, DictRolloutBuffer):
    """Rollout buffer for V-trace (Dict observations)."""


class SparseRowsRolloutBuffer(DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` whose minibatches also carry the policy's sparse input
    rows (:class:`~baselines_sb3.sparse.SparseRows`, under ``SPARSE_ROWS_KEY`` of
    ``observations``), found once per rollout instead of once per minibatch.

    ``rows_of`` (the policy's ``sparse_features``) maps the whole flattened rollout's
    observations to rows, or to ``None`` when its trunks do not take sparse input; each
    minibatch of at least ``MIN_ROWS`` rows then takes its rows from them
    (:meth:`SparseRows.take`: the same entries in the same order as building them from the
    minibatch, so training is unchanged bit for bit). MEAL's PPO epochs read each
    observation 8 times; finding the non-zero entries once saves about 2 ms of a 512-row
    minibatch.
    """

    rows_of: Callable[[dict[str, th.Tensor]], SparseRows | None] | None = None

    def reset(self) -> None:
        super().reset()
        self._rows: SparseRows | None = None
        self._rows_found = False

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:  # type: ignore[override]
        samples = super()._get_samples(batch_inds, env)
        rows = self._rollout_rows() if len(batch_inds) >= MIN_ROWS else None
        if rows is not None:
            samples.observations[SPARSE_ROWS_KEY] = rows.take(th.as_tensor(batch_inds))
        return samples

    def _rollout_rows(self) -> SparseRows | None:
        if not self._rows_found:  # get() has flattened the observations to (T * E, ...)
            if self.rows_of is not None:
                obs = {key: th.as_tensor(value) for key, value in self.observations.items()}
                self._rows = self.rows_of(obs)
            self._rows_found = True
        return self._rows


def flat_observations(observations: Any, device: th.device) -> Any:
    """``(T, E, ...)`` buffer observations to a flat ``(T*E, ...)`` tensor (or dict of them)."""
    if isinstance(observations, dict):
        return {k: flat_observations(v, device) for k, v in observations.items()}
    return th.as_tensor(observations.reshape(-1, *observations.shape[2:]), device=device)
