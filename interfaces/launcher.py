"""The Launcher protocol: how the ranks of a run are started.

The contract, lifecycle first, is the docstring of :class:`Launcher`
(``help(trainspec.Launcher)``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import ParamSpec, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Launcher"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


@runtime_checkable
class Launcher(Protocol):
    """Starts the ranks of a run and runs a function on each.

    Lifecycle (on the main process only)::

        1) launch(function, *args, **kwargs)  -- starts the ranks, runs function on each,
                                                 waits for all of them
        2) the return value is rank 0's result

    Implementations: re-running the script in subprocesses, multiprocessing spawn, or nothing at
    all (when the cluster environment already started the ranks, ``launch`` calls ``function``
    directly).

    Clauses LAUNCH-1 ... LAUNCH-4 in docs/spec.md.
    """

    @property
    @abstractmethod
    def is_interactive_compatible(self) -> bool:
        """Whether ``launch`` works from an interactive session (a notebook, a REPL), where the
        main script cannot be re-run (LAUNCH-1)."""

    @abstractmethod
    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function(*args, **kwargs)`` on every rank and return rank 0's result.

        **Must** return only after every rank it started has exited (LAUNCH-2). If any rank
        fails, **must** stop the others and raise :class:`~trainspec.LaunchError` naming the
        failing rank with its traceback or signal name (LAUNCH-3). **Must not** leave a
        process running after it returns or raises (LAUNCH-4).
        """
