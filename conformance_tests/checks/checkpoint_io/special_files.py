"""CKPT-13: special files (FIFOs, sockets, devices) are refused by save, remove and load,
never replaced, removed or waited on."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import stat
import threading
import time
from typing import TYPE_CHECKING, Final

from trainspec.conformance._helpers import describe_exception, describe_value, failure
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _io_snippet,
    _location,
    _opened,
    _require_local,
    _sample,
    _save,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import CheckpointCorruptedError, CheckpointWriteError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec.checkpoint_io import CheckpointIO

# --------------------------------------------------------------------------- CKPT-13

_SPECIAL_TIMEOUT_S: Final = 5.0
"""How long one call on a special file may take before the check calls it blocked."""


def _make_special(kind: str, path: str) -> socket.socket | None:
    """Create a special file of ``kind`` at ``path`` (a socket stays bound while returned)."""
    if kind == "FIFO":
        os.mkfifo(path, 0o600)
        return None
    if kind == "character device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _special_kind(path: str) -> tuple[str, int] | None:
    """(type, device numbers) of the special file at ``path``, or None if something else."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    for test, kind in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(info.st_mode):
            return kind, info.st_rdev
    return None


def _unblock(path: str, thread: threading.Thread) -> None:
    """Release a thread blocked on the FIFO at ``path``: open its other ends, drain, close."""
    fds: list[int] = []
    for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
        with contextlib.suppress(OSError):
            fds.append(os.open(path, flags))
    deadline = time.monotonic() + _SPECIAL_TIMEOUT_S
    try:
        while thread.is_alive() and time.monotonic() < deadline:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.read(fd, 1 << 16)
            thread.join(0.01)
    finally:
        for fd in fds:
            os.close(fd)
    thread.join(_SPECIAL_TIMEOUT_S)


def _bounded_call(path: str, call: Callable[[], object]) -> tuple[bool, object]:
    """Run ``call`` on a worker thread: (returned in time, its result or exception)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the check
            outcome.append(exc)

    thread = threading.Thread(target=run, name="trainspec-conformance-special-file", daemon=True)
    thread.start()
    thread.join(_SPECIAL_TIMEOUT_S)
    if thread.is_alive():
        _unblock(path, thread)
        return False, None
    return True, outcome[0] if outcome else None


_SPECIAL_KINDS: Final = ("FIFO", "character device", "socket")


def _special_files(target: _Target, operation: str) -> Iterator[tuple[str, str]]:
    """(kind, path) for each special file this machine lets the kit make, in a fresh
    directory; skips the check when none can be made."""
    if not hasattr(os, "mkfifo"):
        raise CheckSkipped("this platform has no FIFOs or device nodes (POSIX only)")
    made = 0
    not_made: list[str] = []
    with _location(target) as where:
        _require_local(where)
        for kind in _SPECIAL_KINDS:
            path = where.path(f"{operation}-{kind.replace(' ', '-')}.ckpt")
            try:
                bound = _make_special(kind, path)
            except (OSError, AttributeError) as exc:
                not_made.append(f"{kind} ({describe_exception(exc)})")
                continue
            made += 1
            try:
                yield kind, path
            finally:
                if bound is not None:
                    bound.close()
                with contextlib.suppress(OSError):
                    os.unlink(path)
    if not made:
        raise CheckSkipped("no special file could be made here: " + "; ".join(not_made))


def _special_snippet(target: _Target, kind: str, call: str) -> str:
    make = {
        "FIFO": "os.mkfifo(path)",
        "character device": "import stat\n"
        "os.mknod(path, 0o600 | stat.S_IFCHR, os.stat('/dev/null').st_rdev)",
        "socket": "import socket\nsocket.socket(socket.AF_UNIX).bind(path)",
    }[kind]
    return _io_snippet(target, f"{make}\n{call}  # must raise, at once, and keep the {kind}")


def _refuses_and_keeps(
    target: _Target, operation: str, call: Callable[[CheckpointIO, str], object]
) -> None:
    shown = {
        "save": "save_checkpoint({'w': torch.ones(2)}, path)",
        "remove": "remove_checkpoint(path)",
    }
    for kind, path in _special_files(target, operation):
        before = _special_kind(path)
        with _opened(target) as io:
            returned, result = _bounded_call(path, functools.partial(call, io, path))
        after = _special_kind(path)
        repro = _special_snippet(target, kind, f"io.{shown[operation]}")
        if not returned:
            actual = f"{operation} on a {kind} had not returned after {_SPECIAL_TIMEOUT_S:.0f}s"
        elif not isinstance(result, CheckpointWriteError):
            actual = f"{operation} on a {kind} " + (
                f"raised {describe_exception(result)}"
                if isinstance(result, BaseException)
                else "returned normally"
            )
        elif after != before:
            now = after[0] if after else "a regular file or nothing"
            actual = f"the {kind} was replaced or removed (now: {now})"
        else:
            continue
        raise failure(
            target,
            "CKPT-13",
            expected=f"refuse to {operation} at a {kind} with CheckpointWriteError, leaving it "
            "in place",
            actual=actual,
            hint="os.lstat(path) first: anything that is not a regular file (or your own "
            "directory layout) is refused with CheckpointWriteError naming the path and its type.",
            snippet=repro,
        )


@check("CKPT-13", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_save_refuses_special_files_and_keeps_them(target: _Target) -> None:
    """Saving at a FIFO, device or socket raises CheckpointWriteError and leaves it in place."""
    checkpoint = _sample(target, 41)
    _refuses_and_keeps(target, "save", lambda io, path: _save(io, checkpoint, path))


@check("CKPT-13", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_remove_refuses_special_files_and_keeps_them(target: _Target) -> None:
    """Removing at a FIFO, device or socket raises CheckpointWriteError and leaves it in place."""
    _refuses_and_keeps(target, "remove", lambda io, path: io.remove_checkpoint(path))


@check("CKPT-13", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_load_refuses_special_files_without_blocking(target: _Target) -> None:
    """Loading a FIFO, device or socket raises CheckpointCorruptedError at once, never blocks."""
    for kind, path in _special_files(target, "load"):
        with _opened(target) as io:
            returned, result = _bounded_call(path, functools.partial(io.load_checkpoint, path))
        if not returned:
            actual = f"load_checkpoint of a {kind} had not returned after {_SPECIAL_TIMEOUT_S:.0f}s"
        elif not isinstance(result, CheckpointCorruptedError):
            actual = f"load_checkpoint of a {kind} " + (
                f"raised {describe_exception(result)}"
                if isinstance(result, BaseException)
                else f"returned {describe_value(result)}"
            )
        elif _special_kind(path) is None:
            actual = f"the {kind} was replaced or removed by loading it"
        else:
            continue
        raise failure(
            target,
            "CKPT-13",
            expected=f"raise CheckpointCorruptedError, without blocking, for a {kind} at the path",
            actual=actual,
            hint="Check os.stat(path) is a regular file before opening it, and open with "
            "O_NONBLOCK so a FIFO swapped in meanwhile cannot block.",
            snippet=_special_snippet(target, kind, "io.load_checkpoint(path)"),
        )
