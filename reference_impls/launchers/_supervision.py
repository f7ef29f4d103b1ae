"""Stopping the processes a launcher started, and describing how a rank ended.

Shared by the reference launchers. On POSIX every started rank leads its own process group
(a new session), so stopping a rank also stops the processes it started (data-loader
workers, helpers). That holds however the rank ends:

- a rank still running is stopped with SIGTERM to its group, then SIGKILL;
- a rank that exited on its own (normally or not) is **not reaped at once**: the launcher
  learns of the exit with ``waitid(..., WNOWAIT)``, which leaves the rank a zombie, so its pid,
  and with it its process group id, cannot be taken by another process. It then sends
  SIGTERM to the group, waits until nothing else in the group is alive (or the grace period
  has passed, then SIGKILL), and only then reaps the rank (:meth:`RankProcess.release`).

A group is therefore only signalled while its leader's pid is held. Where the exit cannot be
observed without reaping (a ``"forkserver"`` rank is the fork server's child, not the
launcher's; Python before 3.13 on macOS has no ``waitid``), the group of a reaped rank is
still signalled: POSIX does not reuse a group id while the group has a member, so this can
only miss, never reach a stranger, unless the group empties and its id is reused as a new
group's in between. Where the members of a group cannot be listed (no ``/proc``), what is
left of an exited rank's group gets SIGKILL right after SIGTERM.

Also here: which errors are *secondary* (the echo of another rank's failure), the message
that blames a hung rank, and how a hung rank's stack is obtained (:func:`enable_stack_dump`,
:func:`request_stack`).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Sequence
    from multiprocessing.process import BaseProcess

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "PopenRank",
    "ProcessRank",
    "RankProcess",
    "check_grace_period",
    "check_num_processes",
    "describe_exit_code",
    "enable_stack_dump",
    "hung_rank_message",
    "is_secondary",
    "request_stack",
    "stop_ranks",
]

DEFAULT_GRACE_PERIOD: Final = 5.0
"""Seconds a rank gets between SIGTERM and SIGKILL when the launcher stops it."""

_POSIX: Final = os.name == "posix"
_CAN_HOLD: Final = _POSIX and hasattr(os, "waitid") and hasattr(os, "WNOWAIT")
"""Whether an exited child can be observed without reaping it."""
_PROC: Final = Path("/proc")
_CAN_LIST_GROUPS: Final = sys.platform.startswith("linux") and (_PROC / "self" / "stat").exists()
_POLL_SECONDS: Final = 0.02
_KILL_SETTLE_SECONDS: Final = 1.0
"""How long a group that got SIGKILL may take to disappear before its leader is reaped anyway
(SIGKILL cannot be caught; only a process stuck in the kernel takes longer)."""
_STACK_SIGNAL: Final = getattr(signal, "SIGUSR2", None)
_STACK_WAIT_SECONDS: Final = 1.0
_KILL: Final = getattr(signal, "SIGKILL", signal.SIGTERM)


def describe_exit_code(code: int) -> str:
    """``"was killed by signal SIGSEGV"`` for a negative (signal) exit code, else
    ``"exited with code N"``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"number {-code}"
        return f"was killed by signal {name}"
    return f"exited with code {code}"


def check_num_processes(value: object, owner: str) -> int:
    """``value`` if it is an int ``>= 1``; otherwise a ConfigurationError."""
    from trainspec.errors import ConfigurationError

    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{owner}: num_processes must be an int >= 1 (ranks on this machine); got {value!r}."
        )
    return value


def check_grace_period(value: object, owner: str) -> float:
    """``value`` as a float if it is a number ``>= 0``; otherwise a ConfigurationError."""
    from trainspec.errors import ConfigurationError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigurationError(
            f"{owner}: grace_period must be a number of seconds >= 0; got {value!r}."
        )
    return float(value)


def is_secondary(error: BaseException) -> bool:
    """Whether ``error`` is likely the echo of another rank's failure (a collective that
    timed out or lost its peer) rather than a cause of its own: a
    :class:`~trainspec.CollectiveError`, or an error of ``torch.distributed``."""
    from trainspec.errors import CollectiveError

    if isinstance(error, CollectiveError):
        return True
    module = type(error).__module__
    return module.startswith("torch.distributed") or type(error).__name__.startswith("Dist")


