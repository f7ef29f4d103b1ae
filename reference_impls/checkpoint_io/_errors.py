"""The one table that turns storage, pickle and torch errors into trainspec errors.

Every checkpoint IO in this package calls :func:`translate` at its boundary and nowhere else,
so the mapping below is the whole story. An operation is split into stages because the same
Python exception means different things in each: an ``OSError`` while *opening* a file is a
storage problem, while torch's reader raises ``OSError(EINVAL)`` for a truncated archive, which
is corruption.

======== ==================================== =================================================
stage    source exception                     trainspec error
======== ==================================== =================================================
read     FileNotFoundError                    CheckpointNotFoundError
read     NotADirectoryError                   CheckpointNotFoundError (a parent is a file)
read     IsADirectoryError                    CheckpointCorruptedError (not a file)
read     SpecialFileError                     CheckpointCorruptedError (a FIFO, device, socket)
read     PermissionError                      CheckpointError
read     OSError                              CheckpointError
decode   UnresolvedContentError               UnsafeCheckpointError ("unsafe or corrupted")
decode   UnsafeContentError                   UnsafeCheckpointError
decode   MemoryError                          CheckpointError (does not fit in memory)
decode   Exception                            CheckpointCorruptedError
encode   PicklingError, TypeError,            TypeError (a value the format cannot store)
         AttributeError, RuntimeError
write    IsADirectoryError                    CheckpointWriteError (a directory is in the way)
write    SpecialFileError                     CheckpointWriteError (refuses a FIFO, device, ...)
write    NotADirectoryError, FileExistsError  CheckpointWriteError (a parent is a file)
write    PermissionError                      CheckpointWriteError
write    FileNotFoundError                    CheckpointWriteError (e.g. a missing bucket)
write    OSError                              CheckpointWriteError (no space, read-only, ...)
remove   IsADirectoryError                    CheckpointWriteError (refuses to delete a folder)
remove   SpecialFileError                     CheckpointWriteError (refuses a FIFO, device, ...)
remove   PermissionError                      CheckpointWriteError
remove   OSError                              CheckpointWriteError
======== ==================================== =================================================

Rules are tried in order; the first whose stage and source class match wins. The original
exception becomes ``__cause__`` (the caller writes ``raise translate(...) from exc``).

Interruptions are never translated: a ``KeyboardInterrupt``, ``SystemExit`` or any other
``BaseException`` that is not an ``Exception`` propagates as itself, even when a library
wrapped it (torch's writer raises a ``RuntimeError`` whose ``__context__`` is the
``KeyboardInterrupt``); :func:`interruption` finds it in the chain.
"""

from __future__ import annotations

import errno
import pickle
import stat
from dataclasses import dataclass
from typing import Final, Literal

from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    UnsafeCheckpointError,
)

__all__ = [
    "FileTooLargeError",
    "RULES",
    "Rule",
    "SpecialFileError",
    "Stage",
    "UnresolvedContentError",
    "UnsafeContentError",
    "file_kind",
    "interruption",
    "translate",
]

Stage = Literal["read", "decode", "encode", "write", "remove"]
"""Where in an operation an error was met: reading raw bytes, decoding them, encoding the
checkpoint, writing bytes, or removing a file."""


