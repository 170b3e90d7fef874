"""The command line's arguments: their types, the flags of every subcommand and the names
they offer (read from ``cl_suites.declarations``, so that parsing and ``--help`` import no
learner family)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cl_suites.config import (
    PRECEDENCE,
    RUN_DEFAULTS,
    ConfigError,
    check_num_envs,
    check_seed,
)
from cl_suites.core.vector import VECTORIZATION_MODES
from cl_suites.declarations import CL_METHODS, RANDOM_METHOD
from cl_suites.job.presets import PRESETS
from cl_suites.remedies import REMEDIES
from cl_suites.suites import COMMON_KWARGS

METHOD_HELP = (
    f"{', '.join((RANDOM_METHOD, *CL_METHODS))}; a plasticity remedy "
    f"({', '.join(REMEDIES)}), alone or on a regulariser as BASE+REMEDY (ewc+redo); or an "
    "own ContinualMethod as package.module:Class or an installed cl_suites.methods entry point"
)
"""What ``--method`` takes: the built-in names (the random agent and the CL methods of
``cl_suites.declarations``) or an own method (checked when the run is resolved)."""


# -- argument types ------------------------------------------------------------------------
def _argtype(check: Callable[[Any], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return check(text)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


_seed = _argtype(check_seed)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


_num_envs = _argtype(check_num_envs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` for every option that has a default (not for ``None``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


JOB_FLAGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "--tensorboard",
        "tensorboard",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "training scalars (losses, entropy, lr, CL penalty, steps/s) and eval "
            "returns to TensorBoard in RUN_DIR/tb (default: off)",
        },
    ),
    (
        "--wandb",
        "wandb",
        {
            "nargs": "?",
            "const": True,
            "metavar": "PROJECT",
            "help": "the same scalars to Weights & Biases, project PROJECT (default project: "
            "cl-suites); WANDB_MODE=offline logs without a network",
        },
    ),
    (
        "--capture-video",
        "capture_video",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "record evaluation episodes per task and split into RUN_DIR/videos/ "
            "(default: off; cadence: --set video_every=N, length: --set video_length=N)",
        },
    ),
)
"""Job options with their own flag: ``(flag, option key, argparse kwargs)``. Any other job
option is set with ``--set KEY=VALUE``."""


def suite_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The suite overrides the command gave (``--steps-per-task``, ...)."""
    return {k: getattr(args, k) for k in COMMON_KWARGS if getattr(args, k, None) is not None}


def run_arguments(run: argparse.ArgumentParser) -> None:
    d = RUN_DEFAULTS
    what = run.add_argument_group("what to run (also settable in --config / --set)")
    what.add_argument("--suite", help="e.g. Procgen6, CLSuite/Procgen6-v0 or MEAL-20")
    what.add_argument("--method", help=f"CL method (default: {d['method']}): {METHOD_HELP}")
    what.add_argument(
        "--learner",
        help="learner (default: the suite's: vtrace on CORA's suites, ppo-jax, the JAX IPPO, "
        "on MEAL, ppo on Diagnostic; ppo on MEAL is the SB3/torch IPPO)",
    )
    what.add_argument(
        "--preset", choices=PRESETS, help=f"hyperparameter preset (default: {d['preset']})"
    )
    what.add_argument(
        "--seed", type=_seed, help=f"run seed, an integer in [0, 2**32 - 1] (default: {d['seed']})"
    )
    what.add_argument(
        "--seeds",
        nargs="+",
        metavar="SEED",
        help="train these seeds vmapped in one program (MEAL, learner ppo-jax) on one set "
        "of kitchens (layout_seed, default: the first seed's); seed s writes the run "
        "directory RUN_DIR/seed-<s> (default RUN_DIR: runs/<suite>-<method>-seeds)",
    )
    what.add_argument("--run-dir", help="run directory (default: runs/<suite>-<method>-s<seed>)")
    what.add_argument(
        "--num-envs", type=_num_envs, help="parallel sub-envs (default: the preset's)"
    )
    what.add_argument(
        "--vectorization-mode",
        choices=(*VECTORIZATION_MODES, "auto"),
        help="batching of simulators without a native batched backend: one process, a "
        "process per env, --set env_workers=N processes, or auto (default): workers where "
        "the cost model says they pay on this machine's cores and device",
    )
    what.add_argument("--resume", action="store_true", help="continue the run in --run-dir")

    cfg = run.add_argument_group("configuration")
    cfg.add_argument("--config", metavar="FILE", help="a .toml or .yaml file of key = value")
    cfg.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any suite, job, learner or method option (repeatable), e.g. "
        "--set device=cpu --set checkpoint_every=100000 --set learning_rate=3e-4",
    )
    cfg.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration as JSON and exit (nothing is run or written)",
    )

    tracking = run.add_argument_group("tracking")
    for flag, key, kwargs in JOB_FLAGS:
        tracking.add_argument(flag, dest=key, **kwargs)
    add_suite_kwargs(run)


