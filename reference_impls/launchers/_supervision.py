"""Stopping the processes a launcher started, and describing how a rank ended.

Shared by the reference launchers. On POSIX every started rank leads its own process group
(a new session), so stopping a rank also stops the processes it started (data-loader
workers, helpers) while it runs. A group is only signalled while its leader has not been
reaped: until then the leader's pid, and so the group id, cannot belong to anyone else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
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
    "stop_ranks",
]

DEFAULT_GRACE_PERIOD: Final = 5.0
"""Seconds a rank gets between SIGTERM and SIGKILL when the launcher stops it."""

_POSIX: Final = os.name == "posix"


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


class RankProcess(ABC):
    """One started rank: its number and a handle on its process."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The process id, ``None`` if it never started."""

    @abstractmethod
    def exit_code(self) -> int | None:
        """The exit code (negative: the signal), or ``None`` while it runs. Reaps the
        process once it has exited."""

    @abstractmethod
    def join(self, timeout: float | None) -> int | None:
        """Wait up to ``timeout`` seconds (``None``: forever); the exit code or ``None``."""

    def send(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the rank's process group (POSIX) or the rank, if it has not
        been reaped yet; a process that is gone already is not an error."""
        pid = self.pid
        if pid is None or self.exit_code() is not None:
            return
        if _POSIX:
            try:
                os.killpg(pid, signum)
                return
            except (ProcessLookupError, PermissionError):
                pass  # no group of its own yet (it has not called setsid): signal it alone
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class PopenRank(RankProcess):
    """A rank started with :class:`subprocess.Popen`."""

    def __init__(self, rank: int, process: subprocess.Popen[bytes]) -> None:
        super().__init__(rank)
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def exit_code(self) -> int | None:
        return self.process.poll()

    def join(self, timeout: float | None) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class ProcessRank(RankProcess):
    """A rank started with :mod:`multiprocessing`."""

    def __init__(self, rank: int, process: BaseProcess) -> None:
        super().__init__(rank)
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def exit_code(self) -> int | None:
        if self.process.pid is None:
            return 0  # never started: nothing to wait for
        return self.process.exitcode

    def join(self, timeout: float | None) -> int | None:
        if self.process.pid is None:
            return 0
        self.process.join(timeout)
        return self.process.exitcode


def stop_ranks(ranks: Sequence[RankProcess], grace_period: float) -> None:
    """Stop every rank still running: SIGTERM (to its process group on POSIX), up to
    ``grace_period`` seconds to exit, then SIGKILL; returns after every rank has exited and
    been reaped. Safe to call with ranks that have exited already."""
    running = [rank for rank in ranks if rank.exit_code() is None]
    if not running:
        return
    terminate = signal.SIGTERM
    kill = getattr(signal, "SIGKILL", signal.SIGTERM)
    for rank in running:
        rank.send(terminate)
    deadline = time.monotonic() + grace_period
    for rank in running:
        rank.join(max(0.0, deadline - time.monotonic()))
    for rank in running:
        rank.send(kill)
    for rank in running:
        rank.join(None)
