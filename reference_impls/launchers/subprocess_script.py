"""``SubprocessScriptLauncher``: start ranks 1..N-1 by re-running the script.

Rank 0 is the process that calls :meth:`~SubprocessScriptLauncher.launch`; it starts the
other ranks as new processes of the same command line (``python script.py args`` or
``python -m module args``), each described to :class:`~trainspec.reference.cluster_environments.
LocalEnvironment` by ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``, ``MASTER_ADDR``
and ``MASTER_PORT``, then runs the function itself. In a started rank the script reaches the
same ``launch`` call, which then runs the function directly.

Because the other ranks re-run the script from the top, the script **must** reach
``launch`` on every rank in the same way, and **should** call it once per run: code before
and after ``launch`` runs on every rank.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from typing_extensions import ParamSpec

from trainspec.errors import ConfigurationError, LaunchError
from trainspec.launcher import Launcher
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.launchers._supervision import (
    DEFAULT_GRACE_PERIOD,
    PopenRank,
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
    from collections.abc import Callable, Sequence

    from trainspec.cluster_environment import ClusterEnvironment

__all__ = [
    "CHILD_RANK_VARIABLE",
    "ERROR_FILE_VARIABLE",
    "SubprocessScriptLauncher",
    "script_command",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_NAME: Final = "SubprocessScriptLauncher"

CHILD_RANK_VARIABLE: Final = "TRAINSPEC_LAUNCHED_RANK"
"""Set in every rank this launcher starts; ``launch`` there runs the function directly."""

ERROR_FILE_VARIABLE: Final = "TRAINSPEC_LAUNCH_ERROR_FILE"
"""Where a started rank writes the traceback of an exception that escapes the function (its
first line says whether the error is ``primary`` or ``secondary``); the rank writes its
threads' stacks to this path plus ``.stack`` when the launcher asks (SIGUSR2)."""

_PRIMARY: Final = "primary"
_SECONDARY: Final = "secondary"

_POLL_SECONDS: Final = 0.05


