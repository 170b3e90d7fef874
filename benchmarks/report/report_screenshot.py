"""The HTML report in headless Chromium: does the page fit 1400 px, and what does it look like?

Builds a realistic report (Procgen6 with CORA's five methods, MEAL-20 with MEAL's five,
two seeds each, single-task experts, evaluation videos), opens ``report.html`` in headless
Chromium at ``--width`` px, reads the layout back from the page (document scroll width and
every table's right edge) and saves a screenshot of the top of the page. Exits with status
1 when anything overflows horizontally.

Needs Debian's ``chromium`` (``apt-get install chromium``); run from the repository root:
``python -m benchmarks.report.report_screenshot [--out /tmp/report-shot] [--width 1400]``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cl_suites.metrics import build_report
from cl_suites.rundir.runlog import RunLog

PROCGEN = ("climber", "dodgeball", "ninja", "starpilot", "bigfish", "fruitbot")
CORA_METHODS = ("ft", "ewc", "online-ewc", "pnc", "clear")
MEAL_METHODS = ("ft", "online-ewc", "ewc", "mas", "l2")
PROBE = """<script>
function clProbe(){
  const w = window.innerWidth;
  const wide = [...document.querySelectorAll('table, img, video, pre')]
    .filter(e => e.getBoundingClientRect().right > w + 0.5).length;
  document.body.setAttribute('data-probe', JSON.stringify({
    scrollWidth: document.documentElement.scrollWidth, innerWidth: w, wideElements: wide}));
}
window.addEventListener('load', clProbe); clProbe();
</script></body>"""


def write_run(
    run_dir: Path,
    *,
    suite: str,
    method: str,
    seed: int,
    names: tuple[str, ...],
    splits: tuple[str, ...],
    steps_per_task: int = 2000,
    eval_every: int = 100,
    keep: float = 0.5,
    extra: dict | None = None,
) -> Path:
    """A run directory with learning-then-forgetting curves (one cycle), via RunLog."""
    rng = np.random.default_rng(seed * 100 + hash(method) % 97)
    n = len(names)
    schedule = [
        {
            "index": k,
            "cycle": 0,
            "task_id": k,
            "task_name": names[k],
            "start_step": k * steps_per_task,
            "end_step": (k + 1) * steps_per_task,
        }
        for k in range(n)
    ]
    meta = {
        "suite_id": f"CLSuite/{suite}-v0",
        "suite": suite,
        "method": method,
        "seed": seed,
        "learner": "vtrace",
        "tasks": [{"task_id": t, "task_name": names[t], "splits": list(splits)} for t in range(n)],
        "schedule": schedule,
        "steps_per_task": [steps_per_task] * n,
        "cycles": 1,
        "eval_every": eval_every,
        "eval_episodes": 10,
        "metric_settings": {"smoothing_window": 5, "return_clip_min": None},
        "start_time": "2024-01-01T00:00:00",
        **(extra or {}),
    }
    total = n * steps_per_task
    with RunLog(run_dir, meta) as log:
        for step in range(0, total + 1, eval_every):
            recs = []
            for t in range(n):
                start, end = t * steps_per_task, (t + 1) * steps_per_task
                level = 0.0 if step < start else min(1.0, (step - start) / steps_per_task)
                if step > end:
                    level *= keep ** ((step - end) / steps_per_task)
                for split in splits:
                    value = (t + 1) * level + rng.normal(0, 0.05) - 0.2 * (split == "test")
                    recs.append(
                        {
                            "total_step": step,
                            "task_id": t,
                            "task_name": names[t],
                            "split": split,
                            "mean_return": value,
                            "std_return": 0.1,
                            "episodes": 10,
                            "wall_time": step / 500,
                        }
                    )
            log.log_eval(recs)
        for seg in schedule:
            log.log_episodes(
                [
                    {
                        "total_step": seg["start_step"] + (e + 1) * steps_per_task // 41,
                        "task_id": seg["task_id"],
                        "episode_return": (seg["task_id"] + 1) * (1 - math.exp(-e / 8))
                        + rng.normal(0, 0.1),
                        "episode_length": 50,
                    }
                    for e in range(40)
                ]
            )
    return run_dir


def add_videos(run_dir: Path, n_tasks: int, steps: tuple[int, ...]) -> None:
    """Tiny real mp4 files named as ``cl-suites run --capture-video`` names them."""
    from moviepy import ImageSequenceClip

    folder = run_dir / "videos"
    folder.mkdir(exist_ok=True)
    frames = [np.full((64, 64, 3), 40 * k % 255, dtype=np.uint8) for k in range(6)]
    clip = ImageSequenceClip(frames, fps=6)
    first = folder / "first.mp4"
    clip.write_videofile(str(first), codec="libx264", audio=False, logger=None)
    for step in steps:
        for t in range(n_tasks):
            for split in ("train", "test"):
                shutil.copy(first, folder / f"eval-step{step:09d}-task{t:02d}-{split}.mp4")
    first.unlink()


def build_runs(root: Path) -> list[Path]:
    dirs = []
    for m, method in enumerate(CORA_METHODS):
        for seed in (0, 1):
            dirs.append(
                write_run(
                    root / f"procgen-{method}-s{seed}",
                    suite="Procgen6",
                    method=method,
                    seed=seed,
                    names=PROCGEN,
                    splits=("train", "test"),
                    keep=0.2 + 0.15 * m,
                )
            )
    meal_names = tuple(f"easy_gen_{i}" for i in range(20))
    meal_extra = {
        "learner": "ppo (IPPO, shared parameters)",
        "num_agents": 2,
        "env_kwargs": {"difficulty": "easy"},
        "score_normalizers": {str(i): float(i + 1) for i in range(20)},
    }
    for m, method in enumerate(MEAL_METHODS):
        for seed in (0, 1):
            dirs.append(
                write_run(
                    root / f"meal-{method}-s{seed}",
                    suite="MEAL-20",
                    method=method,
                    seed=seed,
                    names=meal_names,
                    splits=("train",),
                    steps_per_task=500,
                    eval_every=100,
                    keep=0.1 + 0.2 * m,
                    extra=meal_extra,
                )
            )
    for t in (0, 3):
        dirs.append(
            write_run(
                root / f"ste-{PROCGEN[t]}",
                suite="Procgen6",
                method="ste",
                seed=0,
                names=(PROCGEN[t],),
                splits=("train", "test"),
            )
        )
    add_videos(root / "procgen-clear-s0", 6, (6000, 12000))
    return dirs


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("no chromium found: apt-get install chromium")


def probe(page: Path, width: int) -> dict:
    """Layout of ``page`` at ``width`` px, read back from Chromium's DOM dump."""
    probed = page.with_name("probe.html")
    probed.write_text(page.read_text().replace("</body>", PROBE))
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},1000", "--virtual-time-budget=3000", "--dump-dom",
         probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = re.search(r"data-probe=\"([^\"]+)\"", done.stdout)
    if not found:
        sys.exit("the probe did not run: " + done.stderr[-500:])
    return json.loads(found.group(1).replace("&quot;", '"'))


def screenshot(page: Path, width: int, height: int, png: Path) -> None:
    subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="keep runs, report and screenshot here")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=2600, help="screenshot height in px")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="report-shot-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dirs = build_runs(root / "runs")
    t1 = time.perf_counter()
    result = build_report(dirs, root / "report", bootstrap_reps=200)
    t2 = time.perf_counter()
    layout = probe(result.html, args.width)
    png = root / f"report-{args.width}px.png"
    screenshot(result.html, args.width, args.height, png)
    print(f"runs: {len(dirs)} in {t1 - t0:.1f} s; report in {t2 - t1:.1f} s")
    print(f"layout at {args.width} px: {layout}")
    print(f"screenshot: {png}")
    overflow = layout["scrollWidth"] > layout["innerWidth"] or layout["wideElements"]
    print("horizontal overflow:", "YES" if overflow else "none")
    sys.exit(1 if overflow else 0)


if __name__ == "__main__":
    main()