def hung_rank_message(
    hung: Sequence[int],
    secondary: int,
    secondary_report: str,
    grace_period: float,
    stack: str,
    *,
    also_secondary: Sequence[int] = (),
) -> str:
    """The message of the LaunchError that blames ``hung[0]``: it was still running
    ``grace_period`` seconds after rank ``secondary`` failed with a secondary error
    (``secondary_report``, kept as context), so it is presumed hung. Its first line names the
    blamed rank."""
    culprit = hung[0]
    lines = [
        f"rank {culprit} is presumed hung: it was still running {grace_period:g} s after "
        f"rank {secondary} failed with an error that follows another rank's failure (a "
        "collective that timed out or lost its peer), and it was stopped."
    ]
    if len(hung) > 1:
        others = ", ".join(str(rank) for rank in hung[1:])
        lines.append(f"Also still running then, and stopped: rank(s) {others}.")
    if also_secondary:
        others = ", ".join(str(rank) for rank in also_secondary)
        lines.append(f"Rank(s) {others} also failed with such errors.")
    if stack:
        lines.append(f"rank {culprit}'s threads when it was stopped:\n{stack.rstrip()}")
    lines.append(f"rank {secondary} failed with:\n{secondary_report.rstrip()}")
    return "\n".join(lines)


# -- a hung rank's stack ---------------------------------------------------------------------

_STACK_FILES: list[TextIO] = []
"""The files faulthandler writes to in this rank; they must stay open."""


def enable_stack_dump(path: str) -> None:
    """In a started rank: let the launcher ask for this rank's stacks (:func:`request_stack`).

    Registers :mod:`faulthandler` to write every thread's stack to ``path`` on SIGUSR2, and
    creates ``path`` only once that is done: the launcher sends SIGUSR2 only to a rank whose
    ``path`` exists. Does nothing (and so the launcher never sends the signal) where there is
    no SIGUSR2, when the rank's code already handles SIGUSR2, or when ``path`` cannot be
    written.
    """
    if _STACK_SIGNAL is None or signal.getsignal(_STACK_SIGNAL) is not signal.SIG_DFL:
        return
    staging = f"{path}.partial"
    try:
        # Not a `with`: faulthandler writes to it for as long as the rank runs.
        file = open(staging, "w", encoding="utf-8")
    except OSError:
        return
    try:
        faulthandler.register(_STACK_SIGNAL, file=file, all_threads=True, chain=False)
        os.replace(staging, path)
    except (OSError, RuntimeError, ValueError):
        file.close()
        return
    _STACK_FILES.append(file)


def request_stack(rank: RankProcess, path: Path) -> str:
    """The stacks of ``rank`` (still running) as :mod:`faulthandler` writes them, or ``""``
    when the rank did not :func:`enable_stack_dump` into ``path``, has exited, or wrote
    nothing within a second. Signals the rank alone, never its group."""
    pid = rank.pid
    if _STACK_SIGNAL is None or pid is None or rank.exit_code() is not None:
        return ""
    try:
        if not path.is_file():
            return ""
        os.kill(pid, _STACK_SIGNAL)
    except OSError:
        return ""
    deadline = time.monotonic() + _STACK_WAIT_SECONDS
    last = -1
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            size = path.stat().st_size
        except OSError:
            return ""
        if size > 0 and size == last:
            break
        last = size
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# -- process groups ----------------------------------------------------------------------------


def _group_alive(pgid: int) -> bool | None:
    """Whether a live process other than ``pgid`` itself is in process group ``pgid``;
    ``None`` where groups cannot be listed."""
    if not _CAN_LIST_GROUPS:
        return None
    wanted = str(pgid).encode()
    try:
        names = os.listdir(_PROC)
    except OSError:
        return None
    for name in names:
        if not name.isdigit() or name == str(pgid):
            continue
        try:
            with open(_PROC / name / "stat", "rb") as file:
                data = file.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = data[data.rfind(b")") + 1 :].split()
        if len(fields) > 2 and fields[2] == wanted and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _exit_code_of(info: os.waitid_result) -> int:
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -info.si_status
    return info.si_status


