"""Where checkpoint bytes live: local paths and fsspec URLs, with atomic replacement.

Shared by every file-backed checkpoint IO in this package; the IO classes only encode and
decode. All errors leave this module already translated through :mod:`._errors`.

Paths
    A plain path or a ``file://`` URL is local and handled with :mod:`os` (no fsspec needed).
    Any other ``protocol://`` URL, or a chained URL (``simplecache::s3://...``), goes through
    fsspec, imported on first use.

Atomic local writes (CKPT-3)
    The bytes go to a temporary file in the target's directory, named
    ``.{name}.tmp-{host}-{pid}-{token}``; it is flushed and ``fsync``-ed, moved over the target
    with :func:`os.replace` (atomic on POSIX and Windows within one file system), and then the
    directory is ``fsync``-ed so the rename itself survives a power cut. A failed write removes
    its temporary file; the previous checkpoint is untouched.

Freeing the replaced file off the caller's thread
    Replacing a large file frees its blocks inside :func:`os.replace` (tens of milliseconds
    for a few hundred MiB on ext4). On POSIX, a replaced regular file of at least
    :data:`DEFERRED_RELEASE_MIN_BYTES` with no other hard link is opened just before the
    rename, so the rename only drops its name; the descriptor is then closed on a short-lived
    daemon thread, which is where the kernel frees the blocks. Nothing is visible in the
    directory meanwhile, and a process that dies first leaves nothing behind (the kernel
    closes the descriptor). A child forked during that short window holds the old blocks
    until it exits.

Stale temporary files
    A writer killed mid-write cannot remove its temporary file, so every save (and remove) of a
    target first deletes that target's *stale* temporary files: those whose writer was on this
    host and is no longer running (its pid is gone or a zombie), and any older than
    :data:`STALE_TEMP_AGE_S` (writers on other hosts sharing the directory, or a dead writer
    whose pid was reused). A temporary file of a live writer, in this process or another, is
    never deleted before that age, so concurrent writers do not break each other's saves.

fsspec URLs
    Object stores (:data:`DIRECT_WRITE_PROTOCOLS`: S3, GCS, Azure, ...) are written directly:
    an object becomes visible only when its single PUT, or the completion of its multipart
    upload, succeeds, so a reader sees the old object or the new one. Their "rename" is a copy
    plus delete, which would add cost and no safety. Every other fsspec file system (memory,
    SFTP, HDFS, ...) gets a temporary file next to the target and ``fs.mv``; whether that move
    is atomic is up to the file system. Remote temporary files are cleaned by age only.
"""

from __future__ import annotations

import errno
import inspect
import io
import os
import re
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Final, TypeVar, cast

from trainspec.errors import ConfigurationError

from ._errors import translate

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from typing_extensions import Buffer

    from trainspec.types import PathLike

__all__ = [
    "DEFERRED_RELEASE_MIN_BYTES",
    "DIRECT_WRITE_PROTOCOLS",
    "STALE_TEMP_AGE_S",
    "LocalLocation",
    "Location",
    "RemoteLocation",
    "atomic_write",
    "clean_stale_temps",
    "read",
    "remove",
    "resolve",
    "temp_prefix",
    "wait_for_releases",
]

_T = TypeVar("_T")

STALE_TEMP_AGE_S: Final = 3600.0
"""A temporary file older than this (seconds) is stale even if its writer may still run."""

DEFERRED_RELEASE_MIN_BYTES: Final = 16 * 1024 * 1024
"""A replaced file at least this large is freed on a background thread (see above)."""

DIRECT_WRITE_PROTOCOLS: Final = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"}
)
"""fsspec protocols written with one direct upload instead of temporary file plus move."""

# fsspec consumes these itself in every file system's constructor (instance cache, dir cache).
_FSSPEC_COMMON_OPTIONS: Final = frozenset(
    {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"}
)
_LOCAL_PROTOCOLS: Final = ("file://", "local://")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
_MAX_PLAIN_NAME: Final = 120
_RELEASE_THREAD: Final = "trainspec-release-replaced"


@dataclass(frozen=True)
class LocalLocation:
    """A file on a local (or locally mounted) file system; ``path`` has no URL prefix."""

    display: str
    path: str


@dataclass(frozen=True)
class RemoteLocation:
    """A file behind an fsspec file system; ``path`` is the file system's own path."""

    display: str
    fs: object
    path: str
    protocol: str


Location = LocalLocation | RemoteLocation


def _fsspec_supported_options(cls: type) -> frozenset[str]:
    """The keyword arguments that ``cls`` (an fsspec file system class) names.

    Walks the constructors up the class hierarchy while each passes ``**kwargs`` on.
    """
    names: set[str] = set(_FSSPEC_COMMON_OPTIONS)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        )
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return frozenset(names)


