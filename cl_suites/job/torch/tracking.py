"""The torch learners' experiment tracking through SB3's logger (see
``cl_suites.job.tracking`` for what goes where).

``configure_logger(model, run_dir, job)`` gives the model an SB3 ``Logger`` whose outputs
are the ones the job asks for: SB3's ``TensorBoardOutputFormat`` writing ``RUN_DIR/tb``,
and a W&B run (:class:`WandbOutputFormat`); with ``run_log=`` the run log's scalars go to
the same writers, so a run has one TensorBoard event stream and one W&B run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import KVWriter, Logger, TensorBoardOutputFormat

from cl_suites.job.tracking import (
    TB_DIR,
    WANDB_PROJECT,
    TrackingError,
    start_wandb,
    wandb_values,
)


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
        kept = {k: v for k, v in key_values.items() if not _excluded(key_excluded.get(k), "wandb")}
        row = wandb_values(kept, step)
        if row is not None:
            self.run.log(row)

    def close(self) -> None:
        self.run.finish()


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
        formats.append(WandbOutputFormat(start_wandb(run_dir, project)))
    if not formats:
        model.set_logger(Logger(folder=None, output_formats=[]))
        return None
    logger = Logger(folder=str(run_dir), output_formats=formats)
    model.set_logger(logger)
    if run_log is not None:
        run_log.add_scalar_sink(_sink(formats), logger.close)
    return logger


def _sink(formats: list[KVWriter]):
    def write(values: Mapping[str, float], step: int) -> None:
        for fmt in formats:
            if isinstance(fmt, TensorBoardOutputFormat):  # flushed by SB3's next dump
                for key, value in values.items():
                    fmt.writer.add_scalar(key, value, step)
            else:
                fmt.write(dict(values), {k: None for k in values}, step)

    return write
