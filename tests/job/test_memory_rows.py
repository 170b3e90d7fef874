"""Memory in every progress row (issue 50 item 4): ``progress.json`` and ``resources.csv``
carry the resident (and GPU) memory beside the rate, and a task whose end holds more
memory than the last task's end by more than ``memory_growth_warn`` prints a warning."""

from __future__ import annotations

import logging

import pytest

from cl_suites.rundir import progress as progress_module
from cl_suites.rundir import resources
from cl_suites.rundir.progress import RunProgress, read_progress
from cl_suites.rundir.runlog import RunLog, read_resources


def _schedule():
    from cl_suites.api import make_sequence

    return make_sequence("Diagnostic", steps_per_task=100, n_tasks=3).schedule(1)


def test_resident_memory_is_this_process_and_grows_with_an_allocation():
    before = resources.resident_bytes()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
    after = resources.resident_bytes()
    assert after - before >= 48 * 2**20
    assert resources.memory_row()["gpu_mb"] is None  # a CPU run: no GPU figure
    del block


def test_progress_rows_carry_memory_and_monotone_times(tmp_path, monkeypatch):
    rss = iter(range(100, 200))
    monkeypatch.setattr(
        progress_module, "memory_row", lambda: {"rss_mb": float(next(rss)), "gpu_mb": None}
    )
    with RunLog(tmp_path, {"suite": "Diagnostic"}) as run_log:
        bar = RunProgress(
            _schedule(), run_dir=tmp_path, on_memory=run_log.log_resources, memory_every_s=1e9
        )
        for step in (50, 100, 150, 200, 250, 300):
            bar.update(step, force=True)
        bar.close()
    rows = read_resources(tmp_path)
    assert list(rows["total_step"]) == [100, 200, 300]  # each task's end, once
    assert list(rows["task_id"]) == [0, 1, 2]
    assert rows["time"].is_monotonic_increasing and (rows["rss_mb"] >= 100).all()
    assert rows["gpu_mb"].isna().all()
    data = read_progress(tmp_path)
    assert data["rss_mb"] > 0 and "gpu_mb" in data and data["steps_per_s"] >= 0


@pytest.mark.parametrize(("growth", "warned"), [(1.10, False), (1.40, True)])
def test_memory_growth_over_a_task_beyond_the_limit_warns(monkeypatch, caplog, growth, warned):
    """Task ends at 1,000 MiB, then ``1000 * growth`` MiB: a warning past 25%."""
    rss = {"now": 1000.0}
    monkeypatch.setattr(
        progress_module, "memory_row", lambda: {"rss_mb": rss["now"], "gpu_mb": None}
    )
    bar = RunProgress(_schedule(), memory_every_s=1e9, memory_growth_warn=0.25)
    with caplog.at_level(logging.WARNING, logger=progress_module.__name__):
        bar.update(100)  # task 0's end: the baseline
        rss["now"] = 1000.0 * growth
        bar.update(200)  # task 1's end
    messages = [r.getMessage() for r in caplog.records]
    assert bool(messages) == warned
    if warned:
        assert messages == [
            "resident memory grew 40% over task 1:cue-shift-1 (1,000 -> 1,400 MiB), more "
            "than memory_growth_warn=0.25: a leak grows like this"
        ]
