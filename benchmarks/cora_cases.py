"""Update-for-update parity cases with CORA's IMPALA learners: the inputs and our side.

No CORA code is imported here. ``parity_cora.py update`` (in CORA's interpreter) runs
CORA's side of every case on the same inputs (``cora_side.py``) and compares; the CI test
``tests/baselines/test_cora_parity_pins.py`` runs our side against the values CORA's code
computed, stored with their provenance in ``tests/golden/cora_parity.json``.

A **case** is a network family x a method. Its inputs are generated from a seed (numpy's
PCG64, so they are the same on every machine): the network parameters (drawn for our
policy and written into CORA's network with ``baselines_sb3.cora_weights``) and a list of
**rollouts**, each a batch in TorchBeast's layout: ``T + 1`` frames x ``B`` unrolls of
``frame``, ``reward`` (``reward[t + 1]`` is the reward of the action taken at frame
``t``), ``done`` (frame ``t`` starts an episode), ``last_action``, ``action``
(``action[t + 1]`` was taken at frame ``t``), ``policy_logits`` and ``baseline`` (the
behaviour's outputs computed from frame ``t``, stored at index ``t + 1``). Behaviour
logits are drawn apart from the learner's, so V-trace's importance weights are clipped.

Both sides play the same schedule (``FLOWS``): every rollout is stored by the method (CORA:
each actor's ``on_act_unroll_complete``; ours: ``on_rollout_end``) and then trained on
(CORA: ``Monobeast.learn``; ours: ``VTrace.train``), with the task switches where our
sequence env fires them (inside the last step of a task's last rollout). Replay and Fisher
batches are drawn by a scripted random source on both sides (``SAMPLES``), so both sides
train on the same unrolls.

Our side is built as a run builds it: ``hyperparameters.resolve(suite, "vtrace", method,
"paper")``, ``factory.wrap_env`` and ``factory.build_model`` on a stand-in VecEnv with the
suite's spaces (it is never stepped), ``cl.attach_method``; only the sizes of
``HARNESS_SIZES`` are changed, on both sides alike.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecEnv

from baselines_sb3 import hyperparameters
from baselines_sb3.cl import attach_method, make_method
from baselines_sb3.cl.base import rollout_from_buffer
from baselines_sb3.cora_weights import cora_names, cora_state_dict
from baselines_sb3.factory import build_model, wrap_env
from cl_suites.core.task import Segment, TaskSwitch

PINS_PATH = Path(__file__).resolve().parents[1] / "tests" / "golden" / "cora_parity.json"
"""The values CORA's code computed for every case (``parity_cora.py update --write-pins``)."""


# ------------------------------------------------------------------------------ families
@dataclass(frozen=True)
class Family:
    """A suite family's network and spaces, as CORA builds them and as our preset does.

    ``cora_obs``: CORA's observation shape ``[S, C, H, W]`` (stacked frames, channels);
    ``raw_obs``: our suite's observation shape (channels last except Atari's stack);
    ``task_actions``: the action set of each of the case's tasks (CORA's action spaces by
    ``action_space_id``; our action masks), the policy has ``max`` outputs.
    """

    name: str
    suite: str
    cora_obs: tuple[int, ...]
    raw_obs: tuple[int, ...]
    task_actions: tuple[int, ...]
    unroll: int
    batch: int

    @property
    def num_actions(self) -> int:
        return max(self.task_actions)

    @property
    def channels_first_obs(self) -> tuple[int, ...]:
        s, c, h, w = self.cora_obs
        return (s * c, h, w)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("atari", "Atari6", (4, 1, 84, 84), (4, 84, 84), (18, 18, 18), 4, 3),
        Family("procgen", "Procgen6", (1, 3, 64, 64), (64, 64, 3), (15, 15, 15), 3, 2),
        Family("minihack", "MiniHack15", (1, 3, 84, 84), (84, 84, 3), (8, 11, 8), 4, 3),
        Family("chores", "CHORES-VaryRoom", (1, 6, 64, 64), (64, 64, 6), (12, 12, 12), 4, 2),
    )
}
"""The four network families; ``unroll`` (``T``) and ``batch`` (``B``) are the harness's
sizes (CORA: 20 x 32, CHORES 80 x 10)."""

CORA_ARCH = {"shallow": "orig", "residual": "impala_res_cnn"}
"""Our ``network`` -> CORA's ``conv_net_arch``."""


# ------------------------------------------------------------------------------ schedule
@dataclass(frozen=True)
class Step:
    """One rollout of the schedule: its task, whether the task's budget ends with it (the
    switch fires inside its last env step), and the random draws its update makes
    (``samples``: for each draw, ``(unrolls, entries)``: that many unrolls, each from one
    of ``entries`` stored unrolls per actor)."""

    task: int
    last_of_task: bool = False
    samples: tuple[tuple[str, int], ...] = ()


