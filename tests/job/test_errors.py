"""One error hierarchy, and the CLI's exit codes by class (never by message text).

Every error class of the package derives from ``cl_suites.errors.CLSuitesError`` and from
the built-in type it was before the hierarchy (so existing ``except`` clauses work); the
CLI maps classes to exit codes; unknown options are ``UnknownOptionError`` at their
sources, so a ``TypeError`` from a bug is reported as unexpected, not as bad input.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from baselines_sb3.cl.storage import ReplayMemoryError
from cl_suites import cli
from cl_suites.api import make_sequence
from cl_suites.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, main
from cl_suites.core.env_state import EnvStateError, UnsafeEnvStateError
from cl_suites.core.task import SequenceDoneError
from cl_suites.core.workers import EnvWorkerError
from cl_suites.envs.chores.errors import (
    AlfredDataNotFoundError,
    ChoresSetupError,
    DemonstrationReplayError,
    ThorBuildNotFoundError,
)
from cl_suites.errors import (
    BadValueError,
    CLIError,
    CLSuitesError,
    ConfigError,
    InputError,
    MethodPluginError,
    MissingSimulatorError,
    PluginHookError,
    RunDirConflictError,
    RunDirError,
    RunDirExistsError,
    RunFileError,
    RunInterrupted,
    SimulatorSetupError,
    UnknownOptionError,
    UnknownSuiteError,
    require,
)
from cl_suites.job.main_job import resolve_job
from cl_suites.job.tracking import TrackingError
from cl_suites.meal.layouts import LayoutGenerationError
from cl_suites.metrics.runs import MetricsInputError
from cl_suites.rundir.checkpoint_files import CheckpointError
from cl_suites.rundir.fsutil import RunDiskError
from cl_suites.rundir.runlock import RunDirLockedError
from cl_suites.rundir.runlog import CorruptRunLogError
from cl_suites.sweep.grid import SweepError
from tests.helpers import REPO

BUILTINS: dict[type[Exception], tuple[type[BaseException], ...]] = {
    CLSuitesError: (Exception,),
    InputError: (ValueError,),
    ConfigError: (ValueError,),
    UnknownOptionError: (ValueError, TypeError),
    BadValueError: (ValueError,),
    EnvWorkerError: (RuntimeError,),
    UnknownSuiteError: (ValueError, KeyError),
    SweepError: (ValueError,),
    CLIError: (ValueError,),
    MethodPluginError: (ValueError,),
    RunDirError: (Exception,),
    RunDirConflictError: (ValueError,),
    RunDirExistsError: (ValueError, FileExistsError),
    RunDirLockedError: (RuntimeError,),
    RunFileError: (ValueError,),
    CheckpointError: (ValueError,),
    CorruptRunLogError: (ValueError,),
    UnsafeEnvStateError: (ValueError,),
    MetricsInputError: (ValueError,),
    MissingSimulatorError: (ImportError,),
    SimulatorSetupError: (FileNotFoundError,),
    ChoresSetupError: (FileNotFoundError,),
    ThorBuildNotFoundError: (FileNotFoundError,),
    AlfredDataNotFoundError: (FileNotFoundError,),
    DemonstrationReplayError: (FileNotFoundError,),
    RunDiskError: (RuntimeError,),
    EnvStateError: (Exception,),
    SequenceDoneError: (RuntimeError,),
    LayoutGenerationError: (RuntimeError,),
    ReplayMemoryError: (MemoryError,),
    TrackingError: (RuntimeError,),
    PluginHookError: (RuntimeError,),
    RunInterrupted: (Exception,),
}
"""Every error class of the package and the built-in types it was (and still is)."""


@pytest.mark.parametrize("cls", list(BUILTINS), ids=lambda c: c.__name__)
def test_every_error_class_is_a_cl_suites_error_and_its_builtin(cls):
    assert issubclass(cls, CLSuitesError)
    for builtin in BUILTINS[cls]:
        assert issubclass(cls, builtin), f"{cls.__name__} is no longer a {builtin.__name__}"


def _package_modules() -> list[str]:
    root = REPO
    names = []
    for package in ("cl_suites", "baselines_sb3", "baselines_jax"):
        for info in pkgutil.walk_packages([str(root / package)], prefix=f"{package}."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return names


def test_no_error_class_of_the_package_is_outside_the_hierarchy():
    """Every exception class defined anywhere in the package (found by importing every
    module) is a ``CLSuitesError`` and listed in ``BUILTINS``."""
    found = set()
    for name in _package_modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # a simulator extra that is not installed
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                obj.__module__ == name
                and issubclass(obj, BaseException)
                and not issubclass(obj, Warning)
            ):
                found.add(obj)
    assert found, "no error classes found: the module walk is broken"
    outside = sorted(c.__qualname__ for c in found if not issubclass(c, CLSuitesError))
    assert outside == []
    unlisted = sorted(c.__qualname__ for c in found if c not in BUILTINS)
    assert unlisted == []


def test_unknown_suite_error_prints_its_message_not_a_key_repr():
    assert str(UnknownSuiteError("unknown suite 'X'")) == "unknown suite 'X'"


def test_require_raises_missing_simulator_error_naming_the_extra():
    with pytest.raises(MissingSimulatorError, match=r'pip install "cl-suites\[nope\]"'):
        require("cl_suites_no_such_module", extra="nope")


# -- the CLI's exit code per class ------------------------------------------------------------
EXIT_CASES: list[tuple[BaseException, int, str]] = [
    (KeyboardInterrupt(), EXIT_INTERRUPTED, "interrupted"),
    (RunInterrupted("interrupted; resume with X"), EXIT_INTERRUPTED, "resume with X"),
    (ConfigError("bad config"), EXIT_BAD_INPUT, "error: bad config"),
    (UnknownOptionError("no option 'x'"), EXIT_BAD_INPUT, "error: no option 'x'"),
    (BadValueError("lam must be > 0"), EXIT_BAD_INPUT, "error: lam must be > 0"),
    (UnknownSuiteError("unknown suite 'X'"), EXIT_BAD_INPUT, "error: unknown suite 'X'"),
    (SweepError("bad grid"), EXIT_BAD_INPUT, "error: bad grid"),
    (CLIError("bad flag"), EXIT_BAD_INPUT, "error: bad flag"),
    (RunDirConflictError("holds a run"), EXIT_BAD_INPUT, "error: holds a run"),
    (RunDirExistsError("has a run"), EXIT_BAD_INPUT, "error: has a run"),
    (CheckpointError("corrupt ckpt"), EXIT_BAD_INPUT, "error: corrupt ckpt"),
    (CorruptRunLogError("bad eval.csv"), EXIT_BAD_INPUT, "error: bad eval.csv"),
    (UnsafeEnvStateError("crafted"), EXIT_BAD_INPUT, "error: crafted"),
    (MetricsInputError("no eval rows"), EXIT_BAD_INPUT, "error: no eval rows"),
    (MissingSimulatorError("install x"), EXIT_BAD_INPUT, "error: install x"),
    (ThorBuildNotFoundError("no THOR build"), EXIT_BAD_INPUT, "error: no THOR build"),
    (RunDirLockedError(Path("r"), {"pid": 7}), EXIT_FAILED, "error: r is in use"),
    (RunDiskError("r/eval.csv", "disk full"), EXIT_FAILED, "error: disk full at r/eval.csv"),
    (EnvStateError("unpicklable"), EXIT_FAILED, "error: unpicklable"),
    (SequenceDoneError("stepped after the end"), EXIT_FAILED, "error: stepped after"),
    (LayoutGenerationError("no kitchen"), EXIT_FAILED, "error: no kitchen"),
    (ReplayMemoryError("buffer fits nowhere"), EXIT_FAILED, "error: buffer fits nowhere"),
    (TrackingError("wandb login"), EXIT_FAILED, "error: wandb login"),
    (CLSuitesError("failed"), EXIT_FAILED, "error: failed"),
    # built-ins: library code's bad values, the command failing, and bugs
    (ValueError("bad value"), EXIT_BAD_INPUT, "error: bad value"),
    (OSError("io"), EXIT_FAILED, "error: io"),
    (MemoryError(), EXIT_FAILED, "out of memory (MemoryError)"),
    (TypeError("f() got an unexpected keyword argument 'x'"), EXIT_FAILED, "unexpected TypeError"),
    (AttributeError("no attr"), EXIT_FAILED, "unexpected AttributeError"),
]


@pytest.mark.parametrize(
    ("error", "code", "text"), EXIT_CASES, ids=[type(e).__name__ for e, _, _ in EXIT_CASES]
)
def test_cli_exit_code_by_class(monkeypatch, capsys, error, code, text):
    def fail(args):
        raise error

    monkeypatch.setitem(cli.COMMANDS, "list", cli.Command("", lambda p: None, fail))
    assert main(["list"]) == code
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1
    assert ("unexpected" in err) == (text.startswith("unexpected"))


def test_exit_codes_do_not_read_messages():
    """Two errors of one class with different texts exit alike, and the text that once
    made a ``TypeError`` bad input no longer does."""
    assert cli.exit_code(TypeError("unexpected keyword argument 'x'")) is None
    assert cli.exit_code(TypeError("other")) is None
    assert cli.exit_code(UnknownOptionError("a")) == cli.exit_code(UnknownOptionError("b"))


# -- unknown options at their sources -----------------------------------------------------------
RESOLVE = dict(method="ft", learner=None, preset="small", num_envs=None)
RUN_DIAGNOSTIC = ["run", "--suite", "Diagnostic", "--method", "ft", "--preset", "small"]


@pytest.mark.parametrize(
    ("suite", "overrides"),
    [
        ("Diagnostic", {"no_such_option": 1}),  # the suite builder's names
        ("Diagnostic", {"rms_prop_alpha": 0.9}),  # vtrace's, given to a ppo run
        ("MEAL-2", {"no_such_option": 1}),  # MEAL's builder, learner ppo-jax
        ("MEAL-2", {"clip_range_vf": 0.2}),  # torch ppo's option, given to ppo-jax
    ],
)
def test_unknown_option_raises_unknown_option_error_in_the_library(suite, overrides):
    with pytest.raises(UnknownOptionError) as info:
        resolve_job(suite=suite, overrides=overrides, **RESOLVE)
    assert repr(next(iter(overrides))) in str(info.value)


def test_unknown_suite_option_and_ft_hyperparameter_are_unknown_option_errors():
    with pytest.raises(UnknownOptionError, match="has no option 'bogus'"):
        make_sequence("Diagnostic", bogus=1)
    from baselines_sb3.cl import make_method

    with pytest.raises(UnknownOptionError, match="'ft' does not support option"):
        make_method("ft", lam=1.0)


def test_unknown_option_exits_2_from_the_cli(capsys):
    code = main([*RUN_DIAGNOSTIC, "--set", "no_such_option=1", "--print-config"])
    assert code == EXIT_BAD_INPUT
    assert "unknown option 'no_such_option'" in capsys.readouterr().err


def test_type_error_from_a_bug_exits_as_unexpected(monkeypatch, tmp_path, capsys):
    """A ``TypeError`` deep inside the run (a bug, not input) exits 1 as unexpected, even
    with the "unexpected keyword argument" text the CLI once matched as bad input."""
    import cl_suites.job.main_job

    def helper(steps):
        return steps

    def broken_run(specs, seeds, run_dirs, resume):
        return helper(stpes=seeds[0])  # the bug

    monkeypatch.setattr(cl_suites.job.main_job, "run_resolved", broken_run)
    code = main([*RUN_DIAGNOSTIC, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    assert "unexpected TypeError" in err and "unexpected keyword argument 'stpes'" in err
