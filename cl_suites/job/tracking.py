"""Experiment tracking: TensorBoard and Weights & Biases, for both wings of the job.

The torch wing gives its model an SB3 ``Logger`` (``cl_suites.job.torch.tracking.
configure_logger``) whose outputs are the ones the job asks for:

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

from cl_suites.errors import CLSuitesError

TB_DIR = "tb"
WANDB_DIR = "wandb"
WANDB_PROJECT = "cl-suites"


class TrackingError(CLSuitesError, RuntimeError):
    """A tracking backend could not start (the message says how to fix it)."""


def wandb_values(values: Mapping[str, Any], step: int) -> dict[str, float] | None:
    """The numbers among ``values`` as a W&B row at ``global_step`` ``step`` (``None``
    when there is none)."""
    data = {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
    }
    return {**data, "global_step": int(step)} if data else None


def start_wandb(run_dir: Path, project: str) -> Any:
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


def track_run_log(run_log: Any, run_dir: str | os.PathLike[str], job: Mapping[str, Any]) -> None:
    """Send ``run_log``'s scalars (eval returns, training-episode returns, at env or agent
    steps) to a W&B run when ``job["wandb"]`` asks for one; closed with the run log. For
    learners without an SB3 logger (``ppo-jax``)."""
    wandb_option = job.get("wandb")
    if not wandb_option:
        return
    project = wandb_option if isinstance(wandb_option, str) else WANDB_PROJECT
    wandb_run = start_wandb(Path(run_dir), project)

    def write(values: Mapping[str, float], step: int) -> None:
        row = wandb_values(values, step)
        if row is not None:
            wandb_run.log(row)

    run_log.add_scalar_sink(write, wandb_run.finish)
