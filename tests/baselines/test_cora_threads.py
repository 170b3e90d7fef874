"""CORA's processes run with one OpenMP thread (issue 55): its actors fork after torch
started OpenMP and, with a thread pool, hang at "Steps 0 @ 0.0 SPS". ``train-cora`` and the
speed benchmark's CORA child take the variable from one helper; nothing here runs CORA."""

from __future__ import annotations

import argparse
import os

import pytest

from benchmarks.parity import cora_reference, parity_cora
from benchmarks.speed import bench_cora


class Exec(Exception):
    """What the fake ``os.execve`` raises instead of replacing the test process."""


@pytest.fixture
def execs(monkeypatch):
    calls: list[tuple[str, list[str], dict[str, str]]] = []

    def fake_execve(path, args, env):
        calls.append((path, list(args), dict(env)))
        raise Exec

    monkeypatch.setattr(os, "execve", fake_execve)
    return calls


@pytest.fixture
def argv(tmp_path):
    out = str(tmp_path / "out")
    return ["--cora-repo", "/nonexistent/continual_rl", "train-cora", "--pairs", "0", "--out", out]


@pytest.mark.parametrize("given", [None, "4"])
def test_train_cora_runs_with_one_openmp_thread(given, argv, execs, monkeypatch):
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    with pytest.raises(Exec):
        parity_cora.main(argv)
    ((path, args, env),) = execs
    assert env["OMP_NUM_THREADS"] == "1"
    assert env.items() >= cora_reference.cora_thread_env().items()
    assert path == args[0] and args[1:] == ["-m", "benchmarks.parity.parity_cora", *argv]


def test_train_cora_with_the_variable_set_goes_on_in_place(argv, execs, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert parity_cora.main(argv) == 2  # on to CORA's checkout check, in this process
    assert not execs and "--cora-repo" in capsys.readouterr().err


def test_the_speed_benchmark_gives_its_cora_child_the_same_variable(monkeypatch):
    seen: list[dict[str, str]] = []
    monkeypatch.setattr(bench_cora, "child_result", lambda *a, **env: seen.append(env) or {})
    args = argparse.Namespace(
        cora_python="/x/python", before=None, warmup=1, seconds=1, cora_repo="/x",
        cora_threads=1, ours_set=[],
    )  # fmt: skip
    bench_cora._child(args, "MiniHack15", "cora", 2)
    assert seen == [cora_reference.cora_thread_env()]