FLOWS: dict[str, tuple[tuple[int, ...], tuple[Step, ...]]] = {
    # (rollouts per task's budget, steps)
    "ft": ((4,), (Step(0), Step(0))),
    "ewc": (
        (2, 2, 2),
        (
            Step(0),
            Step(0, True),
            Step(1, samples=(("fisher", 2),) * 3),
            Step(1, True),
            Step(2, samples=(("fisher", 2),) * 3),
        ),
    ),
    "online-ewc": (
        (2, 2, 2),
        (
            Step(0),
            Step(0, True),
            Step(1, samples=(("fisher", 3),) * 3),
            Step(1, True),
            Step(2, samples=(("fisher", 5),) * 3),
        ),
    ),
    "pnc": (
        (2, 3),
        (
            Step(0),
            Step(0, True, samples=(("kl", 2),)),
            Step(1),
            Step(1, samples=(("fisher", 4),) * 3 + (("kl", 4),)),
            Step(1, True, samples=(("kl", 5),)),
        ),
    ),
    "clear": ((4,), (Step(0, samples=(("replay", 1),)), Step(0, samples=(("replay", 1),)))),
}
"""Per method (``ft`` = IMPALA alone): each task's budget in rollouts, and the rollouts
played. EWC's and online EWC's consolidations happen in the first update of tasks 1 and 2
(3 Fisher batches each), P&C's progress / compress phases alternate (0 progress updates
after a boundary: reset and progress, then compress; the KB's Fisher at task 1's first
compress update,
then the KB's online-EWC penalty in the next compress update), CLEAR replays the unrolls
stored before the run in both updates."""

FISHER_BATCHES = 3
HARNESS_SIZES = (
    "unroll T and batch B per family (CORA unroll_length/batch_size/num_actors, ours "
    "n_steps/num_envs); task budgets of 2-4 updates; 3 Fisher batches (n_fisher_samples / "
    "fisher_batches); replay buffers of 8 unrolls per actor; EWC min steps 0; P&C 0 "
    "progress updates after a boundary"
)
"""What the harness shrinks, on both sides alike (every other setting is the preset's and
CORA's config's)."""


@dataclass(frozen=True)
class Case:
    family: Family
    method: str
    cora_config: str
    """CORA's config file (``configs/...``) whose learner / method settings CORA's side loads."""
    cora_extra: Mapping[str, Any] = field(default_factory=dict)
    """Settings CORA's side adds to the config (methods without a config of this suite)."""
    deviation: str = ""
    """The documented deviation this case compares against (empty: none)."""
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.family.name}/{self.method}"


_MINIHACK_EWC = {  # CORA has no MiniHack EWC config: its Procgen/Atari EWC settings
    "policy": "ewc",
    "ewc_lambda": 10000,
    "ewc_per_task_min_frames": 200000,
    "replay_buffer_frames": 1e6,
}

CASES: tuple[Case, ...] = (
    Case(FAMILIES["atari"], "ft", "atari/impala_atari.json"),
    Case(
        FAMILIES["procgen"],
        "ft",
        "procgen/impala_procgen.json",
        {"conv_net_arch": "impala_res_cnn"},
        "Procgen6 network: CORA's impala_res_cnn (the paper's residual model; CORA's "
        "configs leave arch 'orig')",
    ),
    Case(FAMILIES["minihack"], "ft", "minihack/impala_minihack_paperdefaults.json"),
    Case(  # CORA has no CHORES IMPALA config: its CLEAR config's learner settings
        FAMILIES["chores"],
        "ft",
        "chores/clear_vary_envs.json",
        {
            "policy": "impala",
            "replay_buffer_frames": None,
            "batch_replay_ratio": None,
            "large_file_path": None,
        },
    ),
    Case(FAMILIES["atari"], "ewc", "atari/ewc_atari.json"),
    Case(FAMILIES["atari"], "online-ewc", "atari/online_ewc_atari.json"),
    Case(FAMILIES["atari"], "pnc", "atari/pnc_atari.json"),
    Case(FAMILIES["atari"], "clear", "atari/clear_atari.json"),
    Case(
        FAMILIES["minihack"],
        "ewc",
        "minihack/impala_minihack_paperdefaults.json",
        _MINIHACK_EWC,
        "EWC consolidation time: the Fisher's loss divides rewards by the running std "
        "without updating it (CORA's compute_loss also updates it)",
    ),
    Case(FAMILIES["minihack"], "clear", "minihack/clear_minihack_paperdefaults.json"),
)


def find_case(name: str) -> Case:
    for case in CASES:
        if case.name == name:
            return case
    raise ValueError(f"unknown case {name!r}; cases: {', '.join(c.name for c in CASES)}")


# ------------------------------------------------------------------------------ inputs
def _rng(case: Case, *key: int) -> np.random.Generator:
    return np.random.default_rng([case.seed, *key])


