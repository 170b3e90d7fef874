"""A run's ``vectorization_mode`` when it is ``auto`` (the default): env worker processes
where the cost model says they pay on this machine, else the envs in the learner's process.

The decision reads the cores this process may use (``usable_cores``: ``taskset`` and
cgroup cpusets narrow them), whether the run trains on a GPU, the learner's
``policy_lag`` and the suite's per-agent-step costs (``cl_suites.job.cost_model``; the
V-trace learner's figures stand in for every torch learner on a suite). It predicts the
training rate (agent steps per second) with the envs in the learner's process and with
the run's env workers (``env_workers``; unset: all cores but acting's and the update's,
:func:`default_workers`, at most the envs), and takes the workers when they are predicted
:data:`GAIN` times faster or more:

* below :data:`MIN_CORES` (4) usable cores the envs stay in the learner's process
  (``sync``): acting and the update take two cores, one worker steps nothing in parallel;
* on a CPU-only machine with V-trace's ``policy_lag=1``, the update bounds the rate
  (Atari6: 1,023 agent steps/s from 2 cores on), so ``sync``; PPO's lockstep gains from
  workers (Atari6 from 4 cores, MiniHack15 from 8);
* with a GPU, workers pay from 4 cores (Atari6 on 16 cores: 4,596 vs 1,026).

Suites that batch their own simulators (MEAL's JAX engine) and suites without cost figures
(Procgen6's residual network was only timed in-process; CHORES could not be timed) keep
``sync``. An explicit ``vectorization_mode`` (``sync``, ``async``, ``workers``) always wins.
The choice and its reason are printed once in the run's header (``envs:``, after
``device:``) and kept in ``metadata.json`` (``vectorization``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from cl_suites.core.workers import usable_cores
from cl_suites.job.cost_model import cost_data, gpu_forward, predict, predict_gpu

_Options = TypeVar("_Options")

AUTO = "auto"
"""The ``vectorization_mode`` decided here."""
MIN_CORES = 4
"""Fewer usable cores keep the envs in the learner's process: acting and the update take
two, and fewer than two workers step nothing in parallel."""
GAIN = 1.1
"""Workers are taken when predicted at least this many times faster than one process
(the model's error on the measured points is within 10%: ``benchmarks/speed/cost_model.py``)."""


@dataclass(frozen=True)
class VectorizationChoice:
    """``mode`` (``sync``, ``async`` or ``workers``) and why: ``reason`` is one line."""

    mode: str
    reason: str
    env_workers: int | None = None
    """The worker processes of ``workers`` (``None``: the run's ``env_workers``)."""

    def record(self) -> dict[str, str | int | None]:
        """The ``metadata.json`` entry."""
        return {"mode": self.mode, "reason": self.reason, "env_workers": self.env_workers}

    def apply(self, options: _Options) -> _Options:
        """``options`` (the job's ``JobOptions``) with this mode and, where the choice
        names them, its env workers."""
        return dataclasses.replace(
            options,
            vectorization_mode=self.mode,
            env_workers=self.env_workers or options.env_workers,
        )


def choose(
    suite: str,
    *,
    steps_on_cpu: bool,
    gpu: bool,
    policy_lag: int,
    num_envs: int,
    env_workers: int | None = None,
    cores: int | None = None,
    env_splits: int = 1,
) -> VectorizationChoice:
    """The ``vectorization_mode`` of a run of ``suite`` (short name) with ``auto``.

    Args:
        suite: the suite's short name (``Atari6``; the cost model's key).
        steps_on_cpu: the suite's envs step on the CPU one sub-env at a time (its runtime's
            ``steps_on_cpu``; MEAL's batched engine: ``False``).
        gpu: the run trains on a GPU.
        policy_lag: the learner's ``policy_lag`` (1: the update overlaps acting).
        num_envs: the run's sub-envs.
        env_workers: the run's ``env_workers`` (``None``: one per usable core).
        cores: the usable cores (``None``: :func:`usable_cores`).
        env_splits: the run's ``env_splits`` (workers then at most ``num_envs /
            env_splits``; the double-buffered saving is in the workers' prediction).
    """
    cores = usable_cores() if cores is None else int(cores)
    if not steps_on_cpu:
        return VectorizationChoice("sync", f"{suite} batches its own simulators")
    entry = cost_data()["model"].get(suite)
    if entry is None:
        return VectorizationChoice(
            "sync",
            f"no per-step cost figures for {suite} to weigh env workers by; "
            "--vectorization-mode workers to try them",
        )
    if cores < MIN_CORES:
        return VectorizationChoice(
            "sync",
            f"{cores} usable core{'s' if cores != 1 else ''}: acting and the update take 2, "
            f"env workers need {MIN_CORES} or more",
        )
    workers = min(env_workers or default_workers(cores), num_envs // env_splits)
    where = f"{cores} cores" + (" + GPU" if gpu else "")
    if gpu:
        one = predict_gpu(entry["gpu"], cores, 1)
        many = predict_gpu(entry["gpu"], cores, workers, env_splits, gpu_forward(entry))
    else:
        one = predict(entry["cpu"], cores, policy_lag, 0, None)
        many = predict(entry["cpu"], cores, policy_lag, workers, None, env_splits)
    if many >= GAIN * one:
        return VectorizationChoice(
            "workers",
            f"{workers} env workers on {where}: predicted {many:,.0f} vs {one:,.0f} agent "
            "steps/s in one process (cost model)",
            workers,
        )
    return VectorizationChoice(
        "sync",
        f"env workers would not pay on {where}: predicted {many:,.0f} with {workers} vs "
        f"{one:,.0f} agent steps/s in one process (cost model)",
    )


def default_workers(cores: int) -> int:
    """The env workers ``auto`` gives a run on ``cores`` usable cores: all but the two of
    acting and the update (the cost model's fits were measured so)."""
    return max(cores - 2, 1)
