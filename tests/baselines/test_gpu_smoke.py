"""GPU smoke tests (issue 39), skipped without CUDA: every learner x CL method crosses a
task switch on a GPU (MEAL's methods with the torch learner too, their observations on the
GPU where JAX has it), a checkpoint taken on the GPU resumes on the CPU, and a MEAL run
with its observations on the GPU resumes after a kill to the uninterrupted run's rows.
Run them on a GPU machine with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch as th

from cl_suites.job.main_job import run_main_job
from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata
from tests.helpers.device_probe import DIAGNOSTIC, FRESH, MEAL
from tests.helpers.kill_drills import kill_run_at

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device"),
]

JOBS = [
    *(
        pytest.param("Diagnostic", method, learner, DIAGNOSTIC, id=f"diagnostic-{learner}-{method}")
        for learner in ("ppo", "vtrace")
        for method in ("ft", "ewc", "online-ewc", "pnc", "clear")
    ),
    *(
        pytest.param("MEAL-2", method, "ppo", {**MEAL, **extra}, id=f"meal-{name}")
        for name, method, extra in (
            ("ewc", "ewc", FRESH),
            ("ewc-joint", "ewc", {**FRESH, "fisher_agents": "joint"}),
            ("online-ewc", "online-ewc", FRESH),
            ("mas", "mas", FRESH),
            ("l2", "l2", {}),
        )
    ),
]


@pytest.mark.parametrize(("suite", "method", "learner", "overrides"), JOBS)
def test_every_learner_and_method_crosses_a_task_switch_on_a_gpu(
    tmp_path, suite, method, learner, overrides
):
    run_dir = tmp_path / "run"
    run_main_job(
        suite=suite, method=method, learner=learner, preset="small", seed=0, num_envs=4,
        run_dir=run_dir, resume=False, overrides={**overrides, "device": "cuda"},
    )  # fmt: skip
    meta = read_metadata(run_dir)
    assert meta["device"] == "cuda:0"
    if suite == "MEAL-2":  # the observations stay on the GPU when JAX runs there too
        assert meta["observations"] == _meal_observations()
    assert read_eval(run_dir).task_id.nunique() == 2  # both tasks trained and evaluated


def _meal_observations() -> str:
    """Where MEAL's torch learner on ``cuda:0`` takes its observations: on the device
    with a CUDA jaxlib, through the host with the CPU one."""
    import jax

    return "device" if jax.default_backend() == "gpu" else "host"


def test_meal_with_observations_on_the_gpu_resumes_after_a_kill(tmp_path):
    """MEAL-2 EWC on ``cuda``, observations on the GPU (with a CUDA jaxlib): killed mid
    task 1 and resumed, it ends with the uninterrupted run's evaluation rows."""
    job = dict(suite="MEAL-2", method="ewc", learner="ppo", preset="small", seed=0)
    job["num_envs"] = 4
    overrides = {**MEAL, **FRESH, "device": "cuda", "checkpoint_every": 64}
    full, cut = tmp_path / "full", tmp_path / "cut"
    run_main_job(run_dir=full, resume=False, overrides=dict(overrides), **job)
    kill_run_at(cut, job, overrides, kill_at=200)
    run_main_job(run_dir=cut, resume=True, overrides=dict(overrides), **job)
    assert read_metadata(cut)["observations"] == _meal_observations()
    a, b = read_eval(full).drop(columns="wall_time"), read_eval(cut).drop(columns="wall_time")
    assert a.equals(b)


@pytest.mark.parametrize("method", ["ewc", "pnc", "clear"])
def test_a_gpu_checkpoint_resumes_on_the_cpu(tmp_path, method):
    resume_on_another_device(tmp_path / "run", method, first=GPU, then="cpu")


GPU = "cuda"


def resume_on_another_device(run_dir, method: str, first: str, then: str) -> None:
    """Kill a Diagnostic run on device ``first`` after its first checkpoints, resume it on
    ``then``; the resumed run finishes with every step in one logged episode."""
    job = dict(suite="Diagnostic", method=method, learner="ppo", preset="small", seed=1)
    job["num_envs"] = 4
    overrides = {**DIAGNOSTIC, "checkpoint_every": 128}
    kill_run_at(run_dir, job, {**overrides, "device": first}, kill_at=400)
    run_main_job(run_dir=run_dir, resume=True, overrides={**overrides, "device": then}, **job)
    total = DIAGNOSTIC["n_tasks"] * DIAGNOSTIC["steps_per_task"]
    assert int(read_episodes(run_dir).episode_length.sum()) == total
    assert read_eval(run_dir).total_step.max() == total