def unroll_batch(case: Case, index: int, task: int, width: int | None = None) -> dict:
    """Rollout ``index`` of ``case`` (TorchBeast layout, numpy): ``width`` unrolls
    (default ``B``) of task ``task``, ``T + 1`` frames each (see the module docstring)."""
    fam = case.family
    t1, b = fam.unroll + 1, width or fam.batch
    rng = _rng(case, 1, index)
    n, k = fam.num_actions, fam.task_actions[task]
    action = rng.integers(0, k, size=(t1, b))
    reward = np.where(
        rng.random((t1, b)) < 0.4, rng.choice([-3.0, -1.0, 0.5, 1.0, 4.0], (t1, b)), 0
    )
    return {
        "frame": rng.integers(0, 256, size=(t1, b, *fam.cora_obs), dtype=np.uint8),
        "reward": reward.astype(np.float32) + (-0.001 if fam.name == "minihack" else 0.0),
        "done": rng.random((t1, b)) < 0.25,
        "episode_return": np.zeros((t1, b), np.float32),
        "episode_step": np.zeros((t1, b), np.int32),
        "policy_logits": rng.normal(0.0, 1.0, size=(t1, b, n)).astype(np.float32),
        "baseline": rng.normal(0.0, 1.0, size=(t1, b)).astype(np.float32),
        "uncertainty": np.zeros((t1, b), np.float32),
        "last_action": action.copy(),  # the action taken before frame t
        "action": action,
    }


def replay_batch(case: Case) -> dict:
    """The unrolls CLEAR holds before the run (one per actor)."""
    return unroll_batch(case, 1000, 0)


def initial_parameters(policy: th.nn.Module, seed: int) -> None:
    """Draw every parameter of ``policy`` from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (a
    bias takes its layer's weight's fan-in), in ``named_parameters`` order, from numpy's
    PCG64 seeded with ``seed``: the same numbers on every machine and torch version."""
    rng = np.random.default_rng([seed, 7])
    fan_in = 1
    with th.no_grad():
        for _, param in policy.named_parameters():
            if param.dim() > 1:
                fan_in = int(np.prod(param.shape[1:]))
            bound = 1.0 / np.sqrt(fan_in)
            param.copy_(th.as_tensor(rng.uniform(-bound, bound, size=tuple(param.shape))))


def sample_plan(case: Case, step: int, call: int, kind: str, entries: int) -> list[tuple[int, int]]:
    """The ``(actor, entry)`` pairs that draw ``call`` of rollout ``step`` takes: ``B``
    unrolls, each a stored entry of one actor (CLEAR: actor ``i``'s entry 0, in order)."""
    b = case.family.batch
    if kind == "replay":
        return [(a, 0) for a in range(b)]
    rng = _rng(case, 2, step, call)
    return [
        (int(a), int(e))
        for a, e in zip(rng.integers(0, b, b), rng.integers(0, entries, b), strict=True)
    ]


def update_seed(case: Case, step: int) -> int:
    """torch's seed right before update ``step`` on both sides (P&C's re-initialisation
    of the active column draws from it; CORA's actor sampling in its forward pass too)."""
    return 1000 * case.seed + step


def task_segments(case: Case) -> list[Segment]:
    budgets, _ = FLOWS[case.method]
    per_rollout = case.family.unroll * case.family.batch
    out, start = [], 0
    for index, rollouts in enumerate(budgets):
        end = start + rollouts * per_rollout
        out.append(Segment(index, 0, index, f"task{index}", start, end))
        start = end
    return out


# ------------------------------------------------------------------------------ our side
class _Cursor(SimpleNamespace):
    """The parts of ``SequenceCursor`` the learner and the methods read."""

    @property
    def segment(self) -> Segment:
        return self.segments[self.index]


class ScheduleOnlyVecEnv(VecEnv):
    """A VecEnv with the suite's spaces and a schedule cursor, never stepped: the learner
    and the methods read the task position from it as from a sequence env."""

    def __init__(
        self,
        observation_space: spaces.Space,
        num_actions: int,
        num_envs: int,
        segments: list[Segment],
    ):
        super().__init__(num_envs, observation_space, spaces.Discrete(num_actions))
        self.cursor = _Cursor(num_envs=num_envs, segments=segments, index=0, task_step=0)
        self._listeners: list[Callable[[TaskSwitch], None]] = []

    @property
    def current_task(self) -> Segment:
        return self.cursor.segment

    def on_task_switch(self, callback: Callable[[TaskSwitch], None]) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def switch(self, total_step: int) -> None:
        previous = self.cursor.segment
        self.cursor.index += 1
        self.cursor.task_step = 0
        current = (
            self.cursor.segments[self.cursor.index]
            if self.cursor.index < len(self.cursor.segments)
            else None
        )
        for listener in list(self._listeners):
            listener(TaskSwitch(previous, current, total_step))

    def reset(self):
        raise NotImplementedError("the parity env is never stepped")

    def step_async(self, actions):
        raise NotImplementedError("the parity env is never stepped")

    def step_wait(self):
        raise NotImplementedError("the parity env is never stepped")

    def close(self) -> None:
        pass

    def get_attr(self, attr_name, indices=None):
        return [None] * self.num_envs

    def set_attr(self, attr_name, value, indices=None) -> None:
        pass

    def env_method(self, method_name, *args, indices=None, **kwargs):
        return [None] * self.num_envs

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * self.num_envs


