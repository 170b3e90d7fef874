"""The random-agent run: the reference training loop over a ``cl_suites.Recorder``.

``run_random_agent`` plays a whole sequence with uniformly random actions and writes a
complete run directory (the CLI's ``--method random``); plug a learner in by replacing the
action choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.vector import VectorizationMode
from cl_suites.recorder import Recorder


def run_random_agent(
    suite: str,
    *,
    seed: int,
    run_dir: str | Path,
    num_envs: int = 8,
    vectorization_mode: VectorizationMode = "sync",
    progress: bool = False,
    **env_kwargs: Any,
) -> Path:
    """Play a whole sequence with uniformly random actions, evaluating on schedule.

    Writes a complete run directory (``metadata.json``, ``eval.csv``, ``episodes.csv``,
    ``progress.json``) and returns its path. ``env_kwargs`` override the suite's defaults
    (``steps_per_task``, ``cycles``, ``eval_every``, ``eval_episodes``, ...).
    ``progress=True`` draws the rich progress bar (the CLI does; library calls are quiet).
    """
    rec = Recorder(
        run_dir,
        suite,
        num_envs=num_envs,
        seed=seed,
        method="random",
        progress=progress,
        vectorization_mode=vectorization_mode,
        **env_kwargs,
    )
    rng = np.random.default_rng(seed)
    n_actions = rec.sequence.action_space.n

    def policy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
        return rng.integers(n_actions, size=len(obs))

    with rec:
        env = rec.envs
        env.action_space.seed(seed)
        _, infos = env.reset(seed=seed)
        rec.step(infos, policy)
        while not rec.done:
            _, _, _, _, infos = env.step(env.action_space.sample())
            rec.step(infos, policy)
    return Path(run_dir)
