"""The cost model of a torch learner's training rate, and the figures it runs on.

``cl_suites/data/costs.json`` holds what ``benchmarks/`` measured (the package never imports
``benchmarks``): per-agent-step CPU costs of the V-trace learner on Atari6 and MiniHack15
and their GPU fits (``benchmarks/speed/cost_model.py``, whose model is :func:`predict`
and :func:`predict_gpu`), and measured rates of the other suites. Two readers:
``cl_suites.job.vectorization`` (a run's ``vectorization_mode`` when it is ``auto``) and
``cl_suites.sweep.costs`` (the hours of a grid). Rates are agent steps per second.
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