class _Sequence(SimpleNamespace):
    """The parts of ``TaskSequence`` the factory reads."""

    def action_masks(self) -> np.ndarray | None:
        return self.masks


class ScriptedGenerator:
    """Stands in for a ``np.random.Generator``: ``integers(low, high, size)`` returns the
    planned draws in order (and checks they fit the bounds asked)."""

    def __init__(self) -> None:
        self.draws: deque[np.ndarray] = deque()

    def integers(self, low: int, high: int | None = None, size: int | None = None) -> np.ndarray:
        low, high = (0, low) if high is None else (low, high)
        draw = self.draws.popleft()
        if (size is not None and len(draw) != size) or draw.min() < low or draw.max() >= high:
            raise AssertionError(
                f"planned draw {draw.tolist()} does not fit [{low}, {high}) x {size}"
            )
        return draw


def method_kwargs(case: Case, hp: dict) -> dict:
    """The preset's method settings with the harness's sizes."""
    kw = dict(hp["method"])
    fam = case.family
    frames = 8 * fam.unroll * fam.batch
    if case.method in ("ewc", "online-ewc", "pnc"):
        kw.update(fisher_batches=FISHER_BATCHES, buffer_frames=frames)
    if case.method in ("ewc", "online-ewc"):
        kw["min_task_steps"] = 0
    if case.method == "pnc":
        kw["progress_updates"] = 0
    if case.method == "clear":
        kw["buffer_size"] = frames
    return kw


