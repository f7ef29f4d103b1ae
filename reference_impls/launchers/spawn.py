"""``MultiprocessingLauncher``: start every rank with :mod:`multiprocessing`.

Works where a script cannot be re-run (notebooks, REPLs, functions defined at run time) as
long as the function, its arguments and rank 0's result can be pickled: with ``"spawn"`` and
``"forkserver"`` the function must be importable by the new processes (defined at the top
level of a module, not in a notebook cell); ``"fork"`` copies the running process instead and
also accepts functions defined interactively, at the usual risks of forking a process that
has started threads.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeVar, get_args

from typing_extensions import ParamSpec

from trainspec.errors import ConfigurationError, LaunchError
from trainspec.launcher import Launcher
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.launchers._supervision import (
    DEFAULT_GRACE_PERIOD,
    ProcessRank,
    check_grace_period,
    check_num_processes,
    describe_exit_code,
    enable_stack_dump,
    hung_rank_message,
    is_secondary,
    request_stack,
    stop_ranks,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

    from trainspec.cluster_environment import ClusterEnvironment

__all__ = ["MultiprocessingLauncher", "StartMethod"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

StartMethod = Literal["spawn", "forkserver", "fork"]
"""How :class:`MultiprocessingLauncher` starts processes (see :mod:`multiprocessing`)."""

_NAME: Final = "MultiprocessingLauncher"
_START_METHODS: Final[tuple[str, ...]] = get_args(StartMethod)
_WAIT_SECONDS: Final = 0.2


class MultiprocessingLauncher(Launcher):
    """Run the function on ``num_processes`` new processes of this machine (ranks 0..N-1)
    and return rank 0's result (LAUNCH-1 ... LAUNCH-4).

    Each rank gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``, ``MASTER_ADDR``
    and ``MASTER_PORT`` (read by
    :class:`~trainspec.reference.cluster_environments.LocalEnvironment`) before the function
    is unpickled; on POSIX it leads its own process group. The function
    and its arguments are pickled once, in this process, before anything starts: an
    unpicklable one raises :class:`~trainspec.ConfigurationError` and starts nothing.

    If a rank raises, its formatted traceback comes back through a pipe; if it dies, its
    exit code or signal is read. Either way the launcher stops the other ranks (SIGTERM to
    their process groups, SIGKILL after ``grace_period`` seconds) and raises
    :class:`~trainspec.LaunchError` naming the rank.

    A rank that failed with a *secondary* error (a :class:`~trainspec.CollectiveError` or an
    error of ``torch.distributed``: its collective timed out or lost its peer) is the echo of
    another rank's failure, so the launcher waits up to ``grace_period`` for a primary one
    (another exception, a non-zero exit code, a signal), which it blames if it comes. If none
    comes and a rank is still running when the grace period ends, that rank is presumed hung
    and blamed: the error names it, carries its threads' stacks (asked for with SIGUSR2
    through :mod:`faulthandler`, when the rank's code left SIGUSR2 alone) and the secondary
    error as context. Otherwise the rank with the secondary error is blamed.

    Processes a rank started do not outlive it: when a rank exits, normally or not, the
    launcher sends SIGTERM to its process group (SIGKILL after ``grace_period`` seconds to
    whatever is still alive) before it reaps the rank, and that also happens to every rank's
    group when the launch succeeds. ``launch`` never returns or raises with a started process
    or a process of a rank's group still running, including on ``KeyboardInterrupt`` (which
    is re-raised as it is). A process a rank moved out of its group (``setsid``) is not
    followed.

    Not guaranteed: if this process is killed with SIGKILL, the ranks are not stopped.
    """

    def __init__(
        self,
        num_processes: int,
        start_method: StartMethod = "spawn",
        *,
        cluster_environment: ClusterEnvironment | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
    ) -> None:
        """``num_processes`` ranks (``>= 1``) started with ``start_method`` (one of
        ``"spawn"``, ``"forkserver"``, ``"fork"`` that this platform offers); the rendezvous
        address and port are ``cluster_environment``'s (default: a new
        :class:`LocalEnvironment`), read when ``launch`` runs. Bad values raise
        :class:`~trainspec.ConfigurationError`."""
        self._num_processes = check_num_processes(num_processes, _NAME)
        available = multiprocessing.get_all_start_methods()
        if start_method not in _START_METHODS or start_method not in available:
            choices = [method for method in _START_METHODS if method in available]
            raise ConfigurationError(
                f"{_NAME}: start_method must be one of {choices} on this platform; "
                f"got {start_method!r}."
            )
        self._start_method: StartMethod = start_method
        self._environment = (
            cluster_environment if cluster_environment is not None else LocalEnvironment()
        )
        self._grace_period = check_grace_period(grace_period, _NAME)

    def __repr__(self) -> str:
        return f"{_NAME}(num_processes={self._num_processes}, start_method={self._start_method!r})"

    @property
    def num_processes(self) -> int:
        """The number of ranks started."""
        return self._num_processes

    @property
    def start_method(self) -> StartMethod:
        """The multiprocessing start method."""
        return self._start_method

    @property
    def is_interactive_compatible(self) -> bool:
        """``True`` for ``"fork"`` only: spawned processes cannot import functions defined
        in a notebook or REPL (LAUNCH-1)."""
        return self._start_method == "fork"

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function(*args, **kwargs)`` on every rank; rank 0's result (LAUNCH-2 ...
        LAUNCH-4)."""
        try:
            payload = pickle.dumps((function, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as error:
            raise ConfigurationError(
                f"{_NAME}: the function and its arguments must be picklable to reach the "
                f"ranks ({type(error).__name__}: {error}); define the function at the top "
                "level of a module, or use start_method='fork'."
            ) from error
        context = _context(self._start_method)
        address = self._environment.main_address
        port = self._environment.main_port
        ranks: list[_Rank] = []
        workdir = Path(tempfile.mkdtemp(prefix="trainspec-spawn-"))
        try:
            for number in range(self._num_processes):
                reader, writer = context.Pipe(duplex=False)
                variables = LocalEnvironment.variables_for(
                    rank=number,
                    local_rank=number,
                    world_size=self._num_processes,
                    node_rank=0,
                    address=address,
                    port=port,
                )
                stack = workdir / f"rank-{number}.stack"
                process = context.Process(
                    target=_run_rank,
                    args=(number, variables, payload, writer, str(stack)),
                    name=f"trainspec-rank-{number}",
                )
                ranks.append(_Rank(ProcessRank(number, process), reader, stack))
                try:
                    process.start()
                finally:
                    writer.close()
            reported = self._supervise(ranks)
        finally:
            # Also after a success: what the ranks left running in their groups is stopped.
            stop_ranks([rank.process for rank in ranks], self._grace_period)
            for rank in ranks:
                rank.reader.close()
            shutil.rmtree(workdir, ignore_errors=True)
        try:
            result: _R = pickle.loads(reported)
        except Exception as error:
            raise LaunchError(
                f"rank 0's result could not be unpickled in the launching process "
                f"({type(error).__name__}: {error}).",
                rank=0,
            ) from error
        return result

    def _supervise(self, ranks: list[_Rank]) -> bytes:
        """Wait for every rank; rank 0's pickled result, or raise for the rank to blame."""
        deadline: float | None = None
        while True:
            waitables: list[int] = [rank.reader.fileno() for rank in ranks if not rank.drained]
            waitables += [rank.sentinel for rank in ranks if rank.exit_code is None]
            if waitables:
                multiprocessing.connection.wait(waitables, timeout=_WAIT_SECONDS)
            for rank in ranks:
                rank.poll()
                if rank.exit_code is not None:
                    # Stop what the rank left running in its group, then reap it.
                    rank.process.release(self._grace_period)
            failed = [rank for rank in ranks if rank.failed]
            primary = [rank for rank in failed if not rank.secondary]
            running = [rank for rank in ranks if rank.exit_code is None]
            error: LaunchError | None = None
            if primary:
                error = primary[0].error()
            elif failed and not running:
                error = failed[0].error()  # nothing left that could fail in its own right
            elif failed and deadline is None:
                deadline = time.monotonic() + self._grace_period
            elif deadline is not None and time.monotonic() >= deadline:
                error = self._hung_error(running, failed)
            if error is not None:
                stop_ranks([rank.process for rank in ranks], self._grace_period)
                raise error
            if all(rank.finished for rank in ranks):
                assert ranks[0].report is not None
                result = ranks[0].report[2]
                assert isinstance(result, bytes)
                return result

    def _hung_error(self, running: list[_Rank], failed: list[_Rank]) -> LaunchError:
        """The error that blames the first rank still running (without a report) after only
        secondary failures for a grace period; the first secondary failure if there is none."""
        hung = [rank for rank in running if rank.report is None] or running
        if not hung:
            return failed[0].error()
        culprit = hung[0].process
        first = failed[0]
        message = hung_rank_message(
            [rank.process.rank for rank in hung],
            first.process.rank,
            first.describe(),
            self._grace_period,
            request_stack(culprit, hung[0].stack),
            also_secondary=[rank.process.rank for rank in failed[1:]],
        )
        return LaunchError(message, rank=culprit.rank)


class _Reader(Protocol):
    """The receiving end of a rank's pipe (a Connection, or a PipeConnection on Windows)."""

    def poll(self, timeout: float | None = ..., /) -> bool: ...
    def recv_bytes(self, maxlength: int | None = ..., /) -> bytes: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


@dataclass
class _Rank:
    """The parent's view of one rank: its process, its pipe and what it reported."""

    process: ProcessRank
    reader: _Reader
    stack: Path
    """Where the rank writes its threads' stacks when asked (see ``request_stack``)."""
    drained: bool = False
    exit_code: int | None = None
    report: tuple[str, bool, bytes | str] | None = field(default=None)

    @property
    def sentinel(self) -> int:
        return self.process.process.sentinel

    def poll(self) -> None:
        """Read what the rank sent and whether it exited."""
        self._drain()
        if self.exit_code is None:
            code = self.process.exit_code()
            if code is not None:
                # Everything it sent is in the pipe now. Not waiting for end-of-file: a
                # process the rank started may still hold the pipe open.
                self._drain()
                self.drained = True
                self.exit_code = code

    def _drain(self) -> None:
        while not self.drained:
            try:
                if not self.reader.poll():
                    return
                data = self.reader.recv_bytes()
            except (EOFError, OSError):
                self.drained = True
                return
            try:
                self.report = pickle.loads(data)
            except Exception as error:
                self.report = ("error", False, f"(its report could not be read: {error!r})")

    @property
    def failed(self) -> bool:
        if self.report is not None and self.report[0] == "error":
            return True
        return self.exit_code is not None and (self.exit_code != 0 or self.report is None)

    @property
    def secondary(self) -> bool:
        return self.report is not None and self.report[0] == "error" and self.report[1]

    @property
    def finished(self) -> bool:
        return self.exit_code == 0 and self.report is not None and self.report[0] == "ok"

    def describe(self) -> str:
        """How the rank failed: its traceback, or its exit code or signal."""
        if self.report is not None and self.report[0] == "error":
            return str(self.report[2])
        if self.exit_code is not None:
            return f"it {describe_exit_code(self.exit_code)}."
        return "it failed without a report."

    def error(self) -> LaunchError:
        rank = self.process.rank
        if self.report is not None and self.report[0] == "error":
            return LaunchError(f"rank {rank} failed:\n{self.report[2]!s}", rank=rank)
        if self.exit_code is not None and self.exit_code < 0:
            return LaunchError(f"rank {rank} {describe_exit_code(self.exit_code)}.", rank=rank)
        if self.exit_code is not None and self.exit_code != 0:
            return LaunchError(
                f"rank {rank} {describe_exit_code(self.exit_code)} without reporting a "
                "traceback (see its stderr above).",
                rank=rank,
            )
        return LaunchError(f"rank {rank} exited without reporting a result.", rank=rank)


def _context(method: StartMethod) -> SpawnContext | ForkServerContext | ForkContext:
    if method == "fork":
        return multiprocessing.get_context("fork")
    if method == "forkserver":
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def _run_rank(
    rank: int, variables: dict[str, str], payload: bytes, writer: Connection, stack: str
) -> None:
    """The body of every started rank: report ``("ok", False, pickled result or b"")`` or
    ``("error", is_secondary, traceback)`` through ``writer``; exit 1 after an error. The
    rank leads a new session (and so a process group of its own), and writes its stacks to
    ``stack`` when the launcher asks."""
    if hasattr(os, "setsid"):
        try:
            os.setsid()
        except OSError:
            pass  # already a group leader
    enable_stack_dump(stack)
    os.environ.update(variables)
    report: tuple[str, bool, bytes | str]
    failed = False
    try:
        function, args, kwargs = pickle.loads(payload)
        result = function(*args, **kwargs)
        report = ("ok", False, b"")
        if rank == 0:
            try:
                report = ("ok", False, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as error:
                raise LaunchError(
                    f"rank 0's result must be picklable to return from launch(); "
                    f"{type(result).__name__} is not ({type(error).__name__}: {error})."
                ) from error
    except BaseException as error:
        failed = True
        report = ("error", is_secondary(error), "".join(traceback.format_exception(error)))
    try:
        writer.send_bytes(pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        writer.close()
    if failed:
        raise SystemExit(1)
