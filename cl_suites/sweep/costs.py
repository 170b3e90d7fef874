"""How long a grid takes: per-suite training rates of the paper preset, as package data.

``cl_suites/data/costs.json`` holds what ``benchmarks/`` measured (the package never imports
``benchmarks``): for Atari6 and MiniHack15 the V-trace learner's per-agent-step CPU costs and
GPU fit of ``benchmarks/results/costs.json`` (``benchmarks/speed/cost_model.py``, whose model
is :func:`predict` and :func:`predict_gpu` here), for Procgen6 (the paper's residual network)
and MEAL (``ppo-jax``) the rates measured at given core counts. CHORES has none (its
simulator needs a Unity build the measuring machines lacked). Every figure is of fine-tuning;
CL methods cost more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@cache
def cost_data() -> dict[str, Any]:
    """The parsed ``cl_suites/data/costs.json``."""
    return json.loads(resources.files("cl_suites.data").joinpath("costs.json").read_text())


def predict(
    c: dict[str, float], cores: int, lag: int, workers: int | None, gpu_factor: float | None
) -> float:
    """Agent steps per second of one V-trace run on ``cores`` cores from its per-agent-step
    CPU costs ``c`` (``env``, ``forward``, ``update``, ``loop``, ``ipc``: seconds; the model of
    ``benchmarks/speed/cost_model.py``). ``lag``: ``policy_lag``; ``workers``: env worker
    processes (0: the envs step in the learner's process; ``None``: ``cores - 2``);
    ``gpu_factor``: the share of ``update`` and ``forward`` left with a GPU (``None``: CPU)."""
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
        return min(1.0 / (update + forward + loop + stepping), cores / total)
    return min(1.0 / update, 1.0 / acting, envs, cores / total)


def predict_gpu(fit: dict[str, float], cores: int, workers: int | None = None) -> float:
    """Agent steps per second of one run with a GPU from a fitted ``serial + env / W``
    (seconds per agent step; ``workers``: ``None`` for ``cores - 2``)."""
    w = max(cores - 2, 1) if workers is None else max(workers, 1)
    return 1.0 / (fit["serial"] + fit["env"] / w)


@dataclass(frozen=True)
class Rate:
    """One run's training rate on a machine: steps per second and how it was found."""

    steps_per_s: float
    basis: str


def _measured(table: dict[str, float], cores: int) -> tuple[float, int]:
    """The rate measured at the largest core count <= ``cores`` (else the smallest)."""
    counts = sorted(int(k) for k in table)
    below = [n for n in counts if n <= cores]
    n = below[-1] if below else counts[0]
    return float(table[str(n)]), n


def _key(suite: str) -> str:
    return "MEAL" if suite.startswith("MEAL") else suite


def rate(suite: str, cores: int, gpu: bool) -> Rate | None:
    """One paper-preset run's rate of ``suite`` (short name) on ``cores`` cores, with or
    without a GPU; ``None`` where nothing was measured (CHORES). CPU: the envs in the
    learner's process (the preset's default); GPU: ``cores - 2`` env workers where the model
    has them (``--set vectorization_mode=workers``)."""
    data = cost_data()
    key = _key(suite)
    if key in data["model"]:
        entry = data["model"][key]
        if gpu:
            workers = max(cores - 2, 1)
            return Rate(predict_gpu(entry["gpu"], cores), f"model, {workers} env workers + GPU")
        return Rate(predict(entry["cpu"], cores, 1, 0, None), "model, CPU")
    if key in data["measured"]:
        table = data["measured"][key]["gpu" if gpu else "cpu"]
        value, n = _measured(table, cores)
        where = f"{n} cores + GPU" if gpu else f"{n} core{'s' if n != 1 else ''}"
        return Rate(value, f"measured on {where}")
    return None


def measured_where(suite: str) -> str | None:
    """Where ``suite``'s figures were measured (``None``: not measured)."""
    data = cost_data()
    key = _key(suite)
    for group in ("model", "measured"):
        if key in data[group]:
            return data[group][key]["measured"]
    return None