class OurSide:
    """Our learner for ``case``, built as a run builds it (see the module docstring);
    ``learner_changes``: learner settings changed from the preset (tests of the pins)."""

    def __init__(self, case: Case, learner_changes: Mapping[str, Any] | None = None):
        th.manual_seed(case.seed)
        self.case = case
        fam = case.family
        self.hp = hyperparameters.resolve(fam.suite, "vtrace", case.method, "paper")
        self.hp["learner"]["n_steps"] = fam.unroll
        self.hp["learner"].update(learner_changes or {})
        masks = np.zeros((len(fam.task_actions), fam.num_actions), dtype=bool)
        for task, k in enumerate(fam.task_actions):
            masks[task, :k] = True
        sequence = _Sequence(
            name=fam.suite,
            tasks=list(range(len(fam.task_actions))),
            observation_space=spaces.Box(0, 255, fam.raw_obs, np.uint8),
            masks=masks if fam.name == "minihack" else None,
        )
        self.base = ScheduleOnlyVecEnv(
            sequence.observation_space, fam.num_actions, fam.batch, task_segments(case)
        )
        env, _ = wrap_env(self.base, sequence, self.hp, multi_head=False, task_id_input=False)
        self.method = make_method(case.method, seed=case.seed, **method_kwargs(case, self.hp))
        self.model = build_model(
            "vtrace",
            env,
            sequence,
            self.hp,
            self.method,
            method=case.method,
            seed=case.seed,
            multi_head=False,
            task_id_input=False,
            device="cpu",
        )
        self.model.set_logger(Logger(folder=None, output_formats=[]))
        attach_method(self.model, self.method, env)
        self.policy = self.model.policy
        initial_parameters(self.policy, case.seed)
        self.names = {ours: keys[0] for ours, keys in cora_names(self.policy).items()}
        self.rng = ScriptedGenerator()
        for holder in (self.method, getattr(self.method, "buffer", None)):
            if holder is not None and hasattr(holder, "rng"):
                holder.rng = self.rng
        self.replay_terms: list[dict[str, float]] = []
        if case.method == "clear":
            self._fill_replay()

    # -- inputs in our layout --------------------------------------------------------------
    def observation(self, batch: Mapping[str, np.ndarray], t: Any, task: int) -> dict:
        """Frames ``t`` of ``batch`` as the policy's observation (``(..., B, *space)``)."""
        fam = self.case.family
        frames = np.asarray(batch["frame"][t])
        lead = frames.shape[:-4]
        obs = {
            "obs": frames.reshape(*lead, *fam.channels_first_obs),
            "prev_action": np.asarray(batch["last_action"][t], np.int64),
            "prev_reward": np.clip(np.asarray(batch["reward"][t], np.float32), -1, 1)[..., None],
        }
        if "task_id" in self.policy.observation_space.spaces:
            obs["task_id"] = np.full(lead, task, dtype=np.int64)
        return obs

    def learner_rewards(self, rewards: np.ndarray) -> np.ndarray:
        clip = self.hp.get("reward_clip")
        return np.clip(rewards, *clip) if clip is not None else rewards

    def _fill_replay(self) -> None:
        batch = replay_batch(self.case)
        obs = self.observation(batch, slice(None), 0)
        obs["prev_action"] = obs["prev_action"][..., None]
        if "task_id" in obs:
            obs["task_id"] = obs["task_id"][..., None]
        self.method.buffer.add(
            obs,
            batch["action"][1:],
            batch["policy_logits"],
            batch["baseline"],
            self.learner_rewards(batch["reward"][1:]),
            batch["done"],
        )
        self.method.buffer.rng = self.rng

    # -- one rollout -----------------------------------------------------------------------
    def play(self, step_index: int, step: Step, batch: Mapping[str, np.ndarray]) -> dict:
        """Collect ``batch`` as rollout ``step_index`` (the switch, when it is the task's
        last, inside its last env step), hand it to the method, update; return the record."""
        fam, model = self.case.family, self.model
        t_len, b = fam.unroll, fam.batch
        first = model.num_timesteps
        model.num_timesteps += t_len * b - b
        self.base.cursor.task_step += t_len * b
        if step.last_of_task:
            self.base.switch(first + t_len * b)
        model.num_timesteps += b
        buf = model.rollout_buffer
        buf.reset()
        behaviour = th.log_softmax(th.as_tensor(batch["policy_logits"]), -1)
        for t in range(t_len):
            action = batch["action"][t + 1]
            buf.add(
                self.observation(batch, t, step.task),
                action.reshape(b, 1),
                self.learner_rewards(batch["reward"][t + 1]),
                batch["done"][t].astype(np.float32),
                th.as_tensor(batch["baseline"][t + 1]).view(b, 1),
                behaviour[t + 1].gather(-1, th.as_tensor(action).view(b, 1)).view(b),
            )
        last_obs = self.observation(batch, t_len, step.task)
        with th.no_grad():
            tensors = {k: th.as_tensor(v) for k, v in last_obs.items()}
            last_values = self.policy.predict_values(tensors)
        buf.compute_returns_and_advantage(last_values, batch["done"][t_len])
        model._last_obs = last_obs
        model._last_episode_starts = batch["done"][t_len].astype(np.float32)
        for call, (kind, entries) in enumerate(step.samples):
            pairs = sample_plan(self.case, step_index, call, kind, entries)
            self.rng.draws.append(
                np.array([a if kind == "replay" else e * b + a for a, e in pairs])
            )
        self.method.on_rollout_end(rollout_from_buffer(model, first))
        before = {n: p.detach().clone() for n, p in self.policy.named_parameters()}
        lr = model.current_learning_rate()
        model.logger.name_to_value.clear()
        self.replay_terms.clear()
        th.manual_seed(update_seed(self.case, step_index))
        model.train()
        if self.rng.draws:
            raise AssertionError(f"{len(self.rng.draws)} planned draws were not taken")
        return self._record(lr, before)

    def _record(self, lr: float, before: Mapping[str, th.Tensor]) -> dict:
        logged = dict(self.model.logger.name_to_value)
        hp = self.model
        losses: dict[str, float] = {}
        if "train/policy_loss" in logged:
            losses = {
                "pg_loss": logged["train/policy_loss"],
                "baseline_loss": hp.vf_coef * logged["train/value_loss"],
                "entropy_loss": hp.ent_coef * logged["train/entropy_loss"],
            }
        for terms in self.replay_terms:  # CLEAR: CORA's losses run over new + replayed unrolls
            losses["pg_loss"] += terms["policy_gradient"]
            losses["baseline_loss"] += hp.vf_coef * terms["value"]
            losses["entropy_loss"] -= hp.ent_coef * terms["entropy"]
            losses["policy_cloning_loss"] = self.method.policy_cloning * terms["policy_cloning"]
            losses["value_cloning_loss"] = self.method.value_cloning * terms["value_cloning"]
        if self.case.method in ("ewc", "online-ewc"):
            losses["ewc_loss"] = logged.get("train/cl_loss", 0.0)
        if "train/pnc_distill_kl" in logged:
            losses["kl_div_loss"] = logged["train/pnc_distill_kl"]
            losses["ewc_loss"] = logged.get("train/pnc_kb_ewc", 0.0)
        losses["total_loss"] = sum(losses.values())
        record: dict[str, Any] = {
            "lr": lr,
            "losses": losses,
            "grad_norm": logged["train/grad_norm"],
            "grads": {},
            "params": {},
            "before": {},
        }
        for name, param in self.policy.named_parameters():
            key = self.names[name]
            record["params"][key] = param.detach().numpy().copy()
            record["before"][key] = before[name].numpy()
            grad = param.grad
            record["grads"][key] = (
                np.zeros(param.shape, np.float32) if grad is None else grad.numpy().copy()
            )
        normalizer = getattr(self.policy, "reward_normalizer", None)
        if normalizer is not None:
            record["moments"] = {
                m: float(getattr(normalizer, m))
                for m in ("reward_sum", "reward_m2", "reward_count")
            }
        record["terms"] = self.terms()
        return record

    def terms(self) -> dict[str, dict[str, np.ndarray]]:
        """The method's consolidated ``(importance, anchor)`` per term, under CORA's names
        (EWC: by task id; online EWC: ``"online"``; P&C: the KB's, ``"online"``, named as
        the parameters of CORA's KB column)."""
        out: dict[str, dict[str, np.ndarray]] = {}
        if self.case.method in ("ewc", "online-ewc"):
            items = self.method.terms.items()
            rename = self.names.__getitem__
        elif self.case.method == "pnc" and self.method.kb_terms is not None:
            items = [("online", self.method.kb_terms)]
            rename = lambda n: self.names[n][len("knowledge_base.") :]  # noqa: E731
        else:
            return out
        for key, (importance, anchor) in items:
            out[f"{key}/importance"] = {rename(n): v.numpy().copy() for n, v in importance.items()}
            out[f"{key}/anchor"] = {rename(n): v.numpy().copy() for n, v in anchor.items()}
        return out

    def run(self) -> list[dict]:
        """Play the case's schedule; one record per update."""
        if self.case.method == "clear":
            self._watch_replay_terms()
        _, steps = FLOWS[self.case.method]
        return [
            self.play(i, step, unroll_batch(self.case, i, step.task))
            for i, step in enumerate(steps)
        ]

    def _watch_replay_terms(self) -> None:
        method = self.method
        compute = method.replay_terms

        def replay_terms(policy, batch):
            terms = compute(policy, batch)
            self.replay_terms.append({k: float(v.detach()) for k, v in terms.items()})
            return terms

        method.replay_terms = replay_terms


