"""``trainspec typecheck``: static conformance of a class with ``mypy --strict``.

::

    trainspec typecheck my_plugin.io:BucketIO                       protocols it subclasses
    trainspec typecheck my_plugin.io:BucketIO --protocol CheckpointIO   a structural class

The logic is :func:`trainspec.conformance.typecheck.typecheck`; this module prints its
mismatches as a table (protocol member, spec clauses, expected, got).

Exit status: 0 the class satisfies every protocol, 1 a mismatch, 2 a usage error (a target
that cannot be imported or is not a class, an unknown protocol, no protocol claimed, mypy not
installed or unable to see the module).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Final

from trainspec.conformance._cli_common import Command, make_console

if TYPE_CHECKING:
    import argparse

    from trainspec.conformance.typecheck import TypecheckResult

__all__ = ["COMMAND", "add_arguments", "run"]

_PROG: Final = "trainspec typecheck"

_DESCRIPTION = """\
Check with mypy --strict that a class satisfies the trainspec protocols it claims: those it
subclasses, plus those named with --protocol (for a class that satisfies a protocol
structurally, without subclassing it). Each mismatch names the protocol member, the spec
clauses that govern it, and the expected and actual types.

TARGET is 'package.module:Class'; the current directory is importable. mypy must be installed
(a development dependency: pip install mypy). The first run analyses torch's stubs and takes
tens of seconds; mypy's cache (--cache-dir) makes later runs take a few.

Exit status: 0 conforms, 1 a mismatch, 2 a usage error.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``typecheck``'s arguments to ``parser``."""
    parser.add_argument("target", metavar="TARGET", help="module:Class to check")
    parser.add_argument(
        "--protocol",
        action="append",
        default=[],
        metavar="NAME",
        help="also check this protocol (repeatable): a trainspec protocol name such as "
        "CheckpointIO, or a kind such as checkpoint_io",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="PATH",
        help="mypy's cache directory (default: ~/.cache/trainspec/mypy-<python>)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the generated module and mypy's own report",
    )


def run(args: argparse.Namespace) -> int:
    """Type-check the target; 0 clean, 1 mismatches, 2 (one line on standard error) when the
    check cannot run."""
    from trainspec.conformance.runner import load_object
    from trainspec.conformance.typecheck import protocol_by_name, typecheck
    from trainspec.errors import ConfigurationError

    if os.getcwd() not in sys.path:  # `trainspec` is a script: find the user's modules
        sys.path.insert(0, os.getcwd())
    try:
        protocols = [protocol_by_name(name) for name in args.protocol]
        cls = load_object(args.target)
        if not isinstance(cls, type):
            raise ConfigurationError(
                f"TARGET {args.target!r} is a {type(cls).__name__}, not a class; name the "
                "class that implements the protocol (module:Class)"
            )
        result = typecheck(cls, protocols, cache_dir=args.cache_dir)
    except ConfigurationError as error:
        print(f"{_PROG}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    _print_result(result, verbose=args.verbose)
    return 0 if result.ok else 1


def _print_result(result: TypecheckResult, *, verbose: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    protocols = ", ".join(f"trainspec.{name}" for name in result.protocols)
    if verbose:
        console.rule("generated module")
        console.print(escape(result.source), highlight=False)
        console.rule(f"mypy {result.mypy_version}")
        console.print(escape(result.mypy_output or "(no output)"), highlight=False)
    if result.ok:
        console.print(
            f"[green]{escape(result.target)} satisfies {protocols}[/green] "
            f"(mypy {result.mypy_version} --strict)",
            highlight=False,
        )
        return
    table = Table(
        title=f"{escape(result.target)} against {protocols} (mypy {result.mypy_version} --strict)",
        title_justify="left",
    )
    table.add_column("member", style="bold", no_wrap=True)
    table.add_column("clauses", max_width=18)
    table.add_column("expected")
    table.add_column("got", style="red")
    for mismatch in result.mismatches:
        got = escape(mismatch.got)
        if mismatch.detail:
            got += f"\n[dim]{escape(mismatch.detail)}[/dim]"
        table.add_row(
            escape(mismatch.subject or "(mypy)"),
            ", ".join(mismatch.clauses) or "-",
            escape(mismatch.expected),
            got,
        )
    console.print(table)
    count = len(result.mismatches)
    console.print(
        f"[red]{count} mismatch{'es' if count != 1 else ''}[/red]: the clauses are in "
        "docs/spec.md; fix the signatures or annotations named above.",
        highlight=False,
    )


COMMAND: Final = Command(
    name="typecheck",
    help="check statically (mypy --strict) that a class satisfies its trainspec protocols",
    description=_DESCRIPTION,
    configure=add_arguments,
    run=run,
)
