"""What a run uses of the machine's memory: the memory it may still allocate, its resident
set, and the GPU memory its learner holds.

Plain reads of ``/proc`` and the cgroup files (Linux); no torch or JAX import: the GPU
figure asks only a library the process has already imported.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

MIB = 2**20


def available_memory() -> int | None:
    """Bytes of memory this process may still allocate: ``MemAvailable`` of
    ``/proc/meminfo``, capped by the cgroup's limit minus its usage; ``None`` where
    neither can be read (then a guard assumes what it checks fits)."""
    candidates = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            candidates.append(max(int(limit) - usage, 0))
    return min(candidates) if candidates else None


def resident_bytes(pid: int | None = None) -> int:
    """The resident set size of process ``pid`` (this one by default), in bytes
    (``VmRSS`` of ``/proc/<pid>/status``; where that cannot be read, this process's peak
    resident set from ``getrusage``)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def gpu_bytes() -> int | None:
    """Bytes of GPU memory this process's learner holds: torch's allocated CUDA memory
    when torch has initialised CUDA, plus JAX's ``bytes_in_use`` on its GPUs when JAX is
    imported and runs on one; ``None`` with neither (a CPU run)."""
    total, found = 0, False
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        total += sum(torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count()))
        found = True
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            devices = [d for d in jax.devices() if d.platform == "gpu"]
        except RuntimeError:
            devices = []
        for device in devices:
            stats = device.memory_stats() or {}
            total += int(stats.get("bytes_in_use", 0))
            found = True
    return total if found else None


def memory_row() -> dict[str, float | None]:
    """``{"rss_mb": ..., "gpu_mb": ... or None}``: this process's memory now, in MiB."""
    gpu = gpu_bytes()
    return {
        "rss_mb": round(resident_bytes() / MIB, 1),
        "gpu_mb": None if gpu is None else round(gpu / MIB, 1),
    }
