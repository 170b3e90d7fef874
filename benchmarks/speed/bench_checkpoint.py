"""Checkpoint write and read time: the safe format (issue 24) vs the pickled ``state.pt``.

Both sides save the same state: a replay-buffer-like numpy array of ``--mib`` MiB (uint8)
and a 1000 x 1000 float32 weight tensor, into the same directory, alternating, best of
``--reps``. The pickled side is what checkpoints were before issue 24 (``torch.save`` of
the tree, numpy arrays pickled inline, loaded with ``weights_only=False``); the safe side
is ``write_checkpoint`` (arrays as tensors, SHA-256 while writing, read back and checked)
and ``read_checkpoint`` (hash, then ``torch.load(weights_only=True)``).

    python -m benchmarks.speed.bench_checkpoint --mib 256 --reps 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch as th

from cl_suites.rundir.checkpoint_files import read_checkpoint, write_checkpoint
from cl_suites.rundir.fsutil import atomic_write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the numpy buffer")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    state = {
        "buffer": rng.integers(0, 255, size=args.mib << 20, dtype=np.uint8),
        "weights": th.randn(1000, 1000),
    }
    best = {"pickle save": 1e9, "pickle load": 1e9, "safe save": 1e9, "safe load": 1e9}
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        old = Path(tmp) / "state.pt"
        for rep in range(args.reps):
            t = time.perf_counter()
            atomic_write(old, lambda f: th.save(state, f))
            best["pickle save"] = min(best["pickle save"], time.perf_counter() - t)
            t = time.perf_counter()
            th.load(old, weights_only=False)
            best["pickle load"] = min(best["pickle load"], time.perf_counter() - t)
            t = time.perf_counter()
            path = write_checkpoint(Path(tmp) / "safe", rep, state)
            best["safe save"] = min(best["safe save"], time.perf_counter() - t)
            t = time.perf_counter()
            read_checkpoint(path)
            best["safe load"] = min(best["safe load"], time.perf_counter() - t)
    for what in ("save", "load"):
        old_s, new_s = best[f"pickle {what}"], best[f"safe {what}"]
        print(
            f"{what} ({args.mib} MiB array + 4 MB tensor): pickled {old_s:.2f} s, "
            f"safe {new_s:.2f} s, ratio safe/pickled {new_s / old_s:.2f}x"
        )


if __name__ == "__main__":
    main()