class UnsafeContentError(pickle.UnpicklingError):
    """Raised inside this package when a weights-only load refused objects that would run
    code; ``names`` lists the refused globals (``["posix.system"]``) when torch can tell."""

    def __init__(self, message: str, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = names


class UnresolvedContentError(UnsafeContentError):
    """Raised inside this package when a weights-only load was refused and the pickle refers
    to a global whose name cannot be read without running the pickle (a protocol 4/5
    ``STACK_GLOBAL`` fed by computed values): the loader cannot tell an unsafe file from a
    damaged one, and reports it as unsafe, the reading that keeps the code from running."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def file_kind(mode: int) -> str | None:
    """What ``mode`` (an ``st_mode``) names, in words, or ``None`` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return kind
    return "special file"


class SpecialFileError(OSError):
    """Raised inside this package when a checkpoint path names something other than a regular
    file or directory: a FIFO, a character or block device, a socket. Saving over it or
    removing it would destroy it, and reading it could block forever; ``kind`` names it."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path} is a {kind}, not a regular file")
        self.path = path
        self.kind = kind


class FileTooLargeError(MemoryError):
    """Raised inside this package before reading a whole file that is larger than this
    machine's memory (reading it would fail, or wake the out-of-memory killer)."""


def interruption(exc: BaseException) -> BaseException | None:
    """The first ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
    ``SystemExit``, ...) in ``exc`` and its ``__cause__`` / ``__context__`` chain, or ``None``.

    Such an exception **must** propagate as itself rather than be translated.
    """
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if not isinstance(current, Exception):
            return current
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


@dataclass(frozen=True)
class Rule:
    """One row of the table: errors of class ``source`` met in ``stage`` become ``target``.

    ``reason`` is formatted with ``path`` (the path as the caller gave it) and ``fmt`` (the
    checkpoint format, e.g. ``"torch.save"``).
    """

    stage: Stage
    source: tuple[type[BaseException], ...]
    target: type[Exception]
    reason: str


_UNSAFE_HINT: Final = (
    "Loading it would run code, which is refused by default. If the file comes from a source "
    "you trust, load it with TorchCheckpointIO(weights_only=False), or allow the listed classes "
    "with torch.serialization.add_safe_globals([...])."
)

RULES: Final[tuple[Rule, ...]] = (
    Rule("read", (FileNotFoundError,), CheckpointNotFoundError, "no checkpoint exists at {path}"),
    Rule(
        "read",
        (NotADirectoryError,),
        CheckpointNotFoundError,
        "no checkpoint exists at {path}: one of its parents is a file, not a directory",
    ),
    Rule(
        "read",
        (IsADirectoryError,),
        CheckpointCorruptedError,
        "{path} is a directory; a checkpoint must be a single {fmt} file",
    ),
    Rule(
        "read",
        (SpecialFileError,),
        CheckpointCorruptedError,
        "{path} is not a regular file (a FIFO, device or socket); a checkpoint must be a "
        "single {fmt} file",
    ),
    Rule("read", (PermissionError,), CheckpointError, "{path} could not be read: access denied"),
    Rule("read", (OSError,), CheckpointError, "{path} could not be read"),
    Rule(
        "decode",
        (UnresolvedContentError,),
        UnsafeCheckpointError,
        "{path} is unsafe or corrupted: it refers to objects that are not plain data, and the "
        "loader cannot tell which. " + _UNSAFE_HINT,
    ),
    Rule(
        "decode",
        (UnsafeContentError,),
        UnsafeCheckpointError,
        "{path} contains objects that are not plain data. " + _UNSAFE_HINT,
    ),
    Rule(
        "decode",
        (MemoryError,),
        CheckpointError,
        "{path} could not be loaded: it does not fit in this machine's memory",
    ),
    Rule(
        "decode",
        (Exception,),
        CheckpointCorruptedError,
        "{path} is not a complete {fmt} checkpoint (empty, truncated, another format or damaged)",
    ),
    Rule(
        "encode",
        (pickle.PicklingError, TypeError, AttributeError, RuntimeError),
        TypeError,
        "the checkpoint for {path} holds a value that {fmt} cannot store; allowed are nested "
        "dicts, lists and tuples of tensors, ints, floats, bools, strings, None and picklable "
        "objects defined at module level (views of one storage must share one dtype)",
    ),
    Rule(
        "write",
        (IsADirectoryError,),
        CheckpointWriteError,
        "cannot write {path}: a directory is in the way (a checkpoint replaces a file only)",
    ),
    Rule(
        "write",
        (SpecialFileError,),
        CheckpointWriteError,
        "refusing to write {path}: it is not a regular file (a FIFO, device or socket), and a "
        "save would destroy it",
    ),
    Rule(
        "write",
        (NotADirectoryError, FileExistsError),
        CheckpointWriteError,
        "cannot write {path}: one of its parents is a file, not a directory",
    ),
    Rule("write", (PermissionError,), CheckpointWriteError, "cannot write {path}: access denied"),
    Rule(
        "write",
        (FileNotFoundError,),
        CheckpointWriteError,
        "cannot write {path}: its location does not exist (for object stores: the bucket)",
    ),
    Rule("write", (OSError,), CheckpointWriteError, "storage refused to write {path}"),
    Rule(
        "remove",
        (IsADirectoryError,),
        CheckpointWriteError,
        "refusing to remove {path}: it is a directory, and remove_checkpoint removes "
        "checkpoint files only",
    ),
    Rule(
        "remove",
        (SpecialFileError,),
        CheckpointWriteError,
        "refusing to remove {path}: it is not a regular file (a FIFO, device or socket), and "
        "remove_checkpoint removes checkpoint files only",
    ),
    Rule("remove", (PermissionError,), CheckpointWriteError, "cannot remove {path}: access denied"),
    Rule("remove", (OSError,), CheckpointWriteError, "storage refused to remove {path}"),
)

_DETAIL_LIMIT: Final = 300


def _detail(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _DETAIL_LIMIT:
        text = text[: _DETAIL_LIMIT - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def translate(exc: BaseException, *, stage: Stage, path: str, fmt: str) -> BaseException:
    """Return the trainspec error for ``exc`` met in ``stage`` while handling ``path``.

    Returns ``exc`` itself when no rule matches (it is then re-raised unchanged). The caller
    **must** raise the result ``from exc`` so the original stays the ``__cause__``.
    """
    for rule in RULES:
        if rule.stage == stage and isinstance(exc, rule.source):
            message = f"{rule.reason.format(path=path, fmt=fmt)} ({_detail(exc)})"
            error = rule.target(message)
            if isinstance(error, OSError):
                # Only errno: setting ``filename`` would make str(error) drop the message.
                cause_errno = exc.errno if isinstance(exc, OSError) else None
                if isinstance(error, CheckpointNotFoundError):
                    cause_errno = errno.ENOENT
                error.errno = cause_errno
            return error
    return exc
