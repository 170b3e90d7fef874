"""Synthetic run directories, written with the real ``RunLog`` writer: what the metrics
tests (``tests/metrics/conftest.py``) and ``report_before_after.py``'s hostile-name runs
build their reports from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from cl_suites.rundir.runlog import RunLog


def write_run(
    run_dir: Path,
    *,
    method: str = "ft",
    seed: int = 0,
    suite: str = "Toy3",
    returns: Callable[[int, str, int], float] | np.ndarray | None = None,
    n_tasks: int = 3,
    cycles: int = 1,
    steps_per_task: int = 100,
    eval_every: int = 100,
    splits: Sequence[str] = ("train",),
    window: int = 1,
    clip_min: float | None = None,
    episodes_per_segment: int = 10,
    episode_return: Callable[[int, int, int], float] | None = None,
    stop_step: int | None = None,
    extra_meta: dict | None = None,
    task_names: Sequence[str] | None = None,
) -> Path:
    """Write a run directory.

    ``returns`` is either a function ``(task_id, split, step) -> mean return`` or an array
    ``[task_id, eval_index]`` (train split; test = train + 0.5). ``task_names`` default to
    ``task<id>``.
    """
    names = list(task_names) if task_names is not None else [f"task{t}" for t in range(n_tasks)]
    tasks = [{"task_id": t, "task_name": names[t], "splits": list(splits)} for t in range(n_tasks)]
    schedule = []
    k = 0
    for c in range(cycles):
        for t in range(n_tasks):
            schedule.append(
                {
                    "index": k,
                    "cycle": c,
                    "task_id": t,
                    "task_name": names[t],
                    "start_step": k * steps_per_task,
                    "end_step": (k + 1) * steps_per_task,
                }
            )
            k += 1
    total = k * steps_per_task
    meta = {
        "suite_id": f"CLSuite/{suite}-v0",
        "suite": suite,
        "method": method,
        "seed": seed,
        "env_kwargs": {},
        "tasks": tasks,
        "schedule": schedule,
        "steps_per_task": steps_per_task,
        "cycles": cycles,
        "eval_every": eval_every,
        "eval_episodes": 10,
        "num_envs": 1,
        "metric_settings": {"smoothing_window": window, "return_clip_min": clip_min},
        "start_time": "2024-01-01T00:00:00+00:00",
        "versions": {},
    }
    meta.update(extra_meta or {})
    last = total if stop_step is None else stop_step
    with RunLog(run_dir, meta) as log:
        for e, step in enumerate(range(0, last + 1, eval_every)):
            recs = []
            for t in range(n_tasks):
                for split in splits:
                    if isinstance(returns, np.ndarray):
                        v = float(returns[t, e]) + (0.5 if split == "test" else 0.0)
                    else:
                        v = returns(t, split, step)
                    recs.append(
                        {
                            "total_step": step,
                            "task_id": t,
                            "task_name": names[t],
                            "split": split,
                            "mean_return": v,
                            "std_return": 0.0,
                            "episodes": 10,
                            "wall_time": step / 10.0,
                        }
                    )
            log.log_eval(recs)
        for seg in schedule:
            if seg["start_step"] >= last:
                break
            eps = []
            for n in range(episodes_per_segment):
                step = seg["start_step"] + (n + 1) * steps_per_task // (episodes_per_segment + 1)
                r = episode_return(seg["task_id"], seg["index"], n) if episode_return else float(n)
                eps.append(
                    {
                        "total_step": step,
                        "task_id": seg["task_id"],
                        "episode_return": r,
                        "episode_length": 5,
                    }
                )
            log.log_episodes(eps)
    return run_dir


# the hand-worked log of the tests: rows = task, columns = eval points at steps 0..300
HAND = np.array(
    [
        [0.0, 10.0, 4.0, 2.0],
        [1.0, 2.0, 8.0, 6.0],
        [0.0, 5.0, 5.0, 20.0],
    ]
)
