"""CLEAR (Rolnick et al., 2019): reservoir replay with V-trace and behaviour cloning.

Task-agnostic: it never needs task boundaries. After every rollout each sub-env's unroll
(``n_steps`` transitions) is offered to a reservoir buffer (Isele & Cosgun, 2018) whose
size is counted in **transitions**; the buffer stays a uniform sample of all unrolls seen.
Each minibatch of the learner gets a replay batch of the same number of transitions
(50/50 new/replay): windows of ``replay_unroll`` consecutive transitions from random
stored unrolls. The replay loss is the IMPALA loss with V-trace off-policy correction
(behaviour = the stored policy) plus policy cloning ``KL(mu || pi)`` (cost 0.01) and
value cloning ``(V - V_mu)^2`` (cost 0.005).

Storage (:class:`ReservoirBuffer`): observations once, in their own dtype (uint8 for
images; never float copies), in one ``(slots, T, *obs_shape)`` array per observation key;
behaviour logits (float32), values, rewards, actions and episode starts alongside
(~80 bytes per Procgen transition next to 12,288 observation bytes). With ``disk_dir``
the observation arrays live in a flat file read and written with positional I/O
(``os.pread``/``os.pwrite``, a memmap without mapping), so resident memory stays bounded by
the small per-transition arrays whatever the buffer size. Frame-stacked observations are
stored as given (one copy per transition); de-duplicating stacked frames is not done.

Memory guard (``storage="auto"``, the default): before the buffer is allocated its size is
compared with the memory this process may still use (``MemAvailable``, capped by the
cgroup limit). A buffer whose arrays need more than ``RAM_FRACTION`` of it keeps its
observations on disk under ``disk_dir`` (with a message), and when there is no
``disk_dir`` or not enough free disk either, CLEAR refuses before training starts with
the sizes and the options to change (:class:`ReplayMemoryError`). CORA's Procgen6 buffer
(5M transitions of 64x64x3 uint8) needs 57.2 GiB of observations.

``np.memmap`` is not used for the disk buffer: pages written through a shared mapping are
counted in the process's resident set until the kernel reclaims them, so filling 1M
Procgen transitions (12 GiB) through a memmap grows the resident set far past the
benchmark's 2 GiB bound, while ``pwrite`` goes through the page cache without mapping
anything (``benchmarks/bench_baselines.py`` measures both).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_obs_shape

from baselines_sb3.cl.base import ContinualMethod, Rollout, logits_and_values
from baselines_sb3.vtrace import vtrace_targets
from cl_suites.core.fsutil import format_bytes, free_bytes

logger = logging.getLogger(__name__)

STORAGES: tuple[str, ...] = ("auto", "ram", "disk")
RAM_FRACTION = 0.75
"""``storage="auto"`` keeps the buffer in RAM when its arrays need at most this fraction of
the memory still available to the process."""


class ReplayMemoryError(MemoryError):
    """The replay buffer fits neither in memory nor on disk as configured (the message gives
    the sizes and the options to change)."""


def available_memory() -> int | None:
    """Bytes of memory this process may still allocate: ``MemAvailable`` of
    ``/proc/meminfo``, capped by the cgroup's limit minus its usage; ``None`` where
    neither can be read (then the guard assumes the buffer fits)."""
    candidates = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            candidates.append(max(int(limit) - usage, 0))
    return min(candidates) if candidates else None


def replay_storage(option: bool | str | None) -> str:
    """The ``storage`` of a CLEAR buffer from the job option ``replay_on_disk``:
    ``None``/``"auto"`` -> ``"auto"``, ``True`` -> ``"disk"``, ``False`` -> ``"ram"``."""
    if option is None or option == "auto":
        return "auto"
    if isinstance(option, bool):
        return "disk" if option else "ram"
    if option in STORAGES:
        return str(option)
    raise ValueError(f"replay_on_disk must be true, false or 'auto', got {option!r}")


class _FileArray:
    """A ``(slots, T, *shape)`` array in a flat file, read/written with pread/pwrite."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(shape[2:], dtype=np.int64)) * self.dtype.itemsize
        self.slot_bytes = self.row_bytes * shape[1]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self.fd, self.slot_bytes * shape[0])
        self.nbytes = 0  # resident bytes

    def write_slot(self, slot: int, value: np.ndarray) -> None:
        data = np.ascontiguousarray(value, dtype=self.dtype)
        os.pwrite(self.fd, data.tobytes(), slot * self.slot_bytes)

    def read(self, slot: int, start: int, length: int) -> np.ndarray:
        raw = os.pread(
            self.fd, length * self.row_bytes, slot * self.slot_bytes + start * self.row_bytes
        )
        return np.frombuffer(raw, dtype=self.dtype).reshape(length, *self.shape[2:])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _MemArray:
    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.array = np.zeros(shape, dtype=dtype)
        self.nbytes = self.array.nbytes

    def write_slot(self, slot: int, value: np.ndarray) -> None:
        self.array[slot] = value

    def read(self, slot: int, start: int, length: int) -> np.ndarray:
        return self.array[slot, start : start + length]

    def close(self) -> None:
        pass


