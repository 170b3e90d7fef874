"""Checkpoints of a main-job run, and resuming one after a kill.

A checkpoint (``RUN_DIR/checkpoint/state.pt``, written atomically) is taken at a rollout
boundary, after the learner's update, and holds: policy and optimizer state, SB3 counters
(``num_timesteps``, ``_n_updates``), the last observation and episode starts, the CL
method's state (Fisher/importances and anchors, replay buffer, P&C's phase and KB), the
sequence position (``SequenceCursor.state_dict()``), the task env's state when it can be
pickled (else the task restarts from its seed), the evaluator's next eval step and the
torch / numpy / python RNG states.

On resume, the run's ``eval.csv`` and ``episodes.csv`` are cut back to the rows with
``total_step <= checkpoint step`` (rows written after the checkpoint would otherwise be
written twice), so no record is lost or duplicated. With a picklable task env (e.g. the
Diagnostic suite) the resumed run reproduces the uninterrupted run exactly.
A disk-backed CLEAR buffer is not copied into checkpoints: on resume its counters and
small arrays are restored but observation slots overwritten after the checkpoint keep
their newer content.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.wrappers import restart_observation
from cl_suites.core.evaluation import Evaluator
from cl_suites.core.runlog import EPISODES_FILE, EVAL_FILE
from cl_suites.core.vector import SequenceVectorEnv

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"


def checkpoint_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / CHECKPOINT_FILE


def env_state(venv: SequenceVectorEnv) -> dict[str, Any]:
    """Sequence position and, when picklable, the live task env (exact resume)."""
    try:
        backend = pickle.dumps(venv._backend)
    except Exception:  # simulators with native handles (procgen, ALE, NLE) cannot be pickled
        backend = None
    return {
        "cursor": venv.cursor.state_dict(),
        "episodes": (venv._episodes.returns.copy(), venv._episodes.lengths.copy()),
        "backend": backend,
    }


def restore_env(venv: SequenceVectorEnv, state: dict[str, Any]) -> np.ndarray | None:
    """Put ``venv`` back at the checkpoint's position. Returns fresh observations when the
    task env had to be restarted (not picklable), else ``None``."""
    venv.cursor.load_state_dict(state["cursor"])
    if venv.cursor.done:
        return None
    if state["backend"] is not None:
        venv.close_extras()
        venv._backend = pickle.loads(state["backend"])
        venv._episodes.returns[:], venv._episodes.lengths[:] = state["episodes"]
        return None
    obs, _ = venv._activate(venv.cursor.segment)
    return obs


def rng_state() -> dict[str, Any]:
    return {
        "torch": th.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    th.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(
    path: Path,
    model: Any,
    method: Any,
    venv: SequenceVectorEnv,
    evaluator: Evaluator,
    extra: dict[str, Any] | None = None,
) -> None:
    state = {
        "format": 1,
        "num_timesteps": int(model.num_timesteps),
        "n_updates": int(model._n_updates),
        "policy": model.policy.state_dict(),
        "optimizer": model.policy.optimizer.state_dict(),
        "last_obs": model._last_obs,
        "last_episode_starts": model._last_episode_starts,
        "method": method.state_dict(),
        "env": env_state(venv),
        "next_eval_step": evaluator.next_eval_step,
        "rng": rng_state(),
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    th.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    return th.load(path, weights_only=False, map_location="cpu")


def apply_checkpoint(
    state: dict[str, Any],
    model: Any,
    method: Any,
    venv: SequenceVectorEnv,
    evaluator: Evaluator,
    task_id_wrapper: Any = None,
) -> None:
    """Load a checkpoint into freshly built objects (same settings as the original run)."""
    model.policy.load_state_dict(state["policy"])
    model.policy.optimizer.load_state_dict(state["optimizer"])
    model.num_timesteps = state["num_timesteps"]
    model._n_updates = state["n_updates"]
    method.load_state_dict(state["method"])
    evaluator.next_eval_step = state["next_eval_step"]
    fresh = restore_env(venv, state["env"])
    if task_id_wrapper is not None:
        task_id_wrapper.set_task_ids(np.full(venv.num_envs, venv.cursor.segment.task_id))
    if fresh is None:
        model._last_obs = state["last_obs"]
        model._last_episode_starts = state["last_episode_starts"]
    else:
        model._last_obs = restart_observation(model.env, fresh)
        model._last_episode_starts = np.ones(venv.num_envs, dtype=bool)
    set_rng_state(state["rng"])


def truncate_logs(run_dir: str | os.PathLike[str], max_step: int) -> dict[str, int]:
    """Drop the rows of ``eval.csv``/``episodes.csv`` with ``total_step > max_step`` (text
    lines kept byte for byte). Returns the number of rows dropped per file."""
    dropped = {}
    for name in (EVAL_FILE, EPISODES_FILE):
        path = Path(run_dir) / name
        if not path.exists():
            continue
        lines = path.read_text().splitlines(keepends=True)
        if not lines:
            continue
        kept = [lines[0]] + [
            ln for ln in lines[1:] if ln.strip() and int(ln.split(",", 1)[0]) <= max_step
        ]
        dropped[name] = len(lines) - len(kept)
        if dropped[name]:
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(kept))
            tmp.replace(path)
    return dropped


class CheckpointCallback(BaseCallback):
    """Saves a checkpoint at the first rollout boundary at or after every ``every`` agent
    steps (after the learner's update), and at the end of training."""

    def __init__(
        self, path: Path, every: int, method: Any, venv: SequenceVectorEnv, evaluator: Evaluator
    ):
        super().__init__()
        self.path, self.every = path, int(every)
        self.method, self.venv, self.evaluator = method, venv, evaluator
        self.next_step = 0

    def _on_training_start(self) -> None:
        self.next_step = (self.num_timesteps // self.every + 1) * self.every

    def _on_rollout_start(self) -> None:
        if self.num_timesteps >= self.next_step:
            self.save()
            self.next_step = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return True

    def save(self, **extra: Any) -> None:
        save_checkpoint(self.path, self.model, self.method, self.venv, self.evaluator, extra)
