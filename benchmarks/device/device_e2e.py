"""A short CORA-side run end to end on one device: train, kill -9 after the first checkpoint,
resume, report; the resumed run's evaluation rows against an uninterrupted run's
(issue 38 item 6; part of ``device_check.sh``).

    python benchmarks/device_e2e.py [--device cuda] [--steps-per-task 512] [--out DIR]

Both runs are ``cl-suites run --suite Atari6 --method ft --preset small`` on two games
(ALE restores exactly, so a resume on one device is the same run bit for bit where the
device computes deterministically), ``policy_lag=1`` with 2 env workers. Prints one line
per stage and ``E2E OK`` or ``E2E DIFFERS`` (with the first differing rows); exits 0 either
way unless a stage failed (a GPU's convolutions may be non-deterministic: the line says so,
it is a finding, not a crash).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _command(run_dir: Path, args: argparse.Namespace, resume: bool = False) -> list[str]:
    command = [sys.executable, "-m", "cl_suites", "run", "--suite", "Atari6", "--method", "ft"]
    command += ["--preset", "small", "--seed", "0", "--num-envs", "4", "--run-dir", str(run_dir)]
    sets = {
        "games": '["Pong","Breakout"]',
        "steps_per_task": str(args.steps_per_task),
        "cycles": "1",
        "eval_every": str(args.steps_per_task // 2),
        "eval_episodes": "1",
        "eval_max_episode_steps": "50",
        "checkpoint_every": str(args.steps_per_task // 4),
        "device": args.device,
        "policy_lag": "1",
        "vectorization_mode": "workers",
        "env_workers": "2",
    }
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    return command + (["--resume"] if resume else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps-per-task", type=int, default=512)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="device-e2e-", dir=args.out))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    full, cut = out / "full", out / "cut"
    start = time.perf_counter()
    done = subprocess.run(
        _command(full, args), env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).splitlines()[-15:]
        print("uninterrupted run failed:\n" + "\n".join(tail))
        return 1
    print(f"uninterrupted run: {time.perf_counter() - start:.1f} s", flush=True)
    proc = subprocess.Popen(_command(cut, args), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    while proc.poll() is None and not list((cut / "checkpoint").glob("*.sha256")):
        time.sleep(0.05)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    print(f"killed after the first checkpoint: {killed}", flush=True)
    subprocess.run(_command(cut, args, resume=True), env=env, check=True, capture_output=True)
    print("resumed to the end; report:", (cut / "report" / "report.html").exists(), flush=True)
    a = (full / "eval.csv").read_text().splitlines()
    b = (cut / "eval.csv").read_text().splitlines()
    strip = lambda rows: [r.rsplit(",", 1)[0] for r in rows]  # noqa: E731 (drop wall_time)
    if strip(a) == strip(b):
        print(f"E2E OK: {len(a) - 1} evaluation rows identical after kill -9 and resume")
    else:
        diff = [(x, y) for x, y in zip(strip(a), strip(b), strict=False) if x != y][:3]
        print(f"E2E DIFFERS ({len(a)} vs {len(b)} rows; first differences {diff})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
