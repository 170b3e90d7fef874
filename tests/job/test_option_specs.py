"""Option values are checked against their declared type and range before anything runs,
config files are read with a size limit, and absurd run sizes are warned about (issue 24
item 4)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from cl_suites.cli import main
from cl_suites.config import MAX_CONFIG_BYTES, ConfigError, load_config_file
from cl_suites.job import main_job
from cl_suites.job.learners import load_learner
from cl_suites.job.main_job import resolve_job
from cl_suites.job.option_specs import job_size_warnings, size_warnings
from cl_suites.job.run_spec import JOB_OPTIONS, OPTION_SPECS, run_option_specs
from cl_suites.job.run_spec import check_option as check_ppo_option
from cl_suites.sweep.grid import SweepError, load_sweep_file

DIAG = dict(suite="Diagnostic", method="ewc", learner="ppo", preset="small", num_envs=None)

BAD = [
    ("checkpoint_every", "0", "checkpoint_every must be an integer >= 1, got 0"),
    ("learning_rate", "fast", "learning_rate must be a number in (0, 1], got 'fast'"),
    ("learning_rate", "inf", "learning_rate must be a number in (0, 1], got inf"),
    ("gamma", "2", "gamma must be a number in [0, 1], got 2"),
    ("ent_coef", "nan", "ent_coef must be a number >= 0, got nan"),
    ("n_steps", "0.5", "n_steps must be an integer >= 1, got 0.5"),
    ("lam", "-1", "lam must be a number >= 0, got -1"),
    ("tensorboard", "3", "tensorboard must be true or false, got 3"),
    (
        "vectorization_mode",
        "fork",
        "vectorization_mode must be one of 'sync', 'async', 'workers', 'auto', got",
    ),
    ("replay_on_disk", "maybe", "replay_on_disk must be one of true, false, 'auto' or none"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD)
def test_each_bad_value_is_refused_before_training_with_its_name_and_range(
    tmp_path, capsys, key, value, message
):
    run_dir = tmp_path / "run"
    code = main(
        ["run", "--suite", "Diagnostic", "--method", "ewc", "--preset", "small",
         "--run-dir", str(run_dir), "--set", f"{key}={value}"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert err.startswith("error: ") and message in err
    assert not run_dir.exists()  # refused before anything was built or written


@pytest.mark.parametrize(("key", "value"), [("checkpoint_every", 0), ("gamma", 2.0)])
def test_library_calls_and_sweeps_are_checked_in_the_same_place(tmp_path, key, value):
    with pytest.raises(ValueError, match=f"^{key} must be a number|^{key} must be an integer"):
        resolve_job(overrides={key: value}, **DIAG)
    with pytest.raises(ValueError, match=f"{key} must be"):  # before any env is built
        main_job.run_main_job(
            run_dir=tmp_path, resume=False, seed=0, overrides={key: value}, **DIAG
        )
    assert not any(tmp_path.iterdir())


def test_good_values_pass_and_are_normalised():
    ppo = run_option_specs(load_learner("ppo"), {})  # the job's, the suites' and ppo's

    def check_option(name, value):
        return check_ppo_option(name, value, ppo)

    assert check_option("n_steps", 128.0) == 128 and type(check_option("n_steps", 128.0)) is int
    assert check_option("learning_rate", 1e-4) == 1e-4
    assert check_option("batch_size", np.int64(64)) == 64  # numpy numbers from library calls
    assert check_option("gamma", np.float32(0.5)) == 0.5
    assert check_option("wandb", "my-project") == "my-project"
    assert check_option("wandb", True) is True
    assert check_option("replay_on_disk", "auto") == "auto"
    assert check_option("video_length", None) is None
    schedule = lambda progress: 1e-4 * progress  # noqa: E731 - SB3 schedules, library calls
    assert check_option("learning_rate", schedule) is schedule
    assert check_option("steps_per_task", 10**18) == 10**18  # the suite checks its own
    with pytest.raises(ValueError, match="n_steps must be an integer >= 1, got True"):
        check_option("n_steps", True)
    spec = resolve_job(overrides={"learning_rate": 3e-4, "checkpoint_every": 1e3}, **DIAG)
    assert spec.hp["learner"]["learning_rate"] == 3e-4 and spec.options.checkpoint_every == 1000


def test_every_job_option_is_declared():
    assert set(JOB_OPTIONS) <= set(OPTION_SPECS)


# -- config files -----------------------------------------------------------------------------
def _returns_quickly(fn, *args):
    """``fn(*args)``'s exception, failing the test if it blocks (a FIFO read hangs)."""
    out: list[BaseException | None] = []

    def call():
        try:
            fn(*args)
            out.append(None)
        except BaseException as e:
            out.append(e)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert out, f"{fn.__name__} blocked on {args}"
    return out[0]


def test_config_files_that_are_not_regular_or_too_big_are_refused(tmp_path):
    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)
    error = _returns_quickly(load_config_file, fifo)
    assert isinstance(error, ConfigError)
    assert str(error) == f"config file {fifo} is a FIFO, socket or device, not a regular file"
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    error = _returns_quickly(load_config_file, zero)
    assert isinstance(error, ConfigError) and "not a regular file" in str(error)
    big = tmp_path / "big.toml"
    big.write_text("seed = 1\n" + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match=r"big\.toml is 1,048,585 bytes; .* at most 1,048,576"):
        load_config_file(big)
    sweep_fifo = tmp_path / "sweep.toml"
    os.mkfifo(sweep_fifo)
    error = _returns_quickly(load_sweep_file, sweep_fifo)
    assert isinstance(error, SweepError) and "sweep file" in str(error)
    assert "not a regular file" in str(error)


# -- run size ---------------------------------------------------------------------------------
def test_absurd_sizes_are_named_before_the_run(capsys, monkeypatch, tmp_path):
    spec = resolve_job(overrides={"steps_per_task": 10**18}, **DIAG)
    (line,) = job_size_warnings(spec)
    assert line.startswith("the run's budget is 3e+18 agent steps (steps_per_task x tasks x")
    lines = size_warnings(
        total_steps=10**6, step_unit="agent steps", num_envs=100_000, agents=1, n_steps=16,
        obs_bytes=4 * 64 * 64 * 3, cpu_bound=True, memory=16 * 2**30, cores=2,
    )  # fmt: skip
    assert lines == [
        "num_envs 100000 x n_steps 16: the rollout buffer alone needs about 73.2 GiB of "
        "observations, this machine has 16.0 GiB of RAM",
        "num_envs 100000 on 2 CPU core(s): one rollout steps 100000 sub-envs 16 times "
        "(1,600,000 agent steps) before the first update, and progress may look stalled",
    ]
    sane = dict(total_steps=10**7, step_unit="agent steps", num_envs=64, agents=1, n_steps=256)
    assert size_warnings(**sane, obs_bytes=4 * 64 * 64 * 3, cpu_bound=True, cores=2) == []

    def stop(spec):  # the warning comes before any env is built
        raise RuntimeError("stop")

    from cl_suites.job.torch import train as torch_train

    monkeypatch.setattr(torch_train, "training_env", stop)
    with pytest.raises(RuntimeError, match="stop"):
        main_job.run_main_job(
            run_dir=tmp_path, resume=False, seed=0, overrides={"steps_per_task": 10**18}, **DIAG
        )
    assert "warning: the run's budget is 3e+18 agent steps" in capsys.readouterr().err
