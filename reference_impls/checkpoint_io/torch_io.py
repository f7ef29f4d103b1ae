"""``TorchCheckpointIO``: checkpoints as ``torch.save`` files, locally or behind fsspec.

The default checkpoint IO of every reference strategy. Writes are atomic (temporary file,
``fsync``, rename, directory ``fsync``; see :mod:`._storage`), loads are weights-only unless
the instance is built with ``weights_only=False``.
"""

from __future__ import annotations

import importlib
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, ClassVar, Final

import torch

from trainspec.checkpoint_io import CheckpointIO

from . import _storage
from ._checks import check_checkpoint, check_map_location
from ._errors import UnresolvedContentError, UnsafeContentError

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["TorchCheckpointIO", "decode_torch", "encode_torch", "finish_abandoned_writers"]

FORMAT = "torch.save"
_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL (\S+)")
_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def encode_torch(checkpoint: Checkpoint, file: IO[bytes]) -> None:
    """Write ``checkpoint`` to ``file`` with ``torch.save`` (zip format). Does not modify it."""
    torch.save(checkpoint, file)


def _unsafe_globals(file: IO[bytes], error: pickle.UnpicklingError) -> tuple[str, ...] | None:
    """The globals a weights-only load refused, or ``None`` when the failure was not about
    globals or a refused name is not even a dotted identifier (the bytes are then damaged
    rather than unsafe).

    Raises :class:`~._errors.UnresolvedContentError` when the pickle refers to a global whose
    name cannot be read without running it (the file is then unsafe or corrupted).
    """
    names = _refused_globals(file, error)
    if names is None:
        # torch names refused globals only for protocol-2 ``GLOBAL`` opcodes; protocol 4 and 5
        # (``FRAME``, ``STACK_GLOBAL``) fail as "Unsupported operand", which says nothing.
        names = _scanned_unsafe_globals(file)
    if names is None or not all(_DOTTED_NAME.match(name) for name in names):
        return None
    return names


_MEMO_PUTS: Final = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})
_MEMO_GETS: Final = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NO_STACK_EFFECT: Final = frozenset({"PROTO", "FRAME"})
_STRINGS: Final = frozenset(
    {
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
    }
)
_MAX_PICKLES: Final = 5  # the legacy (non-zip) format is five pickles, then raw storage bytes
_MAX_OPCODES: Final = 1_000_000  # a checkpoint's pickle is small; its tensors are elsewhere


class _Archive(zipfile.ZipFile):
    """A ``ZipFile`` whose finalizer runs no Python code; always closed by a ``with`` block.

    ``ZipFile.__del__`` is Python (it calls ``close``), and a ``KeyboardInterrupt`` raised in
    Python code that a finalizer runs is silently dropped: a Ctrl-C landing as the archive is
    freed would be lost. ``object.__init__`` is C and does nothing, so no signal handler can
    run inside this finalizer (scripts/interrupt_every_point.py finds such places).
    """

    __del__ = object.__init__


def finish_abandoned_writers(error: BaseException) -> None:
    """Finish the torch zip writers that ``error``'s traceback keeps alive, unfinished.

    An interrupt inside ``torch.save`` can leave its C++ zip writer unfinished; its
    destructor, run whenever the traceback is freed, writes the end of the archive into the
    file object it was given, and if that file is closed by then, the exception thrown in the
    destructor aborts the process. Calling ``write_end_of_file`` here marks such a writer
    finished even when the write fails (the file may already be closed), so its destructor
    does nothing. Used where the file object belongs to someone else (DCP's writer).
    """
    writer_type = getattr(torch._C, "PyTorchFileWriter", None)
    if writer_type is None:
        return
    tb = error.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            candidate = getattr(value, "file_like", value)  # torch's _opener holds it there
            if isinstance(candidate, writer_type):
                try:
                    candidate.write_end_of_file()
                except Exception:
                    pass
        tb = tb.tb_next


def _pickle_streams(file: IO[bytes]) -> Iterator[IO[bytes]]:
    """The pickle streams of a torch file: ``data.pkl`` of a zip checkpoint, or the file
    itself (legacy format or a raw pickle)."""
    file.seek(0)
    if zipfile.is_zipfile(file):
        file.seek(0)
        with _Archive(file) as archive:
            for name in archive.namelist():
                if name == "data.pkl" or name.endswith("/data.pkl"):
                    with archive.open(name) as member:
                        yield member
                    return
        return
    file.seek(0)
    yield file


def _index(arg: object) -> int:
    """A memo index from ``pickletools`` (an ``int``, or ``-1`` when it is not one)."""
    return arg if isinstance(arg, int) else -1


def _scan_globals(stream: IO[bytes]) -> tuple[list[str], bool]:
    """Read the pickles in ``stream`` without executing them (``pickletools``) and return
    the globals they name and whether a global's name could not be read.

    Only pickles that parse completely (up to ``STOP``) count: damaged bytes, or another
    format whose first byte happens to be an opcode (``.npy`` starts with ``STACK_GLOBAL``),
    are corruption, not content. ``STACK_GLOBAL`` takes its module and name from the stack;
    they are resolved when the two values most recently pushed are strings (directly or
    through the memo), else the global is unresolved.
    """
    names: list[str] = []
    unresolved = False
    count = 0
    for _ in range(_MAX_PICKLES):
        found: list[str] = []
        unnamed = False
        pushed: list[str | None] = []
        memo: dict[int, str | None] = {}
        try:
            for opcode, arg, _position in pickletools.genops(stream):
                count += 1
                if count > _MAX_OPCODES:
                    return names + found, True
                op = opcode.name
                if op in ("GLOBAL", "INST"):
                    module, _sep, name = str(arg).partition(" ")
                    found.append(f"{module}.{name}")
                    pushed.append(None)
                elif op == "STACK_GLOBAL":
                    module_name = pushed[-2:]
                    if len(module_name) == 2 and None not in module_name:
                        found.append(f"{module_name[0]}.{module_name[1]}")
                    else:
                        unnamed = True
                    pushed.append(None)
                elif op in _MEMO_PUTS:
                    key = len(memo) if op == "MEMOIZE" else _index(arg)
                    memo[key] = pushed[-1] if pushed else None
                elif op in _MEMO_GETS:
                    pushed.append(memo.get(_index(arg)))
                elif op not in _NO_STACK_EFFECT:
                    pushed.append(arg if op in _STRINGS and isinstance(arg, str) else None)
        except Exception:  # damaged bytes, or the raw storage data after a legacy file's pickles
            break
        names += found
        unresolved = unresolved or unnamed
    return names, unresolved


