"""Helpers for the checkpoint reliability tests: forked children, tmpfs mounts.

Loaded by the ``test_checkpoint_*`` modules with :func:`load` (pytest's importlib mode puts no
test folder on ``sys.path``). Nothing here starts a new Python: a child is an ``os.fork()`` of
the test process, which already imported torch, and runs a small function only.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

NOBODY = 65534
FORK_TIMEOUT_S = 60.0


@dataclass
class ChildOutcome:
    """What a forked child's function did: returned ``value`` or raised ``error_type``."""

    value: object = None
    error_type: str | None = None  # "module.QualName" of the exception
    error_message: str = ""
    error_errno: int | None = None
    cause_type: str | None = None
    bases: tuple[str, ...] = ()  # qualified names of the exception's classes (MRO)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def run_forked(fn: Callable[[], object], *, timeout: float = FORK_TIMEOUT_S) -> ChildOutcome:
    """Run ``fn`` in a forked child and report what it returned or raised.

    The child exits with ``os._exit`` (no pytest or atexit code runs in it); a child that
    does not finish within ``timeout`` is killed and the test fails.
    """
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        try:
            try:
                outcome = ChildOutcome(value=fn())
            except BaseException as exc:
                cause = exc.__cause__
                outcome = ChildOutcome(
                    error_type=_qualname(type(exc)),
                    error_message=str(exc),
                    error_errno=getattr(exc, "errno", None),
                    cause_type=None if cause is None else _qualname(type(cause)),
                    bases=tuple(_qualname(c) for c in type(exc).__mro__),
                )
            data = pickle.dumps(outcome)
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([pipe], [], [], max(0.0, remaining))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"forked child did not finish within {timeout}s")
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError("forked child died without reporting")
    result = pickle.loads(b"".join(chunks))
    assert isinstance(result, ChildOutcome)
    return result


def as_nobody(fn: Callable[[], object]) -> Callable[[], object]:
    """Wrap ``fn`` to run as the unprivileged ``nobody`` user (for use in a forked child)."""

    def run() -> object:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        return fn()

    return run


class MountUnavailable(Exception):
    """This machine does not let the tests mount a tmpfs."""


@contextlib.contextmanager
def tmpfs(size: str = "1m") -> Iterator[str]:
    """Mount a fresh tmpfs of ``size`` and yield its path; unmount afterwards.

    Raises :class:`MountUnavailable` where mounting is not permitted (not root, no
    CAP_SYS_ADMIN, a restrictive container).
    """
    if sys.platform != "linux" or os.geteuid() != 0:
        raise MountUnavailable("mounting a tmpfs needs root on Linux")
    target = tempfile.mkdtemp(prefix="trainspec-tmpfs-")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", target],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        os.rmdir(target)
        raise MountUnavailable(f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            os.rmdir(target)


def remount_readonly(target: str) -> None:
    """Make the tmpfs at ``target`` read-only."""
    subprocess.run(["mount", "-o", "remount,ro", target], check=True, capture_output=True)
