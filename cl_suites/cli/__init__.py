"""The ``cl-suites`` command: list suites, show schedules, run sequences, write reports.

It parses (``arguments``), calls the job layer (``commands``, ``run``) and prints
(``output``, ``errors``). Every subcommand is one entry of ``commands.COMMANDS`` (a
:class:`Command`: help line, a function adding its arguments, a function running it).
``main`` turns every error into one line on stderr and an exit code chosen by the error's
class (``EXIT_CODES``, over the ``cl_suites.errors`` hierarchy): 0 success, 1 the command
failed (disk full, locked run directory, an unexpected error), 2 bad input, 130
interrupted (Ctrl-C or SIGTERM; an interrupted ``run`` prints the command that resumes
it). ``--debug`` (or ``CL_SUITES_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys

from cl_suites.cli.arguments import RUN_EPILOG, HelpFormatter
from cl_suites.cli.commands import COMMANDS, Command
from cl_suites.cli.errors import (
    DEBUG_ENV,
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    exit_code,
    quiet_third_party_warnings,
    report_error,
    setup_log_messages,
)

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Command",
    "build_parser",
    "exit_code",
    "main",
    "quiet_third_party_warnings",
]


def version() -> str:
    try:
        return importlib.metadata.version("cl-suites")
    except importlib.metadata.PackageNotFoundError:  # a source checkout
        from cl_suites import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cl-suites",
        description="cl-suites: list suites, show schedules, run sequences, write reports.",
        formatter_class=HelpFormatter,
        epilog=f"errors end in one line; --debug or {DEBUG_ENV}=1 shows the traceback",
    )
    parser.add_argument("--version", action="version", version=f"cl-suites {version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub_parser = sub.add_parser(
            name,
            help=command.help,
            description=command.description or command.help,
            parents=[common],
            formatter_class=HelpFormatter,
            epilog=RUN_EPILOG if name == "run" else None,
        )
        command.add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party_warnings()
    setup_log_messages()
    args = build_parser().parse_args(argv)
    args.argv = argv
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return COMMANDS[args.command].run(args)
    except (Exception, KeyboardInterrupt) as e:
        if debug:
            raise
        return report_error(e)