def _check_keys(options: Mapping[str, object], supported: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in options if k not in supported)
    if unknown:
        allowed = ", ".join(sorted(supported)) if supported else "none"
        raise TypeError(
            f"unsupported storage_options {unknown} for {where}; supported keys: {allowed}"
        )


def resolve(
    path: PathLike,
    options: Mapping[str, object] | None,
    *,
    owner: str,
    defaults: Mapping[str, object] | None = None,
) -> Location:
    """Turn ``path`` into a location, validating ``options`` (given with this call) for it.

    Local paths support no options. fsspec URLs support the keyword arguments of their file
    system's constructor (``endpoint_url``, ``key``, ``client_kwargs`` for S3, ...), taken from
    ``defaults`` (the IO's own options) overridden by ``options``; an unknown key raises
    ``TypeError`` naming the supported ones. ``owner`` names the calling class in messages.
    """
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{owner} paths must be str or os.PathLike[str]; got {type(path)!r}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"{owner} paths must be str or os.PathLike[str]; got bytes {text!r}")
    options = options or {}
    if "::" not in text:
        for prefix in _LOCAL_PROTOCOLS:
            if text.startswith(prefix):
                _check_keys(options, frozenset(), f"local path {text!r}")
                return LocalLocation(text, text[len(prefix) :] or ".")
        if not _URL.match(text):
            _check_keys(options, frozenset(), f"local path {text!r}")
            return LocalLocation(text, text)
    return _resolve_remote(text, {**(defaults or {}), **options}, owner)


def _resolve_remote(url: str, options: Mapping[str, object], owner: str) -> RemoteLocation:
    try:
        import fsspec
        import fsspec.core
    except ImportError as exc:
        raise ConfigurationError(
            f"{owner} needs fsspec for the URL {url!r}: pip install 'trainspec[fsspec]'"
        ) from exc
    protocol = url.split("::", 1)[0].split("://", 1)[0]
    if "::" not in url:
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except ImportError as exc:
            raise ConfigurationError(
                f"the URL {url!r} needs an fsspec back end that is not installed: {exc}"
            ) from exc
        except ValueError as exc:
            raise ConfigurationError(
                f"{url!r} has the protocol {protocol!r}, which fsspec does not know; use a "
                "local path or a URL with one of: "
                + ", ".join(sorted(fsspec.available_protocols()))
            ) from exc
        _check_keys(options, _fsspec_supported_options(cls), f"{protocol}:// URLs")
    try:
        fs, fs_path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        raise ConfigurationError(
            f"the URL {url!r} needs an fsspec back end that is not installed: {exc}"
        ) from exc
    except ValueError as exc:
        raise ConfigurationError(f"fsspec cannot open {url!r}: {exc}") from exc
    return RemoteLocation(url, fs, fs_path, protocol)


# --- temporary files -------------------------------------------------------------------------


def temp_prefix(name: str) -> str:
    """The prefix of every temporary file written for a target called ``name``."""
    if len(name.encode()) > _MAX_PLAIN_NAME:
        import hashlib

        name = hashlib.sha1(name.encode()).hexdigest()[:20]
    return f".{name}.tmp-"


def _temp_name(name: str) -> str:
    return f"{temp_prefix(name)}{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