def cora_parameters(case: Case) -> dict[str, th.Tensor]:
    """The case's initial parameters under CORA's names (for CORA's ``load_state_dict``)."""
    return cora_state_dict(OurSide(case).policy)


# ------------------------------------------------------------------------------ comparing
TOLERANCES: dict[str, float] = {
    "lr": 1e-7,
    "losses": 2e-5,
    "grad_norm": 2e-5,
    "grads": 1e-4,
    "params": 1e-3,
    "moments": 1e-5,
    "terms": 1e-4,
}
"""Largest relative difference accepted per quantity (float32 arithmetic in different
orders). ``lr``, ``grad_norm``, ``moments``: each scalar relative to CORA's; ``losses``:
relative to the largest of the update's losses (a loss that is 0 in CORA, e.g. an EWC
penalty right at its anchor, is compared at that scale); ``grads``, ``terms``: the largest
absolute difference over all tensors relative to CORA's largest absolute value;
``params``: the norm of the difference between the two updates (new minus old parameters)
relative to the norm of CORA's update. (RMSProp divides by ``sqrt(v) + eps``, eps 1e-6 on
MiniHack, so an entry whose gradients are tiny moves by ``lr * g / eps`` and float32
noise in ``g`` shows as a large relative difference of that single entry: norms measure
the update, not one entry's noise. Through later updates, and EWC's lambda of 1e4 on the
parameters' distance from the anchor, that noise grows to ~1e-4 of MiniHack's update
norm; a wrong setting moves it by order 1.)"""


def _arrays(d: Mapping[str, Any], keys: Iterable[str]) -> list[np.ndarray]:
    return [np.asarray(d[k], np.float64) for k in keys]


def _same_keys(ours: Mapping[str, Any], cora: Mapping[str, Any], what: str) -> None:
    if set(ours) != set(cora):
        raise AssertionError(
            f"{what}: ours only {sorted(set(ours) - set(cora))}, "
            f"CORA only {sorted(set(cora) - set(ours))}"
        )