class SubprocessScriptLauncher(Launcher):
    """Run the function on ``num_processes`` ranks of this machine: this process is rank 0,
    the others re-run the script (LAUNCH-1 ... LAUNCH-4).

    ``launch`` returns rank 0's result after every started rank has exited with code 0 (it
    waits for them without a time limit).
    If a rank fails it stops the others (SIGTERM to each rank's process group, SIGKILL after
    ``grace_period`` seconds) and raises :class:`~trainspec.LaunchError` naming the rank,
    with the traceback the rank wrote (through :data:`ERROR_FILE_VARIABLE`) or the signal
    that killed it.

    A rank that failed with a *secondary* error (a :class:`~trainspec.CollectiveError` or an
    error of ``torch.distributed``: its collective timed out or lost its peer) is the echo of
    another rank's failure, so the launcher waits up to ``grace_period`` for a primary one
    (another exception, a non-zero exit code, a signal) and blames it if it comes. If none
    comes and a started rank is still running when the grace period ends, that rank is
    presumed hung and blamed: the error names it, carries its threads' stacks (asked for with
    SIGUSR2 through :mod:`faulthandler`, when the rank's code left SIGUSR2 alone) and the
    secondary error as context. Otherwise the rank with the secondary error is blamed. A
    ``KeyboardInterrupt`` stops every rank and is re-raised as it is.

    Processes a started rank (1 ... N-1) started do not outlive the launch: when such a rank
    has exited, normally or not, the launcher sends SIGTERM to its process group (SIGKILL
    after ``grace_period`` seconds to whatever is still alive) before it reaps the rank, and
    ``launch`` never returns or raises with a process of such a group running. Rank 0 is this
    process: what *it* starts is its own business. A process a rank moved out of its group
    (``setsid``) is not followed.

    Not guaranteed: rank 0 runs in this process, so another rank's failure reaches it only
    through its next collective (which raises :class:`~trainspec.PeerFailureError`), or when
    its function returns; a started rank that exits meanwhile is reaped, and its group
    stopped, only then. Not usable interactively (:attr:`is_interactive_compatible` is
    ``False``): there is no script to re-run; use
    :class:`~trainspec.reference.launchers.MultiprocessingLauncher` there.

    While the function runs on rank 0, this process's ``os.environ`` holds rank 0's
    variables; they are restored when ``launch`` returns.
    """

    def __init__(
        self,
        num_processes: int,
        *,
        cluster_environment: ClusterEnvironment | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        command: Sequence[str] | None = None,
    ) -> None:
        """``num_processes`` ranks (``>= 1``); the rendezvous address and port are
        ``cluster_environment``'s (default: a new :class:`LocalEnvironment`), read when
        ``launch`` runs. ``command`` replaces the re-run command line (default:
        :func:`script_command`). Bad values raise :class:`~trainspec.ConfigurationError`."""
        self._num_processes = check_num_processes(num_processes, _NAME)
        self._environment = (
            cluster_environment if cluster_environment is not None else LocalEnvironment()
        )
        self._grace_period = check_grace_period(grace_period, _NAME)
        if command is not None and (
            isinstance(command, str)
            or not command
            or not all(isinstance(part, str) for part in command)
        ):
            raise ConfigurationError(
                f"{_NAME}: command must be a non-empty list of strings (argv); got {command!r}."
            )
        self._command = None if command is None else list(command)

    def __repr__(self) -> str:
        return f"{_NAME}(num_processes={self._num_processes})"

    @property
    def num_processes(self) -> int:
        """The number of ranks, this process included."""
        return self._num_processes

    @property
    def is_interactive_compatible(self) -> bool:
        """``False``: an interactive session has no script to re-run (LAUNCH-1)."""
        return False

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function(*args, **kwargs)`` on every rank; rank 0's result (LAUNCH-2 ...
        LAUNCH-4). In a rank this launcher started, just run it (and record a traceback
        for the launching process if it raises)."""
        if CHILD_RANK_VARIABLE in os.environ:
            return _run_started_rank(function, *args, **kwargs)
        if self._num_processes == 1:
            return _run_rank_zero_alone(function, *args, **kwargs)
        command = self._command if self._command is not None else script_command()
        address = self._environment.main_address
        port = self._environment.main_port
        workdir = Path(tempfile.mkdtemp(prefix="trainspec-launch-"))
        ranks: list[PopenRank] = []
        variables = self._variables(0, address, port)
        saved = {name: os.environ.get(name) for name in variables}
        try:
            for rank in range(1, self._num_processes):
                ranks.append(self._start(rank, command, address, port, workdir))
            os.environ.update(variables)
            try:
                result = function(*args, **kwargs)
            except Exception as error:
                raise self._failure_after_rank_zero_error(error, ranks, workdir) from error
            failure = self._wait_for_ranks(ranks, workdir)
            if failure is not None:
                stop_ranks(ranks, self._grace_period)
                raise failure
            return result
        finally:
            # Also after a success: what ranks 1..N-1 left running in their groups is stopped.
            stop_ranks(ranks, self._grace_period)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            shutil.rmtree(workdir, ignore_errors=True)

    # -- parent side ---------------------------------------------------------------------------

    def _variables(self, rank: int, address: str, port: int) -> dict[str, str]:
        return LocalEnvironment.variables_for(
            rank=rank,
            local_rank=rank,
            world_size=self._num_processes,
            node_rank=0,
            address=address,
            port=port,
        )

    def _start(
        self, rank: int, command: list[str], address: str, port: int, workdir: Path
    ) -> PopenRank:
        environment = dict(os.environ)
        environment.update(self._variables(rank, address, port))
        environment[CHILD_RANK_VARIABLE] = str(rank)
        environment[ERROR_FILE_VARIABLE] = str(workdir / f"rank-{rank}.traceback")
        try:
            process = subprocess.Popen(
                command, env=environment, start_new_session=os.name == "posix"
            )
        except OSError as error:
            raise LaunchError(
                f"{_NAME}: could not start rank {rank} with {command!r}: {error}", rank=rank
            ) from error
        return PopenRank(rank, process)

    def _wait_for_ranks(self, ranks: list[PopenRank], workdir: Path) -> LaunchError | None:
        """After rank 0 succeeded: wait until every started rank exited (stopping what each
        left in its group); the error for the rank to blame, or ``None``."""
        deadline: float | None = None
        while True:
            running = self._poll(ranks)
            failed = [rank for rank in ranks if rank.exit_code() not in (None, 0)]
            primary = [rank for rank in failed if not self._reported_secondary(rank, workdir)]
            if primary:
                return self._child_error(primary[0], workdir)
            if failed and not running:
                return self._child_error(failed[0], workdir)
            if failed and deadline is None:
                deadline = time.monotonic() + self._grace_period
            if deadline is not None and time.monotonic() >= deadline:
                return self._hung_error(
                    running,
                    failed[0].rank,
                    self._report_text(failed[0], workdir),
                    [rank.rank for rank in failed[1:]],
                    workdir,
                )
            if not running and all(rank.released for rank in ranks):
                return None
            time.sleep(_POLL_SECONDS)

    def _poll(self, ranks: list[PopenRank]) -> list[PopenRank]:
        """The ranks still running; those that exited get their groups stopped and are
        reaped (without blocking)."""
        running = []
        for rank in ranks:
            if rank.exit_code() is None:
                running.append(rank)
            else:
                rank.release(self._grace_period)
        return running

    def _failure_after_rank_zero_error(
        self, error: Exception, ranks: list[PopenRank], workdir: Path
    ) -> LaunchError:
        text = "".join(traceback.format_exception(error))
        # A secondary error on rank 0 (a collective that timed out or lost its peer) is the
        # echo of another rank's failure: give that rank the grace period to exit, and blame
        # it if it does; blame a rank that is still running after it (hung).
        if is_secondary(error):
            deadline = time.monotonic() + self._grace_period
            while True:
                running = self._poll(ranks)
                failed = [rank for rank in ranks if rank.exit_code() not in (None, 0)]
                primary = [rank for rank in failed if not self._reported_secondary(rank, workdir)]
                if primary:
                    stop_ranks(ranks, self._grace_period)
                    return self._child_error(primary[0], workdir)
                if not running:
                    break
                if time.monotonic() >= deadline:
                    hung = self._hung_error(
                        running, 0, text, [rank.rank for rank in failed], workdir
                    )
                    stop_ranks(ranks, self._grace_period)
                    return hung
                time.sleep(_POLL_SECONDS)
        stop_ranks(ranks, self._grace_period)
        return LaunchError(f"rank 0 failed:\n{text}", rank=0)

    def _hung_error(
        self,
        running: list[PopenRank],
        secondary: int,
        secondary_text: str,
        also_secondary: list[int],
        workdir: Path,
    ) -> LaunchError:
        """Blame ``running[0]`` (still running a grace period after rank ``secondary``
        failed with a secondary error), with its stacks when it can give them."""
        culprit = running[0]
        stack = request_stack(culprit, workdir / f"rank-{culprit.rank}.traceback.stack")
        message = hung_rank_message(
            [rank.rank for rank in running],
            secondary,
            secondary_text,
            self._grace_period,
            stack,
            also_secondary=also_secondary,
        )
        return LaunchError(message, rank=culprit.rank)

    @staticmethod
    def _read_report(rank: PopenRank, workdir: Path) -> tuple[str, str]:
        """``(kind, traceback)`` that the rank wrote (kind: ``primary`` or ``secondary``);
        ``("", "")`` if it wrote none."""
        try:
            text = (workdir / f"rank-{rank.rank}.traceback").read_text(encoding="utf-8")
        except OSError:
            return "", ""
        kind, _, body = text.partition("\n")
        if kind not in (_PRIMARY, _SECONDARY):
            return "", text
        return kind, body

    def _reported_secondary(self, rank: PopenRank, workdir: Path) -> bool:
        """Whether a rank that exited with a non-zero code reported a secondary error (an
        exit by a signal, or without a report, is primary)."""
        code = rank.exit_code()
        return code is not None and code > 0 and self._read_report(rank, workdir)[0] == _SECONDARY

    def _report_text(self, rank: PopenRank, workdir: Path) -> str:
        code = rank.exit_code()
        text = self._read_report(rank, workdir)[1]
        if text:
            return text
        return f"it {describe_exit_code(code)}." if code is not None else "it failed."

    def _child_error(self, rank: PopenRank, workdir: Path) -> LaunchError:
        code = rank.exit_code()
        how = describe_exit_code(code) if code is not None else "was stopped"
        text = self._read_report(rank, workdir)[1]
        if text:
            return LaunchError(f"rank {rank.rank} failed ({how}):\n{text}", rank=rank.rank)
        if code is not None and code < 0:
            return LaunchError(f"rank {rank.rank} {how}.", rank=rank.rank)
        return LaunchError(
            f"rank {rank.rank} {how} without reporting a traceback (it failed before or "
            "outside launch(); see its stderr above).",
            rank=rank.rank,
        )


def script_command() -> list[str]:
    """The command line that re-runs this process's script: ``[python, script, *args]``, or
    ``[python, -m, module, *args]`` when it was started with ``-m``.

    Raises :class:`~trainspec.ConfigurationError` in an interactive session (a REPL, a
    notebook, ``python -c``), where there is no script to re-run.
    """
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main is None or main_file is None or hasattr(sys, "ps1") or sys.flags.interactive:
        raise ConfigurationError(
            f"{_NAME} re-runs the script for the other ranks, but this is an interactive "
            "session with no script to re-run; use MultiprocessingLauncher "
            "(start_method='spawn' or 'fork') here."
        )
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        module = spec.name.removesuffix(".__main__")
        return [sys.executable, "-m", module, *sys.argv[1:]]
    return [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]


def _run_rank_zero_alone(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    try:
        return function(*args, **kwargs)
    except Exception as error:
        text = "".join(traceback.format_exception(error))
        raise LaunchError(f"rank 0 failed:\n{text}", rank=0) from error


def _run_started_rank(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if path:
        enable_stack_dump(f"{path}.stack")
    try:
        return function(*args, **kwargs)
    except BaseException as error:
        if path:
            kind = _SECONDARY if is_secondary(error) else _PRIMARY
            text = kind + "\n" + "".join(traceback.format_exception(error))
            staging = f"{path}.partial"
            try:
                Path(staging).write_text(text, encoding="utf-8")
                os.replace(staging, path)
            except OSError:
                pass  # the launcher still reports the exit code
        raise
