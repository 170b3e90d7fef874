"""The CLI as researchers use it: configs, bad input, one-line errors, Ctrl-C, tracking,
and CLEAR's memory guard."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import textwrap
import warnings

import pandas as pd
import pytest
import torch as th

from cl_suites import cli
from cl_suites.cli import main
from cl_suites.cli.arguments import report_arguments
from cl_suites.config import parse_value
from cl_suites.rundir.fsutil import RunDiskError
from cl_suites.rundir.runlog import read_eval, read_metadata
from tests.helpers import REPO

th.set_num_threads(1)
ROOT = str(REPO)
TINY = shlex.split(
    "--suite Diagnostic --method ewc --preset small --set n_tasks=2 --steps-per-task 512 "
    "--eval-every 256 --eval-episodes 2 --set checkpoint_every=256 --set report=false "
    "--set progress=false"
)


def one_line_error(capsys) -> str:
    """The one line the CLI printed on stderr (progress bars, which redraw with \\r, aside)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.split("\n") if line.strip() and "\r" not in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished tiny Diagnostic run with TensorBoard on."""
    run_dir = tmp_path_factory.mktemp("cli") / "tiny"
    assert main(["run", *TINY, "--tensorboard", "--run-dir", str(run_dir)]) == 0
    return run_dir


# -- configuration ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("1e-4", 1e-4),
        ("1e5", 100_000),
        ("0.5", 0.5),
        ("true", True),
        ("Yes", True),
        ("off", False),
        ("[64, 64]", [64, 64]),
        ("cpu", "cpu"),
        ("cuda:0", "cuda:0"),
        ('"1"', "1"),
        ("none", None),
    ],
)
def test_set_values_are_parsed_as_data(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_config_file_set_and_flags_resolve_in_documented_order(tmp_path, capsys, suffix):
    values = {"suite": "Diagnostic", "method": "ewc", "preset": "small", "seed": 1,
              "learning_rate": 0.1, "steps_per_task": 3000, "checkpoint_every": 100,
              "lam": 7.0}  # fmt: skip
    if suffix == ".toml":
        text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
    else:
        text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in values.items())
    config = tmp_path / f"run{suffix}"
    config.write_text(text)
    run_dir = tmp_path / "never-created"
    argv = ["run", "--config", str(config), "--set", "learning_rate=0.2", "--set", "seed=2",
            "--set", "lam=8", "--seed", "3", "--steps-per-task", "4000", "--run-dir",
            str(run_dir), "--print-config"]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["suite"] == "CLSuite/Diagnostic-v0" and printed["method"] == "ewc"
    assert printed["seed"] == 3  # flag > --set > file
    assert printed["hyperparameters"]["learner"]["learning_rate"] == 0.2  # --set > file
    assert printed["hyperparameters"]["method"]["lam"] == 8  # --set > file > preset (5000)
    assert printed["suite_kwargs"]["steps_per_task"] == 4000  # flag > file > preset
    assert printed["suite_kwargs"]["eval_every"] == 1000  # the small preset's
    assert printed["job"]["checkpoint_every"] == 100  # the file's
    assert printed["job"]["device"] == "auto" and printed["job"]["torch_threads"] == 1  # defaults
    assert printed["run_dir"] == str(run_dir) and not run_dir.exists()


def test_config_files_are_data_not_code(tmp_path, capsys):
    config = tmp_path / "evil.yaml"
    config.write_text('suite: Diagnostic\nseed: !!python/object/apply:os.system ["touch x"]\n')
    assert main(["run", "--config", str(config), "--print-config"]) == 2
    assert "is not valid YAML" in one_line_error(capsys)


def test_unknown_option_suggests_the_closest_and_lists_the_valid_ones(capsys):
    assert main(["run", "--suite", "Diagnostic", "--set", "learnin_rate=1"]) == 2
    err = one_line_error(capsys)
    assert "unknown option 'learnin_rate' (did you mean 'learning_rate'?)" in err
    job = err.split("job: ", 1)[1].split(";", 1)[0].split(", ")
    assert {"checkpoint_every", "device"} <= set(job) and "suite: cycles" in err


def test_version_help_defaults_and_python_m(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("cl-suites ")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    precedence = "< preset < --config FILE < --set KEY=VALUE (in order) < explicit flags"
    for text in ("CL method (default: ft)", "(default: paper)", "(default: 0)", precedence):
        assert text in help_text
    out = subprocess.run(
        [sys.executable, "-m", "cl_suites", "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
        check=True,
    )
    assert out.stdout.startswith("cl-suites ")


def test_info_meal_works_like_every_other_suite(capsys):
    assert main(["info", "MEAL-3", "--steps-per-task", "1000"]) == 0
    out = capsys.readouterr().out
    assert "CLSuite/MEAL-3-v0" in out and "2-easy_gen_2" in out and "3,000" in out


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-envs", "0"], "num_envs must be a positive integer, got '0'"),
        (["--num-envs", "-4"], "num_envs must be a positive integer, got '-4'"),
        (["--seed", "-1"], "seed must be an integer in [0, 4294967295], got '-1'"),
        (["--seed", str(2**70)], f"seed must be an integer in [0, 4294967295], got '{2**70}'"),
    ],
)
def test_bad_flags_are_refused_before_the_run_directory_exists(tmp_path, capsys, flags, message):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["run", "--suite", "Diagnostic", "--run-dir", str(run_dir), *flags])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()


def test_bad_values_from_config_and_set_are_refused_too(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('suite = "Diagnostic"\nseed = -1\n')
    run_dir = tmp_path / "run"
    assert main(["run", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    assert "seed must be an integer in [0, 4294967295], got -1" in one_line_error(capsys)
    assert main(["run", "--suite", "Diagnostic", "--set", "num_envs=0"]) == 2
    assert "num_envs must be a positive integer, got 0" in one_line_error(capsys)
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: None, "the directory does not exist"),
        (lambda d: d.mkdir(), "the directory is empty (no run to continue)"),
        (
            lambda d: (d.mkdir(), (d / "notes.txt").write_text("mine")),
            "it is not a cl-suites run directory (no metadata.json; it holds notes.txt)",
        ),
        (
            lambda d: (d.mkdir(), (d / "metadata.json").write_text("[1, 2]")),
            "its metadata.json is not a cl-suites run's",
        ),
    ],
)
def test_resume_refuses_a_directory_without_a_run(tmp_path, capsys, make, reason):
    run_dir = tmp_path / "run"
    make(run_dir)
    before = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None
    assert main(["run", "--suite", "Diagnostic", "--run-dir", str(run_dir), "--resume"]) == 2
    assert f"cannot resume {run_dir}: {reason}" in one_line_error(capsys)
    assert (sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None) == before


def test_a_new_run_never_writes_into_a_foreign_directory(tmp_path, capsys):
    (tmp_path / "thesis.tex").write_text("...")
    assert main(["run", "--suite", "Diagnostic", "--run-dir", str(tmp_path)]) == 2
    assert "not empty and holds no cl-suites run" in one_line_error(capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]


# -- errors never show a traceback -----------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (TypeError("boom"), 1, "error: unexpected TypeError: boom (rerun with --debug"),
        (
            RuntimeError("a\nmulti-line\nmessage"),
            1,
            "unexpected RuntimeError: a multi-line message",
        ),
        (MemoryError(), 1, "error: out of memory (MemoryError)"),
        (PermissionError(13, "Permission denied", "/x/out"), 1, "Permission denied: /x/out"),
        (ValueError("metadata.json is not an object"), 2, "error: metadata.json is not an object"),
        (KeyboardInterrupt(), 130, "interrupted"),
        (
            RunDiskError("/r/checkpoint/state.pt", "disk full", needed=10, free=0),
            1,
            "error: disk full at /r/checkpoint/state.pt (10 B needed, 0 B free); the last good "
            "checkpoint is intact; fix this and rerun with --resume to continue",
        ),
    ],
)
def test_every_exception_is_one_line_and_debug_shows_the_traceback(
    monkeypatch, capsys, error, code, text
):
    def fail(args):
        raise error

    monkeypatch.setitem(cli.COMMANDS, "report", cli.COMMANDS["report"].__class__(
        "r", report_arguments, fail))  # fmt: skip
    assert main(["report", "some-run"]) == code
    assert text in one_line_error(capsys)
    with pytest.raises(type(error)):
        main(["report", "some-run", "--debug"])
    monkeypatch.setenv("CL_SUITES_DEBUG", "1")
    with pytest.raises(type(error)):
        main(["report", "some-run"])


def test_report_errors_are_one_line(tiny_run, tmp_path, capsys):
    assert main(["report", str(tiny_run), "--out", "/dev/null/report"]) == 2  # a bad --out
    assert "/dev/null/report" in one_line_error(capsys)
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("eval.csv", "episodes.csv"):
        (bad / name).write_bytes((tiny_run / name).read_bytes())
    (bad / "metadata.json").write_text('"not an object"')
    assert main(["report", str(bad), "--out", str(tmp_path / "r")]) in (1, 2)
    one_line_error(capsys)


def test_third_party_warnings_are_filtered_at_their_source_ours_still_show():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli.quiet_third_party_warnings()
        message = "random_state is deprecated and will be removed"
        warnings.warn_explicit(message, FutureWarning, "base.py", 1, module="arch.bootstrap.base")
        warnings.warn_explicit("np.bool8 is deprecated", DeprecationWarning, "x.py", 1, "gym3.env")
        fork = "os.fork() was called. os.fork() is incompatible with multithreaded code"
        warnings.warn_explicit(fork, RuntimeWarning, "x.py", 1, module="jax._src.xla_bridge")
        warnings.warn_explicit(message, FutureWarning, "report.py", 1, "cl_suites.metrics.report")
    assert [(w.category, w.filename) for w in caught] == [(FutureWarning, "report.py")]


# -- runs: lock, Ctrl-C, tracking ------------------------------------------------------------
def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tiny_run, capsys):
    code = textwrap.dedent(
        f"""
        import time
        from cl_suites.rundir.runlock import RunDirLock
        lock = RunDirLock({str(tiny_run)!r}).acquire()
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        assert main(["run", *TINY, "--run-dir", str(tiny_run), "--resume"]) == 1
        assert f"is in use by another writer (pid {proc.pid} on host" in one_line_error(capsys)
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_leaves_a_resumable_run_and_prints_the_exact_command(
    tiny_run, tmp_path, monkeypatch, capsys
):
    from baselines_sb3 import callbacks

    original = callbacks.ContinualEvalCallback._on_step

    def ctrl_c_at_700(self):
        if self.num_timesteps >= 700:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(callbacks.ContinualEvalCallback, "_on_step", ctrl_c_at_700)
    run_dir = tmp_path / "cut"
    assert main(["run", *TINY, "--tensorboard", "--run-dir", str(run_dir)]) == 130
    err = one_line_error(capsys)
    assert err.startswith(f"interrupted; the run in {run_dir} is safe: continue it with: ")
    command = err.split("with: ", 1)[1].strip()
    words = shlex.split(command)
    assert words[:2] == ["cl-suites", "run"] and words[-1] == "--resume"
    monkeypatch.undo()
    assert main(words[1:]) == 0
    full, cut = read_eval(tiny_run), read_eval(run_dir)
    pd.testing.assert_frame_equal(full.drop(columns="wall_time"), cut.drop(columns="wall_time"))


