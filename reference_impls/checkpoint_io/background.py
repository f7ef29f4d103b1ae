"""``BackgroundCheckpointIO``: saves of another CheckpointIO, done by a worker thread.

Lifecycle::

    1) save_checkpoint(ckpt, path)  -- (caller) waits while ``max_pending`` saves are pending,
                                       snapshots ``ckpt`` (tensor storages copied) and ``path``
                                       (a relative path made absolute), queues it
    2) (worker thread)              -- inner.save_checkpoint(snapshot, path), in call order
    3) load / remove of a path      -- (caller) waits for that path's pending saves first
    4) wait()                       -- (caller) waits for all pending saves
    5) teardown()                   -- waits for all, stops the worker, tears the inner IO down;
                                       a later save starts a new worker

An error from a background save is raised, once, by the next ``save_checkpoint``,
``load_checkpoint``, ``remove_checkpoint``, ``wait`` or ``teardown`` (ACKPT-2). The call
that raises it does not do its own work, except ``teardown``, which finishes tearing down
first.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Final

from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO

from ._checks import check_checkpoint
from ._snapshot import BufferPool, snapshot
from .memory import MemoryCheckpointIO
from .safetensors_io import SafetensorsCheckpointIO
from .torch_io import TorchCheckpointIO

if TYPE_CHECKING:
    import torch

    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["BackgroundCheckpointIO"]

_KEEPS_NO_REFERENCES: tuple[type[CheckpointIO], ...] = (
    TorchCheckpointIO,
    SafetensorsCheckpointIO,
    MemoryCheckpointIO,
)
_LIVE: weakref.WeakSet[BackgroundCheckpointIO] = weakref.WeakSet()
_LOCAL_URL_PREFIXES: Final = ("file://", "local://")
_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


@atexit.register
def _finish_pending_saves() -> None:
    # Worker threads are daemons (a forgotten teardown must not hang interpreter exit), so
    # pending saves are finished here instead; their errors can only be reported.
    for io in list(_LIVE):
        try:
            io.wait()
        except Exception as exc:  # nobody left to raise to
            print(f"trainspec: background checkpoint save failed at exit: {exc!r}", file=sys.stderr)


class _Job:
    """One save: ``counted`` once it is in the pending counts, ``finished`` once the worker
    has written it and taken it out of them again."""

    __slots__ = ("checkpoint", "counted", "finished", "key", "path", "storage_options", "storages")

    def __init__(self, path: PathLike, key: str) -> None:
        self.checkpoint: Checkpoint = {}
        self.storages: list[torch.UntypedStorage] = []
        self.path = path
        self.key = key
        self.storage_options: StorageOptions = None
        self.counted = False
        self.finished = False


class BackgroundCheckpointIO(AsyncCheckpointIO):
    """Makes any :class:`~trainspec.CheckpointIO` asynchronous (ACKPT-1..5).

    Args:
        inner: the IO that does the writing; default :class:`TorchCheckpointIO`. Its
            ``save_checkpoint`` runs on a worker thread, so it **must** tolerate a save on
            that thread while the caller's thread loads or removes *other* paths (every IO in
            this package does).
        max_pending: how many saves may be snapshotted but not yet written; a save beyond it
            blocks until the oldest finishes. Each pending save holds one copy of its
            checkpoint's tensors in memory, so this bounds the extra memory.
        reuse_buffers: keep the tensor storages of written snapshots (at most ``max_pending``
            snapshots' worth) and copy the next snapshot into them, which is several times
            faster than allocating fresh memory when shapes repeat, as they do in training.
            Safe only if ``inner`` keeps no reference to a checkpoint after its
            ``save_checkpoint`` returns. ``None`` (default) turns it on for the inner IOs of
            this package, which keep none, and off for any other. :meth:`teardown` releases
            the kept storages.

    ``save_checkpoint`` blocks for the snapshot only: one copy of each tensor storage
    (plus any wait for ``max_pending``). Serialising and writing happen on the worker.
    Argument errors (a non-dict checkpoint) raise at once; an unsupported ``storage_options``
    key is found by the inner IO and so surfaces like any background error.

    Thread-safety: every method **may** be called from several threads; one lock guards the
    queue and error state, and saves are written in the order their ``save_checkpoint`` calls
    took the lock. The worker is a daemon thread; at interpreter exit pending saves are
    finished by an ``atexit`` hook, but call :meth:`teardown` to see their errors.
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset(
        {"local_paths", "python_objects", "strided_tensors", "shared_storage", "pickle"}
    )
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""
    conformance_options: ClassVar[dict[str, object]] = {
        "trusted_factory": "trainspec.conformance.builtin_targets:trusted_background_io"
    }
    """Options of its conformance run (``trainspec verify`` reads them)."""

    def __init__(
        self,
        inner: CheckpointIO | None = None,
        *,
        max_pending: int = 1,
        reuse_buffers: bool | None = None,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1; got {max_pending}")
        self._inner: CheckpointIO = TorchCheckpointIO() if inner is None else inner
        self._max_pending = max_pending
        if reuse_buffers is None:
            reuse_buffers = type(self._inner) in _KEEPS_NO_REFERENCES
        self._pool = BufferPool(max_pending) if reuse_buffers else None
        # Entered as `with self._lock:` (C, so no signal handler runs between taking the
        # lock and the block's protection); waited on through _wait_locked.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: deque[_Job] = deque()
        self._pending_by_key: dict[str, int] = {}
        self._pending = 0  # queued plus the one being written
        self._errors: list[BaseException] = []
        self._worker: threading.Thread | None = None
        _LIVE.add(self)

    @property
    def inner(self) -> CheckpointIO:
        """The checkpoint IO that performs the writes, loads and removals."""
        return self._inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r}, max_pending={self._max_pending})"

    def _at_call_time(self, path: PathLike) -> PathLike:
        """``path`` as the inner IO must see it: a relative local path joined to the working
        directory *now*, so that a ``chdir`` before the worker writes changes nothing
        (ACKPT-1). URLs, absolute paths and the keys of a :class:`MemoryCheckpointIO` (not
        files) are passed unchanged; a path of the wrong type is left for the inner IO to
        refuse. Loads and removes use the same spelling, so a key-value inner IO sees one
        key per checkpoint."""
        if isinstance(self._inner, MemoryCheckpointIO):
            return path
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            return path
        text = os.fspath(path)
        if not isinstance(text, str) or "::" in text:
            return path
        for prefix in _LOCAL_URL_PREFIXES:
            if text.startswith(prefix):
                rest = text[len(prefix) :]
                return path if os.path.isabs(rest) else prefix + os.path.join(os.getcwd(), rest)
        if _URL.match(text) or os.path.isabs(text):
            return path
        return os.path.join(os.getcwd(), text)  # not normalised: "link/.." keeps its meaning

    @staticmethod
    def _key(path: PathLike) -> str:
        text = os.fspath(path)
        if not isinstance(text, str) or "://" in text or "::" in text:
            return str(text)
        return os.path.abspath(text)

    # --- error handling ---------------------------------------------------------------------

    def _take_error_locked(self) -> BaseException | None:
        if not self._errors:
            return None
        first, rest = self._errors[0], self._errors[1:]
        self._errors.clear()
        if rest and hasattr(first, "add_note"):
            first.add_note(
                f"{len(rest)} later background save(s) also failed: "
                + "; ".join(repr(e) for e in rest)
            )
        return first

    def _raise_pending_error_locked(self) -> None:
        error = self._take_error_locked()
        if error is not None:
            raise error

    # --- worker -----------------------------------------------------------------------------

    def _wait_locked(self) -> None:
        """``self._cond.wait()``, except that an interruption always leaves with the lock held.

        ``Condition.wait`` releases the lock, then enters the ``try`` whose ``finally`` takes
        it back; a ``KeyboardInterrupt`` raised between the two leaves ``wait`` with the lock
        released, and the caller's ``with`` block would then fail to release it with a
        ``RuntimeError`` that hides the interrupt. Every caller holds the lock exactly once.
        """
        try:
            self._cond.wait()
        except BaseException:
            if not self._lock._is_owned():  # type: ignore[attr-defined]  # C RLock helper
                self._lock.acquire()
            raise

    def _release_leaked_lock(self) -> None:
        """Release what this thread still holds of the lock outside any ``with`` block.

        ``with self._lock:`` on the C lock cannot leak a level (no signal handler runs
        inside its ``__enter__``), but a ``with`` on a ``threading.Condition`` could (its
        ``__enter__`` is Python), and so can a caller's own ``acquire``: kept as a guard, so
        that a worker woken by ``teardown`` can always take the lock back and return. Called
        only where this thread holds no lock legitimately (before joining the worker).
        """
        while self._lock._is_owned():  # type: ignore[attr-defined]  # C RLock helper
            self._lock.release()

    def _ensure_worker_locked(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(
                target=self._run, name="trainspec-checkpoint-writer", daemon=True
            )
            self._worker.start()

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                while not self._queue and self._worker is me:
                    self._wait_locked()
                if self._worker is not me:
                    return  # torn down (teardown waited until nothing was pending)
                job = self._queue[0]
            error: BaseException | None = None
            try:
                self._inner.save_checkpoint(job.checkpoint, job.path, job.storage_options)
            except BaseException as exc:  # handed to the caller (ACKPT-2)
                error = exc
            with self._lock:
                self._queue.popleft()
                job.checkpoint = {}
                if error is not None:
                    # the traceback may still reach the snapshot: never reuse its storages
                    self._errors.append(error)
                elif self._pool is not None:
                    self._pool.give(job.storages)
                job.storages = []
                self._uncount_locked(job)
                job.finished = True
                self._cond.notify_all()

    # --- protocol ---------------------------------------------------------------------------

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Snapshot ``checkpoint`` and queue its save; returns before it is written.

        Mutating ``checkpoint`` or its tensors afterwards **must not** change what is
        written, nor may changing the working directory change where (a relative ``path``
        is resolved now; ACKPT-1). Raises a pending background error instead of saving
        (ACKPT-2).
        """
        check_checkpoint(checkpoint, type(self).__name__)
        path = self._at_call_time(path)
        job = _Job(path, self._key(path))
        try:
            with self._lock:
                self._raise_pending_error_locked()
                while self._pending >= self._max_pending:
                    self._wait_locked()
                self._raise_pending_error_locked()
                # Counted before the snapshot so that a concurrent load of this path waits.
                self._count_locked(job)
                # Take every free buffer for this snapshot; the copying runs unlocked.
                reserved = self._pool.drain() if self._pool is not None else None
            job.checkpoint, job.storages = snapshot(checkpoint, reserved)
            if storage_options is not None:
                job.storage_options = dict(storage_options)
            with self._lock:
                self._queue.append(job)
                self._ensure_worker_locked()
                self._cond.notify_all()
        except BaseException:
            # Any exception, a KeyboardInterrupt at any point above included: a queued job
            # gets written; otherwise the counts are as if this call never happened (a
            # leaked count would make wait() and teardown() -- and the exit hook -- hang).
            with self._lock:
                if not job.finished:
                    if any(queued is job for queued in self._queue):
                        self._ensure_worker_locked()
                    elif job.counted:
                        self._uncount_locked(job)
                self._cond.notify_all()
            raise

    def _count_locked(self, job: _Job) -> None:
        count = self._pending_by_key.get(job.key, 0) + 1  # an interrupt here changes nothing
        # No call between these stores: CPython runs signal handlers (KeyboardInterrupt) only
        # at calls and loop jumps, so none can fall between them and leave a half count.
        self._pending += 1
        self._pending_by_key[job.key] = count
        job.counted = True

    def _uncount_locked(self, job: _Job) -> None:
        left = self._pending_by_key.get(job.key, 0) - 1
        self._pending -= 1
        if left > 0:
            self._pending_by_key[job.key] = left
        else:
            self._pending_by_key.pop(job.key, None)
        job.counted = False

    def _wait_for_key(self, key: str) -> None:
        with self._lock:
            while self._pending_by_key.get(key, 0) > 0:
                self._wait_locked()
            self._raise_pending_error_locked()

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Wait for pending saves of ``path`` (ACKPT-3), raise a pending background error if
        any (ACKPT-2), then load through the inner IO."""
        path = self._at_call_time(path)
        self._wait_for_key(self._key(path))
        return self._inner.load_checkpoint(path, map_location)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Wait for pending saves of ``path`` (ACKPT-3), raise a pending background error if
        any, then remove through the inner IO (idempotent, CKPT-11)."""
        path = self._at_call_time(path)
        self._wait_for_key(self._key(path))
        self._inner.remove_checkpoint(path)

    def wait(self) -> None:
        """Block until every pending save is written; raise the first background error since
        the last report, once (ACKPT-5)."""
        with self._lock:
            while self._pending > 0:
                self._wait_locked()
            self._raise_pending_error_locked()

    def teardown(self) -> None:
        """Wait for every pending save (ACKPT-4), stop the worker and tear the inner IO down,
        then raise the first unreported background error, if any. Idempotent; a later save
        starts a new worker (CKPT-12)."""
        with self._lock:
            while self._pending > 0:
                self._wait_locked()
            worker = self._worker
            self._worker = None  # the worker sees this and returns
            if self._pool is not None:
                self._pool.clear()
            self._cond.notify_all()
        if worker is not None and worker is not threading.current_thread():
            self._release_leaked_lock()
            worker.join()
        try:
            self._inner.teardown()
        finally:
            with self._lock:
                self._raise_pending_error_locked()
