"""The messages between a :class:`~trainspec.conformance.distributed.World` and its ranks.

One duplex pipe per rank. The parent sends a task; the rank answers with exactly one result
per task, and may send exchange requests (:meth:`RankContext.exchange`) while the task runs,
each answered by the parent once every rank has sent the same exchange::

    parent -> rank   WorkerConfig (at start, as the process argument)
    rank -> parent   ("ready", pid)  |  ("start_failed", traceback)
    parent -> rank   RunTask | PlanTask | StopTask
    rank -> parent   ("exchange", task_id, seq, payload)       zero or more, while a task runs
    parent -> rank   ("exchanged", task_id, seq, [payload, ...])  |  ("exchange_failed", ..., why)
    rank -> parent   ("result", task_id, {...})

Everything here is plain data: payloads of exchanges are pickled by the rank and forwarded as
bytes, so the parent never unpickles a rank's objects (and never needs torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trainspec.conformance.distributed.spec import TargetSpec

__all__ = ["PlanTask", "RunTask", "StopTask", "WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    """How one rank process starts: its identity, its files, its environment variables."""

    rank: int
    world_size: int
    local_rank: int
    device: str
    """This rank's device, e.g. ``"cpu"`` or ``"cuda:1"``."""
    backend: str
    main_address: str
    env: Mapping[str, str]
    """Set in ``os.environ`` before anything is imported (RANK, WORLD_SIZE, ...)."""
    stderr_path: str
    stack_path: str
    parent_pid: int
    preload: tuple[str, ...] = ()
    """Modules imported once at start, so that checks do not pay for them."""
    death_signal: bool = False
    """Whether the rank may ask the kernel to kill it when its parent dies
    (``PR_SET_PDEATHSIG``): only when the thread that started it lives as long as the parent
    process (the main thread), since the kernel fires on the exit of that thread."""


@dataclass(frozen=True)
class RunTask:
    """Run one check (a registered name or ``"module:function"``) against ``spec``."""

    task_id: int
    check: str
    spec: TargetSpec
    main_port: int
    shared_dir: str
    blocked: Mapping[str, str] = field(default_factory=dict)
    """Members of the target that hung in an earlier check -> why: a call of one of them
    ends the check as ``blocked`` instead of hanging again."""


@dataclass(frozen=True)
class PlanTask:
    """On rank 0 only: validate ``spec`` with the kit's runner, run the structure layer and
    list the checks of ``layers`` (filtered by ``select``) to run."""

    task_id: int
    spec: TargetSpec
    layers: tuple[str, ...]
    select: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StopTask:
    """Leave the task loop and exit normally."""
