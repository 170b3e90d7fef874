"""The CORA parity cases: what both sides play, how they are compared, what the CI pins.

No CORA code is imported here. ``benchmarks/parity/parity_cora.py update`` (in CORA's
interpreter) plays every case on CORA's side (``cora_side.py``) and on ours
(``cora_ours.py``), both beside this file, and compares;
the CI test ``tests/baselines/test_cora_parity_pins.py`` plays our side against the values
CORA's code computed, stored with their provenance in ``tests/golden/cora_parity.json``.

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
batches are drawn by a scripted random source on both sides (``sample_plan``), so both
sides train on the same unrolls. Only the sizes of ``HARNESS_SIZES`` differ from the
presets and CORA's configs, on both sides alike.

**Observation cases** (``OBSERVATION_CASES``): a suite's task env on both sides, the same
seed and actions (``observation_actions``); the streams are compared exactly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from cl_suites.core.task import Segment

PINS_PATH = Path(__file__).resolve().parents[2] / "tests" / "golden" / "cora_parity.json"
"""The values CORA's code computed for every case (``parity_cora.py update --write-pins``),
pinned by the CI test."""


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


def _fisher(entries: int) -> tuple[tuple[str, int], ...]:
    return (("fisher", entries),) * FISHER_BATCHES


FISHER_BATCHES = 3
_EWC_SEGMENTS = ((0, 2), (1, 2), (0, 2), (1, 2))

FLOWS: dict[str, tuple[tuple[tuple[int, int], ...], tuple[Step, ...]]] = {
    # ((task id, rollouts of its budget) per segment of the schedule, rollouts played)
    "ft": (((0, 4),), (Step(0), Step(0))),
    "ewc": (
        _EWC_SEGMENTS,
        (
            Step(0),
            Step(0, True),
            Step(1, samples=_fisher(2)),  # task 0's 2 unrolls per actor
            Step(1, True),
            Step(0, samples=_fisher(2)),  # task 1's; then 2 terms, penalty / 2
            Step(0, True),
            Step(1, samples=_fisher(4)),  # task 0's both visits; its term replaced
        ),
    ),
    "online-ewc": (
        _EWC_SEGMENTS,
        (
            Step(0),
            Step(0, True),
            Step(1, samples=_fisher(3)),  # one buffer for all tasks
            Step(1, True),
            Step(0, samples=_fisher(5)),
            Step(0, True),
            Step(1, samples=_fisher(7)),
        ),
    ),
    "pnc": (
        ((0, 2), (1, 3)),
        (
            Step(0),
            Step(0, True, samples=(("kl", 2),)),
            Step(1),
            Step(1, samples=(*_fisher(4), ("kl", 4))),
            Step(1, True, samples=(("kl", 5),)),
        ),
    ),
    "clear": (((0, 4),), (Step(0, samples=(("replay", 1),)), Step(0, samples=(("replay", 1),)))),
}
"""Per method (``ft`` = IMPALA alone): the schedule's segments, and the rollouts played.
EWC and online EWC visit tasks 0, 1, 0, 1: consolidations in the first update of every
segment but the first (3 Fisher batches each), the second visit of task 0 replaces its
term, the penalty averages over the stored terms. P&C's progress / compress phases
alternate (0 progress updates after a boundary: reset and progress, then compress; the
KB's Fisher at task 1's first compress update, then the KB's online-EWC penalty in the
next compress update). CLEAR replays the unrolls stored before the run in both updates."""

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
    """The schedule's segments (agent steps: rollouts x ``T`` x ``B``)."""
    plan, _ = FLOWS[case.method]
    per_rollout = case.family.unroll * case.family.batch
    out, start = [], 0
    for index, (task, rollouts) in enumerate(plan):
        end = start + rollouts * per_rollout
        out.append(Segment(index, 0, task, f"task{task}", start, end))
        start = end
    return out


def step_segments(case: Case) -> list[int]:
    """The segment of each rollout played (a task's last rollout ends its segment)."""
    out, index = [], 0
    for step in FLOWS[case.method][1]:
        out.append(index)
        index += step.last_of_task
    return out


# ------------------------------------------------------------------------------ comparing
TOLERANCES: dict[str, float] = {
    "lr": 1e-7,
    "losses": 2e-5,
    "grad_norm": 2e-5,
    "grads": 1e-4,
    "params": 1e-4,
    "moments": 1e-5,
    "terms": 1e-4,
}
"""Largest relative difference accepted per quantity, between two updates that start from
the same state (``parity_cora.py`` starts each of ours from CORA's parameters and RMSProp
state before it; float32 arithmetic in other orders remains). ``lr``, ``grad_norm``,
``moments``: each scalar relative to CORA's; ``losses``: relative to the largest of the
update's losses (a loss that is 0 in CORA, e.g. an EWC penalty right at its anchor, is
compared at that scale); ``grads``, ``terms``: the largest absolute difference over all
tensors relative to CORA's largest absolute value; ``params``: the norm of the difference
of the new parameters relative to the norm of CORA's update (RMSProp divides by ``sqrt(v)
+ eps``, eps 1e-6 on MiniHack, so float32 noise in a tiny gradient entry moves that entry
visibly: the norm measures the update, not one entry's noise)."""


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
    ObservationCase("minihack", "MiniHack15", 1, "Room-Dark-5x5-v0", 8, 300),
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


DRIFT_FACTOR = 10.0
"""The CI accepts, per update and quantity, ``DRIFT_FACTOR`` times the difference our free
run had from CORA's when the pins were written (``drift``), when that exceeds
``TOLERANCES``: float32 noise compounds over a free run (EWC's lambda of 1e4 turns 1e-7 of
parameter noise into 1e-3 of its gradient), a regression moves the values by order 1."""


def pin_record(record: Mapping[str, Any], drift: Iterable[Mapping[str, Any]] = ()) -> dict:
    """What the CI pins of one update: learning rate, losses, gradient norm, the norm of
    every clipped gradient, the first entries of every parameter before and after the
    update and of every consolidated Fisher / anchor, the running reward moments; ``drift``:
    ``compare_records``' rows of this update between our free run and CORA's."""
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
    out["drift"] = {row["quantity"]: row["rel"] for row in drift}
    return out


def pin_differences(pinned: Mapping[str, Any], record: Mapping[str, Any]) -> list[str]:
    """Where our ``record`` (of a free run) leaves the pinned values (CORA's) beyond the
    tolerance (``TOLERANCES``, or ``DRIFT_FACTOR`` x the pinned drift), measured as
    ``compare_records`` measures (``grads``: the tensors' norms)."""
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
        tolerance = max(
            TOLERANCES[quantity], DRIFT_FACTOR * pinned.get("drift", {}).get(quantity, 0)
        )
        if not rel <= tolerance:
            problems.append(f"{quantity}: relative difference {rel:.2e} > {tolerance:.1e}")
    return problems


def digest(arrays: Iterable[np.ndarray]) -> str:
    """SHA-256 of the arrays' bytes in order (observation checksums)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def load_pins(path: Path = PINS_PATH) -> dict:
    return json.loads(path.read_text())
