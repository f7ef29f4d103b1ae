"""The ``trainspec`` command line (console script ``trainspec = trainspec.conformance.cli:main``).

Subcommands are modules listed in :data:`COMMAND_MODULES`, each defining
``COMMAND: Command`` (see :mod:`trainspec.conformance._cli_common`); adding a subcommand is
adding its module to the table. Exit status: 0 success, 1 failure (for ``verify``: a target
does not conform), 2 a usage error, reported as one line on standard error, 3 an internal
error of ``verify``, 130 interrupted (Ctrl-C: one line, no traceback).
"""

from __future__ import annotations

import importlib
import sys
from typing import Final

import trainspec
from trainspec import ConfigurationError
from trainspec.conformance._cli_common import Command, OneLineArgumentParser, UsageError

__all__ = ["COMMAND_MODULES", "EXIT_INTERRUPTED", "build_parser", "commands", "main"]

EXIT_INTERRUPTED: Final = 130
"""The exit status after Ctrl-C (128 + SIGINT, as shells report it)."""

COMMAND_MODULES: Final[tuple[str, ...]] = (
    "trainspec.conformance._cli_verify",
    "trainspec.conformance._cli_list",
    "trainspec.conformance._cli_demo",
    "trainspec.conformance._cli_typecheck",
)
"""The modules that define the subcommands, in ``--help`` order."""


def commands() -> list[Command]:
    """Every subcommand, in :data:`COMMAND_MODULES` order.

    A module that cannot be imported costs only its own subcommand: it is left out with a
    one-line warning on standard error, so ``trainspec verify`` keeps working.
    """
    found: list[Command] = []
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as error:
            print(
                f"trainspec: warning: subcommand module {name} is broken and left out: "
                f"{type(error).__name__}: {error}",
                file=sys.stderr,
            )
            continue
        command = getattr(module, "COMMAND", None)
        if not isinstance(command, Command):
            raise TypeError(f"{name} must define COMMAND = Command(...)")
        found.append(command)
    return found


def build_parser() -> OneLineArgumentParser:
    """The ``trainspec`` argument parser with every subcommand."""
    import argparse

    parser = OneLineArgumentParser(
        prog="trainspec",
        description="trainspec: the specification, reference implementations and conformance "
        "kit for PyTorch training plugins.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"trainspec {trainspec.__version__} (spec {trainspec.SPEC_VERSION})",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser
    )
    for command in commands():
        child = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(child)
        child.set_defaults(_command=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``trainspec`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    prog = "trainspec"
    try:
        args, extras = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
        command = getattr(args, "_command", None)
        if not isinstance(command, Command):
            if extras:
                parser.error(f"unrecognized arguments: {' '.join(extras)}")
            parser.print_help(sys.stderr)
            return 2
        prog = f"trainspec {command.name}"
        if extras:  # argparse would report these as the top-level parser's ("trainspec: ...")
            raise UsageError(
                f"unrecognized arguments: {' '.join(extras)} (see '{prog} --help')", prog=prog
            )
        return command.run(args)
    except SystemExit as exit_:  # --help and --version exit through argparse
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except UsageError as error:  # an argparse error names the (sub)command it came from
        print(f"{error.prog or prog}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except ConfigurationError as error:
        print(f"{prog}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the commands' finally blocks have stopped their worlds
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
