"""Which torch thread count a ContinualPPO run acts and updates with (thread-default tests)."""

from __future__ import annotations

import pytest
import torch as th

from baselines_sb3 import learners


def record_threads(mp: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Patch ``ContinualPPO`` (undone with ``mp``) so each rollout and each update appends
    ``("collect" | "update", torch.get_num_threads())`` to the returned list."""
    seen: list[tuple[str, int]] = []
    update, collect = learners.ContinualPPO._update, learners.ContinualPPO.collect_rollouts

    def record_update(self):
        seen.append(("update", th.get_num_threads()))
        return update(self)

    def record_collect(self, *args, **kwargs):
        seen.append(("collect", th.get_num_threads()))
        return collect(self, *args, **kwargs)

    mp.setattr(learners.ContinualPPO, "_update", record_update)
    mp.setattr(learners.ContinualPPO, "collect_rollouts", record_collect)
    return seen