class RankProcess(ABC):
    """One started rank: its number and a handle on its process.

    The lifecycle of the process, as the launchers drive it: :meth:`exit_code` says whether
    it has exited **without reaping it**; :meth:`terminate` and :meth:`kill` signal its process
    group; :meth:`release` stops what is left of the group of an exited rank and reaps it.
    Every started rank **must** end up released (:func:`stop_ranks` does it), or it stays a
    zombie until the launching process exits.
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._code: int | None = None
        self._reaped = False
        self._released = False
        self._terminated_at: float | None = None
        self._killed_at: float | None = None

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The process id, ``None`` if it never started."""

    @abstractmethod
    def _poll_handle(self) -> int | None:
        """The handle's own non-blocking poll: the exit code, reaping the process, or
        ``None`` while it runs."""

    @abstractmethod
    def _wait_handle(self) -> int | None:
        """The handle's own blocking wait: the exit code, reaping the process."""

    @property
    def released(self) -> bool:
        """Whether the rank has exited, what was left of its group was stopped, and it was
        reaped."""
        return self._released

    def exit_code(self) -> int | None:
        """The exit code (negative: the signal) once the rank has exited, ``None`` while it
        runs. Does not reap it (where the platform allows): its pid stays held until
        :meth:`release`."""
        if self._code is None:
            self._code = self._peek()
        return self._code

    def _peek(self) -> int | None:
        pid = self.pid
        if pid is None:
            self._reaped = True
            return 0  # never started: nothing to wait for
        if _CAN_HOLD and not self._reaped:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                pass  # not this process's child (forkserver) or reaped already: ask the handle
            else:
                return None if info is None else _exit_code_of(info)
        code = self._poll_handle()
        if code is not None:
            self._reaped = True
        return code

    def send(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the rank's process group (POSIX), or to the rank alone while it
        has no group of its own yet. Never signals a released rank, nor the pid of a reaped
        one; a process that is gone already is not an error."""
        pid = self.pid
        if pid is None or self._released:
            return
        if _POSIX:
            try:
                os.killpg(pid, signum)
                return
            except (ProcessLookupError, PermissionError):
                pass  # no group of its own (yet): signal it alone
        if self._reaped:
            return  # its pid may belong to another process by now
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """SIGTERM to the rank's group, once; later calls do nothing."""
        if self._terminated_at is None:
            self._terminated_at = time.monotonic()
            self.send(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the rank's group, once; later calls do nothing."""
        if self._killed_at is None:
            self._killed_at = time.monotonic()
            self.send(_KILL)

    def release(self, grace_period: float) -> bool:
        """Advance the end of an exited rank without blocking; ``True`` once it is released.

        ``False`` while the rank runs. After it exited, the first call sends SIGTERM to its
        group (unless :meth:`terminate` did); the rank is reaped once no other process of the
        group is alive, or, if some still are ``grace_period`` seconds after the SIGTERM,
        after SIGKILL to the group and up to a second for it to take effect. Where a group's
        members cannot be listed, SIGKILL follows the SIGTERM at once.
        """
        if self._released:
            return True
        if self.exit_code() is None:
            return False
        if self.pid is not None and _POSIX:
            self.terminate()
            alive = _group_alive(self.pid)
            if alive is None:
                self.kill()
            elif alive:
                now = time.monotonic()
                assert self._terminated_at is not None
                if self._killed_at is None and now - self._terminated_at >= grace_period:
                    self.kill()
                if self._killed_at is None or now - self._killed_at < _KILL_SETTLE_SECONDS:
                    return False
        if not self._reaped:
            code = self._wait_handle()
            self._reaped = True
            if code is not None:
                self._code = code
        self._released = True
        return True


class PopenRank(RankProcess):
    """A rank started with :class:`subprocess.Popen`."""

    def __init__(self, rank: int, process: subprocess.Popen[bytes]) -> None:
        super().__init__(rank)
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _poll_handle(self) -> int | None:
        return self.process.poll()

    def _wait_handle(self) -> int | None:
        return self.process.wait()


class ProcessRank(RankProcess):
    """A rank started with :mod:`multiprocessing`."""

    def __init__(self, rank: int, process: BaseProcess) -> None:
        super().__init__(rank)
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _poll_handle(self) -> int | None:
        return self.process.exitcode

    def _wait_handle(self) -> int | None:
        self.process.join()
        return self.process.exitcode


def stop_ranks(ranks: Sequence[RankProcess], grace_period: float) -> None:
    """Stop every rank and what is left of every rank's process group, and reap them all;
    returns once every rank is released (see :meth:`RankProcess.release`).

    SIGTERM to every group not released yet (ranks still running, and ranks that exited on
    their own: the processes they started); up to ``grace_period`` seconds for the ranks to
    exit and their groups to empty; then SIGKILL to every group left. Safe to call with
    ranks that are released already, and more than once.
    """
    pending = [rank for rank in ranks if not rank.released]
    for rank in pending:
        rank.terminate()
    deadline = time.monotonic() + grace_period
    while True:
        pending = [rank for rank in pending if not rank.release(grace_period)]
        if not pending:
            return
        if time.monotonic() >= deadline:
            for rank in pending:
                rank.kill()
        time.sleep(_POLL_SECONDS)
