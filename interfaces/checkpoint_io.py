"""The CheckpointIO protocol: a checkpoint dict to and from storage.

The contract, lifecycle first, is the docstring of :class:`CheckpointIO`
(``help(trainspec.CheckpointIO)``); asynchronous IO, :class:`AsyncCheckpointIO`, adds clauses
ACKPT-1 ... ACKPT-5.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["AsyncCheckpointIO", "CheckpointIO"]


@runtime_checkable
class CheckpointIO(Protocol):
    """Moves checkpoints between memory and one kind of storage.

    Lifecycle::

        1) save_checkpoint(checkpoint, path)   -- any number of times, any paths
        2) load_checkpoint(path)               -- sees the latest completed save of that path
        3) remove_checkpoint(path)             -- idempotent
        4) teardown()                          -- idempotent; the instance may be used again

    A CheckpointIO knows nothing about ranks: the strategy decides which rank writes and makes the
    others wait. It is called from one thread at a time unless an implementation documents more.

    Clauses CKPT-1 ... CKPT-14 in docs/spec.md (:class:`AsyncCheckpointIO` adds its own).
    """

    @abstractmethod
    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Write ``checkpoint`` to ``path``, replacing what was there.

        **Must**:

        - store everything a later :meth:`load_checkpoint` needs to return an equal checkpoint:
          nested dicts, lists and tuples, tensors with their dtype, shape, strides and values,
          views that share storage still sharing it, Python ints, floats, bools, strings and
          ``None`` (CKPT-1; an implementation may declare a narrower value set, e.g. tensors
          only, and then **must** raise ``TypeError`` for anything outside it);
        - create missing parent directories (CKPT-2);
        - be atomic: a concurrent or later reader sees the previous complete checkpoint or the
          new complete one, never a partial file, even if the process is killed mid-write;
          no temporary file is left that a later save does not clean up (CKPT-3);
        - not modify ``checkpoint`` or anything in it (CKPT-4);
        - raise ``TypeError`` for a ``storage_options`` key it does not support (CKPT-5);
        - raise :class:`~trainspec.CheckpointWriteError` when storage refuses the write,
          leaving the previous checkpoint intact (CKPT-6);
        - refuse a FIFO, device or socket at a local ``path`` with ``CheckpointWriteError``
          naming the path and its type, leaving it in place (CKPT-13);
        - let a ``KeyboardInterrupt`` (any ``BaseException`` that is not an ``Exception``)
          raised during the save propagate as itself, never translated, wrapped or discarded,
          leaving the previous or the new checkpoint (CKPT-14).
        """

    @abstractmethod
    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Read the checkpoint at ``path``.

        **Must** return a checkpoint equal to the one saved (CKPT-1), place tensors according to
        ``map_location`` (CKPT-7), and be safe by default: content that would execute code when
        loaded raises :class:`~trainspec.UnsafeCheckpointError` unless the implementation was
        explicitly configured to trust it (CKPT-8). A missing path **must** raise
        :class:`~trainspec.CheckpointNotFoundError` (a ``FileNotFoundError``, CKPT-9); a path
        that exists but is not a complete checkpoint (empty, truncated, random bytes, another
        format, a directory) **must** raise :class:`~trainspec.CheckpointCorruptedError`
        naming the path (CKPT-10); so **must** a FIFO, device or socket, without blocking
        (CKPT-13). A ``KeyboardInterrupt`` raised during the load **must** propagate as itself
        and change nothing at ``path`` (CKPT-14).
        """

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete the checkpoint at ``path``; afterwards loading it raises
        ``CheckpointNotFoundError``. Removing a missing path **must not** raise (CKPT-11); a
        FIFO, device or socket at ``path`` is refused with ``CheckpointWriteError`` and left in
        place (CKPT-13)."""

    @abstractmethod
    def teardown(self) -> None:
        """Release resources (threads, connections). **Must** be idempotent; the instance
        **may** be used again afterwards (CKPT-12)."""


@runtime_checkable
class AsyncCheckpointIO(CheckpointIO, Protocol):
    """A CheckpointIO whose saves complete in the background.

    Everything in :class:`CheckpointIO` holds once a save has completed, plus:

    - ``save_checkpoint`` returns before the write is done but snapshots the checkpoint at call
      time: mutating a tensor after the call **must not** change what is written (ACKPT-1);
    - an error from a background save **must** be raised by the next ``save_checkpoint``,
      ``load_checkpoint``, ``remove_checkpoint``, :meth:`wait` or ``teardown`` call (ACKPT-2);
    - loading or removing a path with a pending save **must** wait for that save first
      (ACKPT-3);
    - ``teardown`` **must** wait for every pending save (ACKPT-4).
    """

    @abstractmethod
    def wait(self) -> None:
        """Block until every pending save has completed; raise the first background error, if
        any, once (ACKPT-5)."""
