"""Every suite and learner trains a few updates on one device, through the command line
(stage 0 of ``device_check.sh``): MiniHack15, Procgen6 and Atari6 with V-trace (policy lag 1,
env workers) and PPO, MEAL-2 with the JAX learner and the torch one. The runs go side by side
in separate processes, so the check costs about the slowest of them.

    python -m benchmarks.device.device_smoke [--device cuda] [--out DIR]

Prints one line per run, ``OK`` with its wall time or ``FAILED`` with the last lines of its
output (kept in DIR/<run>.log), and exits 1 when any run failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CORA_TINY = {
    "steps_per_task": "1024",
    "cycles": "1",
    "eval_every": "1024",
    "eval_episodes": "1",
    "eval_max_episode_steps": "20",
    "report": "false",
}
MEAL_TINY = {
    "steps_per_task": "256",
    "eval_every": "256",
    "eval_episodes": "1",
    "episode_len": "50",
    "report": "false",
}
WORKERS = {"vectorization_mode": '"workers"', "env_workers": "2"}
# run name: (suite, learner, --set options)
RUNS: dict[str, tuple[str, str, dict[str, str]]] = {
    "minihack-vtrace": (
        "MiniHack15",
        "vtrace",
        {**CORA_TINY, "pairs": "[0]", "policy_lag": "1", **WORKERS},
    ),
    "procgen-vtrace": ("Procgen6", "vtrace", {**CORA_TINY, "games": '["ninja"]'}),
    "atari-vtrace": ("Atari6", "vtrace", {**CORA_TINY, "games": '["Pong"]', "policy_lag": "1"}),
    "atari-ppo": ("Atari6", "ppo", {**CORA_TINY, "games": '["Pong"]'}),
    "meal-ppo-jax": ("MEAL-2", "ppo-jax", MEAL_TINY),
    "meal-ppo-torch": ("MEAL-2", "ppo", MEAL_TINY),
}


def _run(name: str, device: str, out: Path) -> tuple[str, bool, float, str]:
    suite, learner, sets = RUNS[name]
    command = [sys.executable, "-m", "cl_suites", "run", "--suite", suite, "--method", "ft",
               "--learner", learner, "--preset", "small", "--seed", "0", "--num-envs", "4",
               "--run-dir", str(out / name)]  # fmt: skip
    if learner != "ppo-jax":  # JAX takes its default device (the GPU where jax sees one)
        sets = {**sets, "device": f'"{device}"'}
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    log = done.stdout + done.stderr
    (out / f"{name}.log").write_text(log)
    return name, done.returncode == 0, seconds, "\n    ".join(log.strip().splitlines()[-6:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", nargs="+", choices=tuple(RUNS), default=list(RUNS))
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="device-smoke-", dir=args.out))
    with ThreadPoolExecutor(len(args.runs)) as pool:
        results = list(pool.map(lambda name: _run(name, args.device, out), args.runs))
    for name, ok, seconds, tail in results:
        status = "OK" if ok else "FAILED"
        print(f"{name:16s} {status} ({seconds:.1f} s)" + ("" if ok else f"\n    {tail}"))
    return 0 if all(ok for _, ok, _, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
