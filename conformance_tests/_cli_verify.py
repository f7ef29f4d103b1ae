"""``trainspec verify``: run the conformance kit from the command line.

::

    trainspec verify KIND TARGET [options]   one implementation (TARGET is module:attribute)
    trainspec verify KIND                    the built-in reference implementations of KIND
    trainspec verify                         every built-in reference implementation

Exit status: 0 every target conforms, 1 a conformance failure, 2 a usage error, 3 an
internal error of the kit, 130 interrupted (the table is in ``--help`` and in
docs/plugin-authors/running-the-kit.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import math
import os
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from typing import TYPE_CHECKING, Final, NoReturn, cast

from trainspec import ConfigurationError
from trainspec.conformance._cli_common import (
    Command,
    UsageError,
    make_console,
    quote_argument,
)
from trainspec.conformance.core import KINDS, LAYERS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from trainspec.conformance.builtin_targets import BuiltinTarget
    from trainspec.conformance.core import Kind, Target
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

A user TARGET is loaded and verified in a child process that this command supervises: an
import or factory that exits, interrupts, or kills the process still ends in a verdict
(error, naming the exit status or signal) and in the reports.

Exit status:
  0    every target conforms
  1    a target does not conform (a failed, xpassed or error result, or a run-level
       problem; a target whose import or factory ended the process is an error result)
  2    usage error (one line on standard error; nothing was run)
  3    internal error of the kit (for example the table could not be drawn); the --json
       and --junit reports were written first
  130  interrupted (Ctrl-C); the distributed worlds were stopped
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
    parser.add_argument(
        "--lightning",
        action="store_true",
        help="TARGET makes a Lightning plugin (a class or factory of a lightning.fabric / "
        "lightning.pytorch plugin): verify it through trainspec.bridges.lightning (needs the "
        "'lightning' extra)",
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
        "--show-repro",
        action="store_true",
        help="print each failure's 'To reproduce' snippet (a script that runs as printed) "
        "after the table",
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
    kind: str | None = args.kind
    if kind is not None and kind not in KINDS:
        raise UsageError(f"unknown kind {quote_argument(kind)}; valid kinds: {', '.join(KINDS)}")
    xfails = _pairs(args.xfail, "--xfail", "ID=REASON (a reason is required)")
    options: dict[str, object] = dict(_pairs(args.option, "--option", "KEY=VALUE"))
    select = [s.strip() for value in args.select for s in value.split(",") if s.strip()]
    layers = ["structure", *args.layer] if args.layer else None
    timeout: float | None = args.timeout  # validated by timeout_seconds; None: no watchdog
    json_path = report_path(args.json, "--json")
    junit_path = report_path(args.junit, "--junit")
    console = make_console()
    from rich.text import Text

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
        if args.lightning:
            given.append("--lightning")
        if given:
            raise UsageError(
                f"{', '.join(given)} need a TARGET (they describe one implementation); "
                "usage: trainspec verify KIND TARGET [options]"
            )
        # The built-in matrix runs in this process: its targets are the project's own
        # reference implementations, and its distributed rows share one world per size.
        report = _run_builtin(kind, layers, timeout, quiet=args.quiet)

        def draw() -> None:
            if args.verbose:
                report.render(console, show_repro=args.show_repro)
            else:
                report.render_matrix(console, show_repro=args.show_repro)

    else:
        assert kind is not None  # argparse fills KIND before TARGET
        spec: str = args.target
        world_size: int | None = args.world_size

        def verify_target() -> Report:
            return _verify_target(
                kind,
                spec,
                args.capability,
                xfails,
                options,
                world_size,
                layers,
                select,
                timeout,
                lightning=args.lightning,
            )

        if not args.quiet:
            console.print(Text(f"verifying {kind} {spec} ...", style="dim"))
        report = run_supervised(verify_target, kind=kind, name=spec)

        def draw() -> None:
            report.render(console, quiet=args.quiet, show_repro=args.show_repro)

    # The machine reports first: a table that cannot be drawn must not cost them. A report
    # that cannot be written (a full disk) is raised after the table, which still shows.
    write_error: UsageError | None = None
    try:
        _write_outputs(report, json_path, junit_path)
    except UsageError as error:
        write_error = error
    try:
        draw()
    except Exception as error:
        _fallback_summary(report)
        written = [path for path in (json_path, junit_path) if path and write_error is None]
        print(
            f"trainspec verify: error: the kit could not draw the results table "
            f"({type(error).__name__}: {_one_line(str(error))}); "
            + (
                f"the reports were written to {', '.join(written)}"
                if written
                else "the plain summary above is complete; --json PATH keeps the full report"
            )
            + f" (exit status {EXIT_INTERNAL_ERROR})",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    if write_error is not None:
        raise write_error
    return EXIT_OK if report.ok else EXIT_FAILED


def _verify_target(
    kind: str,
    spec: str,
    capabilities: Sequence[str],
    xfails: dict[str, str],
    options: dict[str, object],
    world_size: int | None,
    layers: list[str] | None,
    select: list[str],
    timeout: float | None,
    *,
    lightning: bool = False,
) -> Report:
    """Load and verify one user target (in the supervised process).

    ``lightning``: the target makes a Lightning plugin; it is wrapped by
    :func:`trainspec.bridges.lightning.targets.lightning_target`.
    """
    # Imported here: building the parser for --help must not import the runner's dependencies.
    from trainspec.conformance.report import Report
    from trainspec.conformance.runner import TargetSession, load_target

    if os.getcwd() not in sys.path:  # `trainspec` is a script: find the user's modules
        sys.path.insert(0, os.getcwd())
    try:
        if lightning:
            target = _load_lightning_target(kind, spec, capabilities, xfails, options)
        else:
            target = load_target(
                kind,
                spec,
                capabilities=capabilities,
                expected_failures=xfails,
                options=options,
            )
    except (ConfigurationError, UsageError):
        raise
    except BaseException as error:  # SystemExit, KeyboardInterrupt from the module's import
        return crash_report(
            kind,
            spec,
            f"importing the target raised {_describe_exception(error)}; a plugin module must "
            "not exit or interrupt the process when it is imported",
            traceback.format_exc(),
        )
    if world_size is not None:
        return _run_distributed(target, world_size, layers, select, timeout)
    session = TargetSession(target, layers=layers, select=select or None, timeout_s=timeout)
    return Report(targets=(session.report(),))


def _load_lightning_target(
    kind: str,
    spec: str,
    capabilities: Sequence[str],
    xfails: dict[str, str],
    options: dict[str, object],
) -> Target[object]:
    """The Lightning plugin factory ``spec`` as a trainspec target, through the bridge."""
    from trainspec.conformance.runner import load_object

    try:
        from trainspec.bridges.lightning.targets import lightning_target
    except ImportError as error:
        raise UsageError(
            f"--lightning needs Lightning installed (pip install 'trainspec[lightning]'): "
            f"{_describe_exception(error)}"
        ) from error
    factory = load_object(spec)
    if not callable(factory):
        raise UsageError(
            f"--lightning: {quote_argument(spec)} must be a class or a zero-argument factory "
            f"returning a Lightning plugin; got {type(factory).__name__}"
        )
    return lightning_target(
        cast("Kind", kind),
        cast("Callable[[], object]", factory),
        name=f"{spec} (Lightning, bridged)",
        capabilities=capabilities,
        expected_failures=xfails,
        options=options,
    )


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
    from rich.markup import escape
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
                progress.update(task, description=escape(f"{entry.kind}: {entry.name}"))
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


def report_path(value: str | None, flag: str) -> str | None:
    """A ``--json``/``--junit`` path, checked before anything runs.

    ``None`` when the option was not given. An empty path, or a path at which something other
    than a regular file exists (a FIFO, a device, a directory, a socket), is a
    :class:`UsageError` naming the path and what is there: writing to a FIFO without a reader
    would hang, and writing to a device would not keep a report.
    """
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{flag} needs a file path; got {quote_argument(value)}")
    if "\0" in value:
        raise UsageError(f"{flag} path {quote_argument(value)} contains a NUL byte")
    try:
        mode = os.stat(value).st_mode
    except FileNotFoundError:
        return value
    except OSError as error:
        raise UsageError(
            f"cannot use {quote_argument(value)} for {flag}: {error.strerror or error}"
        ) from error
    if not stat.S_ISREG(mode):
        raise UsageError(
            f"{flag} {quote_argument(value)} is {_file_type(mode)}, not a regular file; give "
            "the path of a (new or existing) regular file"
        )
    return value


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


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


def _fallback_summary(report: Report) -> None:
    """The verdicts in plain text, for when the rich table cannot be drawn."""
    try:
        for target in report.targets:
            for result in target.results:
                if result.status in ("failed", "xpassed", "error"):
                    print(f"{target.name}: {result.clause} {result.check}: {result.status}")
            for problem in target.problems:
                print(f"{target.name}: problem: {_one_line(problem)}")
        print(report.summary_line())
    except Exception:  # the one-line error below still says what happened
        pass


# -- supervision: a user target's import and factory cannot end the run without a verdict ----


EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERNAL_ERROR: Final = 3
EXIT_INTERRUPTED: Final = 130
_STOP_WAIT_S: Final = 30.0
"""How long an interrupted run waits for the supervised process to clean up (its worlds
stop their ranks) before killing its process group; a second Ctrl-C stops waiting."""
_TAIL_CHARS: Final = 4000


def _describe_exception(error: BaseException) -> str:
    text = _one_line(str(error))
    return f"{type(error).__name__}({text!r})" if text else type(error).__name__


def crash_report(kind: str, name: str, cause: str, detail: str = "") -> Report:
    """A report of one target whose verification ended without verdicts: one ``error`` result
    (``run:process``) whose message says why."""
    from trainspec.conformance.report import CheckResult, Report, TargetReport

    result = CheckResult(
        check="run:process",
        clause=_clause_prefix(kind),
        layer="structure",
        status="error",
        message=cause,
        traceback=detail,
    )
    return Report(targets=(TargetReport(kind=kind, name=name, results=(result,)),))


def _clause_prefix(kind: str) -> str:
    try:
        from trainspec.conformance.structure import KIND_PROTOCOLS, protocol_clause_prefix

        return protocol_clause_prefix(KIND_PROTOCOLS[kind])
    except Exception:  # the prefix only labels the verdict
        return kind.upper()


def run_supervised(run: Callable[[], Report], *, kind: str, name: str) -> Report:
    """``run()``'s report, computed in a forked child process that the CLI supervises.

    Whatever the target's import or factory does, the result is a report: ``SystemExit`` or
    ``KeyboardInterrupt`` outside a check become an ``error`` verdict in the child, and a child
    that dies (``os._exit``, a segfault, a signal) becomes an ``error`` verdict here, naming
    the exit status or signal with the tail of its standard error (a Python stack for a fatal
    signal: ``faulthandler`` is on). :class:`UsageError` and
    :class:`~trainspec.ConfigurationError` raised in the child are raised again here.
    ``KeyboardInterrupt`` in this process (Ctrl-C) stops the child (which closes its worlds)
    and is raised again. Where ``os.fork`` does not exist, ``run`` runs in this process.
    """
    if not hasattr(os, "fork"):
        return run()
    result_fd, result_path = tempfile.mkstemp(prefix="trainspec-verify-", suffix=".json")
    tail_fd, tail_path = tempfile.mkstemp(prefix="trainspec-verify-", suffix=".stderr")
    os.close(result_fd)
    os.close(tail_fd)
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        parent = os.getpid()
        torch_loaded = "torch" in sys.modules  # the trainspec script has not imported it
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in os._exit; its verdicts are tested
            _child(run, parent, result_path, tail_path, single_threaded=torch_loaded)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # Ctrl-C, or a caller's alarm: never leave the child running
            _stop(pid)
            raise
        with open(tail_path, encoding="utf-8", errors="replace") as tail_file:
            tail = tail_file.read()
        payload = _read_payload(result_path)
    finally:
        for path in (result_path, tail_path):
            with contextlib.suppress(OSError):
                os.unlink(path)
    if "usage" in payload:
        message, prog = str(payload["usage"]), payload.get("prog")
        if payload.get("configuration"):
            raise ConfigurationError(message)
        raise UsageError(message, prog=prog if isinstance(prog, str) else None)
    if tail:
        sys.stderr.write(tail)
        sys.stderr.flush()
    if "report" in payload:
        from trainspec.conformance.report import Report

        return Report.from_dict(cast("dict[str, object]", payload["report"]))
    if "crash" in payload:
        return crash_report(kind, name, str(payload["crash"]), str(payload.get("detail", "")))
    signalled = os.WIFSIGNALED(status)
    return crash_report(
        kind,
        name,
        f"the process verifying the target {_death(status)} before the kit could record a "
        "verdict: the target's import or factory, or a check's call into it, ended the process"
        + ("; the Python stack at the fault is in the traceback" if signalled else ""),
        _stderr_tail(tail),
    )


def _stderr_tail(text: str) -> str:
    """What a report keeps of the dead child's standard error: from the fatal-error dump
    (``faulthandler``: the stack that was running) if there is one, else the end."""
    if not text.strip():
        return "standard error: (empty)"
    start = text.rfind("Fatal Python error")
    shown = text[start : start + _TAIL_CHARS] if start >= 0 else text[-_TAIL_CHARS:]
    return f"standard error ({len(shown)} of {len(text)} characters):\n{shown}"


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        described = signal.strsignal(number) or name
        return f"was killed by {name} ({described})"
    return f"exited with status {os.WEXITSTATUS(status)}"


def _read_payload(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):  # empty or torn: the child died before it finished
        return {}
    return cast("dict[str, object]", data) if isinstance(data, dict) else {}


def _stop(pid: int) -> None:
    """Interrupt the child like Ctrl-C would (it closes its worlds), then kill its group."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + _STOP_WAIT_S
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            break
        if done:
            return
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _child(
    run: Callable[[], Report],
    parent: int,
    result_path: str,
    tail_path: str,
    *,
    single_threaded: bool,
) -> NoReturn:
    code = 70  # EX_SOFTWARE: only if writing the payload itself failed
    try:
        if single_threaded:
            # Forked from a process that had imported torch (a test session, a script calling
            # main()): its OpenMP thread team does not survive fork, and the first parallel
            # region in the child would hang. One intra-op thread never enters one. The
            # `trainspec` script forks before importing torch, so its checks keep every thread.
            import torch

            torch.set_num_threads(1)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # Ctrl-C reaches the CLI, which decides; killpg reaches us
        _die_with_parent(parent)
        tail = os.open(tail_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(tail, 2)
        # disable() first: enable() on an already enabled faulthandler (a test session's)
        # only changes the file and keeps whatever SIGSEGV handler was installed since.
        faulthandler.disable()
        faulthandler.enable(file=tail, all_threads=True)
        payload: dict[str, object]
        try:
            payload = {"report": run().to_dict()}
        except UsageError as error:
            payload = {"usage": str(error), "prog": error.prog}
        except ConfigurationError as error:
            payload = {"usage": str(error), "configuration": True}
        except BaseException as error:  # SystemExit/KeyboardInterrupt from target code, ...
            payload = {
                "crash": f"verifying the target ended with {_describe_exception(error)} "
                "before every check had a verdict; a plugin must not exit or interrupt the "
                "process (the traceback shows where it was raised)",
                "detail": traceback.format_exc(),
            }
        with open(result_path, "w", encoding="utf-8") as file:
            json.dump(payload, file)
        code = 0
    finally:
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the CLI dies (Linux), GIL or no GIL."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the CLI died before prctl took effect
        os._exit(EXIT_INTERRUPTED)


def _one_line(text: str) -> str:
    return " ".join(text.split())


COMMAND = Command(
    name="verify",
    help="verify a plugin (or the built-in reference implementations) against the spec",
    description=_DESCRIPTION,
    configure=_configure,
    run=_run,
)
