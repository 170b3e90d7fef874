"""``vectorization_mode=auto`` (the default): env workers where the cost model says they
pay on the usable cores and the device, else the envs in the learner's process; an
explicit mode wins; the choice is printed once, kept in ``metadata.json`` and kept by a
resumed run (``cl_suites.job.vectorization``, issue 50 item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cl_suites.job import shared, vectorization
from cl_suites.job.main_job import resolve_job
from cl_suites.job.vectorization import choose
from tests.helpers import REPO

ATARI = dict(suite="Atari6", method="ft", preset="small", num_envs=8)


@pytest.mark.parametrize(
    ("suite", "cores", "gpu", "lag", "mode", "workers", "reason"),
    [
        ("Atari6", 2, True, 1, "sync", None,
         "2 usable cores: acting and the update take 2, env workers need 4 or more"),
        ("Atari6", 16, True, 1, "workers", 14,
         "14 env workers on 16 cores + GPU: predicted 4,596 vs 1,026 agent steps/s in one "
         "process (cost model)"),
        ("Atari6", 16, False, 1, "sync", None,
         "env workers would not pay on 16 cores: predicted 1,023 with 14 vs 1,023 agent "
         "steps/s in one process (cost model)"),
        ("Atari6", 4, False, 0, "workers", 2,
         "2 env workers on 4 cores: predicted 647 vs 572 agent steps/s in one process "
         "(cost model)"),
        ("MiniHack15", 4, False, 0, "sync", None,
         "env workers would not pay on 4 cores: predicted 739 with 2 vs 674 agent steps/s "
         "in one process (cost model)"),
        ("MiniHack15", 8, True, 1, "workers", 6,
         "6 env workers on 8 cores + GPU: predicted 3,086 vs 1,342 agent steps/s in one "
         "process (cost model)"),
        ("Procgen6", 16, True, 1, "sync", None,
         "no per-step cost figures for Procgen6 to weigh env workers by; "
         "--vectorization-mode workers to try them"),
    ],
)  # fmt: skip
def test_auto_decides_per_core_count_and_device(suite, cores, gpu, lag, mode, workers, reason):
    """The cost model's rates (``cl_suites/data/costs.json``) at each core count: Atari6
    with a GPU gains 4.5x from 14 workers on 16 cores; V-trace on CPU only is bound by its
    update (no gain); below 4 cores nothing is tried."""
    choice = choose(suite, steps_on_cpu=True, gpu=gpu, policy_lag=lag, num_envs=32, cores=cores)
    assert (choice.mode, choice.env_workers, choice.reason) == (mode, workers, reason)


def test_auto_takes_the_run_s_env_workers_and_the_envs_bound_it():
    got = choose("Atari6", steps_on_cpu=True, gpu=True, policy_lag=1, num_envs=32, cores=16,
                 env_workers=6)  # fmt: skip
    assert (got.mode, got.env_workers) == ("workers", 6)
    few = choose("Atari6", steps_on_cpu=True, gpu=True, policy_lag=1, num_envs=4, cores=16)
    assert few.env_workers == 4  # never more workers than envs
    meal = choose("MEAL-2", steps_on_cpu=False, gpu=True, policy_lag=0, num_envs=16, cores=64)
    assert (meal.mode, meal.reason) == ("sync", "MEAL-2 batches its own simulators")


def test_resolve_decides_from_the_usable_cores_and_an_explicit_mode_wins(monkeypatch):
    """PPO (lockstep) on Atari6: one process on this machine's cores; 14 workers on a
    16-core machine (the affinity stands in); an explicit ``sync`` stays."""
    here = resolve_job(learner="ppo", seed=0, overrides={}, **ATARI)
    assert here.options.vectorization_mode == "sync" and here.vectorization is not None
    monkeypatch.setattr(vectorization, "usable_cores", lambda: 16)
    big = resolve_job(learner="ppo", seed=0, overrides={}, **ATARI)
    assert (big.options.vectorization_mode, big.options.env_workers) == ("workers", 8)
    assert big.vectorization.reason.startswith("8 env workers on 16 cores: predicted ")
    vtrace = resolve_job(learner="vtrace", seed=0, overrides={"policy_lag": 1}, **ATARI)
    assert vtrace.options.vectorization_mode == "sync"  # CPU only: the update bounds it
    asked = resolve_job(learner="ppo", seed=0, overrides={"vectorization_mode": "sync"}, **ATARI)
    assert asked.options.vectorization_mode == "sync" and asked.vectorization is None
    assert shared.vectorization_record(asked) == {
        "mode": "sync", "reason": "set by the run", "env_workers": None, "auto": False,
    }  # fmt: skip


def test_auto_reads_the_process_affinity():
    """One core by ``os.sched_setaffinity`` in a child process: the envs stay in the
    learner's process, and the reason names the one core."""
    code = (
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]});"
        "from cl_suites.job.main_job import resolve_job;"
        "s = resolve_job(suite='Atari6', method='ft', preset='small', num_envs=8, "
        "learner='ppo', seed=0, overrides={});"
        "print(s.options.vectorization_mode, '|', s.vectorization.reason)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=REPO)  # fmt: skip
    assert out.stdout.strip() == (
        "sync | 1 usable core: acting and the update take 2, env workers need 4 or more"
    )


