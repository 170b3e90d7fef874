"""A sweep's devices are checked before Ray starts (issue 55): on the sweep's own local Ray
instance the runs train on this machine, so a device or a GPU count it does not have is
refused with one line (exit 2), naming the value and the devices present. A cluster
(``--address``) keeps the device for its nodes, which may have GPUs; one without any GPU
refuses runs that ask for CUDA once joined, before any run starts. No Ray instance is
started by these tests."""

from __future__ import annotations

import types

import pytest
import torch

from cl_suites.cli import main
from cl_suites.sweep import SweepError, SweepSpec, run_sweep
from cl_suites.sweep import driver as sweep_driver
from cl_suites.sweep.cluster import Connection

GRID = ["--suite", "Diagnostic", "--methods", "ft", "--seeds", "0", "--preset", "small"]


@pytest.fixture
def cpu_machine(monkeypatch):
    """This machine without CUDA, and Ray never started."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(sweep_driver, "connect", no_ray)


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["sweep", *args])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, " ".join((out.out + out.err).split())


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_cuda_device_is_refused_before_the_local_ray_starts(
    device, cpu_machine, capsys, tmp_path
):
    sweep_dir = tmp_path / "s"
    code, out = _cli(capsys, *GRID, "--set", f"device={device}", "--sweep-dir", str(sweep_dir))
    assert code == 2
    assert f"device {device!r} cannot be used: CUDA is not available here" in out
    assert "(devices present: cpu)" in out
    assert not sweep_dir.exists()


def test_gpus_per_run_is_refused_before_the_local_ray_starts(cpu_machine, capsys, tmp_path):
    sweep_dir = tmp_path / "s"
    code, out = _cli(capsys, *GRID, "--gpus-per-run", "0.5", "--sweep-dir", str(sweep_dir))
    assert code == 2
    assert "--gpus-per-run 0.5 asks for GPUs, but this machine has none" in out
    assert "(devices present: cpu)" in out and "--gpus-per-run 0" in out
    assert not sweep_dir.exists()


def _fake_cluster(monkeypatch, gpus: float) -> list[str]:
    """``--address`` joins a fake cluster of one node with ``gpus`` GPUs; the runs' tasks
    are never started (the returned list records a start)."""
    started: list[str] = []
    node = {"Alive": True, "Resources": {"CPU": 4.0, "GPU": gpus}}
    ray = types.SimpleNamespace(nodes=lambda: [node])
    monkeypatch.setattr(
        sweep_driver, "connect", lambda address, num_cpus: Connection(ray, address, owned=False)
    )

    def execute(connection, sdir, *args):
        started.append("run")
        return sweep_driver.SweepResult(sdir.path)

    monkeypatch.setattr(sweep_driver, "_execute", execute)
    return started


def test_a_cluster_without_gpus_refuses_cuda_runs_before_they_start(
    cpu_machine, monkeypatch, tmp_path
):
    started = _fake_cluster(monkeypatch, gpus=0.0)
    spec = SweepSpec(
        suites=("Diagnostic",), methods=("ft",), seeds=(0,), preset="small",
        overrides={"device": "cuda"},
    )  # fmt: skip
    with pytest.raises(
        SweepError, match=r"device 'cuda'.*Ray cluster at 10\.0\.0\.1:6379 has no GPU"
    ):
        run_sweep(spec, tmp_path / "s", address="10.0.0.1:6379", report=False, live=False)
    assert not started


def test_a_cluster_with_gpus_keeps_the_device_for_its_nodes(cpu_machine, monkeypatch, tmp_path):
    """This machine has no CUDA, the cluster's nodes do: the run goes to them."""
    started = _fake_cluster(monkeypatch, gpus=1.0)
    spec = SweepSpec(
        suites=("Diagnostic",), methods=("ft",), seeds=(0,), preset="small",
        overrides={"device": "cuda"},
    )  # fmt: skip
    run_sweep(spec, tmp_path / "s", address="10.0.0.1:6379", report=False, live=False)
    assert started == ["run"]