def _obs_spaces(space: spaces.Space) -> dict[str, spaces.Space]:
    if isinstance(space, spaces.Dict):
        return dict(space.spaces)
    return {"": space}


class ReservoirBuffer:
    """Reservoir sample of fixed-length unrolls; capacity counted in transitions.

    Args:
        capacity: transitions to keep (``capacity // unroll_length`` unrolls).
        unroll_length: transitions per stored unroll (the learner's ``n_steps``).
        observation_space: the (possibly Dict) observation space; each key is stored in
            its own dtype (``Discrete`` as int64).
        num_actions: size of the stored behaviour logits.
        disk_dir: keep observations on disk under this directory (bounded RAM).
        seed: seed of the reservoir and of sampling.
    """

    def __init__(
        self,
        capacity: int,
        unroll_length: int,
        observation_space: spaces.Space,
        num_actions: int,
        disk_dir: str | os.PathLike[str] | None = None,
        seed: int = 0,
    ):
        self.unroll_length = int(unroll_length)
        self.slots = int(capacity) // self.unroll_length
        if self.slots < 1:
            raise ValueError(
                f"CLEAR buffer of {capacity} transitions holds no unroll of {unroll_length}"
            )
        self.capacity = self.slots * self.unroll_length
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        s, t = self.slots, self.unroll_length
        self.obs: dict[str, _FileArray | _MemArray] = {}
        for key, sp in _obs_spaces(observation_space).items():
            shape = (s, t, *get_obs_shape(sp))  # Discrete keys: (1,), as SB3 buffers them
            dtype = np.int64 if isinstance(sp, spaces.Discrete) else sp.dtype
            if self.disk_dir is not None and isinstance(sp, spaces.Box):
                self.obs[key] = _FileArray(
                    self.disk_dir / f"obs{('_' + key) if key else ''}.bin", shape, dtype
                )
            else:
                self.obs[key] = _MemArray(shape, dtype)
        self.actions = np.zeros((s, t), dtype=np.int32)
        self.logits = np.zeros((s, t, num_actions), dtype=np.float32)
        self.values = np.zeros((s, t), dtype=np.float32)
        self.rewards = np.zeros((s, t), dtype=np.float32)
        self.starts = np.zeros((s, t), dtype=bool)
        self.rng = np.random.default_rng(seed)
        self.seen = 0  # unrolls offered so far
        self.size = 0  # unrolls stored

    @staticmethod
    def nbytes(
        capacity: int, unroll_length: int, observation_space: spaces.Space, num_actions: int
    ) -> tuple[int, int]:
        """``(observation_bytes, other_bytes)`` a buffer of these settings allocates: the
        observation arrays (what ``disk_dir`` moves to disk) and the per-transition
        actions, logits, values, rewards and starts (always in RAM)."""
        transitions = int(capacity) // int(unroll_length) * int(unroll_length)
        obs = 0
        for sp in _obs_spaces(observation_space).values():
            itemsize = 8 if isinstance(sp, spaces.Discrete) else np.dtype(sp.dtype).itemsize
            obs += int(np.prod(sp.shape or (), dtype=np.int64)) * itemsize
        other = 4 + 4 * int(num_actions) + 4 + 4 + 1  # action, logits, value, reward, start
        return transitions * obs, transitions * other

    # -- reservoir ------------------------------------------------------------------------
    def offer(self) -> int | None:
        """Algorithm R: the slot the next offered unroll goes to, or ``None`` (dropped)."""
        self.seen += 1
        if self.size < self.slots:
            self.size += 1
            return self.size - 1
        j = int(self.rng.integers(self.seen))
        return j if j < self.slots else None

    def add(
        self,
        obs: Mapping[str, np.ndarray],
        actions: np.ndarray,
        logits: np.ndarray,
        values: np.ndarray,
        rewards: np.ndarray,
        starts: np.ndarray,
    ) -> None:
        """Offer ``E`` unrolls given time-major ``(T, E, ...)`` arrays."""
        for e in range(actions.shape[1]):
            slot = self.offer()
            if slot is None:
                continue
            for key, store in self.obs.items():
                store.write_slot(slot, obs[key][:, e])
            self.actions[slot] = actions[:, e]
            self.logits[slot] = logits[:, e]
            self.values[slot] = values[:, e]
            self.rewards[slot] = rewards[:, e]
            self.starts[slot] = starts[:, e]

    def sample(self, num_windows: int, window: int) -> dict[str, Any]:
        """``num_windows`` random windows of ``window`` consecutive transitions, time-major
        ``(window, num_windows, ...)``."""
        window = min(window, self.unroll_length)
        slots = self.rng.integers(self.size, size=num_windows)
        starts = self.rng.integers(self.unroll_length - window + 1, size=num_windows)
        idx = starts[:, None] + np.arange(window)
        out: dict[str, Any] = {
            "obs": {
                k: np.stack(
                    [a.read(s, o, window) for s, o in zip(slots, starts, strict=False)], axis=1
                )
                for k, a in self.obs.items()
            }
        }
        rows = slots[:, None]
        for name in ("actions", "logits", "values", "rewards", "starts"):
            out[name] = np.swapaxes(getattr(self, name)[rows, idx], 0, 1)
        return out

    # -- memory -----------------------------------------------------------------------------
    @property
    def resident_bytes(self) -> int:
        """Bytes held in RAM by the buffer's arrays (observations excluded when on disk)."""
        small = sum(
            a.nbytes for a in (self.actions, self.logits, self.values, self.rewards, self.starts)
        )
        return small + sum(a.nbytes for a in self.obs.values())

    def state_dict(self) -> dict[str, Any]:
        state = {
            "seen": self.seen,
            "size": self.size,
            "rng": self.rng.bit_generator.state,
            "actions": self.actions,
            "logits": self.logits,
            "values": self.values,
            "rewards": self.rewards,
            "starts": self.starts,
        }
        state["obs"] = {k: a.array for k, a in self.obs.items() if isinstance(a, _MemArray)}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seen, self.size = int(state["seen"]), int(state["size"])
        self.rng.bit_generator.state = state["rng"]
        for name in ("actions", "logits", "values", "rewards", "starts"):
            getattr(self, name)[...] = state[name]
        for k, arr in state["obs"].items():
            self.obs[k].array[...] = arr  # type: ignore[union-attr]

    def close(self) -> None:
        for a in self.obs.values():
            a.close()


