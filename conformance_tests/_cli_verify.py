"""``trainspec verify``: run the conformance kit from the command line.

::

    trainspec verify KIND TARGET [options]   one implementation (TARGET is module:attribute)
    trainspec verify KIND                    the built-in reference implementations of KIND
    trainspec verify                         every built-in reference implementation

Exit status: 0 every target conforms, 1 a conformance failure, 2 a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import threading
from typing import TYPE_CHECKING, Final

from trainspec import ConfigurationError
from trainspec.conformance._cli_common import (
    Command,
    UsageError,
    make_console,
    quote_argument,
)
from trainspec.conformance.core import KINDS, LAYERS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from trainspec.conformance.builtin_targets import BuiltinTarget
    from trainspec.conformance.core import Target
    from trainspec.conformance.distributed import World
    from trainspec.conformance.report import Report, TargetReport

__all__ = ["COMMAND"]

_DESCRIPTION = """\
Verify a plugin against its protocol: the structure layer (members and signatures), then the
behaviour checks of its kind, with a table on standard output and optional JSON and JUnit
reports.

TARGET is 'package.module:attribute' naming a zero-argument factory (usually the class) that
returns a fresh instance, or a trainspec.conformance.Target object (which carries its own
capabilities, expected failures and options; the options below add to them).

Without TARGET, verifies the built-in reference implementations (of KIND, or of every kind);
one whose module cannot be imported on this machine is reported as skipped.

Exit status: 0 all conform, 1 a conformance failure, 2 a usage error.
"""


def timeout_seconds(text: str) -> float | None:
    """``--timeout``'s value: a finite number of seconds in ``(0, threading.TIMEOUT_MAX]``,
    or ``0`` for no watchdog (``None``). ``nan``, ``inf``, negative and larger values raise
    ``argparse.ArgumentTypeError`` (argparse turns it into a usage error naming the option).
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value == 0:
        return None
    if not math.isfinite(value) or not 0 < value <= threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds in (0, {threading.TIMEOUT_MAX:.0f}], or 0 "
            f"to disable the watchdog; got {quote_argument(text)}"
        )
    return value


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        nargs="?",
        metavar="KIND",
        help=f"the protocol the target implements: {', '.join(KINDS)}",
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="module:attribute of a factory or a trainspec.conformance.Target",
    )
    parser.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="NAME",
        help="declare an optional capability of the target (repeatable; unknown names are "
        "an error that lists the kind's capabilities)",
    )
    parser.add_argument(
        "--xfail",
        action="append",
        default=[],
        metavar="ID=REASON",
        help="expect the clause or check ID to fail, for REASON (repeatable); a declared "
        "failure that passes fails the run",
    )
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="ID[,ID...]",
        help="run only the checks with these clause IDs or check names (repeatable); the "
        "structure layer always runs",
    )
    parser.add_argument(
        "--layer",
        action="append",
        default=[],
        choices=[layer for layer in LAYERS if layer != "structure"],
        help="run only these layers after the structure layer (repeatable; default: all)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a kind-specific target option, passed as a string (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=300.0,
        metavar="SECONDS",
        help="fail a check that runs longer than this (default 300; 0 disables the watchdog)",
    )
    parser.add_argument(
        "--world-size",
        type=_world_size,
        default=None,
        metavar="N",
        help="run the collective or strategy TARGET on N local ranks (gloo on CPU) through "
        "the distributed harness, with the distributed and end-to-end checks",
    )
    parser.add_argument("--json", metavar="PATH", help="write the JSON report to PATH")
    parser.add_argument("--junit", metavar="PATH", help="write a JUnit XML report to PATH")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="list only results that fail the run, then the summary",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every result even when verifying several targets",
    )


def _world_size(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 4 or int(text) < 2:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of ranks from 2 to 9999; got {quote_argument(text)}"
        )
    return int(text)