def difference(
    quantity: str, ours: Any, cora: Any, before: Mapping[str, Any] | None = None
) -> tuple[float, float]:
    """``(max abs difference, relative difference)`` of ``quantity`` (see ``TOLERANCES``)."""
    if not isinstance(cora, Mapping):
        diff = abs(float(ours) - float(cora))
        return diff, diff / max(abs(float(cora)), 1e-12)
    _same_keys(ours, cora, quantity)
    keys = list(cora)
    o, c = _arrays(ours, keys), _arrays(cora, keys)
    diff = max((float(np.max(np.abs(a - b))) for a, b in zip(o, c, strict=True)), default=0.0)
    if quantity == "moments":
        rel = max(
            abs(float(a) - float(b)) / max(abs(float(b)), 1e-12) for a, b in zip(o, c, strict=True)
        )
    elif quantity == "params":
        start = _arrays(before, keys)
        num = sum(float(np.sum((a - b) ** 2)) for a, b in zip(o, c, strict=True))
        den = sum(float(np.sum((b - s) ** 2)) for b, s in zip(c, start, strict=True))
        rel = float(np.sqrt(num / max(den, 1e-30)))
    else:  # losses: the update's largest loss; tensors: the largest entry
        rel = diff / max(max((float(np.max(np.abs(b))) for b in c), default=0.0), 1e-12)
    return diff, rel


def compare_records(ours: list[dict], cora: list[dict]) -> list[dict]:
    """One row per update and quantity: ``{"update", "quantity", "abs", "rel", "ok"}``."""
    if len(ours) != len(cora):
        raise AssertionError(f"{len(ours)} updates here, {len(cora)} in CORA's run")
    rows = []
    for i, (o, c) in enumerate(zip(ours, cora, strict=True)):
        for quantity in ("lr", "losses", "grad_norm", "grads", "params", "moments", "terms"):
            if quantity not in c:
                continue
            if quantity == "terms":
                _same_keys(o["terms"], c["terms"], f"update {i} terms")
                if not c["terms"]:
                    continue
                pairs = [difference("terms", o["terms"][k], c["terms"][k]) for k in c["terms"]]
                diff, rel = max(p[0] for p in pairs), max(p[1] for p in pairs)
            else:
                diff, rel = difference(quantity, o[quantity], c[quantity], c["before"])
            rows.append(
                {
                    "update": i,
                    "quantity": quantity,
                    "abs": diff,
                    "rel": rel,
                    "ok": rel <= TOLERANCES[quantity],
                }
            )
    return rows


# ------------------------------------------------------------------------------ observations
@dataclass(frozen=True)
class ObservationCase:
    """A suite's task env, played with the same seed and actions on both sides:
    CORA's env stack from its task factory (``get_single_<suite>_task`` with its
    experiment spec's settings) in TorchBeast's ``Environment``, and our suite's task env
    (``make_train``) behind the learner's ``PreviousActionReward`` and SB3's
    ``DummyVecEnv`` / ``VecTransposeImage`` (both reset at an episode end and return the
    next episode's first observation)."""

    family: str
    suite: str
    task: int
    """The task's index in our suite (and in CORA's experiment spec)."""
    cora_env: str
    """The env name CORA's experiment spec gives the task."""
    task_actions: int
    steps: int
    seed: int = 3

    @property
    def name(self) -> str:
        return f"{self.family}/{self.cora_env}"


OBSERVATION_CASES: tuple[ObservationCase, ...] = (
    ObservationCase("minihack", "MiniHack15", 0, "Room-Random-5x5-v0", 8, 300),
    ObservationCase("procgen", "Procgen6", 0, "climber-v0", 15, 1500),
    ObservationCase("atari", "Atari6", 0, "SpaceInvadersNoFrameskip-v4", 18, 600),
    ObservationCase("atari", "Atari6", 5, "MsPacmanNoFrameskip-v4", 18, 600),
)
"""Training tasks of CORA's ``experiment_specs.py`` sequences (the first of each; Atari6's
MsPacman too, whose colours made pooling gray frames differ from CORA's pooled RGB), long
enough for episode ends (procgen's climber: 2 in 1,500 steps)."""

STREAM_KEYS = ("frames", "rewards", "dones", "prev_actions", "prev_rewards")


def observation_actions(case: ObservationCase) -> np.ndarray:
    """The actions both sides play: uniform over the task's action set."""
    return np.random.default_rng([case.seed, 3]).integers(0, case.task_actions, case.steps)


