"""What every ``trainspec`` subcommand shares: the :class:`Command` record and the errors.

A subcommand is a module that defines ``COMMAND: Command`` and is listed in
:data:`trainspec.conformance.cli.COMMAND_MODULES`. Keep those modules light at import time
(the parser imports them all to build ``--help``): import torch and the checks inside ``run``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

__all__ = ["Command", "OneLineArgumentParser", "UsageError", "make_console", "quote_argument"]

_QUOTE_LIMIT = 80


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2, never a traceback.

    ``prog`` is the command the input was given to (``"trainspec verify"``), when the raiser
    knows it better than ``main`` does: an argparse error inside a subcommand's arguments.
    """

    def __init__(self, message: str, *, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


def quote_argument(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """``repr(text)`` for a one-line error message, cut after ``limit`` characters (with the
    full length) so that a huge argument does not flood the terminal (the one value
    describer, :func:`trainspec.reference._messages.describe_value`)."""
    from trainspec.reference._messages import describe_value

    return describe_value(text, limit)


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, how to add its arguments and how to run it.

    ``run`` returns the exit status: 0 success, 1 a conformance (or other) failure; it raises
    :class:`UsageError` (or :class:`~trainspec.ConfigurationError`) for bad input, which
    ``main`` turns into one line on standard error and status 2.
    """

    name: str
    help: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')", prog=self.prog)


def make_console(*, stderr: bool = False) -> Console:
    """A rich Console on standard output (or error); 120 columns when not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else 120
    return Console(file=stream, width=width)
