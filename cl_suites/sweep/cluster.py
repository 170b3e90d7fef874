"""Joining Ray: a new local instance by default, or an existing cluster by address.

Everything that can be wrong with the cluster is checked before the first run starts:
Ray missing (the message names the ``sweep`` extra), an address nobody answers, and run
resources no node can ever provide (Ray would otherwise queue such runs forever).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from cl_suites.errors import require
from cl_suites.sweep.grid import SweepError

CONNECT_TIMEOUT_S = 5.0
LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2
"""The sweep only passes small dicts through Ray's object store."""


def import_ray() -> ModuleType:
    """``ray``, or an ``ImportError`` that says to install ``cl-suites[sweep]``."""
    return require("ray", "sweep")


@dataclass
class Connection:
    """A Ray session of the driver. ``owned``: this driver started it (and stops it)."""

    ray: ModuleType
    address: str
    owned: bool

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()


def check_run_resources(cpus_per_run: float, gpus_per_run: float) -> None:
    """Values Ray can schedule: CPUs > 0, GPUs >= 0, fractional GPUs only below 1."""
    if not cpus_per_run > 0:
        raise SweepError(f"--cpus-per-run must be > 0, got {cpus_per_run}")
    if not gpus_per_run >= 0:
        raise SweepError(f"--gpus-per-run must be >= 0, got {gpus_per_run}")
    if gpus_per_run > 1 and not float(gpus_per_run).is_integer():
        raise SweepError(
            f"--gpus-per-run {gpus_per_run}: fractional GPUs must be below 1 "
            "(e.g. 0.25 for four runs per GPU); above 1 use a whole number"
        )


def connect(address: str | None, num_cpus: int | None = None) -> Connection:
    """Use the Ray instance of this process if there is one, else join ``address``, else
    start a new local instance (``num_cpus``: its CPUs; default all cores)."""
    ray = import_ray()
    if ray.is_initialized():
        return Connection(ray, _gcs_address(ray), owned=False)
    if address:
        if num_cpus is not None:
            raise SweepError("--num-cpus sizes a new local Ray instance; drop it with --address")
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as e:  # ConnectionError, RuntimeError, grpc errors, ...
            hint = (
                " (if the cluster uses token authentication, set RAY_AUTH_MODE=token and "
                "give its token: RAY_AUTH_TOKEN or ~/.ray/auth_token)"
                if address != "auto" and "RAY_AUTH_MODE" not in os.environ
                else ""
            )
            raise SweepError(
                f"cannot join the Ray cluster at {address!r}: {_one_line(e)}{hint}"
            ) from e
        return Connection(ray, address, owned=True)
    if num_cpus is not None and num_cpus < 1:
        raise SweepError(f"--num-cpus must be >= 1, got {num_cpus}")
    try:
        with _quiet(RAY_LOCAL_NOISE):
            ray.init(
                address="local",  # never join another cluster that happens to run on this machine
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            )
    except Exception as e:
        raise SweepError(f"could not start a local Ray instance: {_one_line(e)}") from e
    return Connection(ray, _gcs_address(ray), owned=True)


RAY_LOCAL_NOISE = ("ray._private.authentication.authentication_token_setup",)
"""Ray's loggers whose warnings tell the user of a local instance nothing (its default
token authentication on a private instance this process starts and stops); they are
silenced while the instance starts. Joining a cluster keeps them."""


