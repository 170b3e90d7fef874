"""MEAL's torch learner with its observations on the device (issue 39, Deliver 4).

Where JAX and torch share a device (here: both on the CPU), MEAL's SB3 view hands the
engine's observation arrays to torch with ``torch.from_dlpack`` and ``ContinualPPO``
keeps them in a device-side rollout buffer (``baselines_sb3.device_rollout``). These
tests pin that the path trains bit-identically to the host path (numpy observations),
across a task switch with EWC, that no observation goes through host numpy per step, and
that a checkpoint of either path resumes on the other exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th

pytest.importorskip("meal")

from baselines_sb3.device_rollout import DeviceObservations
from cl_suites.job.main_job import run_main_job
from cl_suites.job.torch import checkpoint, device_observations
from cl_suites.rundir.runlog import read_episodes, read_eval, read_metadata
from tests.helpers.kill_drills import kill_run_at
from tests.helpers.meal_learner import meal_ft_learner
from tests.meal.test_meal_job import JOB
from tests.meal.test_meal_job import OVERRIDES as MEAL_JOB

OVERRIDES = {**MEAL_JOB, "device_observations": True}  # test_meal_job's tiny MEAL-2 runs
EWC = {**OVERRIDES, "episodes": 2, "max_steps": 50}  # EWC's fresh episodes at the switch


def _host_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs started after this keep their observations on the host (SB3's numpy path)."""
    monkeypatch.setattr(device_observations, "observation_device", lambda *args: None)


def _run(run_dir):
    run_main_job(method="ewc", run_dir=run_dir, resume=False, overrides=dict(EWC), **JOB)
    return run_dir


def _final_policy(run_dir) -> dict[str, th.Tensor]:
    return checkpoint.load_checkpoint(checkpoint.latest_checkpoint(run_dir))["policy"]


def _assert_same_runs(a, b) -> None:
    ea, eb = read_eval(a).drop(columns="wall_time"), read_eval(b).drop(columns="wall_time")
    assert ea.equals(eb)
    assert read_episodes(a).equals(read_episodes(b))
    pa, pb = _final_policy(a), _final_policy(b)
    assert pa.keys() == pb.keys()
    for key, value in pa.items():
        assert th.equal(value, pb[key]), key


@pytest.fixture(scope="module")
def device_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("device"))


def test_the_cpu_run_keeps_its_observations_on_the_device(device_run):
    assert read_metadata(device_run)["observations"] == "device"
    assert read_eval(device_run).task_id.nunique() == 2


def test_device_and_host_paths_train_bit_identically_across_a_task_switch(
    device_run, tmp_path, monkeypatch
):
    """EWC (its importance from fresh episodes at the switch; the learner's last
    observations in every rollout it sees) on MEAL-2: every evaluation, episode and final
    parameter equal."""
    _host_path(monkeypatch)
    host = _run(tmp_path / "host")
    assert read_metadata(host)["observations"] == "host"
    _assert_same_runs(device_run, host)


@pytest.mark.parametrize("first", ["device", "host"])
def test_a_checkpoint_of_one_path_resumes_exactly_on_the_other(
    device_run, tmp_path, monkeypatch, first
):
    """Checkpoints hold the last observations as host numpy: a run killed mid task 1 on
    one path resumes on the other to the uninterrupted run's rows and parameters."""
    run_dir = tmp_path / "cut"
    job = {**JOB, "method": "ewc"}
    with monkeypatch.context() as patch:
        if first == "host":
            _host_path(patch)
        kill_run_at(run_dir, job, dict(EWC), kill_at=700)
    saved = checkpoint.load_checkpoint(checkpoint.latest_checkpoint(run_dir))["last_obs"]
    assert all(isinstance(v, np.ndarray) for v in saved.values())
    with monkeypatch.context() as patch:
        if first == "device":
            _host_path(patch)
        run_main_job(run_dir=run_dir, resume=True, overrides=dict(EWC), **job)
    _assert_same_runs(device_run, run_dir)


