"""Every learner x CL method builds its tensors on the policy's device (issue 39): one
short job each, crossing a task switch, under :mod:`tests.helpers.device_probe`; a factory call
without ``device=`` in the project's code fails the test unless it is allowed below (with
why it may make a CPU tensor). A CPU machine runs it: the probe sees the call, not the
device mix-up it would cause on a GPU."""

from __future__ import annotations

import pytest
import torch as th

from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_metadata
from tests.helpers.device_probe import DIAGNOSTIC, FRESH, MEAL, outside, probing

ALLOWED = {
    ("baselines_sb3/sparse.py", "*"): "the sparse first layer runs on the CPU only",
    ("baselines_sb3/learners.py", "_get_samples"): "sparse rows (CPU only)",
    ("baselines_sb3/learners.py", "_rollout_rows"): "sparse rows (CPU only)",
    ("baselines_sb3/learners.py", "__init__"): "module buffers, moved with the policy",
    ("baselines_sb3/networks.py", "_flat_size"): "a CPU probe of the CNN at construction",
    ("baselines_sb3/policies.py", "__init__"): "module buffers, moved with the policy",
    ("baselines_sb3/cora_weights.py", "load_cora_weights"): "weights into load_state_dict",
}
"""Sites that may make CPU tensors: ``(file, function)`` -> why."""

JOBS = [
    *(
        pytest.param("Diagnostic", method, learner, DIAGNOSTIC, id=f"diagnostic-{learner}-{method}")
        for learner in ("ppo", "vtrace")
        for method in ("ft", "ewc", "online-ewc", "pnc", "clear")
    ),
    *(
        pytest.param("MEAL-2", method, "ppo", {**MEAL, **extra}, id=f"meal-{name}")
        for name, method, extra in (
            ("ewc", "ewc", FRESH),  # agent 0's played actions
            ("ewc-joint", "ewc", {**FRESH, "fisher_agents": "joint"}),  # resampled: generator
            ("online-ewc", "online-ewc", FRESH),
            ("mas", "mas", FRESH),
            ("l2", "l2", {}),
        )
    ),
]


@pytest.mark.parametrize(("suite", "method", "learner", "overrides"), JOBS)
def test_learner_and_method_make_their_tensors_on_the_policys_device(
    tmp_path, capsys, suite, method, learner, overrides
):
    th.set_num_threads(1)
    with probing() as probe:
        run_main_job(
            suite=suite,
            method=method,
            learner=learner,
            preset="small",
            seed=0,
            num_envs=4,
            run_dir=tmp_path / "run",
            resume=False,
            overrides=dict(overrides),
        )
    assert outside(probe.found, ALLOWED) == []
    # decided at resolve time: auto keeps these MLP suites on the CPU, GPU or not
    assert read_metadata(tmp_path / "run")["device"] == "cpu"
    assert capsys.readouterr().out.startswith("device: cpu (device=auto)")
