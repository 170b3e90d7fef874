"""Each extra installed alone in a fresh venv, its suite built and stepped (issue 43 item 6).

For every extra that brings a suite, a new venv under ``--root`` gets
``pip install -c constraints.txt -e ".[extra]"`` and nothing else (the constraints pin
``torch==2.13.0``, which this machine's pip finds as a local CPU wheel; a venv whose torch
is not a ``+cpu`` build fails the line). Then, in that venv and outside the checkout,
the extra's suite is built as a user builds it (``gym.make("CLSuite/<suite>-v0")``;
MEAL: ``cl_suites.make_parallel``) and stepped ``--steps`` steps with random actions. One
line per extra: ``ok`` (built and stepped), ``setup`` (the suite's own one-line setup
message, e.g. CHORES asking for its data) or ``FAIL`` (the error), with the install and
build-and-step seconds and whether torch came in::

    python -m benchmarks.install.extras_alone [--extras atari meal] [--steps 20]
        [--root /tmp/extras-alone] [--keep] [--out benchmarks/results/extras_alone.json]

Exit status 1 when an extra fails. ``tests/project/test_extras.py`` checks the same from the
declarations (each module an error message names is installed by the extra it names).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES: dict[str, str] = {
    "procgen": "Procgen6",
    "atari": "Atari6",
    "minihack": "MiniHack15",
    "meal": "MEAL-2",
    "chores": "CHORES-VaryRoom",
    "baselines": "Diagnostic",
}
"""The suite each extra brings (``baselines``: the Diagnostic suite's learners' extra)."""

PROBE = r"""
import json, sys, time
import numpy as np
suite, steps = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
try:
    import cl_suites
    if suite.startswith("MEAL-"):
        env = cl_suites.make_parallel(f"CLSuite/{suite}-v0")
        env.reset(seed=0)
        for _ in range(steps):
            env.step({a: env.action_space(a).sample() for a in env.agents})
        shape = env.observation_space(env.agents[0]).shape
    else:
        import gymnasium as gym
        env = gym.make(f"CLSuite/{suite}-v0")
        env.action_space.seed(0)
        env.reset(seed=0)
        for _ in range(steps):
            env.step(env.action_space.sample())
        shape = env.observation_space.shape
    env.close()
    status, detail = "ok", f"{steps} steps, observations {tuple(shape)}"
except Exception as e:  # the user's view: the error's class and first line
    from cl_suites.errors import SimulatorSetupError
    status = "setup" if isinstance(e, SimulatorSetupError) else "FAIL"
    detail = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
print("EXTRA_RESULT " + json.dumps(
    {"status": status, "detail": detail, "build_step_s": round(time.perf_counter() - t0, 1)}
))
"""


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``command`` without this process's ``PYTHONPATH`` (the venv's own packages only)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env, **kwargs)


def try_extra(extra: str, root: Path, steps: int, keep: bool) -> dict:
    """Install ``extra`` alone into a fresh venv under ``root``, build and step its suite."""
    venv = root / extra
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    started = time.perf_counter()
    made = run([sys.executable, "-m", "venv", str(venv)])
    constraints = str(ROOT / "constraints.txt")
    install = made.returncode == 0 and run(
        [str(python), "-m", "pip", "install", "-q", "-c", constraints, "-e", f"{ROOT}[{extra}]"]
    )
    result = {"extra": extra, "suite": SUITES[extra]}
    result["install_s"] = round(time.perf_counter() - started, 1)
    if not install or install.returncode != 0:
        tail = (made.stderr if not install else install.stderr).strip().splitlines()[-3:]
        return {**result, "status": "FAIL", "detail": "install: " + " | ".join(tail)}
    torch = run([str(python), "-c", "import torch; print(torch.__version__)"], cwd=root)
    result["torch"] = torch.stdout.strip() if torch.returncode == 0 else None
    probe = run([str(python), "-c", PROBE, SUITES[extra], str(steps)], cwd=root)
    lines = [x for x in probe.stdout.splitlines() if x.startswith("EXTRA_RESULT ")]
    if lines:
        result.update(json.loads(lines[-1][len("EXTRA_RESULT ") :]))
    else:
        tail = probe.stderr.strip().splitlines()[-1:] or [f"exit {probe.returncode}"]
        result.update(status="FAIL", detail="probe: " + tail[0])
    if result["torch"] and not result["torch"].endswith("+cpu"):
        result.update(status="FAIL", detail=f"pip pulled torch {result['torch']}, not the CPU one")
    if not keep:
        shutil.rmtree(venv, ignore_errors=True)
    return result


def line(r: dict) -> str:
    torch = f"torch {r['torch']}" if r.get("torch") else "no torch"
    build = f"{r['build_step_s']:6.1f}" if "build_step_s" in r else "     -"
    return (
        f"[{r['extra']}] {r['suite']:16} {r['status']:5} install {r['install_s']:6.1f} s  "
        f"build+step {build} s  {torch:18}  {r['detail']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", nargs="+", choices=list(SUITES), default=list(SUITES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--root", type=Path, default=Path("/tmp/extras-alone"))
    parser.add_argument("--keep", action="store_true", help="keep the venvs")
    parser.add_argument("--out", type=Path, help="add the results to this JSON file")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    results = []
    for extra in args.extras:
        results.append(try_extra(extra, args.root, args.steps, args.keep))
        print(line(results[-1]), flush=True)
    if args.out:
        stored = json.loads(args.out.read_text()) if args.out.exists() else {}
        stored.update({r["extra"]: r for r in results})
        args.out.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    return 1 if any(r["status"] == "FAIL" for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