def test_the_choice_is_printed_recorded_and_kept_on_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(vectorization, "usable_cores", lambda: 16)
    spec = resolve_job(learner="ppo", seed=0, overrides={}, **ATARI)
    line = shared.vectorization_line(spec)
    assert line.startswith("envs: vectorization_mode=workers (auto: 8 env workers on 16 cores")
    record = shared.metadata(spec, 0, "cpu")["vectorization"]
    assert record == {**spec.vectorization.record(), "auto": True}
    assert record["mode"] == "workers" and record["env_workers"] == 8
    # the run started elsewhere with 3 workers: resuming keeps them
    started = {"mode": "workers", "env_workers": 3, "reason": "3 env workers ...", "auto": True}
    (tmp_path / "metadata.json").write_text(json.dumps({"vectorization": started}))
    kept = shared.keep_recorded_vectorization(spec, tmp_path)
    assert (kept.options.vectorization_mode, kept.options.env_workers) == ("workers", 3)
    assert kept.vectorization.reason == "as the run started (3 env workers ...)"
    # a run that set its mode keeps what it set
    asked = resolve_job(learner="ppo", seed=0, overrides={"vectorization_mode": "sync"}, **ATARI)
    assert shared.keep_recorded_vectorization(asked, tmp_path) is asked


def test_a_random_agent_run_steps_auto_in_one_process():
    from cl_suites.job.run_kinds import random_vectorization

    assert random_vectorization({"vectorization_mode": "auto"}) == "sync"
    assert random_vectorization({}) == "sync"
    assert random_vectorization({"vectorization_mode": "workers"}) == "workers"


def test_env_splits_bound_the_workers_and_the_model_predicts_their_saving():
    """Double-buffered acting (issue 50 item 2): workers at most one per sub-env of a
    block; the acting thread's forward pass overlaps the workers' stepping, so with a GPU
    (Atari6, 16 cores) the prediction rises from 4,596 to 5,306 agent steps/s, in
    lockstep on 4 CPU cores from 647 to 705, and the lagged CPU model (which already
    overlaps acting and stepping) is unchanged."""
    from cl_suites.job.cost_model import split_saving

    assert split_saving(4.0, 10.0, 1) == 0.0
    assert split_saving(4.0, 10.0, 2) == 2.0 and split_saving(10.0, 4.0, 2) == 2.0
    assert split_saving(4.0, 10.0, 4) == 3.0
    few = choose("Atari6", steps_on_cpu=True, gpu=True, policy_lag=1, num_envs=8, cores=16,
                 env_splits=2)  # fmt: skip
    assert few.env_workers == 4  # a block of 4 envs
    gpu = choose("Atari6", steps_on_cpu=True, gpu=True, policy_lag=1, num_envs=32, cores=16,
                 env_splits=2)  # fmt: skip
    assert "predicted 5,306 vs 1,026" in gpu.reason
    lockstep = choose("Atari6", steps_on_cpu=True, gpu=False, policy_lag=0, num_envs=32,
                      cores=4, env_splits=2)  # fmt: skip
    assert "predicted 705 vs 572" in lockstep.reason
    lagged = choose("Atari6", steps_on_cpu=True, gpu=False, policy_lag=1, num_envs=32,
                    cores=16, env_splits=2)  # fmt: skip
    assert "predicted 1,023 with 14 vs 1,023" in lagged.reason
