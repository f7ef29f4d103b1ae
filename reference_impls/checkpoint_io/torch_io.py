"""``TorchCheckpointIO``: checkpoints as ``torch.save`` files, locally or behind fsspec.

The default checkpoint IO of every reference strategy. Writes are atomic (temporary file,
``fsync``, rename, directory ``fsync``; see :mod:`._storage`), loads are weights-only unless
the instance is built with ``weights_only=False``.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

import torch

from trainspec.checkpoint_io import CheckpointIO

from . import _storage
from ._checks import check_checkpoint, check_map_location
from ._errors import UnsafeContentError

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["TorchCheckpointIO", "decode_torch", "encode_torch"]

FORMAT = "torch.save"
_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL (\S+)")
_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def encode_torch(checkpoint: Checkpoint, file: IO[bytes]) -> None:
    """Write ``checkpoint`` to ``file`` with ``torch.save`` (zip format). Does not modify it."""
    torch.save(checkpoint, file)


def _unsafe_globals(file: IO[bytes], error: pickle.UnpicklingError) -> tuple[str, ...] | None:
    """The globals a weights-only load refused, or ``None`` when the failure was not about
    globals or a refused name is not even a dotted identifier (the bytes are then damaged
    rather than unsafe)."""
    names = _refused_globals(file, error)
    if names is None or not all(_DOTTED_NAME.match(name) for name in names):
        return None
    return names


def _refused_globals(file: IO[bytes], error: pickle.UnpicklingError) -> tuple[str, ...] | None:
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is not None:
        try:
            file.seek(0)
            names = tuple(finder(file))
        except Exception:  # legacy (non-zip) files: fall back to the message
            names = ()
        if names:
            return names
    # Legacy (non-zip) files: torch names each refused global as "GLOBAL module.name".
    return tuple(dict.fromkeys(_GLOBAL_IN_MESSAGE.findall(str(error)))) or None


def decode_torch(file: IO[bytes], map_location: MapLocation, *, weights_only: bool) -> Checkpoint:
    """Read a checkpoint written by :func:`encode_torch` (or plain ``torch.save``) from a
    seekable ``file``.

    Raises :class:`~._errors.UnsafeContentError` when ``weights_only`` refused code-running
    content, ``ValueError`` when the file holds something other than a checkpoint dict, and
    whatever torch raises for damaged bytes (the caller translates all of these).
    """
    try:
        location = dict(map_location) if isinstance(map_location, Mapping) else map_location
        loaded = torch.load(file, map_location=location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        names = _unsafe_globals(file, exc) if weights_only else None
        if names is not None:
            raise UnsafeContentError(f"refused globals {list(names)}", names) from exc
        raise
    if not isinstance(loaded, dict):
        raise ValueError(f"the file holds a {type(loaded).__name__}, not a checkpoint dict")
    return loaded


class TorchCheckpointIO(CheckpointIO):
    """Saves with ``torch.save`` and loads with ``torch.load``; the full CKPT-1 value set.

    Args:
        weights_only: load with ``torch.load(weights_only=True)`` (the default): only tensors,
            containers, numbers, strings and torch's allowlisted classes load; anything whose
            loading would run code raises :class:`~trainspec.UnsafeCheckpointError` (CKPT-8).
            ``False`` loads any pickle and **must** only be used for trusted files.
        storage_options: fsspec file-system options (``endpoint_url``, ``key``,
            ``client_kwargs``, ...) for every fsspec URL this instance reads, writes or
            removes. Loads and removals take no per-call options, so put connection settings
            here. Ignored for local paths.

    ``save_checkpoint(..., storage_options=...)`` accepts, for fsspec URLs, the keyword
    arguments of that URL's file-system constructor (overriding the instance's); for local
    paths it accepts none. Anything else raises ``TypeError`` naming the supported keys
    (CKPT-5).

    Thread-safety: the instance holds no mutable state; any method **may** be called from
    several threads at once. Concurrent saves of one path each replace the file atomically;
    the last rename wins.
    """

    def __init__(
        self, *, weights_only: bool = True, storage_options: Mapping[str, object] | None = None
    ) -> None:
        self._weights_only = weights_only
        self._storage_options: dict[str, object] = dict(storage_options or {})

    @property
    def weights_only(self) -> bool:
        """Whether loads refuse content that would run code (the safe default)."""
        return self._weights_only

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights_only={self._weights_only})"

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Atomically replace ``path`` with ``checkpoint`` (CKPT-1..6).

        **Must not** modify ``checkpoint``. Raises ``TypeError`` for a non-dict checkpoint, an
        unpicklable value or an unsupported ``storage_options`` key, and
        :class:`~trainspec.CheckpointWriteError` when storage refuses the write (the previous
        file is then intact and no temporary file remains).
        """
        check_checkpoint(checkpoint, type(self).__name__)
        location = _storage.resolve(
            path, storage_options, owner=type(self).__name__, defaults=self._storage_options
        )
        _storage.atomic_write(location, lambda f: encode_torch(checkpoint, f), fmt=FORMAT)

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Load the checkpoint at ``path`` with tensors placed by ``map_location`` (CKPT-7..10).

        Raises :class:`~trainspec.CheckpointNotFoundError` for a missing path,
        :class:`~trainspec.CheckpointCorruptedError` for anything that is not a complete
        ``torch.save`` checkpoint dict, and :class:`~trainspec.UnsafeCheckpointError` for
        code-running content while ``weights_only`` is on.
        """
        check_map_location(map_location)
        location = _storage.resolve(
            path, None, owner=type(self).__name__, defaults=self._storage_options
        )
        return _storage.read(
            location,
            lambda f: decode_torch(f, map_location, weights_only=self._weights_only),
            fmt=FORMAT,
        )

    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete ``path`` and stale temporary files of it; a missing path is fine (CKPT-11).

        Refuses to delete a directory (:class:`~trainspec.CheckpointWriteError`).
        """
        location = _storage.resolve(
            path, None, owner=type(self).__name__, defaults=self._storage_options
        )
        _storage.remove(location, fmt=FORMAT)

    def teardown(self) -> None:
        """Nothing to release; idempotent, and the instance stays usable (CKPT-12)."""
