"""``XLALauncher``: start one rank per XLA device with ``torch_xla``'s ``xmp.spawn``.

Not verified here: this path needs several XLA devices (a TPU host). The CPU lane
(``scripts/xla_lane.sh``) covers the single-device path only.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import queue
import traceback
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from typing_extensions import ParamSpec

from trainspec.errors import ConfigurationError, LaunchError
from trainspec.launcher import Launcher
from trainspec.reference.cluster_environments._variables import find_free_port
from trainspec.reference.launchers._supervision import check_num_processes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["XLALauncher"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_NAME: Final = "XLALauncher"


class XLALauncher(Launcher):
    """Run the function on every XLA device of this host with ``xmp.spawn`` and return
    rank 0's result (LAUNCH-1 ... LAUNCH-4).

    Before spawning it sets ``MASTER_ADDR``/``MASTER_PORT`` (a free port) for the ranks' CPU
    group and restores them afterwards. Each rank reports its result or its traceback through
    a manager queue; a rank that raises makes ``xmp.spawn`` (a process pool) fail, and the
    launcher raises :class:`~trainspec.LaunchError` naming that rank. The process pool stops
    and joins its workers before ``xmp.spawn`` returns or raises.

    ``xmp.spawn`` decides the number of processes itself (one per device of the host, or 1):
    ``num_processes`` is only used to ask for a single process. The function, its arguments
    and rank 0's result **must** be picklable (moved to CPU first when they are tensors).

    Not guaranteed: a rank killed by a signal is reported by the process pool without its
    rank number.
    """

    def __init__(
        self, num_processes: int, start_method: Literal["spawn", "fork"] = "spawn"
    ) -> None:
        """``num_processes >= 1``; ``start_method`` ``"spawn"`` (default) or ``"fork"``."""
        self._num_processes = check_num_processes(num_processes, _NAME)
        if start_method not in ("spawn", "fork"):
            raise ConfigurationError(
                f"{_NAME}: start_method must be 'spawn' or 'fork'; got {start_method!r}."
            )
        self._start_method = start_method

    def __repr__(self) -> str:
        return f"{_NAME}(num_processes={self._num_processes}, start_method={self._start_method!r})"

    @property
    def is_interactive_compatible(self) -> bool:
        """``True`` for ``"fork"`` only (LAUNCH-1)."""
        return self._start_method == "fork"

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function(*args, **kwargs)`` on every XLA rank; rank 0's result."""
        try:
            xmp = importlib.import_module("torch_xla.distributed.xla_multiprocessing")
        except Exception as error:
            raise ConfigurationError(
                f"{_NAME}: torch_xla is needed to start XLA ranks ({error})."
            ) from error
        context = multiprocessing.get_context(self._start_method)
        with context.Manager() as manager, _rendezvous_variables():
            reports = manager.Queue()
            nprocs = 1 if self._num_processes == 1 else None
            try:
                xmp.spawn(
                    _run_xla_rank,
                    args=(function, args, kwargs, reports),
                    nprocs=nprocs,
                    start_method=self._start_method,
                )
            except Exception as error:
                failures = [r for r in _drain(reports) if r[0] == "error"]
                if failures:
                    _, rank, text = failures[0]
                    raise LaunchError(f"rank {rank} failed:\n{text}", rank=int(rank)) from error
                raise LaunchError(f"an XLA rank failed: {error!r}", rank=None) from error
            for kind, rank, payload in _drain(reports):
                if kind == "ok" and rank == 0:
                    result: _R = payload  # type: ignore[assignment]
                    return result
        raise LaunchError(f"{_NAME}: rank 0 finished without reporting a result.", rank=0)


@contextlib.contextmanager
def _rendezvous_variables() -> Iterator[None]:
    variables = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(find_free_port())}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _drain(reports: queue.Queue[tuple[str, int, object]]) -> list[tuple[str, int, object]]:
    items: list[tuple[str, int, object]] = []
    while True:
        try:
            items.append(reports.get_nowait())
        except queue.Empty:
            return items


def _run_xla_rank(
    index: int,
    function: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    reports: queue.Queue[tuple[str, int, object]],
) -> None:
    """One XLA rank: ``index`` is the global ordinal ``xmp.spawn`` passes first."""
    try:
        result = function(*args, **kwargs)
    except BaseException as error:
        reports.put(("error", index, "".join(traceback.format_exception(error))))
        raise
    if index == 0:
        reports.put(("ok", 0, _to_cpu(result)))


def _to_cpu(value: object) -> object:
    import torch

    if isinstance(value, torch.Tensor):
        return value.cpu()
    if type(value) is list:
        return [_to_cpu(item) for item in value]
    if type(value) is tuple:
        return tuple(_to_cpu(item) for item in value)
    if type(value) is dict:
        return {key: _to_cpu(item) for key, item in value.items()}
    return value
