"""Storage that refuses one stage of a write, inside one directory (CKPT-6).

We usually run as root, where ``chmod`` refuses nothing, so the kit provokes refusals by
injection: while :func:`refusing` is active, the stage it names fails with an ``OSError`` for
files inside ``root`` only (the rest of the process is untouched):

``open``
    ``os.open``, ``open`` / ``io.open`` of a path for writing: ``PermissionError(EACCES)``.
``write``
    ``os.write`` to, and ``write`` / ``writelines`` on a file object opened (by path or
    descriptor) on, a file in ``root``: ``OSError(ENOSPC)``.
``fsync``
    ``os.fsync`` / ``os.fdatasync`` of a regular file in ``root``: ``OSError(EIO)`` (a
    directory's fsync after the commit is not refused: the commit has happened by then).
``rename``
    ``os.replace``, ``os.rename``, ``os.renames`` and ``os.link`` with either path in
    ``root``: ``PermissionError(EACCES)``.

:class:`Refusals` counts what fired: an implementation that writes by other means (a C
library opening the file itself, a different syscall) never meets the injected refusal, and
then that stage is inconclusive for it, not passed. Linux maps descriptors to paths through
``/proc/self/fd``; elsewhere descriptor-based refusals do not fire.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import stat
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from typing_extensions import Self

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["STAGES", "Refusals", "Stage", "refusing"]

Stage = Literal["open", "write", "fsync", "rename"]
STAGES: Final[tuple[Stage, ...]] = ("open", "write", "fsync", "rename")

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_LOCK = threading.Lock()  # one injection at a time: the patches are process-wide


@dataclass
class Refusals:
    """What an active injection refused: ``fired`` counts, ``calls`` names them."""

    stage: Stage
    root: str
    fired: int = 0
    calls: list[str] = field(default_factory=list)
    files: set[tuple[int, int]] = field(default_factory=set)
    """(st_dev, st_ino) of the files whose fsync was refused: data that is not durable."""

    def refuse(self, call: str, code: int) -> None:
        self.fired += 1
        if len(self.calls) < 5:
            self.calls.append(call)
        message = f"refused by the trainspec conformance kit ({self.stage} stage)"
        if code in (errno.EACCES, errno.EPERM):
            raise PermissionError(code, message)
        raise OSError(code, os.strerror(code) + f": {message}")


def _inside(root: str, path: object) -> bool:
    if isinstance(path, int) and not isinstance(path, bool):
        return _fd_inside(root, path)
    try:
        text = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    except TypeError:
        return False
    return text == root or text.startswith(root + os.sep)


def _fd_inside(root: str, fd: int) -> bool:
    try:
        return _inside(root, os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return False


def _regular(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _writing(mode: object) -> bool:
    return isinstance(mode, str) and any(flag in mode for flag in "wax+")


class _RefusingFile:
    """A file object whose writes are refused; everything else is the real file's."""

    def __init__(self, raw: object, refusals: Refusals) -> None:
        self._raw = raw
        self._refusals = refusals

    def write(self, data: object) -> int:
        self._refusals.refuse("write()", errno.ENOSPC)
        return 0  # not reached

    def writelines(self, lines: object) -> None:
        self._refusals.refuse("writelines()", errno.ENOSPC)

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> object:
        return getattr(self._raw, name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()  # type: ignore[attr-defined]


@contextlib.contextmanager
def refusing(stage: Stage, root: str) -> Iterator[Refusals]:
    """Refuse ``stage`` for files under ``root`` while the block runs (see the module doc)."""
    refusals = Refusals(stage, os.path.abspath(root))
    base = refusals.root
    _LOCK.acquire()  # released when the patches are undone, below
    saved: list[tuple[object, str, object]] = []

    def patch(owner: object, name: str, replacement: object) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    real_open = io.open
    real_os_open = os.open

    if stage == "open":

        def os_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
            if flags & _WRITE_FLAGS and _inside(base, path):
                refusals.refuse(f"os.open({os.fsdecode(path)!r})", errno.EACCES)  # type: ignore[arg-type]
            return real_os_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

        def open_(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
            if _writing(mode) and not isinstance(file, int) and _inside(base, file):
                refusals.refuse(f"open({os.fsdecode(file)!r}, {mode!r})", errno.EACCES)  # type: ignore[arg-type]
            return real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

        patch(os, "open", os_open)
        patch(io, "open", open_)
        patch(builtins, "open", open_)
    elif stage == "write":
        real_write = os.write

        def os_write(fd: int, data: object) -> int:
            if _fd_inside(base, fd):
                refusals.refuse("os.write()", errno.ENOSPC)
            return real_write(fd, data)  # type: ignore[arg-type]

        def open_(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
            raw = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
            if _writing(mode) and _inside(base, file):
                return _RefusingFile(raw, refusals)
            return raw

        patch(os, "write", os_write)
        patch(io, "open", open_)
        patch(builtins, "open", open_)
    elif stage == "fsync":

        def refuse_sync(real: Callable[[object], None], name: str) -> Callable[[object], None]:
            def sync(fd: object) -> None:
                number = fd if isinstance(fd, int) else fd.fileno()  # type: ignore[attr-defined]
                if _regular(number) and _fd_inside(base, number):
                    info = os.fstat(number)
                    refusals.files.add((info.st_dev, info.st_ino))
                    refusals.refuse(f"os.{name}()", errno.EIO)
                real(fd)

            return sync

        patch(os, "fsync", refuse_sync(os.fsync, "fsync"))  # type: ignore[arg-type]
        if hasattr(os, "fdatasync"):
            patch(os, "fdatasync", refuse_sync(os.fdatasync, "fdatasync"))  # type: ignore[arg-type]
    else:

        def refuse_move(real: Callable[..., object], name: str) -> Callable[..., object]:
            def move(src: object, dst: object, *args: object, **kwargs: object) -> object:
                if _inside(base, src) or _inside(base, dst):
                    refusals.refuse(f"os.{name}()", errno.EACCES)
                return real(src, dst, *args, **kwargs)

            return move

        for name in ("replace", "rename", "renames", "link"):
            if hasattr(os, name):
                patch(os, name, refuse_move(getattr(os, name), name))
    try:
        yield refusals
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
        _LOCK.release()
