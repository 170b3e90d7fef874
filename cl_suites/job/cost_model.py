"""The cost model of a torch learner's training rate, and the figures it runs on.

``cl_suites/data/costs.json`` holds what ``benchmarks/`` measured (the package never imports
``benchmarks``): per-agent-step CPU costs of the V-trace learner on Atari6 and MiniHack15
and their GPU fits (``benchmarks/speed/cost_model.py``, whose model is :func:`predict`
and :func:`predict_gpu`), and measured rates of the other suites. Two readers:
``cl_suites.job.vectorization`` (a run's ``vectorization_mode`` when it is ``auto``) and
``cl_suites.sweep.costs`` (the hours of a grid). Rates are agent steps per second.

Double-buffered acting (``env_splits``, ``baselines_sb3.block_acting``): the policy's
forward pass on each block but the first overlaps the env workers stepping the block
before, which saves :func:`split_saving` per agent step wherever the acting thread waits
for the workers (lockstep on the CPU, every GPU run); the lagged CPU model already takes
acting and stepping as overlapping, so splits change nothing there.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def cost_data() -> dict[str, Any]:
    """The parsed ``cl_suites/data/costs.json``."""
    return json.loads(resources.files("cl_suites.data").joinpath("costs.json").read_text())


def split_saving(forward: float, stepping: float, splits: int) -> float:
    """Seconds per agent step that acting in ``splits`` blocks saves, from the policy's
    ``forward`` and the workers' ``stepping`` seconds per agent step: blocks of ``1 /
    splits`` of each, block ``k + 1`` acted on while block ``k`` steps, so a step takes
    ``forward + stepping - (splits - 1) / splits * min(forward, stepping)``."""
    return (splits - 1) / splits * min(forward, stepping)


def gpu_forward(entry: dict[str, Any]) -> float:
    """Seconds per agent step of the policy's forward pass with a GPU, estimated from a
    suite's cost figures: the GPU fit's ``serial`` less the CPU ``loop`` and ``ipc`` costs
    (what else the acting thread does per agent step)."""
    cpu = entry["cpu"]
    return max(entry["gpu"]["serial"] - cpu["loop"] - cpu["ipc"], 0.0)


def predict(
    c: dict[str, float],
    cores: int,
    lag: int,
    workers: int | None,
    gpu_factor: float | None,
    splits: int = 1,
) -> float:
    """Agent steps per second of one V-trace run on ``cores`` cores from its per-agent-step
    CPU costs ``c`` (``env``, ``forward``, ``update``, ``loop``, ``ipc``: seconds; the model of
    ``benchmarks/speed/cost_model.py``). ``lag``: ``policy_lag``; ``workers``: env worker
    processes (0: the envs step in the learner's process; ``None``: ``cores - 2``);
    ``gpu_factor``: the share of ``update`` and ``forward`` left with a GPU (``None``: CPU);
    ``splits``: ``env_splits`` (it pays in lockstep with workers only)."""
    update, forward = c["update"], c["forward"]
    if gpu_factor is not None:
        update, forward = update * gpu_factor, forward * gpu_factor
    env, loop, ipc = c["env"], c["loop"], c["ipc"]
    if workers is None:
        workers = max(cores - 2, 1)
    total = update + forward + loop + env + (ipc if workers else 0.0)
    if workers:
        acting, envs = forward + loop + ipc, min(workers, cores) / (env + ipc)
    else:
        acting, envs = forward + loop + env, float("inf")
    if not lag:  # one thing at a time, the env chunks in parallel
        stepping = env / min(workers, cores) + ipc if workers else env
        saved = split_saving(forward, stepping, splits) if workers else 0.0
        return min(1.0 / (update + forward + loop + stepping - saved), cores / total)
    return min(1.0 / update, 1.0 / acting, envs, cores / total)


def predict_gpu(
    fit: dict[str, float],
    cores: int,
    workers: int | None = None,
    splits: int = 1,
    forward: float = 0.0,
) -> float:
    """Agent steps per second of one run with a GPU from a fitted ``serial + env / W``
    (seconds per agent step; ``workers``: ``None`` for ``cores - 2``), less
    :func:`split_saving` with ``splits`` blocks and a ``forward`` pass of that many
    seconds per agent step (:func:`gpu_forward`)."""
    w = max(cores - 2, 1) if workers is None else max(workers, 1)
    stepping = fit["env"] / w
    return 1.0 / (fit["serial"] + stepping - split_saving(forward, stepping, splits))
