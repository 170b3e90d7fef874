"""The torch learners' policy of every task's end (``RUN_DIR/checkpoint/task-NNN.pt``).

:class:`TaskPolicyCallback` writes one file per schedule segment when the job option
``keep_task_policies`` is on (``cl_suites.rundir.task_policies``: names, resume). It takes
the policy when the evaluation of the task's end does (``ContinualEvalCallback``): a
task end inside a rollout at that step, one at a rollout's end after the learner's update
(MEAL's budgets are whole updates), and the sequence's end when training ends; with
``policy_lag=1`` after the update in flight. The callback stands right after the
evaluation callback, before the CL method's switch and the checkpoint of that step.

A file is a ``torch.save`` of plain data (``torch.load(weights_only=True)``): ``format``,
``segment``, ``task_id``, ``cycle``, ``total_step``, ``learner``, ``method`` and
``policy``, the learner's policy's state dict on the CPU. :func:`load_task_policy`
rebuilds that policy from the run's settings (``baselines_sb3.factory.build_policy``) and
gives its greedy actions, as the evaluator gets them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from baselines_sb3.callbacks import make_eval_policy
from baselines_sb3.policy_lag import wait_for_update
from cl_suites.rundir.checkpoint_files import CheckpointError
from cl_suites.rundir.fsutil import atomic_write
from cl_suites.rundir.task_policies import task_policy_path

if TYPE_CHECKING:
    from cl_suites.job.run_spec import JobSpec

FORMAT = "cl-suites-task-policy-torch-1"
EXTENSION = "pt"
ACTING_EXTRAS = ("reward_normalizer.",)
"""State-dict entries a learner adds to its policy that acting does not use (V-trace's
reward normaliser): a rebuilt policy may lack them."""


def save_task_policy(
    run_dir: str | os.PathLike[str],
    segment: Any,
    total_step: int,
    policy: th.nn.Module,
    *,
    learner: str,
    method: str,
) -> Path:
    """Write ``policy``'s state dict as segment ``segment``'s task policy (atomically;
    disk errors as ``RunDiskError``). Returns the file."""
    state = {
        "format": FORMAT,
        "segment": int(segment.index),
        "task_id": int(segment.task_id),
        "cycle": int(segment.cycle),
        "total_step": int(total_step),
        "learner": str(learner),
        "method": str(method),
        "policy": {k: v.detach().to("cpu") for k, v in policy.state_dict().items()},
    }
    path = task_policy_path(run_dir, segment.index, EXTENSION)
    atomic_write(path, lambda f: th.save(state, f))
    return path


def read_task_policy(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The content of a torch task-policy file; ``CheckpointError`` (one line naming the
    file) for anything else: it is loaded with ``weights_only=True``, so a crafted file
    runs nothing."""
    path = Path(path)
    try:
        state = th.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's unpickler: one line, never a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable task policy ({first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} has task-policy format {found!r}, not {FORMAT!r}")
    return state


def rebuilt_policy(spec: JobSpec, state: dict[str, Any]) -> th.nn.Module:
    """The run's policy (``spec``: its resolved settings) with the saved parameters, on
    the CPU, in evaluation mode."""
    from baselines_sb3.factory import build_policy

    policy = build_policy(
        spec.sequence.observation_space,
        spec.sequence.action_space,
        spec.sequence,
        spec.hp,
        method=spec.method,
        multi_head=spec.multi_head,
        task_id_input=spec.task_id_input,
    )
    missing, unexpected = policy.load_state_dict(state["policy"], strict=False)
    unexpected = [k for k in unexpected if not k.startswith(ACTING_EXTRAS)]
    if missing or unexpected:
        raise CheckpointError(
            f"task policy of segment {state.get('segment')} does not fit the run's policy "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    policy.set_training_mode(False)
    return policy


def load_task_policy(
    path: str | os.PathLike[str], spec: JobSpec
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``policy(obs, task_ids) -> greedy actions`` of the task policy in ``path`` of a run
    of ``spec`` (the evaluator's policy of that task's end)."""
    state = read_task_policy(path)
    if state.get("learner") != spec.learner:
        raise CheckpointError(
            f"{path} holds a policy of learner {state.get('learner')!r}, the run's is "
            f"{spec.learner!r}"
        )
    try:
        policy = rebuilt_policy(spec, state)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    return make_eval_policy(None, None, deterministic=True, policy=policy)


class TaskPolicyCallback(BaseCallback):
    """Writes the policy of every task's end (see the module docstring).

    Args:
        run_dir: the run's directory.
        schedule: the run's segments.
        agents_per_env: SB3 slots per env (the run's step is ``num_timesteps //
            agents_per_env``).
        learner, method: recorded in each file.
    """

    def __init__(
        self,
        run_dir: Path,
        schedule: Sequence[Any],
        agents_per_env: int,
        *,
        learner: str,
        method: str,
    ):
        super().__init__()
        self.run_dir, self.schedule = Path(run_dir), tuple(schedule)
        self.agents_per_env = int(agents_per_env)
        self.learner, self.method = learner, method
        self.next = 0  # the first segment whose policy is not written

    @property
    def step(self) -> int:
        return int(self.model.num_timesteps) // self.agents_per_env

    def _on_training_start(self) -> None:
        # a resumed run: the segments that ended at or before its checkpoint are written
        step = self.step
        self.next = sum(1 for seg in self.schedule if seg.end_step <= step)

    def _save_due(self) -> None:
        step = self.step
        while self.next < len(self.schedule) and self.schedule[self.next].end_step <= step:
            wait_for_update(self.model)  # policy_lag=1: the update in flight is part of it
            save_task_policy(
                self.run_dir,
                self.schedule[self.next],
                step,
                self.model.policy,
                learner=self.learner,
                method=self.method,
            )
            self.next += 1

    def _on_rollout_start(self) -> None:
        self._save_due()

    def _on_step(self) -> bool:
        rollout_full = self.locals.get("n_steps", -2) + 1 >= self.model.n_steps
        if not rollout_full:  # an end at a rollout's end waits for the update
            self._save_due()
        return True

    def _on_training_end(self) -> None:
        self._save_due()