_TEMP_SUFFIX = re.compile(r"^(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return True  # cannot tell (e.g. Windows semantics): keep the file
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")  # a zombie writer is dead
    except (OSError, IndexError):
        return True


def _is_stale(suffix: str, age_s: float) -> bool:
    if age_s > STALE_TEMP_AGE_S:
        return True
    match = _TEMP_SUFFIX.match(suffix)
    if match is None or match["host"] != _HOST:
        return False
    return not _pid_running(int(match["pid"]))


def clean_stale_temps(directory: str, name: str) -> list[str]:
    """Delete stale temporary files of the target ``name`` in local ``directory``; return the
    paths deleted. Files that vanish meanwhile (another cleaner) are ignored."""
    prefix = temp_prefix(name)
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            if _is_stale(entry.name[len(prefix) :], age):
                os.unlink(entry.path)
                removed.append(entry.path)
        except FileNotFoundError:
            continue
    return removed


# --- writing ---------------------------------------------------------------------------------


class _TrackedWriter(io.RawIOBase):
    """Passes writes to ``raw`` and remembers the first ``OSError``.

    torch's zip writer swallows the ``OSError`` of a failed ``write`` (a full disk) and raises
    a ``RuntimeError`` about file positions instead; the remembered error is the real cause.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        try:
            written = self._raw.write(data)
        except OSError as exc:
            if self.error is None:
                self.error = exc
            raise
        return written if written is not None else 0

    def flush(self) -> None:
        self._raw.flush()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # Windows and some file systems cannot open directories
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _hold_replaced(target: str) -> int | None:
    """A read-only descriptor on ``target`` when freeing it is worth moving off this thread.

    ``None`` unless ``target`` is a regular file of at least
    :data:`DEFERRED_RELEASE_MIN_BYTES` whose only link is ``target``, on POSIX. Never raises:
    a file that cannot be opened is simply replaced the ordinary way.
    """
    if os.name != "posix":
        return None  # Windows cannot replace a file that is open
    try:
        info = os.lstat(target)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_nlink != 1
            or info.st_size < DEFERRED_RELEASE_MIN_BYTES
        ):
            return None
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        same = (opened.st_dev, opened.st_ino) == (info.st_dev, info.st_ino)
    except OSError:
        same = False
    if not same:  # replaced between lstat and open: not the file we measured
        os.close(fd)
        return None
    return fd


def _release(fd: int) -> None:
    """Close ``fd`` on a daemon thread: the last close of an unlinked file frees its blocks.

    Closes it here instead when no thread can be started (interpreter shutdown, limits)."""
    try:
        threading.Thread(
            target=_close_quietly, args=(fd,), name=_RELEASE_THREAD, daemon=True
        ).start()
    except RuntimeError:
        _close_quietly(fd)


def wait_for_releases(timeout: float | None = None) -> None:
    """Wait until every replaced file handed to a release thread so far is closed (freed).

    For benchmarks and tests that must not let that work overlap what they measure next."""
    for thread in threading.enumerate():
        if thread.name == _RELEASE_THREAD:
            thread.join(timeout)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def atomic_write(location: Location, write: Callable[[IO[bytes]], None], *, fmt: str) -> None:
    """Replace the file at ``location`` with what ``write`` writes, atomically (CKPT-3).

    ``write`` receives a binary file object. An ``OSError`` from storage becomes
    ``CheckpointWriteError``; any other error from ``write`` is an encoding problem and becomes
    ``TypeError``. Either way the previous file is intact and no temporary file is left.
    """
    if isinstance(location, RemoteLocation):
        _remote_write(location, write, fmt=fmt)
        return
    target = location.path
    if os.path.islink(target):
        target = os.path.realpath(target)  # replace the file the link names, keep the link
    directory, name = os.path.split(os.path.abspath(target))
    shown = location.display
    try:
        os.makedirs(directory, exist_ok=True)
        if os.path.isdir(target):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
        clean_stale_temps(directory, name)
        temp = os.path.join(directory, _temp_name(name))
        raw = open(temp, "xb")  # closed below, before the rename
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
    tracked = _TrackedWriter(raw)
    replaced: int | None = None
    try:
        try:
            write(cast("IO[bytes]", tracked))
            raw.flush()
            os.fsync(raw.fileno())
        finally:
            raw.close()
        replaced = _hold_replaced(target)
        os.replace(temp, target)
    except BaseException as exc:
        if replaced is not None:
            _close_quietly(replaced)  # still linked: closing frees nothing
        _unlink_quietly(temp)
        if tracked.error is not None:
            raise translate(tracked.error, stage="write", path=shown, fmt=fmt) from tracked.error
        if isinstance(exc, OSError):
            raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
        if isinstance(exc, Exception):
            raise translate(exc, stage="encode", path=shown, fmt=fmt) from exc
        raise
    if replaced is not None:
        _release(replaced)
    try:
        _fsync_directory(directory)
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc


def _remote_write(
    location: RemoteLocation, write: Callable[[IO[bytes]], None], *, fmt: str
) -> None:
    fs = location.fs
    shown = location.display
    path = location.path.rstrip("/")
    parent, _, name = path.rpartition("/")
    direct = location.protocol in DIRECT_WRITE_PROTOCOLS
    try:
        if _remote_isdir(fs, path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
        if not direct:
            if parent:
                fs.makedirs(parent, exist_ok=True)  # type: ignore[attr-defined]
            _clean_remote_temps(fs, parent, name)
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
    if direct:
        # Encode fully first, then one upload: a failed encode never reaches the store, and
        # the object only changes when the upload completes.
        buffer = io.BytesIO()
        try:
            write(buffer)
        except Exception as exc:
            raise translate(exc, stage="encode", path=shown, fmt=fmt) from exc
        try:
            fs.pipe_file(path, buffer.getvalue())  # type: ignore[attr-defined]
        except OSError as exc:
            raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
        return
    temp = f"{parent}/{_temp_name(name)}" if parent else _temp_name(name)
    tracked: _TrackedWriter | None = None
    try:
        with fs.open(temp, "wb") as raw:  # type: ignore[attr-defined]
            tracked = _TrackedWriter(raw)
            write(cast("IO[bytes]", tracked))
        fs.mv(temp, path)  # type: ignore[attr-defined]
    except BaseException as exc:
        _remote_rm_quietly(fs, temp)
        if tracked is not None and tracked.error is not None:
            raise translate(tracked.error, stage="write", path=shown, fmt=fmt) from tracked.error
        if isinstance(exc, OSError):
            raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
        if isinstance(exc, Exception):
            raise translate(exc, stage="encode", path=shown, fmt=fmt) from exc
        raise


def _remote_isdir(fs: object, path: str) -> bool:
    try:
        return bool(fs.isdir(path))  # type: ignore[attr-defined]
    except FileNotFoundError:
        return False


def _remote_rm_quietly(fs: object, path: str) -> None:
    try:
        fs.rm_file(path)  # type: ignore[attr-defined]
    except Exception:  # best effort: the error being raised matters more
        pass


def _clean_remote_temps(fs: object, parent: str, name: str) -> None:
    pattern = f"{parent}/{temp_prefix(name)}*" if parent else f"{temp_prefix(name)}*"
    try:
        found = fs.glob(pattern)  # type: ignore[attr-defined]
    except FileNotFoundError:
        return
    now = time.time()
    for candidate in found:
        try:
            modified = fs.modified(candidate)  # type: ignore[attr-defined]
            age = now - modified.timestamp()
        except (NotImplementedError, FileNotFoundError, AttributeError):
            continue
        if age > STALE_TEMP_AGE_S:
            _remote_rm_quietly(fs, candidate)


# --- reading and removing --------------------------------------------------------------------


def read(location: Location, decode: Callable[[IO[bytes]], _T], *, fmt: str) -> _T:
    """Open ``location`` and return ``decode(file)``.

    Errors while opening are storage errors (``CheckpointNotFoundError``, ...); any error from
    ``decode`` means the bytes are not a valid checkpoint (``CheckpointCorruptedError``, or
    ``UnsafeCheckpointError`` for :class:`~._errors.UnsafeContentError`).
    """
    shown = location.display
    try:
        if isinstance(location, RemoteLocation):
            fs = location.fs
            if _remote_isdir(fs, location.path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            with fs.open(location.path, "rb") as remote:  # type: ignore[attr-defined]
                source: IO[bytes] = io.BytesIO(remote.read())
        else:
            source = open(location.path, "rb")  # closed below
    except OSError as exc:
        raise translate(exc, stage="read", path=shown, fmt=fmt) from exc
    with source:
        try:
            return decode(source)
        except MemoryError:
            raise
        except Exception as exc:
            raise translate(exc, stage="decode", path=shown, fmt=fmt) from exc


def remove(location: Location, *, fmt: str) -> None:
    """Delete the file at ``location``; a missing file is not an error (CKPT-11)."""
    shown = location.display
    try:
        if isinstance(location, RemoteLocation):
            fs = location.fs
            if _remote_isdir(fs, location.path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            try:
                fs.rm_file(location.path)  # type: ignore[attr-defined]
            except FileNotFoundError:
                pass
            return
        target = location.path
        try:
            os.unlink(target)
        except (FileNotFoundError, NotADirectoryError):
            pass
        directory, name = os.path.split(os.path.abspath(target))
        clean_stale_temps(directory, name)
    except OSError as exc:
        raise translate(exc, stage="remove", path=shown, fmt=fmt) from exc
