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
    its temporary file; the previous checkpoint is untouched. An interrupted write
    (``KeyboardInterrupt``, ``SystemExit``) removes it too and propagates as itself.

    The temporary file gets the replaced file's permission bits (and owner and group, where
    this process may set them), so an overwrite never widens a 0600 checkpoint; a new
    checkpoint gets what a plain ``open`` gives (``0o666 & ~umask``).

Special files
    Only a regular file (or nothing) at the target is replaced or removed. A FIFO, a
    character or block device or a socket there is refused with ``SpecialFileError``
    (translated to ``CheckpointWriteError``): replacing ``/dev/null`` with a checkpoint, or
    deleting it, would break the machine. Reads check the type before opening and open with
    ``O_NONBLOCK``, then check the opened file again, so a FIFO never blocks a load.

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
    target first deletes that target's *stale* temporary files. A writer holds an exclusive
    advisory lock (``flock``) on its temporary file from creating it until the rename; the
    kernel drops the lock when the writer dies, however it dies. Pids are not trusted: a
    writer in another PID namespace (a container sharing the directory) has a pid that means
    nothing here. A cleaner opens each candidate and tries the lock without waiting:

    - the lock is held: a live writer, in this process or another, on this host or (where the
      file system's locks reach across hosts) another: kept, whatever its age;
    - the lock is free and the name records this host: its writer is gone: deleted, while the
      cleaner holds the lock (so a writer that created the file but has not locked it yet
      finds its name gone once it gets the lock, and starts again with a new name);
    - the lock is free and the name records another host: deleted only when older than
      :data:`STALE_TEMP_AGE_S` (that host's locks may not reach this one);
    - locks are not supported (``ENOLCK``, ``EOPNOTSUPP``, Windows) or the file cannot be
      opened: as before locks, deleted when its writer was on this host and its pid is gone,
      or when older than :data:`STALE_TEMP_AGE_S`.

    Only regular files are ever deleted.

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
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Final, TypeVar, cast

from trainspec.errors import ConfigurationError

from ._errors import (
    FileTooLargeError,
    SpecialFileError,
    Stage,
    file_kind,
    interruption,
    translate,
)

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
    "memory_limit",
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
_NAME_ATTEMPTS: Final = 8  # temporary names tried when cleaners keep taking them away
# (st_dev, st_ino) of the temporary files this process is writing: its own cleaners leave them
# alone without opening them. On NFS, flock is emulated with POSIX locks, which do not
# conflict within one process and which any close() of the file by the process releases.
_WRITING: Final[set[tuple[int, int]]] = set()
_OPEN_SPECIAL_SAFE: Final = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
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


def _stale_by_pid(suffix: str, age_s: float) -> bool:
    """Whether a temporary file is stale judged by its name and age (no lock available)."""
    if age_s > STALE_TEMP_AGE_S:
        return True
    match = _TEMP_SUFFIX.match(suffix)
    if match is None or match["host"] != _HOST:
        return False
    return not _pid_running(int(match["pid"]))


def _lock(fd: int, *, wait: bool) -> bool | None:
    """Take an exclusive ``flock`` on ``fd``: ``True`` when taken, ``False`` when another
    open file holds it (only without ``wait``), ``None`` when locks are not supported."""
    if sys.platform == "win32":
        return None
    import fcntl  # POSIX only

    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP, EINVAL: this file system has no flock
        return None
    return True


def _same_file(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        return os.path.samestat(os.lstat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def _clean_one(path: str, suffix: str, now: float) -> bool:
    """Delete the temporary file ``path`` if it is stale (module docstring); return whether
    it was deleted."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False  # never ours: a name that merely looks like a temporary file
    if (info.st_dev, info.st_ino) in _WRITING:
        return False  # this process is writing it
    age = now - info.st_mtime
    try:
        fd = os.open(path, _OPEN_SPECIAL_SAFE | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return False
    except OSError:  # e.g. another user's file: judge by name and age
        if _stale_by_pid(suffix, age):
            _unlink_quietly(path)
            return True
        return False
    try:
        if not os.path.samestat(info, os.fstat(fd)):
            return False  # replaced between lstat and open: look again next time
        locked = _lock(fd, wait=False)
        if locked is None:
            stale = _stale_by_pid(suffix, age)
        elif not locked:
            return False  # a live writer holds it
        else:
            match = _TEMP_SUFFIX.match(suffix)
            stale = (match is not None and match["host"] == _HOST) or age > STALE_TEMP_AGE_S
        if stale and _same_file(path, fd):
            os.unlink(path)  # while holding the lock: see _create_temp
            return True
        return False
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


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
        if entry.name.startswith(prefix) and _clean_one(entry.path, entry.name[len(prefix) :], now):
            removed.append(entry.path)
    return removed


# --- writing ---------------------------------------------------------------------------------


class _TrackedWriter(io.RawIOBase):
    """Passes writes to ``raw`` and remembers the first ``OSError``.

    torch's zip writer swallows the ``OSError`` of a failed ``write`` (a full disk) and raises
    a ``RuntimeError`` about file positions instead; the remembered error is the real cause.

    Closed explicitly by :func:`atomic_write`, never left to the garbage collector: closing
    runs :meth:`flush`, Python code, and a ``KeyboardInterrupt`` raised in Python code that a
    finalizer runs is silently dropped (Ctrl-C would be lost). After :meth:`discard`, writes
    are accepted and dropped: an interrupted ``torch.save`` may leave its zip writer
    unfinished, and the writer's destructor, whenever it runs, then writes the end of the
    archive; raising there (the temporary file is closed by then) aborts the process.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._discarding = False
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        if self._discarding:
            return memoryview(data).nbytes
        try:
            written = self._raw.write(data)
        except OSError as exc:
            if self.error is None:
                self.error = exc
            raise
        return written if written is not None else 0

    def flush(self) -> None:
        if not self._discarding:
            self._raw.flush()

    def discard(self) -> None:
        """Accept and drop every later write; close without touching ``raw``."""
        self._discarding = True
        self.close()


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

    Closes it here instead when no thread can be started (interpreter shutdown, limits). An
    interruption while the thread starts propagates as itself (``Thread.start`` may wrap it
    in a ``RuntimeError`` about an unlocked lock); ``fd`` is then closed exactly once, by
    whichever of the thread and this call takes it first.
    """
    owner = [fd]
    interrupted: BaseException | None = None
    try:
        threading.Thread(
            target=_close_owned, args=(owner,), name=_RELEASE_THREAD, daemon=True
        ).start()
    except BaseException as exc:
        _close_owned(owner)
        interrupted = interruption(exc)
        if interrupted is None and not isinstance(exc, RuntimeError):
            raise
    if interrupted is not None:
        raise interrupted  # outside the handler: no context cycle through the wrapper


def _close_owned(owner: list[int]) -> None:
    """Close the descriptor in ``owner`` unless another caller took it (``list.pop`` is one
    step under the GIL, so exactly one caller gets it)."""
    try:
        fd = owner.pop()
    except IndexError:
        return
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


def _replaceable(target: str) -> os.stat_result | None:
    """What is at ``target`` when a save may replace it: a regular file's status, or ``None``
    for nothing (or a symbolic link that names nothing, which is replaced itself).

    Raises ``IsADirectoryError`` for a directory and :class:`~._errors.SpecialFileError` for a
    FIFO, device or socket (replacing one would destroy it).
    """
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return None
    kind = file_kind(info.st_mode)
    if kind is None:
        return info
    if kind == "directory":
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
    if kind == "symbolic link":
        return None
    raise SpecialFileError(target, kind)


def _keep_owner_and_mode(fd: int, replaced: os.stat_result) -> None:
    """Give the new file (open as ``fd``) the owner, group and permission bits of the file it
    replaces, as far as this process may (best effort: some file systems have no modes)."""
    if os.name != "posix":
        return
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (replaced.st_uid, replaced.st_gid):
        try:
            os.fchown(fd, replaced.st_uid, replaced.st_gid)
        except OSError:
            try:  # not root: the group may still be one of ours
                os.fchown(fd, -1, replaced.st_gid)
            except OSError:
                pass
    try:
        os.fchmod(fd, stat.S_IMODE(replaced.st_mode))  # after chown, which clears set-id bits
    except OSError:
        pass


@dataclass
class _Temp:
    """A temporary file being written; its lock (where supported) lasts until ``file`` is
    closed, which happens after the rename. ``identity`` is its key in ``_WRITING`` until
    :meth:`done`."""

    path: str
    file: IO[bytes]
    identity: tuple[int, int]

    def done(self) -> None:
        _WRITING.discard(self.identity)


def _create_temp(directory: str, name: str, replaced: os.stat_result | None) -> _Temp:
    """Create, lock and return a new temporary file for the target ``name`` in ``directory``.

    Created with ``O_EXCL`` and the mode of the file it will replace (``0o666`` for a new
    target, narrowed by the umask), then locked. A cleaner deletes an unlocked file only while
    holding its lock, so a file whose name is gone once the lock is ours was taken by a
    cleaner in the instant between creating and locking it: try again with a new name.
    """
    mode = 0o666 if replaced is None else stat.S_IMODE(replaced.st_mode) & 0o777

    def opener(path: str, flags: int) -> int:
        return os.open(path, flags, mode)  # "x": O_CREAT | O_EXCL

    for _ in range(_NAME_ATTEMPTS):
        path = os.path.join(directory, _temp_name(name))
        file: IO[bytes] | None = None
        identity = (-1, -1)
        try:
            # Everything from the open on is inside the try: a KeyboardInterrupt raised as the
            # open returns (a signal that arrives during a system call is handled right after
            # it) must not leave the new file behind. Only the file object owns the
            # descriptor, so an orphaned one closes it exactly once.
            file = open(path, "xb", opener=opener)
            fd = file.fileno()
            opened = os.fstat(fd)
            identity = (opened.st_dev, opened.st_ino)
            _WRITING.add(identity)
            if _lock(fd, wait=True) and not _same_file(path, fd):
                _WRITING.discard(identity)
                closing, file = file, None
                closing.close()
                continue
            if replaced is not None:
                _keep_owner_and_mode(fd, replaced)
            return _Temp(path, file, identity)
        except BaseException as exc:
            _WRITING.discard(identity)
            # The name is random, so it is ours unless the open itself refused to create it.
            if file is not None or not isinstance(exc, OSError):
                _unlink_quietly(path)
            if file is not None:
                _close_file_quietly(file)
            raise
    raise FileNotFoundError(
        errno.ENOENT, f"{_NAME_ATTEMPTS} temporary files were deleted while being created", name
    )


def _open_temp(directory: str, name: str, replaced: os.stat_result | None) -> _Temp:
    # A seam for tests that need a file whose writes fail or are interrupted.
    return _create_temp(directory, name, replaced)


def _finish_failed_write(
    exc: BaseException, tracked: _TrackedWriter | None, shown: str, fmt: str
) -> BaseException:
    """The exception to raise for a failed write: an interruption found anywhere in the
    chain as itself, else the remembered storage error, else ``exc`` translated."""
    interrupted = interruption(exc)
    if interrupted is not None:
        return interrupted
    if tracked is not None and tracked.error is not None:
        error = translate(tracked.error, stage="write", path=shown, fmt=fmt)
        error.__cause__ = tracked.error
        return error
    stage: Stage = "write" if isinstance(exc, OSError) else "encode"
    error = translate(exc, stage=stage, path=shown, fmt=fmt)
    if error is not exc:
        error.__cause__ = exc
    return error


def atomic_write(location: Location, write: Callable[[IO[bytes]], None], *, fmt: str) -> None:
    """Replace the file at ``location`` with what ``write`` writes, atomically (CKPT-3).

    ``write`` receives a binary file object. An ``OSError`` from storage becomes
    ``CheckpointWriteError``; any other error from ``write`` is an encoding problem and becomes
    ``TypeError``; an interruption (``KeyboardInterrupt``, ``SystemExit``, ... even when
    wrapped by torch) propagates as itself. In every case the previous file is intact and no
    temporary file is left. A FIFO, device or socket at the path is refused
    (``CheckpointWriteError``), never replaced.
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
        existing = _replaceable(target)
        clean_stale_temps(directory, name)
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
    temp: _Temp | None = None
    tracked: _TrackedWriter | None = None
    replaced: int | None = None
    failure: BaseException | None = None
    try:
        temp = _open_temp(directory, name, existing)
        tracked = _TrackedWriter(temp.file)
        write(cast("IO[bytes]", tracked))
        tracked.close()  # here, where an interruption propagates (see _TrackedWriter)
        temp.file.flush()
        os.fsync(temp.file.fileno())
        if os.name != "posix":
            temp.file.close()  # Windows cannot rename an open file
        _replaceable(target)  # again, just before the rename: refuse what appeared meanwhile
        replaced = _hold_replaced(target)
        os.replace(temp.path, target)
    except BaseException as exc:
        if tracked is not None:
            tracked.discard()
        if replaced is not None:
            _close_quietly(replaced)  # still linked: closing frees nothing
        if temp is not None:
            _unlink_quietly(temp.path)  # still locked: no cleaner races this
            _close_file_quietly(temp.file)
            temp.done()
        failure = _finish_failed_write(exc, tracked, shown, fmt)
    if failure is not None:
        # Raised outside the handler, so an interruption keeps its own context (torch's
        # wrapping error points at it; the reverse link would make a cycle).
        raise failure
    assert temp is not None
    _close_file_quietly(temp.file)  # drops the lock; the name is gone, the bytes are synced
    temp.done()
    if replaced is not None:
        _release(replaced)
    try:
        _fsync_directory(directory)
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc


def _close_file_quietly(file: IO[bytes]) -> None:
    try:
        file.close()
    except Exception:  # best effort: the error being raised matters more
        pass


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
            kind = _remote_kind(fs, path)
            if kind is not None:
                raise SpecialFileError(shown, kind)
            if parent:
                fs.makedirs(parent, exist_ok=True)  # type: ignore[attr-defined]
            _clean_remote_temps(fs, parent, name)
    except OSError as exc:
        raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
    if direct:
        # Encode fully first, then one upload: a failed encode never reaches the store, and
        # the object only changes when the upload completes.
        buffer = io.BytesIO()
        failure: BaseException | None = None
        try:
            write(buffer)
        except BaseException as exc:
            failure = _finish_failed_write(exc, None, shown, fmt)
        if failure is not None:
            raise failure
        try:
            fs.pipe_file(path, buffer.getvalue())  # type: ignore[attr-defined]
        except OSError as exc:
            raise translate(exc, stage="write", path=shown, fmt=fmt) from exc
        return
    temp = f"{parent}/{_temp_name(name)}" if parent else _temp_name(name)
    tracked: _TrackedWriter | None = None
    failure = None
    try:
        with fs.open(temp, "wb") as raw:  # type: ignore[attr-defined]
            tracked = _TrackedWriter(raw)
            write(cast("IO[bytes]", tracked))
            tracked.close()
        fs.mv(temp, path)  # type: ignore[attr-defined]
    except BaseException as exc:
        if tracked is not None:
            tracked.discard()
        _remote_rm_quietly(fs, temp)
        failure = _finish_failed_write(exc, tracked, shown, fmt)
    if failure is not None:
        raise failure


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


def memory_limit() -> int | None:
    """The bytes of memory this process can have at most (physical memory, or a smaller
    cgroup limit), or ``None`` where that cannot be told."""
    limit: int | None = None
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", "rb") as f:
            text = f.read().strip()
        if text.isdigit():
            limit = int(text) if limit is None else min(limit, int(text))
    except OSError:
        pass
    return limit if limit is not None and limit > 0 else None


def _check_fits(size: int, shown: str) -> None:
    limit = memory_limit()
    if limit is not None and size > limit:
        raise FileTooLargeError(
            f"{shown} holds {size} bytes, more than this machine's memory ({limit} bytes)"
        )


def _check_regular(info: os.stat_result, path: str) -> None:
    kind = file_kind(info.st_mode)
    if kind == "directory":
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if kind is not None:
        raise SpecialFileError(path, kind)


def _open_local(path: str) -> IO[bytes]:
    """Open the regular file ``path`` for reading; never opens, or blocks on, anything else.

    The type is checked before opening (a device is not even opened), the open is
    non-blocking (a FIFO swapped in meanwhile does not wait for a writer) and the opened file
    is checked again.
    """
    _check_regular(os.stat(path), path)
    fd = os.open(path, _OPEN_SPECIAL_SAFE)
    opened: os.stat_result | None = None
    try:
        opened = os.fstat(fd)
        _check_regular(opened, path)
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return open(fd, "rb")  # the file object owns fd from here on
    except BaseException:
        _close_unless_taken(fd, opened)
        raise


def _close_unless_taken(fd: int, opened: os.stat_result | None) -> None:
    """Close ``fd`` after a failed open, unless a file object already took and closed it.

    An interruption can be raised just after ``open(fd)`` returned: the new file object is
    then freed as the exception unwinds, closing ``fd`` itself; closing it again would close
    whatever file another thread opened under the same number meanwhile. ``fd`` is closed
    here only while it still names the file that was opened (``opened``).
    """
    if opened is not None:
        try:
            now = os.fstat(fd)
        except OSError:
            return  # already closed
        if not os.path.samestat(now, opened):
            return  # closed and reused by another open
    _close_quietly(fd)


def _remote_kind(fs: object, path: str) -> str | None:
    """What a non-object-store fsspec path names when it is neither a file nor a directory
    (fsspec's local file system says ``"other"`` for FIFOs and devices), else ``None``."""
    try:
        info = fs.info(path)  # type: ignore[attr-defined]
    except (FileNotFoundError, NotImplementedError):
        return None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind in (None, "file", "directory"):
        return None
    mode = info.get("mode")
    named = file_kind(mode) if isinstance(mode, int) else None
    return named or str(kind)


def _remote_size(fs: object, path: str) -> int | None:
    try:
        size = fs.size(path)  # type: ignore[attr-defined]
    except (NotImplementedError, AttributeError):
        return None
    return size if isinstance(size, int) else None


def _open_for_read(location: Location, *, whole: bool) -> IO[bytes]:
    shown = location.display
    if isinstance(location, LocalLocation):
        source = _open_local(location.path)
        try:
            if whole:
                _check_fits(os.fstat(source.fileno()).st_size, shown)
        except BaseException:
            source.close()
            raise
        return source
    fs = location.fs
    if _remote_isdir(fs, location.path):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
    if location.protocol not in DIRECT_WRITE_PROTOCOLS:
        kind = _remote_kind(fs, location.path)
        if kind is not None:
            raise SpecialFileError(shown, kind)
    size = _remote_size(fs, location.path)
    if size is not None:
        _check_fits(size, shown)
    with fs.open(location.path, "rb") as remote:  # type: ignore[attr-defined]
        return io.BytesIO(remote.read())


def _decode_failure(exc: BaseException, shown: str, fmt: str) -> BaseException:
    """The exception to raise for ``exc`` met while decoding: an interruption as itself,
    anything else translated (a ``MemoryError`` included: it becomes ``CheckpointError``)."""
    interrupted = interruption(exc)
    if interrupted is not None or not isinstance(exc, Exception):
        return interrupted or exc
    error = translate(exc, stage="decode", path=shown, fmt=fmt)
    if error is not exc:
        error.__cause__ = exc
    return error


def read(
    location: Location,
    decode: Callable[[IO[bytes]], _T],
    *,
    fmt: str,
    whole: bool = False,
) -> _T:
    """Open ``location`` and return ``decode(file)``.

    Errors while opening are storage errors (``CheckpointNotFoundError``, ...); a directory,
    FIFO, device or socket is not a checkpoint (``CheckpointCorruptedError``) and is never
    read. Any error from ``decode`` means the bytes are not a valid checkpoint
    (``CheckpointCorruptedError``, or ``UnsafeCheckpointError`` for
    :class:`~._errors.UnsafeContentError`), except a ``MemoryError`` (``CheckpointError``: it
    does not fit) and an interruption (``KeyboardInterrupt``, ..., propagated as itself).
    ``whole`` says ``decode`` reads the whole file into memory: a file larger than memory is
    then refused before reading. Remote files are always read whole.
    """
    shown = location.display
    try:
        source = _open_for_read(location, whole=whole)
    except FileTooLargeError as exc:
        raise translate(exc, stage="decode", path=shown, fmt=fmt) from exc
    except OSError as exc:
        raise translate(exc, stage="read", path=shown, fmt=fmt) from exc
    failure: BaseException | None = None
    with source:
        try:
            return decode(source)
        except BaseException as exc:
            failure = _decode_failure(exc, shown, fmt)
    # Raised outside the handler, so an interruption keeps its own context.
    raise failure


def remove(location: Location, *, fmt: str) -> None:
    """Delete the file at ``location``; a missing file is not an error (CKPT-11)."""
    shown = location.display
    try:
        if isinstance(location, RemoteLocation):
            fs = location.fs
            if _remote_isdir(fs, location.path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            if location.protocol not in DIRECT_WRITE_PROTOCOLS:
                kind = _remote_kind(fs, location.path)
                if kind is not None:
                    raise SpecialFileError(shown, kind)
            try:
                fs.rm_file(location.path)  # type: ignore[attr-defined]
            except FileNotFoundError:
                pass
            return
        target = location.path
        try:
            kind = file_kind(os.lstat(target).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            kind = "missing"
        if kind == "directory":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
        if kind not in (None, "missing", "symbolic link"):  # the link itself goes, not its file
            raise SpecialFileError(target, kind)
        if kind != "missing":
            try:
                os.unlink(target)
            except (FileNotFoundError, NotADirectoryError):
                pass
        directory, name = os.path.split(os.path.abspath(target))
        clean_stale_temps(directory, name)
    except OSError as exc:
        raise translate(exc, stage="remove", path=shown, fmt=fmt) from exc