def our_observation_stream(case: ObservationCase) -> dict[str, np.ndarray]:
    """Our side: ``frames`` ``(steps + 1, C, H, W)`` uint8 (the policy's layout),
    ``rewards``, ``dones`` ``(steps,)``, ``prev_actions``, ``prev_rewards`` ``(steps + 1,)``
    (the previous action and clipped reward inputs of each frame)."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.vec_env import DummyVecEnv

    from baselines_sb3.wrappers import PreviousActionReward
    from cl_suites.suites import find_suite

    sequence = find_suite(case.suite).build_sequence()
    venv = PreviousActionReward(DummyVecEnv([sequence.tasks[case.task].make_train]))
    venv = BaseAlgorithm._wrap_env(venv, verbose=0, monitor_wrapper=False)  # as the learner
    venv.seed(case.seed)
    out: dict[str, list] = {k: [] for k in STREAM_KEYS}

    def frame(obs: dict) -> None:
        out["frames"].append(obs["obs"][0])
        out["prev_actions"].append(int(obs["prev_action"][0]))
        out["prev_rewards"].append(float(obs["prev_reward"][0, 0]))

    frame(venv.reset())
    for action in observation_actions(case):
        obs, reward, done, _ = venv.step(np.array([action]))
        frame(obs)
        out["rewards"].append(float(reward[0]))
        out["dones"].append(bool(done[0]))
    venv.close()
    return stream_arrays(out)


def stream_arrays(stream: Mapping[str, list]) -> dict[str, np.ndarray]:
    dtypes = {
        "frames": np.uint8,
        "rewards": np.float32,
        "dones": bool,
        "prev_actions": np.int64,
        "prev_rewards": np.float32,
    }
    return {k: np.asarray(stream[k], dtype=dtypes[k]) for k in STREAM_KEYS}


def compare_streams(ours: Mapping[str, np.ndarray], cora: Mapping[str, np.ndarray]) -> dict:
    """Per key: the first step where the streams differ (``None``: identical) and the
    largest absolute difference; plus the episode ends seen."""
    row: dict[str, Any] = {
        "steps": len(cora["rewards"]),
        "episode_ends": int(np.sum(cora["dones"])),
    }
    for key in STREAM_KEYS:
        o, c = np.asarray(ours[key]), np.asarray(cora[key])
        if o.shape != c.shape:
            row[key] = {"first": 0, "max_abs": float("inf"), "shapes": (o.shape, c.shape)}
            continue
        diff = np.abs(o.astype(np.float64) - c.astype(np.float64)).reshape(len(o), -1).max(axis=1)
        bad = np.flatnonzero(diff > 0)
        row[key] = {
            "first": int(bad[0]) if bad.size else None,
            "max_abs": float(diff.max(initial=0)),
        }
    row["ok"] = all(row[k]["first"] is None for k in STREAM_KEYS)
    return row


def stream_pins(stream: Mapping[str, np.ndarray]) -> dict:
    """What the CI pins of an observation stream: the frames' SHA-256, rewards, dones and
    previous inputs."""
    return {
        "frames_sha256": digest(stream["frames"]),
        "frame_sums": [
            int(x) for x in stream["frames"].reshape(len(stream["frames"]), -1).sum(axis=1)
        ],
        **{k: np.asarray(stream[k]).tolist() for k in STREAM_KEYS if k != "frames"},
    }


# ------------------------------------------------------------------------------ pins
PIN_PARAMETERS = 4
"""Entries of every parameter tensor pinned after each update (and of every Fisher)."""


def _head(array: np.ndarray, n: int = PIN_PARAMETERS) -> list[float]:
    return [float(x) for x in np.asarray(array).reshape(-1)[:n]]


def pin_record(record: Mapping[str, Any]) -> dict:
    """What the CI pins of one update: learning rate, losses, gradient norm, the norm of
    every clipped gradient, the first entries of every parameter before and after the
    update and of every consolidated Fisher / anchor, the running reward moments."""
    out = {
        "lr": record["lr"],
        "losses": dict(record["losses"]),
        "grad_norm": record["grad_norm"],
        "grads": {k: float(np.linalg.norm(v)) for k, v in record["grads"].items()},
        "params": {k: _head(v) for k, v in record["params"].items()},
        "before": {k: _head(v) for k, v in record["before"].items()},
        "terms": {t: {k: _head(v) for k, v in d.items()} for t, d in record["terms"].items()},
    }
    if "moments" in record:
        out["moments"] = dict(record["moments"])
    return out


def pin_differences(pinned: Mapping[str, Any], record: Mapping[str, Any]) -> list[str]:
    """Where our ``record`` leaves the pinned values (CORA's) beyond ``TOLERANCES``, measured
    as ``compare_records`` measures (``grads``: the tensors' norms)."""
    ours = pin_record(record)
    problems = []
    for quantity in ("lr", "losses", "grad_norm", "grads", "params", "moments", "terms"):
        if quantity not in pinned:
            continue
        try:
            if quantity == "terms":
                _same_keys(ours["terms"], pinned["terms"], "terms")
                rel = max(
                    (
                        difference("terms", ours["terms"][t], v)[1]
                        for t, v in pinned["terms"].items()
                    ),
                    default=0.0,
                )
            else:
                rel = difference(quantity, ours[quantity], pinned[quantity], pinned["before"])[1]
        except AssertionError as e:
            problems.append(str(e))
            continue
        if not rel <= TOLERANCES[quantity]:
            problems.append(
                f"{quantity}: relative difference {rel:.2e} > {TOLERANCES[quantity]:.0e}"
            )
    return problems


def digest(arrays: Iterable[np.ndarray]) -> str:
    """SHA-256 of the arrays' bytes in order (observation checksums)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def load_pins(path: Path = PINS_PATH) -> dict:
    return json.loads(path.read_text())
