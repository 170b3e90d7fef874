"""Experiment tracking through SB3's logger: TensorBoard and Weights & Biases.

``configure_logger(model, run_dir, job)`` gives the model an SB3 ``Logger`` whose outputs
are the ones the job asks for:

* ``job["tensorboard"]``: SB3's ``TensorBoardOutputFormat`` writing ``RUN_DIR/tb``;
* ``job["wandb"]``: a W&B run (``True``: project ``cl-suites``; a string: that project),
  named after the run directory, with the run's ``metadata.json`` as its config. Set
  ``WANDB_MODE=offline`` to log without a network (``wandb sync`` uploads later). The W&B
  run id is kept in ``RUN_DIR/wandb/run-id`` so ``--resume`` continues the same W&B run.

Everything the learner records goes there: losses (``train/policy_gradient_loss``,
``train/value_loss``, ...), ``train/entropy_loss``, ``train/learning_rate``, the CL
penalty (``train/cl_loss``), ``time/fps`` (agent steps per second) and
``rollout/ep_rew_mean``, at the agent step of each dump. With ``run_log=`` the run log's
scalars (eval returns per task and split, ``eval/<id>-<name>/<split>``, and training
returns per task, ``train/episode_return/<id>``) go to the same writers, so a run has one
TensorBoard event stream and one W&B run. Learners without an SB3 logger (``ppo-jax``)
send the run log's scalars to W&B with :func:`track_run_log` (TensorBoard: ``RunLog(...,
tensorboard=True)``); several runs of one process (``--seeds``) are separate W&B runs.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import KVWriter, Logger, TensorBoardOutputFormat

from cl_suites.errors import CLSuitesError

TB_DIR = "tb"
WANDB_DIR = "wandb"
WANDB_PROJECT = "cl-suites"


class TrackingError(CLSuitesError, RuntimeError):
    """A tracking backend could not start (the message says how to fix it)."""


def _excluded(excluded: Any, name: str) -> bool:
    return excluded is not None and (name in excluded or "tensorboard" in excluded)


class WandbOutputFormat(KVWriter):
    """An SB3 ``KVWriter`` that logs numeric values to a W&B run, against ``global_step``
    (agent steps), skipping keys SB3 keeps off TensorBoard (``time/iterations``, ...)."""

    def __init__(self, run: Any):
        self.run = run

    def write(
        self,
        key_values: dict[str, Any],
        key_excluded: dict[str, tuple[str, ...]],
        step: int = 0,
    ) -> None:
        data = {
            key: float(value)
            for key, value in key_values.items()
            if isinstance(value, (int, float, np.number))
            and not isinstance(value, bool)
            and not _excluded(key_excluded.get(key), "wandb")
        }
        if data:
            self.run.log({**data, "global_step": int(step)})

    def close(self) -> None:
        self.run.finish()


def _start_wandb(run_dir: Path, project: str) -> Any:
    try:
        import wandb
    except ImportError as e:
        raise TrackingError("--wandb needs the wandb package: pip install wandb") from e
    id_file = run_dir / WANDB_DIR / "run-id"
    id_file.parent.mkdir(parents=True, exist_ok=True)
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
    id_file.write_text(run_id + "\n")
    meta_path = run_dir / "metadata.json"
    config = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    config.pop("schedule", None)  # long and in the run directory anyway
    try:
        run = wandb.init(
            project=project,
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
            reinit="create_new",  # one W&B run per run dir, several in one process
        )
    except Exception as e:  # no login, no network in online mode, bad settings
        message = " ".join(str(e).split())
        raise TrackingError(
            f"W&B could not start ({type(e).__name__}: {message}); run `wandb login`, or set "
            "WANDB_MODE=offline to log locally and `wandb sync` later"
        ) from e
    run.define_metric("global_step")
    run.define_metric("*", step_metric="global_step")
    return run


def configure_logger(
    model: BaseAlgorithm,
    run_dir: str | os.PathLike[str],
    job: Mapping[str, Any],
    run_log: Any = None,
) -> Logger | None:
    """Send the learner's training scalars to TensorBoard and/or W&B (see the module
    docstring) as ``job["tensorboard"]`` / ``job["wandb"]`` ask; with ``run_log`` (a
    ``cl_suites.RunLog``) its eval and episode scalars go to the same writers.

    Returns the ``Logger`` set on the model, or ``None`` when no tracking was asked for:
    the model then gets a silent logger with no folder (SB3's own default would make an
    empty ``SB3-<date>`` directory in the temp directory at every ``learn()``).
    """
    run_dir = Path(run_dir)
    formats: list[KVWriter] = []
    if job.get("tensorboard"):
        try:
            formats.append(TensorBoardOutputFormat(str(run_dir / TB_DIR)))
        except AssertionError as e:  # SB3 asserts that tensorboard is installed
            raise TrackingError(
                '--tensorboard needs the tensorboard package: pip install "cl-suites[baselines]"'
            ) from e
    wandb_option = job.get("wandb")
    if wandb_option:
        project = wandb_option if isinstance(wandb_option, str) else WANDB_PROJECT
        formats.append(WandbOutputFormat(_start_wandb(run_dir, project)))
    if not formats:
        model.set_logger(Logger(folder=None, output_formats=[]))
        return None
    logger = Logger(folder=str(run_dir), output_formats=formats)
    model.set_logger(logger)
    if run_log is not None:
        run_log.add_scalar_sink(_sink(formats), logger.close)
    return logger


def track_run_log(run_log: Any, run_dir: str | os.PathLike[str], job: Mapping[str, Any]) -> None:
    """Send ``run_log``'s scalars (eval returns, training-episode returns, at env or agent
    steps) to a W&B run when ``job["wandb"]`` asks for one (see ``configure_logger``);
    closed with the run log. For learners without an SB3 logger (``ppo-jax``)."""
    wandb_option = job.get("wandb")
    if not wandb_option:
        return
    project = wandb_option if isinstance(wandb_option, str) else WANDB_PROJECT
    fmt = WandbOutputFormat(_start_wandb(Path(run_dir), project))
    run_log.add_scalar_sink(_sink([fmt]), fmt.close)


def _sink(formats: list[KVWriter]):
    def write(values: Mapping[str, float], step: int) -> None:
        for fmt in formats:
            if isinstance(fmt, TensorBoardOutputFormat):  # flushed by SB3's next dump
                for key, value in values.items():
                    fmt.writer.add_scalar(key, value, step)
            else:
                fmt.write(dict(values), {k: None for k in values}, step)

    return write