class _HostCopies:
    """Counts the host copies of arrays of one observation shape ``(..., H, W, C)`` that are
    not numpy already (JAX arrays, torch tensors): through ``jax.device_get`` (JAX's
    ``_value``) and through ``np.array`` / ``np.asarray`` in the modules given to
    :meth:`watch` (the MEAL env, its SB3 view, SB3's rollout buffers)."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape, self.count = tuple(shape), 0

    def _seen(self, x) -> None:
        if not isinstance(x, np.ndarray) and tuple(getattr(x, "shape", ()))[-3:] == self.shape:
            self.count += 1

    def watch(self, monkeypatch: pytest.MonkeyPatch, *modules) -> None:
        from types import SimpleNamespace

        from jax._src.array import ArrayImpl

        value = ArrayImpl._value

        def counted_value(array):
            self._seen(array)
            return value.fget(array)

        def counting(fn):
            def wrapper(x, *args, **kwargs):
                self._seen(x)
                return fn(x, *args, **kwargs)

            return wrapper

        monkeypatch.setattr(ArrayImpl, "_value", property(counted_value))
        names = {k: getattr(np, k) for k in dir(np) if not k.startswith("__")}
        proxy = SimpleNamespace(**{**names, "array": counting(np.array)})
        proxy.asarray = counting(np.asarray)
        for module in modules:
            monkeypatch.setattr(module, "np", proxy)


def _learn(steps: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    """A MEAL-2 FT learner (20-step episodes) trained ``steps`` batch steps; returns it and
    the host copies of observations counted meanwhile."""
    import stable_baselines3.common.buffers as sb3_buffers

    from cl_suites.meal import batched
    from cl_suites.sb3 import meal as sb3_meal

    model, env = meal_ft_learner(JOB, {**OVERRIDES, "episode_len": 20})
    copies = _HostCopies(model.observation_space["obs"].shape)
    with monkeypatch.context() as patch:
        copies.watch(patch, batched, sb3_meal, sb3_buffers)
        model.learn(total_timesteps=steps * env.num_envs)
    return model, copies.count


def test_no_observation_goes_through_host_numpy_per_step(monkeypatch):
    """On the device path only the terminal observations of the batch's episode ends (one
    copy each, for SB3's bootstrap from them) reach the host while the learner collects
    and trains, and the rollout buffer holds torch tensors; the host path (the counter's
    check) copies every step's observations."""
    steps = 48  # three rollouts and updates of 16 batch steps; episodes of 20 steps
    model, copies = _learn(steps, monkeypatch)
    assert model.device_observations and isinstance(model.rollout_buffer, DeviceObservations)
    assert isinstance(model._last_obs["obs"], th.Tensor)
    assert isinstance(model.rollout_buffer.observations["obs"], th.Tensor)
    assert copies == steps // 20
    _host_path(monkeypatch)
    model, copies = _learn(steps, monkeypatch)
    assert not model.device_observations
    assert copies > steps  # the env's device_get of every step, the reset and the ends


def test_the_device_path_is_on_only_where_jax_and_torch_share_the_device(monkeypatch):
    from gymnasium import spaces

    wide = spaces.Box(0, 255, (7, 9, 26), np.uint8)
    tall = spaces.Box(0, 255, (9, 7, 26), np.uint8)  # SB3 would transpose it (numpy only)
    decide = device_observations.observation_device
    assert decide("cpu", wide, True) == "cpu" and decide(None, wide, True) is None
    assert decide("cpu", wide) is None and decide("cpu", wide, False) is None  # the default
    assert decide("cpu", tall, True) is None
    assert decide("cuda:0", wide, True) is None  # the CPU jaxlib beside a CUDA torch
    monkeypatch.setattr(device_observations, "_jax_device", lambda: ("gpu", 1))
    assert decide("cuda:1", wide) == "cuda:1" and decide("cuda:1", wide, False) is None
    assert decide("cuda:0", wide) is None and decide("cpu", wide, True) is None
    assert device_observations.observation_location("cuda:1", wide) == "device"
