"""The replay-memory guard as a dry run, before a run directory exists."""

from __future__ import annotations

from pathlib import Path

from baselines_sb3.cl import make_method, method_class
from baselines_sb3.cl.storage import replay_storage
from cl_suites.job.run_spec import JobSpec


def check_replay_memory(spec: JobSpec, run_dir: Path) -> None:
    """Plan the replay buffers of ``spec``'s method (CLEAR; CORA's EWC, online EWC and
    P&C) as the run would, so that a buffer that fits nowhere is refused before the run
    directory is created; nothing is allocated or written."""
    if not method_class(spec.method, spec.hp["method"].get("variant")).keeps_replay:
        return
    method = make_method(
        spec.method,
        **spec.hp["method"],
        disk_dir=run_dir / "replay",
        storage=replay_storage(spec.options.replay_on_disk),
    )
    method.plan_storage(
        int(spec.hp["learner"].get("n_steps", 20)),
        spec.sequence.observation_space,
        int(spec.sequence.action_space.n),
        quiet=True,
    )
