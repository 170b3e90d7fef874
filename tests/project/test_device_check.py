"""The prepared GPU check (``benchmarks/device/device_check.sh``, issue 38 item 6) runs through
every stage on the CPU with ``--shrink``, so it is ready when a GPU is lent."""

from __future__ import annotations

import subprocess

from tests.helpers import REPO

ROOT = REPO


def test_the_shrunken_device_check_runs_every_stage(tmp_path):
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "device" / "device_check.sh"),
            "--shrink",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "procgen-vtrace   OK" in out  # stage 0's smoke run through the command line
    for stage in ("== 0. card", "== 1. agent steps/s", "== 2. Procgen6's residual",
                  "== 3. MEAL", "== 4. end to end", "== 5. the cost model",
                  "== 6. double-buffered acting"):  # fmt: skip
        assert stage in out
    assert "E2E OK" in out
    assert "measured beside the model" in out and "device check done" in out
    assert (tmp_path / "cores.json").exists()


def test_bad_arguments_are_one_line():
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "device" / "device_check.sh"), "--bogus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "device_check.sh: unknown argument '--bogus'; use --shrink, --out DIR and/or --stages LIST"
    )
