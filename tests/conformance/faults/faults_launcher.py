"""Fault-seeded launchers; ``clause`` names the clause whose check must reject each.

:class:`SwallowsRankFailureLauncher` subclasses the reference ``MultiprocessingLauncher``.
:class:`LeavesRanksRunningLauncher` is a small launcher of its own (the reference one offers
no public seam to skip stopping its ranks): correct except that it raises as soon as one
rank fails, without stopping the others. It records what it started so the tests can stop
the processes it leaks.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
from typing import TYPE_CHECKING, ClassVar, TypeVar

from typing_extensions import ParamSpec

from trainspec.errors import LaunchError
from trainspec.launcher import Launcher
from trainspec.reference.launchers.spawn import MultiprocessingLauncher

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

_P = ParamSpec("_P")
_R = TypeVar("_R")


class SwallowsRankFailureLauncher(MultiprocessingLauncher):
    """Returns None instead of raising when a rank fails (the failure is swallowed)."""

    clause: ClassVar[str] = "LAUNCH-3"
    ranks: ClassVar[int] = 1

    def __init__(self) -> None:
        super().__init__(1, "spawn", grace_period=1.0)

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return super().launch(function, *args, **kwargs)
        except LaunchError:
            return None  # type: ignore[return-value]


def _rank_main(
    rank: int, function: Callable[..., object], args: tuple[object, ...], writer: Connection
) -> None:
    os.environ["RANK"] = str(rank)
    result = function(*args)  # an exception exits the process with code 1
    writer.send(result if rank == 0 else None)
    writer.close()


class LeavesRanksRunningLauncher(Launcher):
    """Raises LaunchError for a failed rank without stopping the other ranks."""

    clause: ClassVar[str] = "LAUNCH-4"
    ranks: ClassVar[int] = 2
    started: ClassVar[list[BaseProcess]] = []

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        context = multiprocessing.get_context("spawn")
        processes = []
        readers = []
        for rank in range(self.ranks):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_rank_main, args=(rank, function, args, writer))
            process.start()
            writer.close()
            type(self).started.append(process)
            processes.append(process)
            readers.append(reader)
        waiting = list(processes)
        while waiting:
            multiprocessing.connection.wait([p.sentinel for p in waiting])
            for rank, process in enumerate(processes):
                if process in waiting and process.exitcode is not None:
                    waiting.remove(process)
                    if process.exitcode != 0:
                        # The seeded fault: the other ranks are left running.
                        raise LaunchError(f"rank {rank} exited with {process.exitcode}", rank=rank)
        result: _R = readers[0].recv()
        for process in processes:
            process.join()
        return result

    @classmethod
    def stop_leftovers(cls) -> None:
        """Terminate and join every process any instance started."""
        for process in cls.started:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
        cls.started.clear()


FAULTS: tuple[type[Launcher], ...] = (SwallowsRankFailureLauncher, LeavesRanksRunningLauncher)
"""Every fault-seeded launcher; each class's ``clause`` is the clause that rejects it."""
