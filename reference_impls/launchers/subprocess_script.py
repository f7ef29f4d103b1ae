"""``SubprocessScriptLauncher``: start ranks 1..N-1 by re-running the script.

Rank 0 is the process that calls :meth:`~SubprocessScriptLauncher.launch`; it starts the
other ranks as new processes of the same command line (``python script.py args`` or
``python -m module args``), each described to :class:`~trainspec.reference.environments.
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

from trainspec.errors import CollectiveError, ConfigurationError, LaunchError
from trainspec.launcher import Launcher
from trainspec.reference.environments.local import LocalEnvironment
from trainspec.reference.launchers._supervision import (
    DEFAULT_GRACE_PERIOD,
    PopenRank,
    check_grace_period,
    check_num_processes,
    describe_exit_code,
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
"""Where a started rank writes the traceback of an exception that escapes the function."""

_POLL_SECONDS: Final = 0.05


class SubprocessScriptLauncher(Launcher):
    """Run the function on ``num_processes`` ranks of this machine: this process is rank 0,
    the others re-run the script (LAUNCH-1 ... LAUNCH-4).

    ``launch`` returns rank 0's result after every started rank has exited with code 0 (it
    waits for them without a time limit).
    If a rank fails it stops the others (SIGTERM to each rank's process group, SIGKILL after
    ``grace_period`` seconds) and raises :class:`~trainspec.LaunchError` naming the rank,
    with the traceback the rank wrote (through :data:`ERROR_FILE_VARIABLE`) or the signal
    that killed it. When rank 0 fails with a :class:`~trainspec.CollectiveError` (a peer
    died) the launcher waits up to ``grace_period`` for the rank that caused it and blames
    that one. A ``KeyboardInterrupt`` stops every rank and is re-raised as it is.

    Not guaranteed: rank 0 runs in this process, so another rank's failure reaches it only
    through its next collective (which raises :class:`~trainspec.PeerFailureError`), or when
    its function returns. Not usable interactively (:attr:`is_interactive_compatible` is
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
            failed = self._wait_for_ranks(ranks)
            if failed is not None:
                stop_ranks(ranks, self._grace_period)
                raise self._child_error(failed, workdir)
            return result
        finally:
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

    def _wait_for_ranks(self, ranks: list[PopenRank]) -> PopenRank | None:
        """Wait until every rank exited; the first that failed, or ``None``."""
        while True:
            running = False
            for rank in ranks:
                code = rank.exit_code()
                if code is None:
                    running = True
                elif code != 0:
                    return rank
            if not running:
                return None
            time.sleep(_POLL_SECONDS)

    def _failure_after_rank_zero_error(
        self, error: Exception, ranks: list[PopenRank], workdir: Path
    ) -> LaunchError:
        # A collective error on rank 0 is usually the echo of another rank's failure: give
        # that rank the grace period to exit, and blame it if it does.
        if isinstance(error, CollectiveError):
            deadline = time.monotonic() + self._grace_period
            while time.monotonic() < deadline:
                for rank in ranks:
                    code = rank.exit_code()
                    if code is not None and code != 0:
                        stop_ranks(ranks, self._grace_period)
                        return self._child_error(rank, workdir)
                time.sleep(_POLL_SECONDS)
        stop_ranks(ranks, self._grace_period)
        text = "".join(traceback.format_exception(error))
        return LaunchError(f"rank 0 failed:\n{text}", rank=0)

    def _child_error(self, rank: PopenRank, workdir: Path) -> LaunchError:
        code = rank.exit_code()
        how = describe_exit_code(code) if code is not None else "was stopped"
        report = workdir / f"rank-{rank.rank}.traceback"
        try:
            text = report.read_text(encoding="utf-8")
        except OSError:
            text = ""
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
    try:
        return function(*args, **kwargs)
    except BaseException as error:
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if path:
            text = "".join(traceback.format_exception(error))
            staging = f"{path}.partial"
            try:
                Path(staging).write_text(text, encoding="utf-8")
                os.replace(staging, path)
            except OSError:
                pass  # the launcher still reports the exit code
        raise
