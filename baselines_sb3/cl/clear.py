"""CLEAR (Rolnick et al., 2019): reservoir replay with V-trace and behaviour cloning.

Task-agnostic: it never needs task boundaries. After every rollout each sub-env's unroll
(``T = n_steps`` transitions, ``T + 1`` frames with the bootstrap frame, as CORA's
``clear_monobeast.py`` stores them) is offered to a reservoir buffer (Isele & Cosgun,
2018) whose size is counted in **transitions**; the buffer stays a uniform sample of all
unrolls seen. Each update (PPO: each minibatch) gets a replay batch of the same number
of transitions (50/50 new/replay; CORA's ``batch_replay_ratio`` 1.0): whole stored
unrolls, drawn at random. The replay loss is the IMPALA loss with V-trace off-policy
correction (behaviour = the stored policy) on the unroll's ``T`` transitions, bootstrapped
from its last frame, plus policy cloning ``KL(mu || pi)`` (cost 0.01) and value cloning
``(V - V_mu)^2`` (cost 0.005), reduced as the learner reduces its loss (summed in CORA's
presets). With a learner that divides rewards by a running std (CORA's MiniHack),
replayed rewards join its moments and are divided by the same std as the new ones
(:meth:`CLEAR.extra_rewards`).

Behaviour outputs are stored in CORA's (TorchBeast's) layout: index ``i`` of an unroll's
``T + 1`` logits and values holds the output computed from frame ``i - 1`` (the actor
writes the output of the step at ``t + 1``; index 0 holds the previous unroll's last
output, or frame 0's own output for an env's first unroll). V-trace reads the behaviour
of frame ``t`` at index ``t + 1``. Cloning (``clone_alignment``): ``"cora"`` compares the
current output of frame ``i`` with index ``i`` for all ``T + 1`` frames, as CORA's
``custom_loss`` does (so the target is the previous frame's output); ``"paper"`` compares
frame ``i`` with its own behaviour output (index ``i + 1``) for the ``T`` acted frames.

Storage (:class:`ReservoirBuffer`): observations once, in their own dtype (uint8 for
images; never float copies), in one ``(slots, T + 1, *obs_shape)`` array per observation
key; behaviour logits (float32), values, rewards, actions and episode starts alongside
(~80 bytes per Procgen transition next to 12,902 observation bytes). With ``disk_dir``
the observation arrays live in a flat file read and written with positional I/O
(``os.pread``/``os.pwrite``, a memmap without mapping), so resident memory stays bounded by
the small per-transition arrays whatever the buffer size. Frame-stacked observations are
stored as given (one copy per transition); de-duplicating stacked frames is not done.

Memory guard (``storage="auto"``, the default; ``baselines_sb3.cl.storage``): a buffer
that does not fit the free memory keeps its observations on disk under ``disk_dir``, and
CLEAR refuses before training when it fits nowhere. CORA's Procgen6 buffer (5M
transitions of 64x64x3 uint8, 21 frames per 20-step unroll) needs 60.1 GiB of
observations.

``np.memmap`` is not used for the disk buffer: pages written through a shared mapping are
counted in the process's resident set until the kernel reclaims them, so filling 1M
Procgen transitions (12 GiB) through a memmap grows the resident set far past the
benchmark's 2 GiB bound, while ``pwrite`` goes through the page cache without mapping
anything (``benchmarks/speed/bench_baselines.py`` measures both).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_obs_shape

from baselines_sb3.cl.base import ContinualMethod, Rollout, logits_and_values
from baselines_sb3.cl.storage import check_storage, place_buffer
from baselines_sb3.vtrace import vtrace_targets

CLONE_ALIGNMENTS: tuple[str, ...] = ("cora", "paper")


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


def _as_obs_dict(obs: Any) -> dict[str, np.ndarray]:
    return dict(obs) if isinstance(obs, Mapping) else {"": obs}


def _obs_spaces(space: spaces.Space) -> dict[str, spaces.Space]:
    if isinstance(space, spaces.Dict):
        return dict(space.spaces)
    return {"": space}


class ReservoirBuffer:
    """Reservoir sample of fixed-length unrolls; capacity counted in transitions.

    An unroll of ``T`` transitions holds ``T + 1`` frames (observations, episode starts,
    behaviour logits and values in CORA's layout, see the module docstring) and ``T``
    actions and rewards.

    Args:
        capacity: transitions to keep (``capacity // unroll_length`` unrolls).
        unroll_length: transitions ``T`` per stored unroll (the learner's ``n_steps``).
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
            shape = (s, t + 1, *get_obs_shape(sp))  # Discrete keys: (1,), as SB3 buffers them
            dtype = np.int64 if isinstance(sp, spaces.Discrete) else sp.dtype
            if self.disk_dir is not None and isinstance(sp, spaces.Box):
                self.obs[key] = _FileArray(
                    self.disk_dir / f"obs{('_' + key) if key else ''}.bin", shape, dtype
                )
            else:
                self.obs[key] = _MemArray(shape, dtype)
        self.actions = np.zeros((s, t), dtype=np.int32)
        self.logits = np.zeros((s, t + 1, num_actions), dtype=np.float32)
        self.values = np.zeros((s, t + 1), dtype=np.float32)
        self.rewards = np.zeros((s, t), dtype=np.float32)
        self.starts = np.zeros((s, t + 1), dtype=bool)
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
        t = int(unroll_length)
        slots = int(capacity) // t
        obs = 0
        for sp in _obs_spaces(observation_space).values():
            itemsize = 8 if isinstance(sp, spaces.Discrete) else np.dtype(sp.dtype).itemsize
            obs += int(np.prod(sp.shape or (), dtype=np.int64)) * itemsize
        per_frame = 4 * int(num_actions) + 4 + 1  # logits, value, start
        per_transition = 4 + 4  # action, reward
        return slots * (t + 1) * obs, slots * ((t + 1) * per_frame + t * per_transition)

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
        """Offer ``E`` unrolls given time-major arrays: ``obs``, ``logits``, ``values`` and
        ``starts`` ``(T + 1, E, ...)`` (CORA's layout), ``actions`` and ``rewards``
        ``(T, E)``."""
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

    def sample(self, num_unrolls: int) -> dict[str, Any]:
        """``num_unrolls`` whole stored unrolls drawn uniformly (with replacement),
        time-major: ``obs``, ``logits``, ``values``, ``starts`` ``(T + 1, num_unrolls,
        ...)``, ``actions``, ``rewards`` ``(T, num_unrolls)``."""
        slots = self.rng.integers(self.size, size=num_unrolls)
        frames = self.unroll_length + 1
        out: dict[str, Any] = {
            "obs": {
                k: np.stack([a.read(s, 0, frames) for s in slots], axis=1)
                for k, a in self.obs.items()
            }
        }
        for name in ("actions", "logits", "values", "rewards", "starts"):
            out[name] = np.swapaxes(getattr(self, name)[slots], 0, 1)
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


@dataclass
class _Fetched:
    """The replay of an update's minibatches, drawn at once (``CLEAR.start_update``):
    ``batch`` holds ``count`` minibatches of ``per`` unrolls along the unroll axis (1);
    ``rng_state``: the reservoir's stream before the draw."""

    batch: dict[str, Any]
    per: int
    count: int
    rng_state: dict[str, Any]
    used: int = 0

    def next(self) -> dict[str, Any] | None:
        """The next minibatch's replay (``None`` once all are used)."""
        if self.used >= self.count:
            return None
        cut = slice(self.used * self.per, (self.used + 1) * self.per)
        self.used += 1
        return {
            k: {o: a[:, cut] for o, a in v.items()} if isinstance(v, dict) else v[:, cut]
            for k, v in self.batch.items()
        }


class CLEAR(ContinualMethod):
    """CLEAR replay (see the module docstring). Works with PPO and V-trace; discrete actions.

    Args:
        buffer_size: replay capacity in transitions.
        policy_cloning / value_cloning: costs of the two cloning losses.
        replay_ratio: fraction of each batch that is replay (0.5: 50/50, CORA's
            ``batch_replay_ratio`` 1.0); replay comes in whole unrolls.
        clone_alignment: ``"cora"`` (cloning targets as CORA's code aligns them) or
            ``"paper"`` (each frame's own behaviour output); see the module docstring.
        disk_dir: where observations go when they are kept on disk.
        storage: ``"auto"`` (RAM when the buffer fits the free memory, else ``disk_dir``,
            else refuse; see the module docstring), ``"ram"`` or ``"disk"`` (needs
            ``disk_dir``).
        seed: reservoir / sampling seed.
    """

    switch_inside_step = True  # the hook reads the network only (ContinualMethod)

    name = "clear"
    keeps_replay = True
    needs_task_boundaries = False

    def __init__(
        self,
        buffer_size: int,
        policy_cloning: float = 0.01,
        value_cloning: float = 0.005,
        replay_ratio: float = 0.5,
        clone_alignment: str = "cora",
        disk_dir: str | os.PathLike[str] | None = None,
        storage: str = "auto",
        seed: int = 0,
    ):
        super().__init__()
        if not 0.0 <= replay_ratio < 1.0:
            raise ValueError(f"replay_ratio must be in [0, 1), got {replay_ratio}")
        if clone_alignment not in CLONE_ALIGNMENTS:
            raise ValueError(
                f"unknown clone_alignment {clone_alignment!r}; valid: {', '.join(CLONE_ALIGNMENTS)}"
            )
        check_storage(storage, disk_dir, "CLEAR")
        self.storage = storage
        self.buffer_size = int(buffer_size)
        self.policy_cloning, self.value_cloning = float(policy_cloning), float(value_cloning)
        self.replay_ratio = float(replay_ratio)
        self.clone_alignment = clone_alignment
        self.disk_dir = disk_dir
        self.seed = seed
        self.buffer: ReservoirBuffer | None = None
        self._previous_output: tuple[np.ndarray, np.ndarray] | None = None
        self._drawn: dict[str, Any] | None = None
        self._fetched: _Fetched | None = None

    def bind(self, policy, model=None) -> None:
        super().bind(policy, model)
        if not isinstance(policy.action_space, spaces.Discrete):
            raise ValueError(f"CLEAR supports Discrete action spaces, got {policy.action_space}")
        n_steps = int(model.n_steps) if model is not None else 20
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
        return place_buffer(
            f"CLEAR replay buffer of {self.buffer_size:,} transitions",
            obs_bytes,
            other_bytes,
            storage=self.storage,
            disk_dir=self.disk_dir,
            smaller="lower buffer_size (--set buffer_size=N)",
            quiet=quiet,
        )

    def on_rollout_end(self, rollout: Rollout) -> None:
        """Offer the rollout's ``E`` unrolls: ``T + 1`` frames each (the rollout's and the
        bootstrap observation) with the behaviour outputs in CORA's layout."""
        if rollout.last_observations is None or rollout.last_episode_starts is None:
            raise ValueError("CLEAR needs rollouts with last_observations")
        t, e = rollout.num_steps, rollout.num_envs
        obs = _as_obs_dict(rollout.observations)
        last = _as_obs_dict(rollout.last_observations)
        flat = {
            k: th.as_tensor(v.reshape(-1, *v.shape[2:]), device=self.policy.device)
            for k, v in obs.items()
        }
        behaviour = rollout.behaviour_policy or self.policy  # CORA stores the actors' outputs
        with th.no_grad():
            logits, values = logits_and_values(behaviour, flat.get("", flat))
        logits = logits.cpu().numpy().reshape(t, e, -1)
        values = values.cpu().numpy().reshape(t, e)
        # index 0: the output of the frame before frame 0 (an env's first unroll: frame 0's)
        previous = self._previous_output or (logits[0], values[0])
        self._previous_output = (logits[-1].copy(), values[-1].copy())
        frames = {
            k: np.concatenate([v, np.asarray(last[k]).reshape(1, *v.shape[1:])], axis=0)
            for k, v in obs.items()
        }
        starts = np.concatenate([rollout.episode_starts, rollout.last_episode_starts[None]])
        self.buffer.add(
            frames,
            rollout.actions,
            np.concatenate([previous[0][None], logits], axis=0),
            np.concatenate([previous[1][None], values], axis=0),
            rollout.rewards,
            starts.astype(bool),
        )

    def _replay_unrolls(self, batch_size: int) -> int:
        """Unrolls per replay batch: ``replay_ratio`` of the batch, in whole unrolls."""
        n_replay = batch_size * self.replay_ratio / (1 - self.replay_ratio)
        return max(1, round(n_replay / self.buffer.unroll_length))

    def extra_rewards(self, policy, batch_size: int) -> th.Tensor | None:
        """Draw this update's replay batch and return its raw rewards ``(T, R)``, which the
        learner adds to its running reward moments (CORA concatenates new and replayed
        unrolls before ``compute_loss`` normalises the rewards)."""
        if self.buffer is None or self.buffer.size == 0 or self.replay_ratio == 0:
            return None
        self._drawn = self.buffer.sample(self._replay_unrolls(batch_size))
        return th.as_tensor(self._drawn["rewards"], device=policy.device)

    def start_update(self, policy, batch_size: int, minibatches: int) -> None:
        """Draw the replay of every minibatch of the update in one sample, moved to the
        policy's device at once (one gather and one copy per update, not per minibatch):
        the same unrolls as drawing them minibatch by minibatch (the reservoir draws its
        slots from one stream), and :meth:`end_update` puts the stream where the
        minibatches that ran leave it."""
        if self.buffer is None or self.buffer.size == 0 or self.replay_ratio == 0:
            return
        if minibatches < 2:
            return
        per = self._replay_unrolls(batch_size)
        rng_state = self.buffer.rng.bit_generator.state
        batch = self.buffer.sample(per * minibatches)
        on_device = {
            k: (
                {o: th.as_tensor(a, device=policy.device) for o, a in v.items()}
                if isinstance(v, dict)
                else th.as_tensor(v, device=policy.device)
            )
            for k, v in batch.items()
        }
        self._fetched = _Fetched(on_device, per, minibatches, rng_state)

    def end_update(self) -> None:
        fetched, self._fetched = self._fetched, None
        if fetched is not None and fetched.used < fetched.count:  # a KL early stop
            self.buffer.rng.bit_generator.state = fetched.rng_state
            self.buffer.rng.integers(self.buffer.size, size=fetched.used * fetched.per)

    def extra_loss(self, policy, batch_size: int) -> th.Tensor | None:
        if self.buffer is None or self.buffer.size == 0 or self.replay_ratio == 0:
            return None
        batch, self._drawn = self._drawn, None
        if batch is None and self._fetched is not None:
            batch = self._fetched.next()
        if batch is None:
            batch = self.buffer.sample(self._replay_unrolls(batch_size))
        return self.replay_loss(policy, batch)

    def replay_loss(self, policy, batch: Mapping[str, Any]) -> th.Tensor:
        """V-trace actor-critic loss + cloning on whole replayed unrolls: the terms of
        :meth:`replay_terms` weighted by the learner's and CLEAR's costs."""
        terms = self.replay_terms(policy, batch)
        return (
            terms["policy_gradient"]
            + self.vf_coef * terms["value"]
            - self.ent_coef * terms["entropy"]
            + self.policy_cloning * terms["policy_cloning"]
            + self.value_cloning * terms["value_cloning"]
        )

    def replay_terms(self, policy, batch: Mapping[str, Any]) -> dict[str, th.Tensor]:
        """The unweighted, reduced terms of the replay loss on whole replayed unrolls
        (time-major: ``T + 1`` frames, ``T`` transitions; see
        :meth:`ReservoirBuffer.sample`): ``policy_gradient``, ``value`` (``0.5 * (vs -
        V)^2``), ``entropy`` over the ``T`` acted frames; ``policy_cloning`` (``KL(mu ||
        pi)``) and ``value_cloning`` (``(V - V_mu)^2``) as ``clone_alignment`` pairs them.
        Rewards are divided by the learner's running std where it keeps one."""
        dev = policy.device
        frames, w = batch["starts"].shape
        obs = {
            k: th.as_tensor(v.reshape(frames * w, *v.shape[2:]), device=dev).float()
            for k, v in batch["obs"].items()
        }
        logits, values = logits_and_values(policy, obs.get("", obs))
        log_pi = th.log_softmax(logits, dim=-1).view(frames, w, -1)
        v = values.view(frames, w)
        log_mu = th.log_softmax(th.as_tensor(batch["logits"], device=dev), dim=-1)
        mu_values = th.as_tensor(batch["values"], device=dev)
        actions = th.as_tensor(batch["actions"], device=dev).long().unsqueeze(-1)
        target_lp = log_pi[:-1].gather(2, actions).squeeze(2)  # frames 0..T-1
        behaviour_lp = log_mu[1:].gather(2, actions).squeeze(2)  # their outputs: index t+1
        starts = th.as_tensor(batch["starts"], device=dev).float()
        rewards = th.as_tensor(batch["rewards"], device=dev)
        normalizer = getattr(policy, "reward_normalizer", None)
        if normalizer is not None:
            rewards = rewards / normalizer.std().float()
        vs, pg_adv = vtrace_targets(
            behaviour_lp,
            target_lp.detach(),
            rewards,
            v.detach()[:-1],
            v.detach()[-1],
            self.gamma * (1.0 - starts[1:]),
        )
        reduce = th.sum if self.reduction == "sum" else th.mean
        pg_loss = -reduce(pg_adv * target_lp)
        value_loss = 0.5 * reduce((vs - v[:-1]).pow(2))
        entropy = -(log_pi[:-1].exp() * log_pi[:-1]).sum(-1)
        if self.clone_alignment == "cora":  # frame i vs index i, all T + 1 frames
            pi_c, mu_c, v_c, mu_v = log_pi, log_mu, v, mu_values
        else:  # frame i vs its own output (index i + 1), the T acted frames
            pi_c, mu_c, v_c, mu_v = log_pi[:-1], log_mu[1:], v[:-1], mu_values[1:]
        kl = (mu_c.exp() * (mu_c - pi_c)).sum(-1)
        return {
            "policy_gradient": pg_loss,
            "value": value_loss,
            "entropy": reduce(entropy),
            "policy_cloning": reduce(kl),
            "value_cloning": reduce((v_c - mu_v).pow(2)),
        }

    def state_dict(self) -> dict[str, Any]:
        if self.buffer is None:
            return {"buffer": None}
        return {
            "buffer": self.buffer.state_dict(),
            "on_disk": self.buffer.disk_dir is not None,
            "previous_output": self._previous_output,
        }

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
        self._previous_output = state.get("previous_output")
