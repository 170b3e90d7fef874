"""The errors cl-suites raises, under one root, and clear errors for missing simulators.

Every error of the package derives from :class:`CLSuitesError`; each subclass also
derives from the built-in type code caught before the hierarchy existed (``ValueError``,
``TypeError``, ``KeyError``, ``ImportError``, ``FileNotFoundError``, ``RuntimeError``,
``MemoryError``), so existing ``except`` clauses keep working. The CLI maps these
classes, never message text, to its exit codes (``cl_suites.cli.EXIT_CODES``).

The tree (classes defined in other modules are re-parented onto the categories here)::

    CLSuitesError                               expected failure (CLI exit 1)
    +-- InputError (ValueError)                 input the user can fix (CLI exit 2)
    |   +-- ConfigError                         a run configuration that cannot be used
    |   |   +-- UnknownOptionError (TypeError)  an option name nothing accepts
    |   |   +-- BadValueError                   an option value out of type or range
    |   |   +-- UnknownSuiteError (KeyError)    a suite id not in the catalog
    |   |   +-- SweepError                      cl_suites.sweep.grid: bad sweep input
    |   |   +-- CLIError                        bad command-line input (cl_suites.cli)
    |   +-- RunDirConflictError (RunDirError)   a run directory the command cannot use
    |   |   +-- RunDirExistsError (FileExistsError)  already holds a run (RunLog)
    |   +-- RunFileError                        run files that cannot be used:
    |   |   +-- CheckpointError                 cl_suites.rundir.checkpoint_files
    |   |   +-- CorruptRunLogError              cl_suites.rundir.runlog
    |   |   +-- UnsafeEnvStateError             cl_suites.core.env_state
    |   +-- MetricsInputError                   cl_suites.metrics.runs
    +-- MissingSimulatorError (ImportError)     a simulator package not installed (exit 2)
    +-- SimulatorSetupError (FileNotFoundError) a simulator's build or data missing (exit 2)
    |   +-- ChoresSetupError (and its three)    cl_suites.envs.chores.errors
    +-- RunDirError                             run-directory conflicts:
    |   +-- RunDirLockedError (RuntimeError)    cl_suites.rundir.runlock (exit 1)
    +-- RunDiskError (RuntimeError)             cl_suites.rundir.fsutil: disk full (exit 1)
    +-- EnvStateError                           cl_suites.core.env_state
    +-- SequenceDoneError (RuntimeError)        cl_suites.core.task
    +-- LayoutGenerationError (RuntimeError)    cl_suites.meal.layouts
    +-- ReplayMemoryError (MemoryError)         baselines_sb3.cl.storage
    +-- TrackingError (RuntimeError)            cl_suites.job.tracking
    +-- PluginHookError (RuntimeError)          an own CL method's hook raised (exit 1)
    +-- RunInterrupted                          cl_suites.cli: Ctrl-C / SIGTERM (exit 130)

>>> from cl_suites.errors import CLSuitesError, UnknownOptionError
>>> issubclass(UnknownOptionError, (CLSuitesError, ValueError, TypeError))
True
"""

from __future__ import annotations

import importlib
from types import ModuleType


class CLSuitesError(Exception):
    """Root of every error cl-suites raises on purpose (the CLI: one line, exit 1, unless
    a subclass says otherwise)."""


class InputError(CLSuitesError, ValueError):
    """Input the user can fix (arguments, config and sweep files, run directories, run
    files); the message names the bad value and the valid ones. CLI exit 2."""


class ConfigError(InputError):
    """A run configuration that cannot be used (the message names the value and why)."""


class UnknownOptionError(ConfigError, TypeError):
    """An option name no part of the run accepts (a ``TypeError`` too: a keyword the
    constructors do not take; the message lists the valid names)."""


class BadValueError(ConfigError):
    """An option value outside its declared type or range (the message names both)."""


class UnknownSuiteError(ConfigError, KeyError):
    """A suite id that is not in the catalog (a ``KeyError`` too, as ``find_suite``
    raised before; the message lists the valid ids)."""

    __str__ = BaseException.__str__  # the message as written, not KeyError's repr


class MethodPluginError(ConfigError):
    """An own CL method (``--method package.module:Class`` or a ``cl_suites.methods``
    entry point) that cannot be used: it does not import, is not a ``ContinualMethod``,
    or declares an option badly (the message names the plug-in and what to fix)."""


class CLIError(ConfigError):
    """Bad command-line input found by the CLI itself (printed as one line, exit 2)."""


class RunDirError(CLSuitesError):
    """A run directory the command cannot use as it is (conflicts between runs)."""


class RunDirConflictError(RunDirError, CLIError):
    """A ``--run-dir`` that does not fit the command: a run is already there (without
    ``--resume``), nothing to resume, a file, or a non-empty foreign directory. Exit 2."""


class RunDirExistsError(RunDirConflictError, FileExistsError):
    """A run directory that already holds a run, opened to start a new one (a
    ``FileExistsError`` too, as ``RunLog`` raised before)."""


class RunFileError(InputError):
    """Files of a run directory (checkpoint, logs, saved env state) that cannot be used."""


class MissingSimulatorError(CLSuitesError, ImportError):
    """A simulator (or other optional) package that is not installed; the message names
    the ``pip install "cl-suites[extra]"`` that provides it. CLI exit 2."""


class SimulatorSetupError(CLSuitesError, FileNotFoundError):
    """A simulator that is installed but misses what it needs at run time (a build, data
    files); the message says how to fix it. CLI exit 2."""


class RunInterrupted(CLSuitesError):
    """A ``run`` stopped by Ctrl-C / SIGTERM (the message says how to resume it). CLI
    exit 130."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingSimulatorError` (an ``ImportError``)
    naming the cl-suites extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingSimulatorError(
            f"{module!r} is not installed (or failed to import: {e}); "
            f'install it with: pip install "cl-suites[{extra}]"'
        ) from e


def silence_legacy_gym_banner() -> None:
    """Import the legacy ``gym`` package (if installed) with its stderr banner suppressed.

    procgen2 depends on old ``gym``, and stable-baselines3 imports it when present; gym
    then prints an "unmaintained" notice on every start. cl-suites only uses gymnasium.
    """
    import contextlib
    import importlib.util
    import io
    import sys

    if "gym" in sys.modules or importlib.util.find_spec("gym") is None:
        return
    with contextlib.redirect_stderr(io.StringIO()):
        importlib.import_module("gym")


class PluginHookError(CLSuitesError, RuntimeError):
    """An own CL method's hook raised during a run: the message names the plug-in, its
    class, the hook and the exception (the job adds how to resume). CLI exit 1.

    Attributes:
        plugin: the method's name (``package.module:Class`` or its entry point).
        hook: the hook that raised (``on_task_switch``, ``penalty``, ...).
    """

    def __init__(self, message: str, plugin: str = "", hook: str = ""):
        super().__init__(message)
        self.plugin, self.hook = plugin, hook

    def with_run_dir(self, run_dir: object) -> PluginHookError:
        """The same error with how to resume the run in ``run_dir`` once it is fixed."""
        return PluginHookError(
            f"{self}; fix it and resume with `cl-suites run --resume --run-dir {run_dir}`",
            self.plugin,
            self.hook,
        )