RUN_EPILOG = f"""\
precedence (lowest first): {PRECEDENCE}.

examples:
  cl-suites run --suite Diagnostic --method ewc --preset small
  cl-suites run --config my-run.toml --set learning_rate=3e-4 --tensorboard
  cl-suites run --suite Procgen6 --method clear --learner vtrace --print-config
  cl-suites run --suite Diagnostic --method my_methods:MyMethod --set my_option=2
  cl-suites options --suite Procgen6 --method clear   # every option, its default and doc
  cl-suites run --suite MEAL-2 --method ewc --seeds 0 1 2 3 4   # 5 seeds in one program
  cl-suites run --run-dir runs/Procgen6-clear-s0 --suite Procgen6 --method clear --resume
"""


def options_arguments(options: argparse.ArgumentParser) -> None:
    options.add_argument("--suite", required=True, help="e.g. Procgen6 or MEAL-2")
    options.add_argument("--method", default="ft", help=f"CL method: {METHOD_HELP}")
    options.add_argument("--learner", help="default: the suite's (cl-suites list names them)")
    options.add_argument("--preset", default="paper", choices=PRESETS, help="preset")


def report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "run_dirs",
        nargs="+",
        help="run directories, or directories holding them (a --seeds run, a sweep's runs/)",
    )
    report.add_argument("--out", default="report", help="output directory")
    report.add_argument(
        "--window",
        type=positive_int,
        metavar="N",
        help="CORA's smoothing window in evaluations: final performance averages the last N "
        "(default: the suite's, 20 on CORA's suites, 1 on MEAL; 1: the last evaluation)",
    )
    report.add_argument(
        "--reference-runs",
        nargs="+",
        default=[],
        metavar="DIR",
        help="single-task reference runs (MEAL-1 runs, one per kitchen and seed, or "
        "directories holding them) for MEAL's forward transfer FT",
    )
    report.add_argument(
        "--meal-ci",
        action="store_true",
        help="also give MEAL's mean ± 1.96 SE over seeds (its tables' ±) of every MEAL metric",
    )
    report.add_argument(
        "--meal-forgetting",
        choices=("weighted", "paper", "peak_final"),
        default="weighted",
        help="MEAL's F: weighted (default, its result scripts' Table 2 formula), paper "
        "(eq. 2) or peak_final (its comparison scripts')",
    )
    report.add_argument(
        "--coordination",
        action="store_true",
        help="first compute MEAL's coordination matrix of every MEAL run from the policies it "
        "kept at each task's end (keep_task_policies) into RUN_DIR/coordination_matrix.csv "
        "(cells x episodes of play: minutes on MEAL-20)",
    )
    report.add_argument(
        "--coordination-episodes",
        type=positive_int,
        default=64,
        metavar="N",
        help="envs (one episode each) per cell of the coordination matrix (default 64, MEAL's)",
    )


# -- the parser ----------------------------------------------------------------------------
def add_suite_kwargs(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suite overrides (default: the paper's values)")
    group.add_argument("--steps-per-task", type=int, help="training budget per task, agent steps")
    group.add_argument("--cycles", type=int, help="passes over the task list")
    group.add_argument("--eval-every", type=int, help="evaluation cadence, agent steps")
    group.add_argument("--eval-episodes", type=int, help="episodes per task and split")


def info_arguments(info: argparse.ArgumentParser) -> None:
    info.add_argument("suite", help="e.g. CLSuite/Procgen6-v0, Procgen6 or MEAL-20")
    info.add_argument("--num-envs", type=_num_envs, default=1, help="sub-envs of the schedule")
    add_suite_kwargs(info)
