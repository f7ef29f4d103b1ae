"""Fixtures and helpers shared by the CheckpointIO checks: locations, the checkpoints the
declared capabilities allow, saving through a synchronous or asynchronous IO, comparisons and
reproduction snippets."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import torch

from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.conformance._helpers import (
    checkpoint_differences,
    failure,
    importable_path,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target
from trainspec.conformance.hypothesis_strategies import supported_dtypes

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

_Target = Target[CheckpointIO]


# --------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class _Location:
    """A fresh, empty place for one check's checkpoints."""

    root: str
    local: bool

    def path(self, *parts: str) -> str:
        if self.local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])


@contextlib.contextmanager
def _location(target: _Target) -> Iterator[_Location]:
    base = target.options.get("base_path")
    if base is None:
        with tempfile.TemporaryDirectory(prefix="trainspec-ckpt-") as tmp:
            yield _Location(tmp, local=True)
        return
    if not isinstance(base, (str, os.PathLike)):
        raise TypeError(f"conformance option 'base_path' must be a str or path: {base!r}")
    base = os.fspath(base)
    if "://" in base:
        root = f"{base.rstrip('/')}/{uuid.uuid4().hex}"
        try:
            yield _Location(root, local=False)
        finally:
            with contextlib.suppress(Exception):
                import fsspec

                fs, fs_path = fsspec.core.url_to_fs(root)
                if fs.exists(fs_path):
                    fs.rm(fs_path, recursive=True)
        return
    root = os.path.join(base, uuid.uuid4().hex)
    os.makedirs(root)
    try:
        yield _Location(root, local=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_OTHER_FILE_SYSTEM_CANDIDATES: Final = ("/dev/shm", "/var/tmp", "/tmp", "~", ".")


def _tmpdir_device() -> int:
    return os.stat(tempfile.gettempdir()).st_dev


@contextlib.contextmanager
def _other_file_system(target: _Target) -> Iterator[_Location | None]:
    """A fresh local directory on a file system (``st_dev``) other than ``$TMPDIR``'s, or None.

    A local ``base_path`` option is tried first, then the usual candidates (``/dev/shm``
    tmpfs, ``/var/tmp``, ``/tmp``, the home and the working directories)."""
    tmp_device = _tmpdir_device()
    base = target.options.get("base_path")
    candidates = [os.fspath(base)] if isinstance(base, (str, os.PathLike)) else []
    candidates += [os.path.expanduser(c) for c in _OTHER_FILE_SYSTEM_CANDIDATES]
    for candidate in candidates:
        if "://" in candidate:
            continue
        try:
            if os.stat(candidate).st_dev == tmp_device:
                continue
            root = tempfile.mkdtemp(prefix="trainspec-ckpt-xfs-", dir=candidate)
        except OSError:
            continue
        try:
            yield _Location(root, local=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    yield None


def _no_other_file_system() -> str:
    tried = ", ".join(_OTHER_FILE_SYSTEM_CANDIDATES)
    return (
        f"no writable directory on a file system other than $TMPDIR's "
        f"({tempfile.gettempdir()}) was found (tried base_path, {tried})"
    )


def _require_local(location: _Location) -> None:
    if not location.local:
        raise CheckSkipped("base_path is a URL; this check inspects local files")


def _forkable_factory(target: _Target, purpose: str) -> tuple[str, str]:
    """``(module, qualname)`` of the target's factory, for a fresh process that forks children
    to ``purpose`` (the kill server); raises CheckSkipped on a platform without fork, or for a
    factory a fresh process cannot import (a lambda, a local function, a partial)."""
    if not hasattr(os, "fork"):
        raise CheckSkipped(f"this platform cannot fork a process to {purpose} (POSIX only)")
    located = importable_path(target.factory)
    if located is None:
        raise CheckSkipped(
            f"the factory {target.factory!r} is not importable by its module and name (a "
            f"lambda, local function or partial): a child process cannot build the IO to "
            f"{purpose}"
        )
    return located


@contextlib.contextmanager
def _opened(target: _Target) -> Iterator[CheckpointIO]:
    """A fresh instance, torn down afterwards (teardown errors are left to CKPT-12)."""
    io = target.make()
    try:
        yield io
    finally:
        with contextlib.suppress(Exception):
            io.teardown()


def _settle(io: CheckpointIO) -> None:
    """Wait for background saves of an asynchronous IO, raising their errors."""
    if isinstance(io, AsyncCheckpointIO):
        io.wait()


def _save(
    io: CheckpointIO, checkpoint: Checkpoint, path: str, storage_options: object = None
) -> None:
    """Save and, for an asynchronous IO, wait: the save's errors surface here."""
    io.save_checkpoint(checkpoint, path, storage_options)  # type: ignore[arg-type]
    _settle(io)


# --------------------------------------------------------------------------- checkpoints


def _dtypes(target: _Target) -> tuple[torch.dtype, ...]:
    value = target.options.get("dtypes")
    if value is None:
        return supported_dtypes("cpu")
    if not isinstance(value, Sequence) or not all(isinstance(d, torch.dtype) for d in value):
        raise TypeError(f"conformance option 'dtypes' must be a sequence of torch.dtype: {value!r}")
    return tuple(value)


def _caps(target: _Target) -> frozenset[str]:
    return target.capabilities


def _random(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(dtype)


def _sample(target: _Target, seed: int = 0, *, size: int = 16) -> Checkpoint:
    """A small, deterministic checkpoint within the declared value set."""
    weight = _random((size, 4), seed)
    checkpoint: Checkpoint = {"weight": weight, "bias": _random((4,), seed + 1)}
    if "python_objects" in _caps(target):
        checkpoint.update(
            {
                "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "lr": 0.1},
                "epoch": seed,
                "name": f"run-{seed}",
                "history": [1.5, float("nan"), None, True],
                "shape": (size, 4),
            }
        )
    return checkpoint


def _big(fill: float, *, megabytes: int = 2) -> Checkpoint:
    return {"weight": torch.full((megabytes * 1024, 256), fill)}


def _equal_or_fail(
    target: _Target,
    clause: str,
    expected: Checkpoint,
    loaded: object,
    *,
    what: str,
    repro: str,
    hint: str = "",
) -> None:
    differences = checkpoint_differences(
        expected, loaded, check_sharing="shared_storage" in _caps(target)
    )
    if differences:
        raise failure(
            target,
            clause,
            expected=what,
            actual="; ".join(differences[:4]) + (" ..." if len(differences) > 4 else ""),
            hint=hint,
            snippet=repro,
        )


_IO_SNIPPET_IMPORTS = "import os, tempfile"


def _io_snippet(target: _Target, body: str) -> str:
    return snippet(
        target,
        "path = os.path.join(tempfile.mkdtemp(), 'model.ckpt')\n"
        + textwrap.dedent(body).strip("\n"),
        var="io",
        imports=_IO_SNIPPET_IMPORTS,
    )


# --------------------------------------------------------------------------- CKPT-8

_EXECUTED: list[str] = []


def _record_execution(token: str) -> str:
    """Called when an :class:`UnsafePayload` is unpickled: proof that loading ran code."""
    _EXECUTED.append(token)
    return token


def executed_payloads() -> tuple[str, ...]:
    """Tokens of every :class:`UnsafePayload` unpickled in this process so far."""
    return tuple(_EXECUTED)


class UnsafePayload:
    """An object whose unpickling calls a function: content a safe load must refuse.

    Unpickling it calls ``_record_execution(token)`` (and yields the token string), so a check
    can tell whether loading executed code.
    """

    def __init__(self, token: str) -> None:
        self.token = token

    def __reduce__(self) -> tuple[Callable[[str], str], tuple[str]]:
        return (_record_execution, (self.token,))

    def __copy__(self) -> UnsafePayload:
        return UnsafePayload(self.token)

    def __deepcopy__(self, memo: object) -> UnsafePayload:
        # A snapshot (deepcopy) must keep the payload, not run it as pickling would.
        return UnsafePayload(self.token)
