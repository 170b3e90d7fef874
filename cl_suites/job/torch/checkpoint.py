"""Checkpoints of a main-job run, and resuming one after a kill.

A checkpoint (``RUN_DIR/checkpoint/step-STEP.pt`` with its ``step-STEP.sha256``; the
previous one is kept until the new one is written and verified, see
``cl_suites.rundir.checkpoint_files``) is taken at a rollout boundary, after the learner's
update, and holds: policy and optimizer state, SB3 counters
(``num_timesteps``, ``_n_updates``), the last observation and episode starts, the CL
method's state (Fisher/importances and anchors, replay buffer, P&C's phase and KB), the
training env's state (``env.state_dict()``: the sequence position, the running episodes'
returns and lengths and, where the simulator allows it, the simulator state; MEAL: the
JAX env state and PRNG keys), the evaluator's state (next eval step, recorded videos) and
the torch / numpy / python RNG states (and the CUDA ones when CUDA is available) and, for
a ``policy_lag=1`` learner, the network that acts and its generator (``policy_lag``; a
checkpoint waits for the update in flight). ``total_step`` is the run's step (agent
steps; env steps for MEAL) at the checkpoint.

Checkpoints are data: tensors, numpy arrays and plain containers, loaded with
``torch.load(weights_only=True)``; the one pickle inside, the task env's state, is
unpickled against an allow-list (``cl_suites.core.env_state``). A crafted checkpoint is
refused without running anything, and so are the pickled ``state.pt`` files of older
versions. On ``--resume`` a checkpoint that fails its checksum is set aside with one line
naming it, and the run resumes from the previous good one; it never resumes from a
checkpoint that fails its checksum.

On resume, the run's ``eval.csv`` and ``episodes.csv`` are cut back to the rows with
``total_step <= total_step of the checkpoint`` (rows written after it would otherwise be
written twice), so no record is lost or duplicated. Where the env restores exactly, the
resumed run reproduces the uninterrupted one bit for bit, episodes running at the
checkpoint included. Where it cannot (``load_state_dict`` returns fresh observations:
the task env restarts from its seed), the episodes running at the checkpoint are logged
once, as cut, at step ``total_step + 1``, so every training step stays in exactly one
logged episode, and the resume prints one ``note:`` line saying it is not bit-exact and
why (:func:`inexact_resume_note`).
A disk-backed CLEAR buffer is not copied into checkpoints: on resume its counters and
small arrays are restored but observation slots overwritten after the checkpoint keep
their newer content.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.device_rollout import host_observations, observations_as_tensor
from baselines_sb3.policy_lag import wait_for_update
from baselines_sb3.wrappers import restart_observation
from cl_suites.core.env_state import UnsafeEnvStateError
from cl_suites.core.evaluation import Evaluator
from cl_suites.rundir.checkpoint_files import (
    CheckpointError,
    checkpoint_files,
    load_latest,
    read_checkpoint,
    write_checkpoint,
)
from cl_suites.rundir.runlog import truncate_logs as truncate_logs  # lives in the run log

CHECKPOINT_DIR = "checkpoint"
LEGACY_FILE = "state.pt"
FORMAT = 3


def checkpoint_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint file of the run (not checked), or ``None``."""
    found = checkpoint_files(checkpoint_dir(run_dir))
    return found[0][1] if found else None


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)


def env_state(env: Any) -> dict[str, Any]:
    """The training env's state (``SequenceVectorEnv`` / ``MealBatchedEnv.state_dict()``)."""
    return {"state": env.state_dict()}


def restore_env(env: Any, state: dict[str, Any]) -> np.ndarray | None:
    """Put ``env`` back at the checkpoint's position. Returns fresh observations when the
    task env had to be restarted (its simulator state cannot be saved), else ``None``."""
    return env.load_state_dict(state["state"])


