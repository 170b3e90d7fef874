"""Bad option values are refused when the run is resolved, before anything is written
(issue 41 item 3): ``cl-suites run``, ``--print-config`` and a sweep's pre-check alike; a
start that fails anyway before its first step leaves no run directory in the way of the
same command run again."""

from __future__ import annotations

import io
import shlex

import pytest
import torch as th
from rich.console import Console

from cl_suites.cli import main
from cl_suites.job import main_job
from cl_suites.job.torch import train as torch_train
from cl_suites.sweep import SweepError, SweepSpec, run_sweep

th.set_num_threads(1)

TINY = shlex.split(
    "--suite Diagnostic --method ft --preset small --set n_tasks=2 --steps-per-task 512 "
    "--eval-every 256 --eval-episodes 2 --set report=false --set progress=false"
)

BAD = [
    ("net_arch=64", "net_arch must be a list of integers, each >= 1, got 64"),
    ("net_arch=[64,abc]", "net_arch must be a list of integers, each >= 1, got '[64,abc]'"),
    ("net_arch=[64,0]", "net_arch must be a list of integers, each >= 1, got [64, 0]"),
    ("device=cdua", "device 'cdua' cannot be used: not a torch device"),
    ("activation=gelu", "activation must be one of 'relu', 'tanh', 'crelu', got 'gelu'"),
    ("network=resnet", "network must be one of 'mlp', 'shallow', 'residual'"),
    ("network=shallow", "network 'shallow' needs image observations; Diagnostic has"),
    ("reward_clip=[1]", "reward_clip must be a pair [low, high] of numbers with low <= high"),
    ("reward_clip=[1,-1]", "reward_clip must be a pair [low, high]"),
    ("lr_schedule=cosine", "lr_schedule must be one of 'constant', 'linear'"),
    ("value_loss=huber", "value_loss must be one of 'mse', 'clipped-max'"),
    ("time_limit_terminal=maybe", "time_limit_terminal must be true or false"),
]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.split("\n") if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("setting", "message"), BAD)
def test_a_bad_value_is_refused_before_a_run_directory_exists(setting, message, capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["run", *TINY, "--set", setting, "--run-dir", str(run_dir)]) == 2
    assert message in one_line_error(capsys)
    assert not run_dir.exists()
    assert main(["run", *TINY, "--set", setting, "--print-config"]) == 2
    assert message in one_line_error(capsys)


def test_the_sweep_precheck_refuses_bad_values_before_any_run(tmp_path):
    overrides = {"n_tasks": 2, "steps_per_task": 512, "eval_every": 256, "net_arch": 64}
    spec = SweepSpec(
        suites=("Diagnostic",),
        methods=("ft", "ewc"),
        seeds=(0,),
        preset="small",
        overrides=overrides,
    )
    with pytest.raises(SweepError, match="net_arch must be a list of integers"):
        run_sweep(spec, tmp_path / "sweep", live=False, console=Console(file=io.StringIO()))
    assert not (tmp_path / "sweep" / "runs").exists()


@pytest.mark.parametrize("existed", [False, True])
def test_a_start_that_fails_before_its_first_step_can_be_run_again(
    existed, capsys, tmp_path, monkeypatch
):
    """A failure the checks cannot foresee (here: building the learner) removes what the
    run wrote; the same command then runs. An empty ``--run-dir`` given stays, empty."""
    run_dir = tmp_path / "run"
    if existed:
        run_dir.mkdir()

    def broken(*args, **kwargs):
        raise TypeError("'int' object is not iterable")

    with monkeypatch.context() as mp:
        mp.setattr(torch_train, "build_model", broken)
        assert main(["run", *TINY, "--run-dir", str(run_dir)]) == 1
    assert "unexpected TypeError: 'int' object is not iterable" in one_line_error(capsys)
    assert run_dir.exists() == existed and (not existed or not any(run_dir.iterdir()))
    assert main(["run", *TINY, "--run-dir", str(run_dir)]) == 0
    assert (run_dir / "eval.csv").exists()


def test_a_run_that_took_steps_keeps_its_directory(capsys, tmp_path, monkeypatch):
    """A failure after the first step keeps the run (it resumes from its checkpoint)."""
    from baselines_sb3 import callbacks

    original = callbacks.ContinualEvalCallback._on_step

    def failing(self):
        out = original(self)
        if self.total_step >= 300:
            raise RuntimeError("disk on fire")
        return out

    run_dir = tmp_path / "run"
    with monkeypatch.context() as mp:
        mp.setattr(callbacks.ContinualEvalCallback, "_on_step", failing)
        assert main(["run", *TINY, "--set", "checkpoint_every=256", "--run-dir", str(run_dir)]) == 1
    assert "disk on fire" in capsys.readouterr().err
    assert (run_dir / "metadata.json").exists()
    assert (
        main(["run", *TINY, "--set", "checkpoint_every=256", "--run-dir", str(run_dir), "--resume"])
        == 0
    )


def test_a_ppo_jax_start_that_fails_before_its_first_step_leaves_nothing(tmp_path, monkeypatch):
    """The JAX job too: a failure after the run directory was opened but before the first
    step (here: right after opening it) removes what was written."""
    from cl_suites.job import shared
    from cl_suites.job.jax import train as jax_job

    def opened_then_failed(specs, seeds, run_dirs, resume, metadata):
        run_log, evaluator, progress = shared.open_run(
            specs[0], seeds[0], run_dirs[0], resume, 0, meta=metadata[0],
            show_progress=False,
        )  # fmt: skip
        progress.close("failed", "RuntimeError: no device")
        evaluator.close()
        run_log.close()
        assert (run_dirs[0] / "metadata.json").exists()
        raise RuntimeError("no device")

    monkeypatch.setattr(jax_job, "_train", opened_then_failed)
    run_dir = tmp_path / "meal"
    with pytest.raises(RuntimeError, match="no device"):
        main_job.run_main_job(
            suite="MEAL-2", method="ft", learner="ppo-jax", preset="small", seed=0,
            run_dir=run_dir, resume=False, num_envs=None,
            overrides={"steps_per_task": 512, "report": False},
        )  # fmt: skip
    assert not run_dir.exists()
