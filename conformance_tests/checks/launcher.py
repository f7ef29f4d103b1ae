"""Behaviour checks for :class:`trainspec.Launcher` (LAUNCH-1 ... LAUNCH-4).

Launching is slow, so each check launches once. The launched functions are in
:mod:`trainspec.conformance._launch_targets` (importable by any new process, torch-free);
each rank reads its rank from an environment variable and leaves marker files with its pid,
from which a check learns which processes ran and whether any is still running. A check
that finds a launched process still running stops it (SIGKILL) before it reports.

Target options read here:

``num_processes`` (``int >= 2``, read only with the ``multi_process`` capability)
    How many ranks the factory's launcher starts; without ``multi_process``, one.
``rank_variable`` (``str``, default ``"RANK"``)
    The environment variable through which a launched process learns its global rank.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    int_option,
    snippet,
)
from trainspec.conformance._launch_targets import (
    fail_on_last_rank,
    read_markers,
    report_and_return,
)
from trainspec.conformance.core import Target, check
from trainspec.conformance.kinds import KIND_TABLE
from trainspec.errors import LaunchError

if TYPE_CHECKING:
    from trainspec.launcher import Launcher

__all__ = ["CAPABILITIES"]

CAPABILITIES: Final[dict[str, str]] = dict(KIND_TABLE["launcher"].vocabulary)
"""The kind's capability vocabulary (name -> description), read from the table of kinds
(:data:`trainspec.conformance.kinds.KIND_TABLE`), where each capability is described once."""

_PAYLOAD: Final = {"answer": 42, "nested": [1, "two", None]}
_LINGER_SUCCESS_S: Final = 1.0  # ranks != 0 outlive rank 0 by this much on success
_LINGER_FAILURE_S: Final = 15.0  # ranks that should be stopped sleep this long
_WAIT_FOR_START_S: Final = 60.0  # the failing rank waits this long for the others to start


def _num_processes(target: Target[Launcher]) -> int:
    if "multi_process" not in target.capabilities:
        return 1
    count = int_option(target, "num_processes", 2)
    if count < 2:
        raise TypeError(
            f"conformance option 'num_processes' must be >= 2 with 'multi_process'; got {count}"
        )
    return count


def _rank_variable(target: Target[Launcher]) -> str:
    value = target.options.get("rank_variable", "RANK")
    if not isinstance(value, str) or not value:
        raise TypeError(f"conformance option 'rank_variable' must be a str; got {value!r}")
    return value


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has exited)."""
    if pid == os.getpid():
        return False  # a launcher that ran the function in this process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _stop(pids: list[int]) -> None:
    # Only processes that ran a kit function (they left a marker) are stopped.
    for pid in pids:
        if is_running(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _snippet(target: Target[Launcher], body: str) -> str:
    return snippet(
        target,
        body,
        var="launcher",
        imports="import tempfile\nfrom trainspec.conformance import _launch_targets",
    )


@check("LAUNCH-1", "launcher")
def check_launcher_interactive_compatibility_is_a_constant_bool(target: Target[Launcher]) -> None:
    """is_interactive_compatible must be a bool that does not change between reads."""
    launcher = target.make()
    first, second = launcher.is_interactive_compatible, launcher.is_interactive_compatible
    if not isinstance(first, bool) or first != second:
        raise failure(
            target,
            "LAUNCH-1",
            expected="report is_interactive_compatible as the same bool on every read",
            actual=f"{first!r} then {second!r}",
            snippet=_snippet(
                target,
                "print(launcher.is_interactive_compatible, launcher.is_interactive_compatible)",
            ),
        )


@check("LAUNCH-2", "launcher")
def check_launcher_returns_rank_zero_result_after_every_rank_exited(
    target: Target[Launcher],
) -> None:
    """launch must run the function on every rank and return rank 0's result after all exit."""
    count, variable = _num_processes(target), _rank_variable(target)
    with tempfile.TemporaryDirectory(prefix="trainspec-launch-") as markers:
        repro = _snippet(
            target,
            "markers = tempfile.mkdtemp()\n"
            f"result = launcher.launch(_launch_targets.report_and_return, markers, "
            f"{variable!r}, {_PAYLOAD!r}, {_LINGER_SUCCESS_S})\n"
            f"print(result, _launch_targets.read_markers(markers, 'started'))",
        )
        launcher = target.make()
        try:
            result = launcher.launch(
                report_and_return, markers, variable, _PAYLOAD, _LINGER_SUCCESS_S
            )
        except Exception as error:
            _stop([pid for _, pid in read_markers(markers, "started")])
            raise failure(
                target,
                "LAUNCH-2",
                expected="return from launch when the function succeeds on every rank",
                actual=describe_exception(error),
                snippet=repro,
            ) from error
        started = read_markers(markers, "started")
        running = [pid for _, pid in started if is_running(pid)]
        if running:
            _stop(running)
            raise failure(
                target,
                "LAUNCH-2",
                expected="return only after every rank it started has exited",
                actual=f"process(es) {running} still running after launch returned",
                hint="Join every rank, not just rank 0.",
                snippet=repro,
            )
        ranks = sorted(rank for rank, _ in started)
        if ranks != list(range(count)):
            raise failure(
                target,
                "LAUNCH-2",
                expected=f"run the function once on each of ranks 0..{count - 1}",
                actual=f"it ran on ranks {ranks} (as read from ${variable})",
                hint=f"Give each rank its rank in ${variable} (option 'rank_variable'), and "
                "declare 'multi_process' with option 'num_processes' for more than one rank.",
                snippet=repro,
            )
        if result != (0, _PAYLOAD):
            raise failure(
                target,
                "LAUNCH-2",
                expected=f"return rank 0's result {(0, _PAYLOAD)!r}",
                actual=describe_value(result),
                snippet=repro,
            )


def _failing_launch(target: Target[Launcher], markers: str) -> tuple[object, str]:
    """Launch :func:`fail_on_last_rank`; (what launch raised or returned, snippet)."""
    count, variable = _num_processes(target), _rank_variable(target)
    repro = _snippet(
        target,
        "markers = tempfile.mkdtemp()\n"
        f"launcher.launch(_launch_targets.fail_on_last_rank, markers, {variable!r}, {count}, "
        f"{_LINGER_FAILURE_S}, {_WAIT_FOR_START_S})  # rank {count - 1} raises",
    )
    launcher = target.make()
    try:
        return (
            launcher.launch(
                fail_on_last_rank,
                markers,
                variable,
                count,
                _LINGER_FAILURE_S,
                _WAIT_FOR_START_S,
            ),
            repro,
        )
    except Exception as error:
        return error, repro


@check("LAUNCH-3", "launcher")
def check_launcher_raises_launch_error_naming_the_failing_rank(target: Target[Launcher]) -> None:
    """When a rank fails, launch must stop the others and raise LaunchError naming that rank."""
    count = _num_processes(target)
    failing = count - 1
    with tempfile.TemporaryDirectory(prefix="trainspec-launch-") as markers:
        outcome, repro = _failing_launch(target, markers)
        _stop([pid for _, pid in read_markers(markers, "started")])

        def reraise() -> object:
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        error = expect_raises(
            target,
            "LAUNCH-3",
            LaunchError,
            reraise,
            expected=f"raise LaunchError when rank {failing} raises",
            hint="Watch every rank's exit status and translate a failure into LaunchError.",
            snippet=repro,
        )
        if error.rank is not None and error.rank != failing:
            raise failure(
                target,
                "LAUNCH-3",
                expected=f"name the failing rank {failing} in LaunchError.rank",
                actual=f"rank={error.rank!r}",
                snippet=repro,
            )
        finished = sorted(rank for rank, _ in read_markers(markers, "finished"))
        if finished:
            raise failure(
                target,
                "LAUNCH-3",
                expected="stop the other ranks as soon as one fails",
                actual=f"rank(s) {finished} ran to completion ({_LINGER_FAILURE_S:.0f} s "
                "after the failure)",
                hint="Terminate the remaining ranks instead of waiting for them.",
                snippet=repro,
            )


@check("LAUNCH-4", "launcher")
def check_launcher_leaves_no_process_running_after_a_failure(target: Target[Launcher]) -> None:
    """After launch raises for a failed rank, no process it started may still be running."""
    with tempfile.TemporaryDirectory(prefix="trainspec-launch-") as markers:
        outcome, repro = _failing_launch(target, markers)
        started = read_markers(markers, "started")
        running = [pid for _, pid in started if is_running(pid)]
        _stop(running)
        if running:
            how = (
                f"raised {type(outcome).__name__}"
                if isinstance(outcome, BaseException)
                else "returned"
            )
            raise failure(
                target,
                "LAUNCH-4",
                expected="leave no started process running when launch returns or raises",
                actual=f"process(es) {running} still running after launch {how}",
                hint="Stop (terminate, then kill) and join every rank before raising.",
                snippet=repro,
            )