def running_episodes(state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(returns, lengths)`` of the episodes running at the checkpoint (per sub-env)."""
    episodes = state["state"]["episodes"]
    return (
        np.asarray(episodes["returns"], dtype=np.float64),
        np.asarray(episodes["lengths"], dtype=np.int64),
    )


def rng_state() -> dict[str, Any]:
    """The process's random states: torch's CPU generator, numpy's, python's and, when
    CUDA is available, every CUDA device's generator (``"cuda"``: SB3's action sampling
    and P&C's column re-initialisation draw from it on a GPU)."""
    state = {
        "torch": th.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if th.cuda.is_available():
        state["cuda"] = th.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`. The CUDA states are restored when the checkpoint has them
    and CUDA is available (one per device, as many as both sides have); a checkpoint from
    a GPU resumes on a CPU without them, and one from a CPU (or of an older version)
    leaves the CUDA generators as seeded. Bit identity then holds on the CPU stream only
    (``docs/fidelity.md``)."""
    th.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    saved = state.get("cuda")
    if saved and th.cuda.is_available():
        for device, cuda_state in enumerate(list(saved)[: th.cuda.device_count()]):
            th.cuda.set_rng_state(cuda_state, device)


def save_checkpoint(
    directory: Path,
    model: Any,
    method: Any,
    venv: Any,
    evaluator: Evaluator,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of a run into ``directory`` (see the module docstring); ``venv``
    is the training env that keeps the schedule (``SequenceVectorEnv`` or
    ``MealBatchedEnv``). Returns the checkpoint's path."""
    state = {
        "format": FORMAT,
        "total_step": int(venv.cursor.total_step),
        "num_timesteps": int(model.num_timesteps),
        "n_updates": int(model._n_updates),
        "policy": model.policy.state_dict(),
        "optimizer": model.policy.optimizer.state_dict(),
        "last_obs": host_observations(model._last_obs),  # numpy: portable across devices
        "last_episode_starts": model._last_episode_starts,
        "method": method.state_dict(),
        "env": env_state(venv),
        "evaluator": evaluator.state_dict(),
        "rng": rng_state(),
        "policy_lag": _policy_lag_state(model),
        **(extra or {}),
    }
    # disk errors: one-line RunDiskError
    path = write_checkpoint(directory, state["total_step"], state)
    flush = getattr(method, "flush_events", None)
    if flush is not None:  # a remedy's acts up to this checkpoint (remedy.csv)
        flush()
    return path


def _policy_lag_state(model: Any) -> dict[str, Any] | None:
    """The behaviour network and acting generator of a ``policy_lag=1`` learner (``None``
    for any other)."""
    getter = getattr(model, "policy_lag_state", None)
    return getter() if getter is not None else None


def _check_format(state: dict[str, Any], path: Path) -> dict[str, Any]:
    if state.get("format") != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} has format {state.get('format')!r}; this version reads "
            f"format {FORMAT}"
        )
    return state


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint ``path``, checked against its checksum (``CheckpointError``: one
    line naming the file, when it is corrupt, crafted or of another format)."""
    return _check_format(read_checkpoint(Path(path)), Path(path))


def load_resume_state(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], Path] | None:
    """The newest good checkpoint of the run and its path (``None``: none was written).
    Corrupt ones are set aside, each with a warning line naming it and the checkpoint
    resumed from instead; ``CheckpointError`` when none is good, or for a pickled
    ``state.pt`` of an older version (it is not loaded: unpickling it could run code)."""
    directory = checkpoint_dir(run_dir)
    found = load_latest(directory, _warn)
    legacy = directory / LEGACY_FILE
    if found is None and legacy.exists():
        raise CheckpointError(
            f"checkpoint {legacy} is a pickle of an older cl-suites; it is not loaded, since "
            "unpickling a file can run code. Start the run again without --resume"
        )
    return None if found is None else (_check_format(found[0], found[1]), found[1])


def checkpoint_step(state: dict[str, Any]) -> int:
    """The run's step at the checkpoint (agent steps; env steps for MEAL)."""
    return int(state["total_step"])


def apply_checkpoint(
    state: dict[str, Any],
    model: Any,
    method: Any,
    venv: Any,
    evaluator: Evaluator,
    task_id_wrapper: Any = None,
    source: Path | None = None,
) -> list[dict[str, Any]]:
    """Load a checkpoint into freshly built objects (same settings as the original run).

    Returns the training-episode rows to log for episodes the resume cut (empty when the
    env restored exactly). Raises ``CheckpointError`` naming ``source`` (the checkpoint's
    file) when the saved task env names a global outside the allow-list (nothing of it
    runs).
    """
    model.policy.load_state_dict(state["policy"])
    model.policy.optimizer.load_state_dict(state["optimizer"])
    if hasattr(model, "load_policy_lag_state"):  # absent in older checkpoints: lockstep
        model.load_policy_lag_state(state.get("policy_lag"))
    model.num_timesteps = state["num_timesteps"]
    model._n_updates = state["n_updates"]
    method.load_state_dict(state["method"])
    evaluator.load_state_dict(state["evaluator"])
    try:
        fresh = restore_env(venv, state["env"])
    except UnsafeEnvStateError as e:
        raise CheckpointError(f"checkpoint {source} is refused: {e}") from None
    if task_id_wrapper is not None:
        task_id_wrapper.set_task_ids(np.full(task_id_wrapper.num_envs, venv.cursor.segment.task_id))
    cut: list[dict[str, Any]] = []
    if fresh is None:
        model._last_obs = state["last_obs"]
        model._last_episode_starts = state["last_episode_starts"]
    else:
        step = checkpoint_step(state)
        returns, lengths = running_episodes(state["env"])
        task = venv.cursor.segment.task_id
        cut = [
            {
                "total_step": step + 1,
                "task_id": task,
                "episode_return": float(r),
                "episode_length": int(n),
            }
            for r, n in zip(returns, lengths, strict=True)
            if n > 0
        ]
        model._last_obs = restart_observation(model.env, fresh)
        model._last_episode_starts = np.ones(model.env.num_envs, dtype=bool)
        print(inexact_resume_note(state, len(cut)), flush=True)
    if getattr(model, "device_observations", False):  # as the env hands them: on the device
        model._last_obs = observations_as_tensor(model._last_obs, model.device)
    set_rng_state(state["rng"])
    return cut


def inexact_resume_note(state: dict[str, Any], cut: int) -> str:
    """The one line a resume prints when the task env could not be restored (MiniHack15's
    NetHack, CHORES, ``async`` envs: ``docs/environments.md``, "Checkpoints and exact
    resume"): the run goes on, but not as the uninterrupted run would have."""
    why = state["env"]["state"].get("task_env_note") or "the task env's state was not saved"
    return (
        f"note: resuming at step {checkpoint_step(state)} is not bit-exact: {why}; the task "
        f"env restarts from a seed of the step reached and its {cut} running episode(s) are "
        "logged as cut"
    )


class CheckpointCallback(BaseCallback):
    """Saves a checkpoint (into ``directory``) at the first rollout boundary at or after
    every ``every`` steps of the run and every step of ``task_ends`` (after the learner's
    update), and at the end of training.

    ``every`` counts the run's steps (``venv.cursor.total_step``: agent steps, or env steps
    for MEAL), not SB3's ``num_timesteps`` (which counts every agent of a MEAL env).
    """

    def __init__(
        self,
        directory: Path,
        every: int,
        method: Any,
        venv: Any,
        evaluator: Evaluator,
        task_ends: Sequence[int] = (),
    ):
        super().__init__()
        self.directory, self.every = directory, int(every)
        self.task_ends = sorted(int(e) for e in task_ends)
        self.method, self.venv, self.evaluator = method, venv, evaluator
        self.next_step = 0
        self.extra_state: Callable[[], dict[str, Any]] | None = None
        """Adds entries to every checkpoint (the plasticity tracker's state)."""

    def _point_after(self, step: int) -> int:
        point = (step // self.every + 1) * self.every
        return min([point, *(e for e in self.task_ends if e > step)])

    def _on_training_start(self) -> None:
        self.next_step = self._point_after(self.venv.cursor.total_step)

    def _on_rollout_start(self) -> None:
        step = self.venv.cursor.total_step
        if step >= self.next_step:
            wait_for_update(self.model)  # policy_lag=1: the update in flight is part of it
            self.save()
            self.next_step = self._point_after(step)

    def _on_step(self) -> bool:
        return True

    def save(self, **extra: Any) -> Path:
        if self.extra_state is not None:
            extra = {**self.extra_state(), **extra}
        return save_checkpoint(
            self.directory, self.model, self.method, self.venv, self.evaluator, extra
        )
