"""``MemoryCheckpointIO``: checkpoints kept in a dict in this process.

Public and meant for tests: a trainer's checkpoint logic can be exercised without touching a
disk, a test can corrupt or inspect the stored bytes through :attr:`MemoryCheckpointIO.store`,
and ``capacity_bytes`` simulates a full disk.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from typing import TYPE_CHECKING, ClassVar

from trainspec.checkpoint_io import CheckpointIO

from ._checks import check_checkpoint, check_map_location
from ._errors import interruption, translate
from .torch_io import FORMAT, decode_torch, encode_torch

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["MemoryCheckpointIO"]


class MemoryCheckpointIO(CheckpointIO):
    """Keeps each checkpoint as the bytes ``torch.save`` would write, keyed by path.

    Storing serialised bytes (rather than references) makes every save a deep snapshot: later
    changes to the saved tensors do not leak into the store, and a load returns fresh tensors
    with their dtypes, strides and shared storage, exactly as :class:`TorchCheckpointIO`.

    Args:
        store: the mapping to keep checkpoints in, from ``os.fspath(path)`` to bytes. Pass one
            to share checkpoints between instances; the default is a new private dict.
            Paths are compared as strings: ``"a/b"`` and ``"./a/b"`` are different keys, and
            URLs are just keys (nothing is imported for them).
        weights_only: as for :class:`TorchCheckpointIO` (CKPT-8).
        capacity_bytes: if set, a save that would make the store hold more bytes raises
            :class:`~trainspec.CheckpointWriteError` (a simulated full disk, CKPT-6).

    "Directories" do not exist: CKPT-2 holds trivially. A save replaces the entry in one
    assignment after encoding succeeded, so it is atomic (CKPT-3). No ``storage_options`` key
    is supported (CKPT-5).

    Thread-safety: every method **may** be called from several threads; one lock guards the
    store (encoding and decoding run outside it).
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset(
        {"python_objects", "strided_tensors", "shared_storage", "pickle"}
    )
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""

    def __init__(
        self,
        store: MutableMapping[str, bytes] | None = None,
        *,
        weights_only: bool = True,
        capacity_bytes: int | None = None,
    ) -> None:
        if capacity_bytes is not None and capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0 or None; got {capacity_bytes}")
        self._store: MutableMapping[str, bytes] = {} if store is None else store
        self._weights_only = weights_only
        self._capacity = capacity_bytes
        self._lock = threading.Lock()

    @property
    def store(self) -> MutableMapping[str, bytes]:
        """The live mapping from path keys to stored bytes (not a copy)."""
        return self._store

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(<{len(self._store)} checkpoints>, "
            f"weights_only={self._weights_only}, capacity_bytes={self._capacity})"
        )

    @staticmethod
    def _key(path: PathLike) -> str:
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"MemoryCheckpointIO paths must be str or os.PathLike[str]; got {path!r}"
            )
        key = os.fspath(path)
        if not isinstance(key, str):
            raise TypeError(f"MemoryCheckpointIO paths must be str; got bytes {key!r}")
        return key

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Store a snapshot of ``checkpoint`` under ``path`` (CKPT-1..6); **must not** modify
        ``checkpoint``. ``TypeError`` for unpicklable values or any ``storage_options`` key;
        :class:`~trainspec.CheckpointWriteError` when ``capacity_bytes`` would be exceeded."""
        check_checkpoint(checkpoint, type(self).__name__)
        key = self._key(path)
        if storage_options:
            raise TypeError(
                f"unsupported storage_options {sorted(storage_options)} for "
                f"{type(self).__name__}; supported keys: none"
            )
        buffer = io.BytesIO()
        try:
            encode_torch(checkpoint, buffer)
        except Exception as exc:
            interrupted = interruption(exc)  # e.g. a KeyboardInterrupt torch wrapped
            if interrupted is not None:
                raise interrupted from None
            raise translate(exc, stage="encode", path=key, fmt=FORMAT) from exc
        data = buffer.getvalue()
        with self._lock:
            if self._capacity is not None:
                used = sum(len(v) for k, v in self._store.items() if k != key)
                if used + len(data) > self._capacity:
                    full = OSError(
                        errno.ENOSPC,
                        f"{len(data)} more bytes do not fit: {used} of {self._capacity} "
                        "capacity_bytes are used",
                    )
                    raise translate(full, stage="write", path=key, fmt=FORMAT) from full
            self._store[key] = data

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Return a fresh copy of the checkpoint stored under ``path`` (CKPT-7..10)."""
        check_map_location(map_location)
        key = self._key(path)
        with self._lock:
            data = self._store.get(key)
        if data is None:
            missing = FileNotFoundError(errno.ENOENT, "not in the store", key)
            raise translate(missing, stage="read", path=key, fmt=FORMAT) from missing
        try:
            return decode_torch(io.BytesIO(data), map_location, weights_only=self._weights_only)
        except Exception as exc:  # a MemoryError included: CheckpointError, it does not fit
            interrupted = interruption(exc)
            if interrupted is not None:
                raise interrupted from None
            raise translate(exc, stage="decode", path=key, fmt=FORMAT) from exc

    def remove_checkpoint(self, path: PathLike) -> None:
        """Forget ``path``; a missing key is fine (CKPT-11)."""
        key = self._key(path)
        with self._lock:
            self._store.pop(key, None)

    def teardown(self) -> None:
        """Keeps the store (it is the point of the class); idempotent (CKPT-12)."""
