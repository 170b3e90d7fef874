"""The run's torch device, decided once at resolve time (issue 39): ``auto`` takes a GPU
only for convolutional policies; a device that cannot be used is one line naming the
value and the devices present, before any env is built; the CUDA random states travel in
checkpoints and a checkpoint resumes on either device."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch as th

from cl_suites.cli import main
from cl_suites.errors import BadValueError
from cl_suites.job.run_spec import resolve_job
from cl_suites.job.torch import checkpoint
from cl_suites.job.torch.device import devices_present, resolve_device
from cl_suites.rundir.checkpoint_files import read_checkpoint, write_checkpoint
from tests.helpers import REPO

RUN = ["run", "--suite", "Diagnostic", "--method", "ft", "--preset", "small"]


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two CUDA devices, as far as device choice and RNG states can tell."""
    states = {0: th.tensor([1, 2], dtype=th.uint8), 1: th.tensor([3, 4], dtype=th.uint8)}
    monkeypatch.setattr(th.cuda, "is_available", lambda: True)
    monkeypatch.setattr(th.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(th.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(th.cuda, "get_rng_state_all", lambda: [states[0], states[1]])
    monkeypatch.setattr(th.cuda, "set_rng_state", lambda s, d: states.__setitem__(d, s.clone()))
    return states


def _resolve(suite="Diagnostic", method="ft", learner=None, **overrides):
    return resolve_job(
        suite=suite, method=method, learner=learner, preset="small", num_envs=None,
        overrides=overrides,
    )  # fmt: skip


def test_auto_takes_a_gpu_for_convolutional_policies_only(two_gpus):
    assert resolve_device("auto", convolutional=True) == "cuda:0"
    assert resolve_device("auto", convolutional=False) == "cpu"
    assert _resolve().device == "cpu"  # Diagnostic: an MLP
    assert _resolve("MEAL-2", learner="ppo").device == "cpu"  # MEAL's torch learner: an MLP
    assert _resolve("MEAL-2", learner="ppo", device="cuda").device == "cuda:0"  # asked for
    assert _resolve().options.device == "auto"  # the option as given; spec.device as decided


def test_auto_is_the_cpu_without_cuda():
    if th.cuda.is_available():
        pytest.skip("a CPU-only machine")
    assert resolve_device("auto", convolutional=True) == "cpu"
    assert devices_present() == ("cpu",)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("cdua", "not a torch device"),
        ("cuda:7", "there is no CUDA device 7"),
        ("mps", "no float64"),
        ("meta", "holds no data"),
    ],
)
def test_a_device_that_cannot_be_used_is_refused_naming_the_devices_present(two_gpus, value, why):
    with pytest.raises(BadValueError) as err:
        _resolve(device=value)
    assert why in str(err.value) and repr(value) in str(err.value)
    assert "devices present: cpu, cuda:0, cuda:1" in str(err.value)


def test_cuda_without_cuda_is_one_line_and_builds_nothing(tmp_path, capsys):
    if th.cuda.is_available():
        pytest.skip("a CPU-only machine")
    run_dir = tmp_path / "run"
    assert main([*RUN, "--run-dir", str(run_dir), "--set", "device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "device 'cuda' cannot be used: CUDA is not available here" in err
    assert "devices present: cpu" in err
    assert not run_dir.exists()


def test_a_sweep_driver_checks_the_value_but_not_the_machine():
    assert resolve_device("cuda:3", convolutional=False, probe=False) == "cuda:3"
    with pytest.raises(BadValueError, match="not a torch device"):
        resolve_device("gpu0", convolutional=False, probe=False)


# -- random states in checkpoints ---------------------------------------------------------------
def test_the_cuda_random_states_are_saved_and_restored(two_gpus, tmp_path):
    saved = checkpoint.rng_state()
    assert [s.tolist() for s in saved["cuda"]] == [[1, 2], [3, 4]]
    path = write_checkpoint(tmp_path, 0, {"format": checkpoint.FORMAT, "rng": saved})
    loaded = read_checkpoint(path)["rng"]
    two_gpus.clear()
    checkpoint.set_rng_state(loaded)
    assert {d: s.tolist() for d, s in two_gpus.items()} == {0: [1, 2], 1: [3, 4]}


def test_a_gpu_checkpoint_resumes_on_a_cpu(monkeypatch):
    monkeypatch.setattr(th.cuda, "is_available", lambda: False)
    state = checkpoint.rng_state()
    assert "cuda" not in state
    cpu_stream = th.get_rng_state()
    th.rand(3)
    checkpoint.set_rng_state({**state, "cuda": [th.tensor([9], dtype=th.uint8)]})
    assert th.equal(th.get_rng_state(), cpu_stream)  # the CPU stream is exact


def test_a_cpu_or_older_checkpoint_resumes_on_a_gpu(two_gpus):
    state = {k: v for k, v in checkpoint.rng_state().items() if k != "cuda"}
    checkpoint.set_rng_state(state)  # no CUDA states: the generators stay as seeded
    assert {d: s.tolist() for d, s in two_gpus.items()} == {0: [1, 2], 1: [3, 4]}


def test_jax_does_not_preallocate_the_gpu_beside_the_torch_learner(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    _resolve("MEAL-2", learner="ppo-jax")  # JAX alone: its default
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX may have started in an earlier test
        _resolve("MEAL-2", learner="ppo")
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")  # the user's choice stays
    _resolve("MEAL-2", learner="ppo")
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"


def test_jax_beside_torch_is_set_before_jax_starts():
    """In a fresh process, as ``cl-suites run`` starts: the variable is in place before
    MEAL's kitchens start JAX, so no warning."""
    code = (
        "import os, warnings; warnings.simplefilter('error'); "
        "os.environ.pop('XLA_PYTHON_CLIENT_PREALLOCATE', None); "
        "from cl_suites.job.run_spec import resolve_job; "
        "resolve_job(suite='MEAL-2', method='ft', learner='ppo', preset='small', num_envs=4, "
        "overrides={}); import jax; jax.numpy.zeros(1); "
        "print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    )
    root = REPO
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "false"


def test_the_jax_cache_option_turns_on_jaxs_persistent_cache(tmp_path):
    import jax

    from cl_suites.job.shared import use_jax_cache

    with pytest.raises(BadValueError, match="jax_cache_dir must be a string or none, got 3"):
        _resolve("MEAL-2", learner="ppo-jax", jax_cache_dir=3)
    assert _resolve("MEAL-2", jax_cache_dir="~/c").options.jax_cache_dir == "~/c"
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    previous = {k: getattr(jax.config, k) for k in keys}
    try:
        use_jax_cache(str(tmp_path / "cache"))
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "cache")
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
        assert (tmp_path / "cache").is_dir()
    finally:
        for key, value in previous.items():
            jax.config.update(key, value)