@contextlib.contextmanager
def _quiet(loggers: tuple[str, ...]) -> Iterator[None]:
    """``loggers`` at ERROR level inside the block."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def check_local_gpus(gpus_per_run: float) -> None:
    """Before a new local Ray instance starts: refuse ``gpus_per_run`` this machine cannot
    give (Ray counts the CUDA devices this process sees, as torch does here, without
    starting CUDA). ``SweepError`` naming the value and the devices present."""
    if gpus_per_run <= 0:
        return
    from cl_suites.job.torch.device import devices_present

    present = devices_present()
    gpus = len(present) - 1  # the CPU first
    where = f"(devices present: {', '.join(present)})"
    if gpus == 0:
        raise SweepError(
            f"--gpus-per-run {gpus_per_run:g} asks for GPUs, but this machine has none "
            f"{where}; use --gpus-per-run 0, or --address to join a cluster with GPUs"
        )
    if gpus_per_run > gpus:
        raise SweepError(f"--gpus-per-run {gpus_per_run:g}: this machine has {gpus:g} {where}")


def check_cuda_runs(total: dict[str, Any], devices: set[Any], where: str) -> None:
    """Refuse runs that ask for a CUDA device (``devices``: the runs' checked ``device``
    values) on a cluster without any GPU (``total``: :func:`check_cluster`'s)."""
    cuda = sorted(str(d) for d in devices if str(d).startswith("cuda"))
    if cuda and total["GPU"] == 0:
        raise SweepError(
            f"device {cuda[0]!r} cannot be used: {where} has no GPU ({total['nodes']} "
            f"node(s), {total['CPU']:g} CPUs); use --set device=cpu or a cluster with GPUs"
        )


def check_cluster(ray: ModuleType, address: str, cpus_per_run: float, gpus_per_run: float) -> dict:
    """Refuse runs that no alive node can host. Returns the cluster's total resources."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    per_node = [n.get("Resources", {}) for n in nodes]
    max_cpus = max((r.get("CPU", 0.0) for r in per_node), default=0.0)
    max_gpus = max((r.get("GPU", 0.0) for r in per_node), default=0.0)
    total = {"nodes": len(nodes), "CPU": sum(r.get("CPU", 0.0) for r in per_node)}
    total["GPU"] = sum(r.get("GPU", 0.0) for r in per_node)
    where = f"the Ray cluster at {address}" if address else "the local Ray instance"
    if gpus_per_run > 0 and total["GPU"] == 0:
        raise SweepError(
            f"--gpus-per-run {gpus_per_run} asks for GPUs, but {where} has none "
            f"({len(nodes)} node(s), {total['CPU']:g} CPUs); use --gpus-per-run 0"
        )
    if gpus_per_run > max_gpus:
        raise SweepError(
            f"--gpus-per-run {gpus_per_run}: no node of {where} has that many GPUs "
            f"(largest: {max_gpus:g})"
        )
    if cpus_per_run > max_cpus:
        raise SweepError(
            f"--cpus-per-run {cpus_per_run:g}: no node of {where} has that many CPUs "
            f"(largest: {max_cpus:g})"
        )
    return total


def parallel_runs(total: dict[str, Any], cpus_per_run: float, gpus_per_run: float) -> int:
    """How many runs the cluster's totals allow at once (an upper bound across nodes)."""
    by_cpu = math.floor(total["CPU"] / cpus_per_run + 1e-9)
    by_gpu = math.floor(total["GPU"] / gpus_per_run + 1e-9) if gpus_per_run > 0 else by_cpu
    return max(0, min(by_cpu, by_gpu))


def lost_nodes(ray: ModuleType) -> set[str]:
    """The ids of the cluster's nodes Ray has marked dead (empty when it cannot say)."""
    try:
        return {n["NodeID"] for n in ray.nodes() if not n.get("Alive", True)}
    except Exception:  # the driver's view of the cluster is best effort here
        return set()


def _check_reachable(address: str) -> None:
    """A quick TCP check of ``host:port`` / ``ray://host:port`` (``auto`` is Ray's)."""
    if address == "auto":
        return
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SweepError(
            f"bad --address {address!r}; use auto, HOST:PORT (a node of the cluster, "
            "e.g. 10.0.0.1:6379) or ray://HOST:10001 (Ray Client)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise SweepError(
            f"cannot reach a Ray cluster at {address!r} ({_one_line(e)}); is it started "
            "(`ray start --head`) and is the port open?"
        ) from e


def _gcs_address(ray: ModuleType) -> str:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:
        return "local"


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