def _pairs(values: Sequence[str], flag: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key.strip() or not rest.strip():
            raise UsageError(f"{flag} takes {what}; got {quote_argument(value)}")
        pairs[key.strip()] = rest.strip()
    return pairs


def _run(args: argparse.Namespace) -> int:
    # Imported here: building the parser for --help must not import the runner's dependencies.
    from trainspec.conformance.report import Report
    from trainspec.conformance.runner import TargetSession, load_target

    report: Report

    kind: str | None = args.kind
    if kind is not None and kind not in KINDS:
        raise UsageError(f"unknown kind {quote_argument(kind)}; valid kinds: {', '.join(KINDS)}")
    xfails = _pairs(args.xfail, "--xfail", "ID=REASON (a reason is required)")
    options: dict[str, object] = dict(_pairs(args.option, "--option", "KEY=VALUE"))
    select = [s.strip() for value in args.select for s in value.split(",") if s.strip()]
    layers = ["structure", *args.layer] if args.layer else None
    timeout: float | None = args.timeout  # validated by timeout_seconds; None: no watchdog
    console = make_console()

    if args.target is None:
        given = [
            flag
            for flag, value in (
                ("--capability", args.capability),
                ("--xfail", args.xfail),
                ("--select", args.select),
                ("--option", args.option),
            )
            if value
        ]
        if args.world_size is not None:
            given.append("--world-size")
        if given:
            raise UsageError(
                f"{', '.join(given)} need a TARGET (they describe one implementation); "
                "usage: trainspec verify KIND TARGET [options]"
            )
        report = _run_builtin(kind, layers, timeout, quiet=args.quiet)
        if args.verbose:
            report.render(console)
        else:
            report.render_matrix(console)
    else:
        assert kind is not None  # argparse fills KIND before TARGET
        if os.getcwd() not in sys.path:  # `trainspec` is a script: find the user's modules
            sys.path.insert(0, os.getcwd())
        target = load_target(
            kind,
            args.target,
            capabilities=args.capability,
            expected_failures=xfails,
            options=options,
        )
        if args.world_size is not None:
            report = _run_distributed(target, args.world_size, layers, select, timeout)
        else:
            session = TargetSession(target, layers=layers, select=select or None, timeout_s=timeout)
            if not args.quiet:
                console.print(f"[dim]verifying {kind} {session.name} ...[/dim]")
            report = Report(targets=(session.report(),))
        report.render(console, quiet=args.quiet)
    _write_outputs(report, args.json, args.junit)
    return 0 if report.ok else 1


def _run_distributed(
    target: Target[object],
    world_size: int,
    layers: list[str] | None,
    select: list[str],
    timeout: float | None,
    world: World | None = None,
) -> Report:
    from trainspec.conformance.distributed import DISTRIBUTED_KINDS, verify_distributed

    if target.kind not in DISTRIBUTED_KINDS:
        raise UsageError(
            f"--world-size runs kinds {', '.join(DISTRIBUTED_KINDS)} on several ranks; "
            f"{target.kind} is verified in one process (drop --world-size)"
        )
    return verify_distributed(
        target,
        world_size=world_size,
        layers=[layer for layer in layers if layer != "structure"] if layers else None,
        select=select or None,
        timeout_s=timeout if timeout is not None else DEFAULT_DISTRIBUTED_TIMEOUT_S,
        world=world,
    )


DEFAULT_DISTRIBUTED_TIMEOUT_S: Final = 300.0
"""A check's limit on the ranks when ``--timeout 0`` disabled the in-process watchdog: the
harness never waits without a limit."""


def _run_builtin(
    kind: str | None, layers: list[str] | None, timeout: float | None, *, quiet: bool
) -> Report:
    from trainspec.conformance.builtin_targets import builtin_targets
    from trainspec.conformance.report import Report

    console = make_console()
    targets: list[TargetReport] = []
    entries = builtin_targets(kind)
    if not entries:
        raise UsageError(
            f"there is no built-in {kind} target to verify; give one: trainspec verify "
            f"{kind} package.module:Factory"
        )
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    worlds: dict[int, World] = {}
    progress = Progress(
        TextColumn("[bold]verify[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet,
    )
    try:
        with progress:
            task = progress.add_task("", total=len(entries))
            for entry in entries:
                progress.update(task, description=f"{entry.kind}: {entry.name}")
                targets.extend(_run_entry(entry, layers, timeout, worlds))
                progress.advance(task)
    finally:
        for world in worlds.values():
            world.close()
    return Report(targets=tuple(targets))


def _run_entry(
    entry: BuiltinTarget,
    layers: list[str] | None,
    timeout: float | None,
    worlds: dict[int, World],
) -> list[TargetReport]:
    from trainspec.conformance.report import TargetReport
    from trainspec.conformance.runner import TargetSession

    try:
        target = entry.load()
    except ConfigurationError as error:
        return [TargetReport(kind=entry.kind, name=entry.name, skipped=_one_line(str(error)))]
    if entry.world_size is not None:
        from trainspec.conformance.distributed import World

        world = worlds.get(entry.world_size)
        if world is None:
            world = worlds[entry.world_size] = World(world_size=entry.world_size)
        report = _run_distributed(target, entry.world_size, layers, [], timeout, world)
        return [dataclasses.replace(t, name=entry.name) for t in report.targets]
    try:
        session = TargetSession(target, layers=layers, timeout_s=timeout)
    except ConfigurationError as error:  # a bad row in the table: a failure, not usage
        return [
            TargetReport(
                kind=entry.kind,
                name=entry.name,
                problems=(f"built-in target is misconfigured: {error}",),
            )
        ]
    return [session.report()]


def _write_outputs(report: Report, json_path: str | None, junit_path: str | None) -> None:
    for path, write in ((json_path, report.write_json), (junit_path, report.write_junit)):
        if not path:
            continue
        try:
            write(path)
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
            raise UsageError(
                f"cannot write the report to {quote_argument(path)}: {error}; give a path "
                "to a file in a writable directory"
            ) from error


def _one_line(text: str) -> str:
    return " ".join(text.split())


COMMAND = Command(
    name="verify",
    help="verify a plugin (or the built-in reference implementations) against the spec",
    description=_DESCRIPTION,
    configure=_configure,
    run=_run,
)