class CLEAR(ContinualMethod):
    """CLEAR replay (see the module docstring). Works with PPO and V-trace; discrete actions.

    Args:
        buffer_size: replay capacity in transitions.
        policy_cloning / value_cloning: costs of the two cloning losses.
        replay_ratio: fraction of each batch that is replay (0.5: 50/50).
        replay_unroll: length of replayed windows (default: the learner's ``n_steps``,
            at most 20).
        disk_dir: where observations go when they are kept on disk.
        storage: ``"auto"`` (RAM when the buffer fits the free memory, else ``disk_dir``,
            else refuse; see the module docstring), ``"ram"`` or ``"disk"`` (needs
            ``disk_dir``).
        seed: reservoir / sampling seed.
    """

    name = "clear"
    needs_task_boundaries = False

    def __init__(
        self,
        buffer_size: int,
        policy_cloning: float = 0.01,
        value_cloning: float = 0.005,
        replay_ratio: float = 0.5,
        replay_unroll: int | None = None,
        disk_dir: str | os.PathLike[str] | None = None,
        storage: str = "auto",
        seed: int = 0,
    ):
        super().__init__()
        if not 0.0 <= replay_ratio < 1.0:
            raise ValueError(f"replay_ratio must be in [0, 1), got {replay_ratio}")
        if storage not in STORAGES:
            raise ValueError(f"unknown storage {storage!r}; valid: {', '.join(STORAGES)}")
        if storage == "disk" and disk_dir is None:
            raise ValueError("CLEAR storage='disk' needs disk_dir")
        self.storage = storage
        self.buffer_size = int(buffer_size)
        self.policy_cloning, self.value_cloning = float(policy_cloning), float(value_cloning)
        self.replay_ratio = float(replay_ratio)
        self.replay_unroll = replay_unroll
        self.disk_dir = disk_dir
        self.seed = seed
        self.buffer: ReservoirBuffer | None = None

    def bind(self, policy, model=None) -> None:
        super().bind(policy, model)
        if not isinstance(policy.action_space, spaces.Discrete):
            raise ValueError(f"CLEAR supports Discrete action spaces, got {policy.action_space}")
        n_steps = int(model.n_steps) if model is not None else 20
        self.window = int(self.replay_unroll or min(n_steps, 20))
        self.gamma = float(getattr(model, "gamma", 0.99))
        self.vf_coef = float(getattr(model, "vf_coef", 0.5))
        self.ent_coef = float(getattr(model, "ent_coef", 0.01))
        self.reduction = getattr(model, "loss_reduction", "mean")
        if self.buffer is None:
            on_disk = self.plan_storage(n_steps, policy.observation_space, policy.action_space.n)
            self._build_buffer(n_steps, policy, on_disk)

    def _build_buffer(self, n_steps: int, policy, on_disk: bool) -> None:
        self.buffer = ReservoirBuffer(
            self.buffer_size,
            n_steps,
            policy.observation_space,
            int(policy.action_space.n),
            self.disk_dir if on_disk else None,
            self.seed,
        )

    def plan_storage(
        self,
        unroll_length: int,
        observation_space: spaces.Space,
        num_actions: int,
        quiet: bool = False,
    ) -> bool:
        """Whether the buffer's observations go to disk (see the module docstring); raises
        :class:`ReplayMemoryError` before anything is allocated when it fits nowhere.
        ``quiet``: no message when the buffer goes to disk (a dry run)."""
        obs_bytes, other_bytes = ReservoirBuffer.nbytes(
            self.buffer_size, unroll_length, observation_space, int(num_actions)
        )
        if self.storage == "disk":
            return True
        free = available_memory()
        budget = None if free is None else int(free * RAM_FRACTION)
        size = f"CLEAR replay buffer of {self.buffer_size:,} transitions"
        if budget is None or obs_bytes + other_bytes <= budget:
            return False
        memory = (
            f"needs {format_bytes(obs_bytes + other_bytes)} of RAM "
            f"({format_bytes(obs_bytes)} of observations) but only {format_bytes(free)} of "
            f"memory is free (the buffer may use {RAM_FRACTION:.0%})"
        )
        smaller = "lower buffer_size (--set buffer_size=N)"
        if self.storage == "ram":
            raise ReplayMemoryError(
                f"{size} {memory}; {smaller}, or keep it on disk (--set replay_on_disk=true)"
            )
        if self.disk_dir is None:
            raise ReplayMemoryError(f"{size} {memory}; {smaller}, or pass disk_dir=DIR")
        disk_free = free_bytes(self.disk_dir)
        if other_bytes > budget or (disk_free is not None and obs_bytes > disk_free):
            disk = f"{format_bytes(disk_free)} free" if disk_free is not None else "unknown"
            raise ReplayMemoryError(
                f"{size} {memory}, and on disk its {format_bytes(obs_bytes)} of observations "
                f"do not fit either ({self.disk_dir}: {disk}); {smaller}"
            )
        if quiet:
            return True
        logger.warning(
            "%s %s: keeping its observations on disk in %s (%s of %s free); "
            "--set replay_on_disk=false forces RAM",
            size,
            memory,
            self.disk_dir,
            format_bytes(obs_bytes),
            format_bytes(disk_free) if disk_free is not None else "?",
        )
        return True

    def on_rollout_end(self, rollout: Rollout) -> None:
        obs = (
            rollout.observations
            if isinstance(rollout.observations, dict)
            else {"": rollout.observations}
        )
        flat = {
            k: th.as_tensor(v.reshape(-1, *v.shape[2:]), device=self.policy.device)
            for k, v in obs.items()
        }
        with th.no_grad():
            logits, _ = logits_and_values(self.policy, flat.get("", flat))
        t, e = rollout.num_steps, rollout.num_envs
        stored = {k: v.reshape(t, e, *v.shape[2:]) for k, v in obs.items()}
        self.buffer.add(
            stored,
            rollout.actions,
            logits.cpu().numpy().reshape(t, e, -1),
            rollout.values,
            rollout.rewards,
            rollout.episode_starts.astype(bool),
        )

    def extra_loss(self, policy, batch_size: int) -> th.Tensor | None:
        if self.buffer is None or self.buffer.size == 0 or self.replay_ratio == 0:
            return None
        n_replay = max(1, round(batch_size * self.replay_ratio / (1 - self.replay_ratio)))
        windows = max(1, n_replay // self.window)
        batch = self.buffer.sample(windows, self.window)
        return self.replay_loss(policy, batch)

    def replay_loss(self, policy, batch: Mapping[str, Any]) -> th.Tensor:
        """V-trace actor-critic loss + cloning on a replay batch (time-major ``(T, W)``)."""
        dev = policy.device
        t_len, w = batch["rewards"].shape
        obs = {
            k: th.as_tensor(v.reshape(t_len * w, *v.shape[2:]), device=dev).float()
            for k, v in batch["obs"].items()
        }
        logits, values = logits_and_values(policy, obs.get("", obs))
        log_pi = th.log_softmax(logits, dim=-1)
        mu_logits = th.as_tensor(batch["logits"], device=dev).reshape(t_len * w, -1)
        log_mu = th.log_softmax(mu_logits, dim=-1)
        actions = th.as_tensor(batch["actions"], device=dev).long().reshape(-1, 1)
        target_lp = log_pi.gather(1, actions).squeeze(1)
        behaviour_lp = log_mu.gather(1, actions).squeeze(1)
        starts = th.as_tensor(batch["starts"], device=dev).float()
        rewards = th.as_tensor(batch["rewards"], device=dev)
        v = values.view(t_len, w)
        # bootstrap from the window's last state; its own transition is not trained on
        discounts = self.gamma * (1.0 - starts[1:])
        vs, pg_adv = vtrace_targets(
            behaviour_lp.view(t_len, w)[:-1],
            target_lp.detach().view(t_len, w)[:-1],
            rewards[:-1],
            v.detach()[:-1],
            v.detach()[-1],
            discounts,
        )
        reduce = th.sum if self.reduction == "sum" else th.mean
        n = (t_len - 1) * w
        pg_loss = -reduce(pg_adv.flatten() * target_lp.view(t_len, w)[:-1].flatten())
        value_loss = 0.5 * reduce((vs.flatten() - v[:-1].flatten()).pow(2))
        probs = log_pi.exp()
        entropy = -(probs * log_pi).sum(-1)
        kl = (log_mu.exp() * (log_mu - log_pi)).sum(-1)
        value_clone = (values - th.as_tensor(batch["values"], device=dev).flatten()).pow(2)
        loss = (
            pg_loss
            + self.vf_coef * value_loss
            - self.ent_coef * reduce(entropy[:n])
            + self.policy_cloning * reduce(kl)
            + self.value_cloning * reduce(value_clone)
        )
        return loss

    def state_dict(self) -> dict[str, Any]:
        if self.buffer is None:
            return {"buffer": None}
        return {"buffer": self.buffer.state_dict(), "on_disk": self.buffer.disk_dir is not None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("buffer") is None or self.buffer is None:
            return
        on_disk = bool(state.get("on_disk", self.buffer.disk_dir is not None))
        if on_disk and self.disk_dir is None:
            raise ValueError("the checkpoint's CLEAR buffer is on disk: pass disk_dir")
        if on_disk != (self.buffer.disk_dir is not None):  # keep the checkpoint's storage
            self.buffer.close()
            self._build_buffer(self.buffer.unroll_length, self.policy, on_disk)
        self.buffer.load_state_dict(state["buffer"])
