"""Own CL methods for the task-boundary tests (``tests/job/test_task_boundaries.py``)."""

from __future__ import annotations

import torch as th

from baselines_sb3 import ContinualMethod
from cl_suites.core.task import TaskSwitch


class HeadReset(ContinualMethod):
    """Re-initialises the policy's output head at every task switch.

    Args:
        only_at_end: reset only at the end of the sequence (training then equals ft's)
    """

    name = "head-reset"

    def __init__(self, only_at_end: bool = False) -> None:
        super().__init__()
        self.only_at_end = bool(only_at_end)

    def on_task_switch(self, event: TaskSwitch) -> None:
        if self.only_at_end and event.current is not None:
            return
        with th.no_grad():
            for p in self.policy.action_net.parameters():
                p.normal_(0.0, 1.0)  # far from the trained head: a greedy change shows


class Fails(ContinualMethod):
    """Raises in its task-switch hook."""

    name = "fails"

    def on_task_switch(self, event: TaskSwitch) -> None:
        raise RuntimeError("the head is gone")