def test_training_and_eval_scalars_go_to_one_tensorboard_stream(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tiny_run / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("train/policy_gradient_loss", "train/value_loss", "train/entropy_loss",
                "train/learning_rate", "train/cl_loss", "time/fps", "eval/0-cue-identity/train",
                "eval/1-cue-shift-1/train", "train/episode_return/0"):  # fmt: skip
        assert tag in tags, tag
    evals = [e.step for e in events.Scalars("eval/1-cue-shift-1/train")]
    assert evals == sorted(read_eval(tiny_run).total_step.unique().tolist())
    assert len(list((tiny_run / "tb").glob("events.out.tfevents.*"))) == 1


def test_wandb_offline_gets_the_training_scalars(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from baselines_sb3.learners import ContinualPPO
    from baselines_sb3.policies import ContinualPolicy
    from cl_suites.api import make_vec
    from cl_suites.job.torch.tracking import configure_logger
    from cl_suites.rundir.runlog import RunLog
    from cl_suites.sb3.adapter import SB3VecEnv

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    env = SB3VecEnv(make_vec("Diagnostic", 2, n_tasks=2, steps_per_task=64))
    model = ContinualPPO(ContinualPolicy, env, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    with RunLog(tmp_path, {"suite": "Diagnostic"}) as log:
        configure_logger(model, tmp_path, {"wandb": "cl-suites-test"}, run_log=log)
        model.learn(64)
        record = {"total_step": 64, "task_id": 0, "task_name": "a", "split": "train"}
        record.update(mean_return=1.0, std_return=0.0, episodes=1, wall_time=0.0)
        log.log_eval([record])
    run_id = (tmp_path / "wandb" / "run-id").read_text().strip()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    records = (runs[0] / f"run-{run_id}.wandb").read_bytes()  # protobuf records
    for key in (b"train/value_loss", b"train/entropy_loss", b"time/fps", b"eval/0-a/train"):
        assert key in records, key


def test_a_run_without_tracking_leaves_no_sb3_folder_in_the_temp_directory(tmp_path, monkeypatch):
    """SB3's default logger makes an empty ``SB3-<date>`` folder in the temp directory at
    every ``learn()``; a run without --tensorboard/--wandb gets a silent one instead."""
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert main(["run", *TINY, "--run-dir", str(tmp_path / "run")]) == 0
    assert list(temp.glob("SB3-*")) == []  # (torch's own caches may live there)


# -- CLEAR's memory guard ---------------------------------------------------------------------
def test_clear_buffer_goes_to_disk_or_is_refused_with_sizes(tmp_path, monkeypatch, caplog):
    from gymnasium import spaces

    from baselines_sb3.cl import clear, storage

    procgen = spaces.Box(0, 255, (64, 64, 3), "uint8")
    obs, other = clear.ReservoirBuffer.nbytes(20_000, 20, procgen, 15)
    # 1,000 unrolls of 21 frames: 12,288 observation bytes per frame, and per frame 65
    # bytes of logits, value and start plus 8 bytes of action and reward per transition
    assert (obs, other) == (1_000 * 21 * 12_288, 1_000 * (21 * 65 + 20 * 8))
    monkeypatch.setattr(storage, "available_memory", lambda: 100 * 2**20)  # 100 MiB free
    monkeypatch.setattr(storage, "free_bytes", lambda path: 100 * 2**30)  # not this disk's
    method = clear.CLEAR(buffer_size=20_000, disk_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        assert method.plan_storage(20, procgen, 15) is True
    assert "needs 247.5 MiB of RAM (246.1 MiB of observations) but only 100.0 MiB" in caplog.text
    assert f"keeping its observations on disk in {tmp_path}" in caplog.text
    with pytest.raises(storage.ReplayMemoryError, match=r"--set replay_on_disk=true"):
        clear.CLEAR(buffer_size=20_000, storage="ram").plan_storage(20, procgen, 15)
    with pytest.raises(storage.ReplayMemoryError, match="pass disk_dir=DIR"):
        clear.CLEAR(buffer_size=20_000).plan_storage(20, procgen, 15)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 2**20)
    with pytest.raises(storage.ReplayMemoryError, match=r"do not fit either .*1\.0 MiB free"):
        method.plan_storage(20, procgen, 15)
    assert clear.CLEAR(buffer_size=2_000, disk_dir=tmp_path).plan_storage(20, procgen, 15) is False


def test_readme_clear_paper_command_refuses_before_starting_when_nothing_fits(
    tmp_path, monkeypatch, capsys
):
    from baselines_sb3.cl import storage

    monkeypatch.setattr(storage, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 20 * 2**30)
    run_dir = tmp_path / "clear-s0"
    argv = ["run", "--suite", "Procgen6", "--method", "clear", "--learner", "vtrace",
            "--preset", "paper", "--seed", "0", "--run-dir", str(run_dir)]  # fmt: skip
    assert main(argv) == 1
    err = one_line_error(capsys)
    assert "CLEAR replay buffer of 5,000,000 transitions needs 60.4 GiB of RAM" in err
    assert "(60.1 GiB of observations) but only 16.0 GiB of memory is free" in err
    assert "--set buffer_size=N" in err and not run_dir.exists()


def test_main_job_moves_a_buffer_that_does_not_fit_to_disk(tmp_path, monkeypatch, capsys):
    from baselines_sb3.cl import storage

    monkeypatch.setattr(storage, "available_memory", lambda: 1_000_000)  # 750 kB for the buffer
    run_dir = tmp_path / "clear"
    argv = ["run", *TINY, "--method", "clear", "--steps-per-task", "256", "--run-dir",
            str(run_dir)]  # fmt: skip
    assert main(argv) == 0
    assert "keeping its observations on disk in" in capsys.readouterr().err
    assert (run_dir / "replay" / "obs.bin").stat().st_size > 0
    assert read_metadata(run_dir)["method"] == "clear"


def test_the_job_builds_the_method_once_and_hands_the_env_the_schedule_it_cut(
    tmp_path, monkeypatch
):
    """One pass down the stack (issue 43): the replay guard plans the method the run
    trains with, and the training env follows the job's schedule instead of a new cut."""
    from cl_suites.job.torch import train as torch_train

    made, built = [], []
    make_method, training_env = torch_train.make_method, torch_train.training_env

    def counted(name, **kwargs):
        made.append(name)
        return make_method(name, **kwargs)

    def spied(spec):
        envs = training_env(spec)
        built.append((spec, envs[0]))
        return envs

    monkeypatch.setattr(torch_train, "make_method", counted)
    monkeypatch.setattr(torch_train, "training_env", spied)
    argv = ["run", *TINY, "--method", "clear", "--num-envs", "2", "--steps-per-task", "256",
            "--run-dir", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 0
    ((spec, env),) = built
    assert made == ["clear"]
    assert env.cursor.segments is spec.schedule and spec.schedule.num_envs == 2


# -- the same guard for CORA's Fisher buffers (EWC, online EWC) and P&C's buffer --------------
@pytest.mark.parametrize("method", ["ewc", "online-ewc", "pnc"])
def test_fisher_buffers_go_to_disk_or_are_refused_with_sizes(method, tmp_path, monkeypatch, caplog):
    from gymnasium import spaces

    from baselines_sb3.cl import make_method, storage

    atari = spaces.Box(0, 255, (84, 84, 4), "uint8")  # 28,224 bytes a frame
    frames = 1_000_000
    monkeypatch.setattr(storage, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 100 * 2**30)  # not this disk's
    on_disk = make_method(method, variant="cora", buffer_frames=frames, disk_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        assert on_disk.plan_storage(20, atari, 6) is True
    # 1e6 x 28,224 observation bytes + 1e6 x 20 bytes of action, log-prob, reward, start
    assert f"{method}: a buffer of 1,000,000 frames needs 26.3 GiB of RAM (26.3 GiB" in caplog.text
    assert "but only 16.0 GiB of memory is free" in caplog.text
    with pytest.raises(storage.ReplayMemoryError, match=r"--set replay_on_disk=true"):
        make_method(method, variant="cora", buffer_frames=frames, storage="ram").plan_storage(
            20, atari, 6
        )
    with pytest.raises(
        storage.ReplayMemoryError, match=r"--set buffer_frames=N\), or pass disk_dir=DIR"
    ):
        make_method(method, variant="cora", buffer_frames=frames).plan_storage(20, atari, 6)
    with pytest.raises(ValueError, match="storage='disk' needs disk_dir"):
        make_method(method, variant="cora", storage="disk")
    small = make_method(method, variant="cora", buffer_frames=100_000, disk_dir=tmp_path)
    assert small.plan_storage(20, atari, 6) is False  # 2.6 GiB: RAM


def test_paper_ewc_on_atari_refuses_before_starting_when_nothing_fits(
    tmp_path, monkeypatch, capsys
):
    from baselines_sb3.cl import storage

    monkeypatch.setattr(storage, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 20 * 2**30)
    run_dir = tmp_path / "ewc-s0"
    argv = ["run", "--suite", "Atari6", "--method", "ewc", "--preset", "paper",
            "--run-dir", str(run_dir)]  # fmt: skip
    assert main(argv) == 1
    err = one_line_error(capsys)
    assert "ewc: a buffer of 1,000,000 frames needs 26.3 GiB of RAM" in err
    assert "do not fit either" in err and "20.0 GiB free" in err and not run_dir.exists()


def test_main_job_keeps_an_ewc_buffer_that_does_not_fit_on_disk(tmp_path, monkeypatch, capsys):
    from baselines_sb3.cl import storage

    monkeypatch.setattr(storage, "available_memory", lambda: 1_000_000)
    run_dir = tmp_path / "ewc"
    assert main(["run", *TINY, "--run-dir", str(run_dir)]) == 0
    assert "ewc: a buffer of" in capsys.readouterr().err
    assert list((run_dir / "replay").glob("task*/unrolls*.npy"))
