"""The most recent unrolls of training, for CORA's Fisher and P&C's distillation.

CORA's EWC keeps, per task, a ring buffer of the task's latest unrolls
(``ewc_monobeast.py`` ``EWCTaskInfo``: ``replay_buffer_frames`` frames, file-backed) and
draws its Fisher batches from it; online EWC and P&C keep one such buffer for all tasks.
:class:`UnrollBuffer` is that ring: it stores whole rollouts (``E`` unrolls of ``T``
transitions plus the observation after them, as CORA's ``T + 1`` frames) and drops the
oldest rollout while more than ``capacity_frames`` transitions are held (the latest
rollout is always kept). Observations are stored in the observation space's own dtype
(uint8 images, int64 discrete keys), in RAM or, with ``disk_dir``, in ``.npy`` files read
through memory maps (a checkpoint then records the file names, not the contents; files
dropped after the checkpoint are skipped on resume with a warning). A RAM buffer larger
than ``checkpoint_limit_bytes`` is left out of checkpoints (with a warning): after a
resume it refills from the frames played since (CORA's paper-size buffers are 1e6
frames, 28 GB of Atari observations, which CORA kept on disk too).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from baselines_sb3.cl.base import Rollout
from baselines_sb3.cl.storage import place_buffer


def _obs_dtypes(space: spaces.Space) -> dict[str, np.dtype]:
    subspaces = dict(space.spaces) if isinstance(space, spaces.Dict) else {"": space}
    return {
        key: np.dtype(np.int64) if isinstance(sp, spaces.Discrete) else np.dtype(sp.dtype)
        for key, sp in subspaces.items()
    }


def _as_dict(obs: Any) -> dict[str, np.ndarray]:
    return dict(obs) if isinstance(obs, Mapping) else {"": obs}


class UnrollBuffer:
    """Ring buffer of the latest unrolls (see the module docstring).

    Args:
        capacity_frames: transitions kept (CORA's ``replay_buffer_frames``).
        observation_space: the policy's observation space (possibly ``Dict``).
        disk_dir: keep observations in ``.npy`` files under this directory.
    """

    def __init__(
        self,
        capacity_frames: int,
        observation_space: spaces.Space,
        disk_dir: str | os.PathLike[str] | None = None,
        checkpoint_limit_bytes: int = 256 * 2**20,
    ):
        if int(capacity_frames) < 1:
            raise ValueError(f"capacity_frames must be >= 1, got {capacity_frames}")
        self.capacity_frames = int(capacity_frames)
        self.dtypes = _obs_dtypes(observation_space)
        self.dict_obs = isinstance(observation_space, spaces.Dict)
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        self.chunks: list[dict[str, Any]] = []
        self._next_id = 0
        self.checkpoint_limit_bytes = int(checkpoint_limit_bytes)
        self.frame_bytes = self.frame_nbytes(observation_space)

    @staticmethod
    def frame_nbytes(observation_space: spaces.Space) -> int:
        """Observation bytes of one stored frame (each key in its stored dtype)."""
        dtypes = _obs_dtypes(observation_space)
        subspaces = (
            observation_space.spaces.values()
            if isinstance(observation_space, spaces.Dict)
            else [observation_space]
        )
        return sum(
            int(np.prod(sp.shape or (1,))) * dtypes[k].itemsize
            for k, sp in zip(dtypes, subspaces, strict=True)
        )

    @property
    def max_bytes(self) -> int:
        """Observation bytes of a full buffer."""
        return self.capacity_frames * self.frame_bytes

    @property
    def resident_bytes(self) -> int:
        """Observation bytes held in RAM now."""
        return sum(
            a.nbytes
            for c in self.chunks
            for a in c["obs"].values()
            if not getattr(a, "filename", None)
        )

    # -- filling -------------------------------------------------------------------------
    @property
    def num_unrolls(self) -> int:
        return sum(c["actions"].shape[1] for c in self.chunks)

    @property
    def num_frames(self) -> int:
        return sum(c["actions"].size for c in self.chunks)

    def __len__(self) -> int:
        return self.num_unrolls

    def add(self, rollout: Rollout) -> None:
        """Store ``rollout`` (it needs ``last_observations``) and drop the oldest rollouts
        beyond the capacity."""
        if rollout.last_observations is None or rollout.last_episode_starts is None:
            raise ValueError("UnrollBuffer needs rollouts with last_observations")
        obs, last = _as_dict(rollout.observations), _as_dict(rollout.last_observations)
        chunk: dict[str, Any] = {"id": self._next_id, "obs": {}}
        for key, dtype in self.dtypes.items():
            rows = np.asarray(obs[key])
            tail = np.asarray(last[key]).reshape(1, *rows.shape[1:])
            full = np.concatenate([rows, tail], axis=0).astype(dtype, copy=False)
            chunk["obs"][key] = self._store(full, key)
        chunk["actions"] = (
            np.asarray(rollout.actions).reshape(rollout.rewards.shape).astype(np.int64)
        )
        chunk["log_probs"] = np.asarray(rollout.log_probs, dtype=np.float32).copy()
        chunk["rewards"] = np.asarray(rollout.rewards, dtype=np.float32).copy()
        chunk["starts"] = np.concatenate(
            [rollout.episode_starts, np.asarray(rollout.last_episode_starts)[None]], axis=0
        ).astype(np.float32)
        self._next_id += 1
        self.chunks.append(chunk)
        while len(self.chunks) > 1 and self.num_frames > self.capacity_frames:
            self._drop(self.chunks.pop(0))

    def _store(self, array: np.ndarray, key: str) -> np.ndarray:
        if self.disk_dir is None:
            return np.ascontiguousarray(array).copy()
        self.disk_dir.mkdir(parents=True, exist_ok=True)
        path = self.disk_dir / f"unrolls{self._next_id:09d}{'_' + key if key else ''}.npy"
        np.save(path, array)
        return np.load(path, mmap_mode="r")

    def _drop(self, chunk: dict[str, Any]) -> None:
        for array in chunk["obs"].values():
            filename = getattr(array, "filename", None)
            if filename:
                Path(filename).unlink(missing_ok=True)

    def clear(self) -> None:
        for chunk in self.chunks:
            self._drop(chunk)
        self.chunks = []

    def close(self) -> None:
        """Release the memory maps (files stay, for a resume)."""
        for chunk in self.chunks:
            for array in chunk["obs"].values():
                mmap = getattr(array, "_mmap", None)
                if mmap is not None:
                    mmap.close()
        self.chunks = []

    # -- sampling ------------------------------------------------------------------------
    def sample(self, num_unrolls: int, rng: np.random.Generator) -> dict[str, Any]:
        """``num_unrolls`` unrolls drawn uniformly with replacement (CORA: a random actor,
        then a random entry of its buffer), time-major: ``obs`` ``(T+1, B, ...)`` (dict when
        the observation space is a Dict), ``actions``, ``log_probs``, ``rewards`` ``(T, B)``,
        ``starts`` ``(T+1, B)``."""
        if not self.chunks:
            raise ValueError("the unroll buffer is empty")
        sizes = np.array([c["actions"].shape[1] for c in self.chunks])
        picks = rng.integers(0, sizes.sum(), size=int(num_unrolls))
        chunk_of = np.searchsorted(np.cumsum(sizes), picks, side="right")
        column = picks - (np.cumsum(sizes) - sizes)[chunk_of]
        pairs = list(zip(chunk_of.tolist(), column.tolist(), strict=True))
        out: dict[str, Any] = {
            name: np.stack([self.chunks[c][name][:, e] for c, e in pairs], axis=1)
            for name in ("actions", "log_probs", "rewards", "starts")
        }
        obs = {
            key: np.stack([np.asarray(self.chunks[c]["obs"][key][:, e]) for c, e in pairs], axis=1)
            for key in self.dtypes
        }
        out["obs"] = obs if self.dict_obs else obs[""]
        return out

    # -- checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.resident_bytes > self.checkpoint_limit_bytes:
            warnings.warn(
                f"unroll buffer: {self.resident_bytes / 2**20:,.0f} MiB of observations in RAM "
                "are left out of the checkpoint (a resumed run refills the buffer); keep it on "
                "disk (replay_on_disk) to checkpoint it",
                stacklevel=2,
            )
            return {"chunks": [], "next_id": self._next_id}
        chunks = []
        for chunk in self.chunks:
            stored = {k: v for k, v in chunk.items() if k != "obs"}
            stored["obs"] = {
                key: (
                    {"file": str(array.filename)}
                    if getattr(array, "filename", None)
                    else np.asarray(array)
                )
                for key, array in chunk["obs"].items()
            }
            chunks.append(stored)
        return {"chunks": chunks, "next_id": self._next_id}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.chunks = []
        missing = 0
        for stored in state["chunks"]:
            chunk = {k: v for k, v in stored.items() if k != "obs"}
            chunk["obs"] = {}
            for key, value in stored["obs"].items():
                if isinstance(value, dict):
                    if not Path(value["file"]).exists():
                        break
                    chunk["obs"][key] = np.load(value["file"], mmap_mode="r")
                else:
                    chunk["obs"][key] = np.asarray(value).copy()
            if len(chunk["obs"]) != len(stored["obs"]):
                missing += 1
                continue
            self.chunks.append(chunk)
        self._next_id = int(state["next_id"])
        if missing:
            warnings.warn(
                f"unroll buffer: {missing} rollouts written to disk after the checkpoint were "
                "dropped since; the resumed buffer holds the others",
                stacklevel=2,
            )


OTHER_BYTES_PER_FRAME = 20
"""Bytes a stored transition holds besides its observation (action int64, log-prob,
reward and episode start float32); always in RAM."""


def unroll_buffer_on_disk(
    method: str,
    capacity_frames: int,
    observation_space: spaces.Space,
    *,
    storage: str = "auto",
    disk_dir: str | os.PathLike[str] | None = None,
    quiet: bool = False,
) -> bool:
    """Whether an :class:`UnrollBuffer` of ``capacity_frames`` keeps its observations in
    ``disk_dir``, by the memory guard (``baselines_sb3.cl.storage``): RAM when a full
    buffer fits the free memory (``storage="auto"``), else disk; raises
    :class:`~baselines_sb3.cl.storage.ReplayMemoryError` when it fits nowhere. ``method``
    names the method in messages; ``quiet``: no message (a dry run)."""
    return place_buffer(
        f"{method}: a buffer of {int(capacity_frames):,} frames",
        int(capacity_frames) * UnrollBuffer.frame_nbytes(observation_space),
        int(capacity_frames) * OTHER_BYTES_PER_FRAME,
        storage=storage,
        disk_dir=disk_dir,
        smaller="lower buffer_frames (--set buffer_frames=N)",
        quiet=quiet,
    )


class GuardedUnrollBuffers:
    """Mixin of the methods that keep :class:`UnrollBuffer` s (CORA's EWC, online EWC, P&C):
    places each new buffer by the memory guard. Needs ``name``, ``buffer_frames``,
    ``storage``, ``disk_dir`` and a bound ``policy``."""

    def plan_storage(
        self,
        unroll_length: int,
        observation_space: spaces.Space,
        num_actions: int,
        quiet: bool = False,
        disk_dir: Any = None,
    ) -> bool:
        """Whether a new buffer's observations go to disk (the memory guard, now: see
        ``baselines_sb3.cl.storage``); raises ``ReplayMemoryError`` when it fits nowhere.
        ``unroll_length`` and ``num_actions`` are not needed (CLEAR's signature);
        ``disk_dir``: the buffer's directory (default: the method's)."""
        return unroll_buffer_on_disk(
            self.name,  # type: ignore[attr-defined]
            self.buffer_frames,  # type: ignore[attr-defined]
            observation_space,
            storage=self.storage,  # type: ignore[attr-defined]
            disk_dir=self.disk_dir if disk_dir is None else disk_dir,  # type: ignore[attr-defined]
            quiet=quiet,
        )

    def _new_buffer(self, name: str) -> UnrollBuffer:
        """A new buffer: in RAM or in ``disk_dir/name``, as the memory guard decides."""
        disk = None if self.disk_dir is None else f"{self.disk_dir}/{name}"  # type: ignore[attr-defined]
        space = self.policy.observation_space  # type: ignore[attr-defined]
        on_disk = self.plan_storage(0, space, 0, disk_dir=disk)
        return UnrollBuffer(self.buffer_frames, space, disk if on_disk else None)  # type: ignore[attr-defined]
