"""``CompressedCheckpointIO``: ``torch.save`` checkpoints, gzip-compressed, written atomically.

A complete :class:`trainspec.CheckpointIO` in one module, written the way a third-party
plugin should be: it depends on the public ``trainspec`` contracts only, translates every
error from gzip, pickle, torch and the operating system into the trainspec hierarchy in one
table (:data:`ERRORS`), and passes the conformance kit (see ``tests/test_conformance.py``).

File format: a gzip stream (RFC 1952) whose payload is a ``torch.save`` zip archive. Any gzip
tool can unpack it; ``torch.load`` reads the result.

Writing (CKPT-2, CKPT-3)::

    1) torch.save into memory, then gzip.compress    -- nothing touches the disk yet
    2) write a temporary file next to the target     -- .model.ckpt.<pid>.<random>.tmp
    3) fsync it, os.replace it over the target       -- readers see old or new, never partial
    4) fsync the directory                           -- the rename survives a power cut

A process killed during 2) leaves its temporary file behind; the next save of the same path
removes temporary files whose writing process no longer exists.

Special files (CKPT-13): a FIFO, a device or a socket at the path is never replaced or removed
(``CheckpointWriteError`` naming its type), and a load opens the path without blocking and
refuses anything that is not a regular file (``CheckpointCorruptedError``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import pickle
import secrets
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

import torch
from trainspec import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointIO,
    CheckpointNotFoundError,
    CheckpointWriteError,
    ConfigurationError,
    UnsafeCheckpointError,
)

if TYPE_CHECKING:
    from trainspec import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["ERRORS", "CompressedCheckpointIO"]

_NAME: Final = "CompressedCheckpointIO"
_TEMP_SUFFIX: Final = ".tmp"
_DEFAULT_LEVEL: Final = 6

ERRORS: Final[tuple[tuple[str, type[BaseException], type[Exception], str], ...]] = (
    # (stage, error met, trainspec error raised, what it means)
    ("read", FileNotFoundError, CheckpointNotFoundError, "no checkpoint exists at {path}"),
    ("read", NotADirectoryError, CheckpointNotFoundError, "no checkpoint exists at {path}"),
    ("read", IsADirectoryError, CheckpointCorruptedError, "{path} is a directory, not a file"),
    ("read", OSError, CheckpointError, "{path} could not be read"),
    ("decompress", Exception, CheckpointCorruptedError, "{path} is not a complete gzip file"),
    ("decode", Exception, CheckpointCorruptedError, "{path} is not a torch.save checkpoint"),
    ("encode", pickle.PicklingError, TypeError, "the checkpoint holds a value pickle refuses"),
    ("encode", TypeError, TypeError, "the checkpoint holds a value torch.save cannot store"),
    ("encode", AttributeError, TypeError, "the checkpoint holds a value pickle cannot find"),
    ("write", IsADirectoryError, CheckpointWriteError, "a directory is in the way of {path}"),
    ("write", NotADirectoryError, CheckpointWriteError, "a parent of {path} is a file"),
    ("write", FileExistsError, CheckpointWriteError, "a parent of {path} is a file"),
    ("write", OSError, CheckpointWriteError, "storage refused to write {path}"),
    ("remove", IsADirectoryError, CheckpointWriteError, "{path} is a directory; not removed"),
    ("remove", OSError, CheckpointWriteError, "storage refused to remove {path}"),
)
"""The whole error mapping, tried in order: the first row whose stage and error class match
decides. The original error is kept as ``__cause__``."""


def _translate(error: BaseException, stage: str, path: str) -> BaseException:
    for row_stage, source, target, meaning in ERRORS:
        if row_stage == stage and isinstance(error, source):
            detail = " ".join(str(error).split())[:300]
            what = meaning.format(path=path)
            return target(f"{_NAME}: {what} ({type(error).__name__}: {detail})")
    return error


class CompressedCheckpointIO(CheckpointIO):
    """Saves ``torch.save`` output through gzip, atomically; loads weights-only by default.

    Args:
        weights_only: load with ``torch.load(weights_only=True)`` (the default): tensors,
            containers, numbers, strings and torch's allowlisted classes load, and anything
            whose loading would run code raises :class:`~trainspec.UnsafeCheckpointError`
            (CKPT-8). ``False`` is the explicit opt-in for files from a trusted source.
        compresslevel: the default gzip level, 0 (store) to 9 (smallest); 6 unless given.

    ``save_checkpoint`` accepts one storage option, ``compresslevel`` (an int 0..9) for that
    save; any other key raises ``TypeError`` naming it (CKPT-5). Paths are local paths (``str``
    or ``os.PathLike``); URLs are not supported.

    Thread safety: the instance holds no mutable state; concurrent saves of one path each
    replace the file atomically, and the last rename wins.
    """

    def __init__(self, *, weights_only: bool = True, compresslevel: int = _DEFAULT_LEVEL) -> None:
        self._weights_only = bool(weights_only)
        self._compresslevel = _check_level(compresslevel, "compresslevel")

    def __repr__(self) -> str:
        return f"{_NAME}(weights_only={self._weights_only}, compresslevel={self._compresslevel})"

    @property
    def weights_only(self) -> bool:
        """Whether loads refuse content that would run code (the safe default)."""
        return self._weights_only

    # -- CheckpointIO ----------------------------------------------------------------------

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Atomically replace ``path`` with the compressed checkpoint (CKPT-1 ... CKPT-6).

        **Must not** modify ``checkpoint``. Raises ``TypeError`` for a checkpoint that is not a
        dict with string keys, a value ``torch.save`` cannot store, or an unsupported storage
        option; :class:`~trainspec.CheckpointWriteError` when the file system refuses the
        write, with the previous checkpoint left intact and no temporary file behind.
        """
        level = self._level_for(storage_options)
        if not isinstance(checkpoint, dict) or not all(isinstance(k, str) for k in checkpoint):
            raise TypeError(
                f"{_NAME}.save_checkpoint: checkpoint must be a dict with str keys; got "
                f"{type(checkpoint).__name__}"
            )
        target = Path(_local_path(path, "save_checkpoint"))
        buffer = io.BytesIO()
        try:
            torch.save(checkpoint, buffer)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise _translate(error, "encode", str(path)) from error
        data = gzip.compress(buffer.getvalue(), compresslevel=level, mtime=0)
        _refuse_special_file(target, "save_checkpoint")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_temporaries(target)
            _atomic_write(target, data)
        except OSError as error:
            raise _translate(error, "write", str(path)) from error

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Read the checkpoint at ``path``, placing tensors by ``map_location`` (CKPT-7 ...
        CKPT-10).

        Raises :class:`~trainspec.CheckpointNotFoundError` for a missing path,
        :class:`~trainspec.CheckpointCorruptedError` for anything that is not a complete
        compressed checkpoint dict (empty, truncated, another format, a directory), and
        :class:`~trainspec.UnsafeCheckpointError` for code-running content while
        ``weights_only`` is on. A ``map_location`` of the wrong type raises ``TypeError``, one
        that is not a device :class:`~trainspec.ConfigurationError`, before anything is read.
        """
        location = _check_map_location(map_location)
        name = str(path)
        try:
            raw = _read_regular_file(_local_path(path, "load_checkpoint"))
        except OSError as error:
            raise _translate(error, "read", name) from error
        try:
            payload = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise _translate(error, "decompress", name) from error
        buffer = io.BytesIO(payload)
        try:
            loaded: object = torch.load(
                buffer, map_location=location, weights_only=self._weights_only
            )
        except pickle.UnpicklingError as error:
            refused = _refused_globals(buffer) if self._weights_only else ()
            if refused:
                raise UnsafeCheckpointError(
                    f"{_NAME}: {name} contains objects that are not plain data "
                    f"({', '.join(refused)}); loading them would run code. For a file from a "
                    "source you trust, load it with CompressedCheckpointIO(weights_only=False)."
                ) from error
            raise _translate(error, "decode", name) from error
        except Exception as error:
            raise _translate(error, "decode", name) from error
        if not isinstance(loaded, dict):
            raise CheckpointCorruptedError(
                f"{_NAME}: {name} holds a {type(loaded).__name__}, not a checkpoint dict"
            )
        return loaded

    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete ``path`` and stale temporary files of it; a missing path is fine (CKPT-11).
        Refuses to delete a directory (:class:`~trainspec.CheckpointWriteError`)."""
        target = Path(_local_path(path, "remove_checkpoint"))
        _refuse_special_file(target, "remove_checkpoint")
        try:
            target.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            raise _translate(error, "remove", str(path)) from error
        with contextlib.suppress(OSError):
            _remove_stale_temporaries(target)

    def teardown(self) -> None:
        """Nothing to release; idempotent, and the instance stays usable (CKPT-12)."""

    # -- helpers ---------------------------------------------------------------------------

    def _level_for(self, storage_options: StorageOptions) -> int:
        if storage_options is None:
            return self._compresslevel
        if not isinstance(storage_options, Mapping):
            raise TypeError(
                f"{_NAME}.save_checkpoint: storage_options must be a mapping or None; got "
                f"{type(storage_options).__name__}"
            )
        unknown = sorted(str(key) for key in storage_options if key != "compresslevel")
        if unknown:
            raise TypeError(
                f"{_NAME}.save_checkpoint: unsupported storage option(s) {unknown}; the only "
                "supported key is 'compresslevel' (an int 0..9)"
            )
        if "compresslevel" in storage_options:
            level = storage_options["compresslevel"]
            return _check_level(level, "storage_options['compresslevel']")
        return self._compresslevel