def _allowed_globals() -> frozenset[str]:
    """The ``module.name`` globals a weights-only load accepts (torch's list and the user's)."""
    try:
        unpickler: object = importlib.import_module("torch._weights_only_unpickler")
    except ImportError:  # a private torch module; without it nothing counts as allowed
        return frozenset()
    allowed: set[str] = set()
    for getter in ("_get_allowed_globals", "_get_user_allowed_globals"):
        table = getattr(unpickler, getter, None)
        try:
            keys: object = table() if callable(table) else {}
        except Exception:  # a private torch API
            continue
        if isinstance(keys, Mapping):
            allowed.update(str(key) for key in keys)
    return frozenset(allowed)


def _scanned_unsafe_globals(file: IO[bytes]) -> tuple[str, ...] | None:
    """The globals in ``file``'s pickle that a weights-only load would refuse, ``None`` when
    there are none (the failure is then damage or an unsupported protocol), or
    :class:`~._errors.UnresolvedContentError` when a global's name cannot be read."""
    try:
        found: list[str] = []
        unresolved = False
        for stream in _pickle_streams(file):
            found, unresolved = _scan_globals(stream)
    except Exception:  # not even a readable archive: damaged
        return None
    allowed = _allowed_globals()
    refused = tuple(dict.fromkeys(name for name in found if name not in allowed))
    if refused:
        return refused
    if unresolved:
        raise UnresolvedContentError(
            "the pickle refers to a global whose name the loader cannot read without running it"
        )
    return None


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


def _out_of_memory(error: RuntimeError) -> bool:
    """Whether torch failed to allocate memory: its CPU allocator raises a plain
    ``RuntimeError`` (``DefaultCPUAllocator: can't allocate memory``), devices raise
    ``torch.OutOfMemoryError``."""
    oom = getattr(torch, "OutOfMemoryError", None)
    if isinstance(oom, type) and isinstance(error, oom):
        return True
    return "DefaultCPUAllocator" in str(error) and "allocate" in str(error)


def _verify_record_checksums(file: IO[bytes]) -> None:
    """Check the CRC-32 of a zip checkpoint's small records (``data.pkl``, ``version``, ...).

    torch's reader does not verify checksums, so one damaged byte in ``data.pkl`` can load as
    a checkpoint with a renamed key. The tensor storages (``.../data/<n>``) are skipped: they
    are most of the bytes, and reading them twice would double the cost of a load. Raises
    ``zipfile.BadZipFile`` (corruption, for the caller's translation) on a mismatch.
    """
    file.seek(0)
    if not zipfile.is_zipfile(file):
        file.seek(0)
        return
    file.seek(0)
    with _Archive(file) as archive:
        for info in archive.infolist():
            if "/data/" in info.filename or info.file_size > _MAX_RECORD_BYTES:
                continue
            with archive.open(info) as member:  # zipfile checks the CRC at the end
                while member.read(1 << 16):
                    pass
    file.seek(0)


_MAX_RECORD_BYTES: Final = 64 << 20
"""Records above this size are not re-read for their checksum (a pickle that large is not a
checkpoint's metadata)."""


def decode_torch(file: IO[bytes], map_location: MapLocation, *, weights_only: bool) -> Checkpoint:
    """Read a checkpoint written by :func:`encode_torch` (or plain ``torch.save``) from a
    seekable ``file``.

    Raises :class:`~._errors.UnsafeContentError` when ``weights_only`` refused code-running
    content, ``MemoryError`` when the tensors do not fit in memory, ``ValueError`` when the
    file holds something other than a checkpoint dict, and whatever torch raises for damaged
    bytes (the caller translates all of these).
    """
    _verify_record_checksums(file)
    try:
        location = dict(map_location) if isinstance(map_location, Mapping) else map_location
        with warnings.catch_warnings():
            # torch warns about pickle protocols above 2 before refusing them; the refusal is
            # reported below, with what the file holds.
            warnings.filterwarnings(
                "ignore", message="Detected pickle protocol", category=UserWarning
            )
            loaded = torch.load(file, map_location=location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        try:
            names = _unsafe_globals(file, exc) if weights_only else None
        except UnresolvedContentError as unresolved:
            raise unresolved from exc
        if names is not None:
            raise UnsafeContentError(f"refused globals {list(names)}", names) from exc
        raise
    except RuntimeError as exc:
        if _out_of_memory(exc):
            raise MemoryError(f"torch could not allocate the checkpoint's tensors: {exc}") from exc
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

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset(
        {"local_paths", "python_objects", "strided_tensors", "shared_storage", "pickle"}
    )
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""
    conformance_options: ClassVar[dict[str, object]] = {
        "trusted_factory": "trainspec.conformance.builtin_targets:trusted_torch_io"
    }
    """Options of its conformance run (``trainspec verify`` reads them)."""

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