def _check_level(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 9:
        raise ConfigurationError(f"{_NAME}: {what} must be an int from 0 to 9; got {value!r}")
    return value


def _local_path(path: object, method: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{_NAME}.{method}: path must be a str or os.PathLike; got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise TypeError(f"{_NAME}.{method}: path must be a non-empty text path; got {path!r}")
    if "://" in text:
        raise ConfigurationError(
            f"{_NAME}.{method}: {text!r} is a URL; this checkpoint IO writes local paths only"
        )
    return text


def _check_map_location(map_location: object) -> str | torch.device | dict[str, str] | None:
    """``map_location`` in the form ``torch.load`` takes, checked before any bytes are read, so
    that a bad request is not mistaken for a damaged file."""
    if map_location is None or isinstance(map_location, torch.device):
        return map_location
    if isinstance(map_location, str):
        _device(map_location)
        return map_location
    if isinstance(map_location, Mapping):
        mapping: dict[str, str] = {}
        for source, target in map_location.items():
            if not isinstance(source, str) or not isinstance(target, str):
                raise TypeError(
                    f"{_NAME}.load_checkpoint: a map_location mapping must map device strings "
                    f"to device strings; got {source!r}: {target!r}"
                )
            _device(source)
            _device(target)
            mapping[source] = target
        return mapping
    raise TypeError(
        f"{_NAME}.load_checkpoint: map_location must be None, a device string, a "
        f"torch.device or a mapping of device strings; got {map_location!r}"
    )


def _device(text: str) -> torch.device:
    try:
        return torch.device(text)
    except RuntimeError as error:
        raise ConfigurationError(
            f"{_NAME}.load_checkpoint: map_location {text!r} is not a device; expected e.g. "
            "'cpu' or 'cuda:0'"
        ) from error


def _refused_globals(buffer: io.BytesIO) -> tuple[str, ...]:
    """The globals a weights-only load refused; empty when the failure was not about them
    (the bytes are then damaged rather than unsafe)."""
    try:
        buffer.seek(0)
        return tuple(torch.serialization.get_unsafe_globals_in_checkpoint(buffer))
    except Exception:  # damaged archive: not an unsafe one
        return ()


def _special_kind(mode: int) -> str | None:
    """What a file of this mode is, when it is a special file (CKPT-13)."""
    for test, kind in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return None


def _refuse_special_file(target: Path, method: str) -> None:
    """Raise CheckpointWriteError when a special file is at ``target``: replacing or deleting
    it (``/dev/null``, a FIFO another program reads) is never what a save or removal means."""
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return  # nothing there (or unreadable: the write itself reports that)
    kind = _special_kind(mode)
    if kind is not None:
        raise CheckpointWriteError(
            f"{_NAME}.{method}: {target} is a {kind}, not a checkpoint file; it was left as it "
            "is. Give the path of a regular file."
        )


def _read_regular_file(path: str) -> bytes:
    """The bytes of the regular file at ``path``. Its type is checked before opening (a
    socket cannot be opened at all) and again on the open descriptor, opened without blocking
    (a FIFO swapped in meanwhile, with no writer, would wait forever)."""
    kind = _special_kind(os.stat(path).st_mode)
    if kind is not None:
        raise CheckpointCorruptedError(
            f"{_NAME}.load_checkpoint: {path} is a {kind}, not a checkpoint file"
        )
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        kind = _special_kind(os.fstat(descriptor).st_mode)
        if kind is not None:
            raise CheckpointCorruptedError(
                f"{_NAME}.load_checkpoint: {path} is a {kind}, not a checkpoint file"
            )
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(descriptor)


def _atomic_write(target: Path, data: bytes) -> None:
    temporary = target.with_name(
        f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
    )
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms without directory descriptors (Windows)
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _remove_stale_temporaries(target: Path) -> None:
    """Remove temporary files of ``target`` whose writing process no longer exists."""
    prefix = f".{target.name}."
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(_TEMP_SUFFIX)):
            continue
        pid_text = name[len(prefix) :].split(".", 1)[0]
        if pid_text.isdigit() and not _process_exists(int(pid_text)):
            with contextlib.suppress(OSError):
                entry.unlink()


def _process_exists(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # os.kill(pid, 0) would terminate it on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else, or the platform cannot tell
        return True
    return True
