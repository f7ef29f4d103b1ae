"""Fault-seeded checkpoint IOs: each subclasses a correct IO and breaks exactly one rule;
``clause`` names the clause, ``rejected_by`` the check that must reject it and
``capabilities`` what the fault declares.

Baselines: the reference ``TorchCheckpointIO``, ``MemoryCheckpointIO`` and
``SafetensorsCheckpointIO``, and :class:`MiniAsyncCheckpointIO`, a small correct asynchronous IO
whose steps (snapshot, write, error hand-over, waiting) are separate methods, so that each
asynchronous fault overrides one of them. Its ``write_delay_s`` simulates slow storage: a
fault that races with the caller (no snapshot, a load that does not wait) then loses the race
every time instead of by chance.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    LifecycleError,
)
from trainspec.reference.checkpoint_io import (
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

FULL: frozenset[str] = frozenset(
    {"local_paths", "fsspec_urls", "python_objects", "strided_tensors", "shared_storage", "pickle"}
)
"""What TorchCheckpointIO declares."""
MEMORY: frozenset[str] = frozenset(
    {"python_objects", "strided_tensors", "shared_storage", "pickle"}
)
"""What MemoryCheckpointIO declares: no paths other instances see."""
FLAT: frozenset[str] = frozenset({"local_paths", "fsspec_urls"})
"""What SafetensorsCheckpointIO declares: flat dicts of contiguous tensors."""
ASYNC: frozenset[str] = FULL | {"async"}
"""What the asynchronous IOs over TorchCheckpointIO declare."""

SLOW_WRITE_S = 0.1
"""The write delay of the racing asynchronous faults."""


class MiniAsyncCheckpointIO(AsyncCheckpointIO):
    """A correct asynchronous IO: one worker thread, deep-copy snapshots, per-path waiting.

    ``write_delay_s`` sleeps before every background write (slow storage).
    """

    def __init__(self, inner: CheckpointIO | None = None, *, write_delay_s: float = 0.0) -> None:
        self.inner: CheckpointIO = TorchCheckpointIO() if inner is None else inner
        self.write_delay_s = write_delay_s
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.pending: list[tuple[str, Future[None]]] = []
        self.errors: list[BaseException] = []
        self.closed = False

    @staticmethod
    def key(path: PathLike) -> str:
        text = os.fspath(path)
        return text if "://" in text else os.path.abspath(text)

    # The steps a fault overrides -------------------------------------------------------------

    def snapshot(self, checkpoint: Checkpoint) -> Checkpoint:
        return copy.deepcopy(checkpoint)

    def resolve(self, path: PathLike) -> PathLike:
        """A relative local path names a file in the working directory of the call (ACKPT-1)."""
        text = os.fspath(path)
        if "://" in text or "::" in text or os.path.isabs(text):
            return path
        return os.path.join(os.getcwd(), text)

    def write(self, checkpoint: Checkpoint, path: PathLike, options: StorageOptions) -> None:
        if self.write_delay_s:
            time.sleep(self.write_delay_s)
        self.inner.save_checkpoint(checkpoint, path, options)

    def record_error(self, error: BaseException) -> None:
        with self.lock:
            self.errors.append(error)

    def raise_error(self) -> None:
        with self.lock:
            if not self.errors:
                return
            first = self.errors[0]
            self.errors.clear()
        raise first

    def wait_for(self, key: str | None) -> None:
        with self.lock:
            futures = [f for k, f in self.pending if key is None or k == key]
        for future in futures:
            future.result()
        with self.lock:
            self.pending = [(k, f) for k, f in self.pending if not f.done()]

    # The protocol ----------------------------------------------------------------------------

    def _run(self, checkpoint: Checkpoint, path: PathLike, options: StorageOptions) -> None:
        try:
            self.write(checkpoint, path, options)
        except BaseException as exc:  # handed to the caller by the next call (ACKPT-2)
            self.record_error(exc)

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        self.raise_error()
        path = self.resolve(path)
        snap = self.snapshot(checkpoint)
        options = dict(storage_options) if storage_options is not None else None
        with self.lock:
            self.closed = False
            if self.executor is None:
                self.executor = ThreadPoolExecutor(1, thread_name_prefix="mini-async-ckpt")
            future = self.executor.submit(self._run, snap, path, options)
            self.pending.append((self.key(path), future))

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        self.wait_for(self.key(path))
        self.raise_error()
        return self.inner.load_checkpoint(path, map_location)

    def remove_checkpoint(self, path: PathLike) -> None:
        self.wait_for(self.key(path))
        self.raise_error()
        self.inner.remove_checkpoint(path)

    def wait(self) -> None:
        self.wait_for(None)
        self.raise_error()

    def teardown(self) -> None:
        self.wait_for(None)
        with self.lock:
            executor, self.executor = self.executor, None
            self.closed = True
        if executor is not None:
            executor.shutdown(wait=True)
        self.inner.teardown()
        self.raise_error()


def _map_tensors(value: object, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of ``value``'s containers with ``fn`` applied to every tensor."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, fn) for v in value)
    return value


class _TorchFault(TorchCheckpointIO):
    clause: ClassVar[str]
    rejected_by: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = FULL


# --------------------------------------------------------------------------- CKPT-1


class DropsDtypesTorchIO(_TorchFault):
    """Saves every floating-point tensor as float32."""

    clause = "CKPT-1"
    rejected_by = "check_checkpoint_io_round_trips_every_dtype"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        converted = _map_tensors(checkpoint, lambda t: t.float() if t.is_floating_point() else t)
        super().save_checkpoint(converted, path, storage_options)


class ClonesTensorsTorchIO(_TorchFault):
    """Clones every tensor before saving: views no longer share storage."""

    clause = "CKPT-1"
    rejected_by = "check_checkpoint_io_preserves_storage_sharing"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        super().save_checkpoint(_map_tensors(checkpoint, torch.clone), path, storage_options)


class ContiguousTorchIO(_TorchFault):
    """Makes every tensor contiguous before saving: strides are lost."""

    clause = "CKPT-1"
    rejected_by = "check_checkpoint_io_preserves_strides"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        contiguous = _map_tensors(checkpoint, lambda t: t.contiguous())
        super().save_checkpoint(contiguous, path, storage_options)


def _tuples_to_lists(value: object) -> Any:
    if isinstance(value, dict):
        return {k: _tuples_to_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tuples_to_lists(v) for v in value]
    return value


class TuplesAsListsTorchIO(_TorchFault):
    """Stores tuples as lists (a JSON-minded encoder)."""

    clause = "CKPT-1"
    rejected_by = "check_checkpoint_io_round_trips_python_values"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        super().save_checkpoint(_tuples_to_lists(checkpoint), path, storage_options)


class ReferenceKeepingMemoryIO(MemoryCheckpointIO):
    """Keeps the saved dict itself and returns it from every load."""

    clause: ClassVar[str] = "CKPT-1"
    rejected_by: ClassVar[str] = "check_checkpoint_io_saved_checkpoint_is_independent_of_mutation"
    capabilities: ClassVar[frozenset[str]] = MEMORY

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, Checkpoint] = {}

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)  # validation and errors
        self.objects[os.fspath(path)] = checkpoint

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        super().load_checkpoint(path, map_location)  # errors
        return self.objects[os.fspath(path)]


class DropsNonTensorsSafetensorsIO(SafetensorsCheckpointIO):
    """A flat-tensor IO that silently drops non-tensor values instead of raising TypeError."""

    clause: ClassVar[str] = "CKPT-1"
    rejected_by: ClassVar[str] = "check_checkpoint_io_rejects_values_outside_its_declared_set"
    capabilities: ClassVar[frozenset[str]] = FLAT

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        tensors = {k: v for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}
        super().save_checkpoint(tensors, path, storage_options)


# --------------------------------------------------------------------------- CKPT-2 ... CKPT-6


class NoParentsTorchIO(_TorchFault):
    """Refuses to save when the parent directory does not exist yet."""

    clause = "CKPT-2"
    rejected_by = "check_checkpoint_io_save_creates_missing_parent_directories"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        parent = os.path.dirname(os.fspath(path))
        if not os.path.isdir(parent):
            raise CheckpointWriteError(f"directory {parent} does not exist")
        super().save_checkpoint(checkpoint, path, storage_options)


class InPlaceTorchIO(_TorchFault):
    """Writes with torch.save straight onto the target path (not atomic)."""

    clause = "CKPT-3"
    rejected_by = "check_checkpoint_io_failed_save_leaves_previous_checkpoint_intact"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        if storage_options:
            raise TypeError(f"unsupported storage_options {sorted(storage_options)}")
        target = os.fspath(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        try:
            torch.save(checkpoint, target)
        except OSError as exc:
            raise CheckpointWriteError(f"cannot write {target}: {exc}") from exc


class _StagesInTmpdirTorchIO(_TorchFault):
    """Writes the new checkpoint to a temporary file in $TMPDIR, then moves it over the target."""

    def move(self, source: str, target: str) -> None:
        raise NotImplementedError

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        if storage_options:
            raise TypeError(f"unsupported storage_options {sorted(storage_options)}")
        target = os.fspath(path)
        handle, staged = tempfile.mkstemp(suffix=".ckpt")  # in $TMPDIR: maybe another device
        os.close(handle)
        try:
            torch.save(checkpoint, staged)
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            self.move(staged, target)
        except OSError as exc:
            raise CheckpointWriteError(f"cannot write {target}: {exc}") from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(staged)


class StagesInTmpdirReplaceTorchIO(_StagesInTmpdirTorchIO):
    """Stages in $TMPDIR and os.replace()s over the target: refused across file systems."""

    clause = "CKPT-3"
    rejected_by = "check_checkpoint_io_saves_are_atomic_on_another_file_system_than_tmpdir"

    def move(self, source: str, target: str) -> None:
        os.replace(source, target)


class StagesInTmpdirMoveTorchIO(_StagesInTmpdirTorchIO):
    """Stages in $TMPDIR and shutil.move()s over the target: across file systems that copies
    onto the target in place (not atomic)."""

    clause = "CKPT-3"
    rejected_by = "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"

    def move(self, source: str, target: str) -> None:
        shutil.move(source, target)


class RemovesFirstTorchIO(_TorchFault):
    """Removes the old checkpoint, then renames the new one in: a kill between the two leaves
    no checkpoint at all."""

    clause = "CKPT-3"
    rejected_by = "check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target = os.fspath(path)
        staged = target + ".partial"
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        torch.save(checkpoint, staged)
        with contextlib.suppress(FileNotFoundError):
            os.remove(target)
        time.sleep(0.001)  # the window a kill finds: no checkpoint at all
        os.rename(staged, target)


class BackupLeavingTorchIO(_TorchFault):
    """Copies the previous checkpoint to "<path>.bak" before each save and never removes it."""

    clause = "CKPT-3"
    rejected_by = "check_checkpoint_io_save_leaves_no_temporary_files"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target = os.fspath(path)
        if os.path.isfile(target):
            shutil.copyfile(target, target + ".bak")
        super().save_checkpoint(checkpoint, path, storage_options)


class MutatingTorchIO(_TorchFault):
    """Replaces the caller's tensors with detached copies, in the caller's dict."""

    clause = "CKPT-4"
    rejected_by = "check_checkpoint_io_save_does_not_mutate_its_input"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        for key, value in checkpoint.items():
            if isinstance(value, torch.Tensor):
                checkpoint[key] = value.detach()
        super().save_checkpoint(checkpoint, path, storage_options)


class IgnoresStorageOptionsTorchIO(_TorchFault):
    """Silently ignores storage_options it does not understand."""

    clause = "CKPT-5"
    rejected_by = "check_checkpoint_io_rejects_unknown_storage_options"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        super().save_checkpoint(checkpoint, path, None)


class RawOSErrorTorchIO(_TorchFault):
    """Creates the parent directory itself and lets the raw OSError escape."""

    clause = "CKPT-6"
    rejected_by = "check_checkpoint_io_refused_parent_path_raises_checkpoint_write_error"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
        super().save_checkpoint(checkpoint, path, storage_options)


# --------------------------------------------------------------------------- CKPT-7 ... CKPT-12


class IgnoresMapLocationTorchIO(_TorchFault):
    """Loads every tensor where it was saved, whatever map_location says."""

    clause = "CKPT-7"
    rejected_by = "check_checkpoint_io_load_places_tensors_by_map_location"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        return super().load_checkpoint(path, None)


class TrustingTorchIO(_TorchFault):
    """Loads full pickles by default (weights_only=False)."""

    clause = "CKPT-8"
    rejected_by = "check_checkpoint_io_refuses_unsafe_content_by_default"

    def __init__(self) -> None:
        super().__init__(weights_only=False)


class RawFileNotFoundTorchIO(_TorchFault):
    """Raises the builtin FileNotFoundError for a missing path."""

    clause = "CKPT-9"
    rejected_by = "check_checkpoint_io_missing_path_raises_not_found"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        if not os.path.exists(os.fspath(path)):
            raise FileNotFoundError(os.fspath(path))
        return super().load_checkpoint(path, map_location)


class RawDecodeErrorTorchIO(_TorchFault):
    """Calls torch.load directly: damaged files raise torch's and pickle's errors."""

    clause = "CKPT-10"
    rejected_by = "check_checkpoint_io_corrupted_file_raises_corrupted_error"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        target = os.fspath(path)
        if os.path.isfile(target):
            loaded: Checkpoint = torch.load(target, map_location=None, weights_only=True)
            return loaded
        return super().load_checkpoint(path, map_location)


class StrictRemoveTorchIO(_TorchFault):
    """remove_checkpoint is os.remove: a second removal raises FileNotFoundError."""

    clause = "CKPT-11"
    rejected_by = "check_checkpoint_io_remove_is_idempotent"

    def remove_checkpoint(self, path: PathLike) -> None:
        os.remove(os.fspath(path))


class ClosedAfterTeardownTorchIO(_TorchFault):
    """After teardown, every save raises LifecycleError."""

    clause = "CKPT-12"
    rejected_by = "check_checkpoint_io_teardown_is_idempotent_and_reusable"

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        if self.closed:
            raise LifecycleError("this checkpoint IO was torn down")
        super().save_checkpoint(checkpoint, path, storage_options)

    def teardown(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------- ACKPT-1 ... ACKPT-5


class _AsyncFault(MiniAsyncCheckpointIO):
    clause: ClassVar[str]
    rejected_by: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = ASYNC

    def __init__(self) -> None:
        super().__init__(write_delay_s=SLOW_WRITE_S)


class NoSnapshotAsyncIO(_AsyncFault):
    """Queues the caller's checkpoint itself: later mutations reach the file."""

    clause = "ACKPT-1"
    rejected_by = "check_async_checkpoint_io_snapshots_at_save_time"

    def snapshot(self, checkpoint: Checkpoint) -> Checkpoint:
        return checkpoint


class SwallowingAsyncIO(_AsyncFault):
    """Drops background errors."""

    clause = "ACKPT-2"
    rejected_by = "check_async_checkpoint_io_surfaces_background_errors"

    def record_error(self, error: BaseException) -> None:
        return None


class LoadDoesNotWaitAsyncIO(_AsyncFault):
    """Loads and removes without waiting for pending saves of the path."""

    clause = "ACKPT-3"
    rejected_by = "check_async_checkpoint_io_load_and_remove_wait_for_pending_save"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        self.raise_error()
        return self.inner.load_checkpoint(path, map_location)

    def remove_checkpoint(self, path: PathLike) -> None:
        self.raise_error()
        self.inner.remove_checkpoint(path)


class TeardownDropsPendingAsyncIO(_AsyncFault):
    """teardown returns at once and drops the saves that have not been written yet."""

    clause = "ACKPT-4"
    rejected_by = "check_async_checkpoint_io_teardown_waits_for_pending_saves"

    def write(self, checkpoint: Checkpoint, path: PathLike, options: StorageOptions) -> None:
        time.sleep(self.write_delay_s)
        if not self.closed:
            self.inner.save_checkpoint(checkpoint, path, options)

    def teardown(self) -> None:
        with self.lock:
            executor, self.executor = self.executor, None
            self.closed = True
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        self.inner.teardown()


class WaitDoesNotWaitAsyncIO(_AsyncFault):
    """wait() only reports errors; it does not wait for pending saves."""

    clause = "ACKPT-5"
    rejected_by = "check_async_checkpoint_io_wait_completes_every_pending_save"

    def wait(self) -> None:
        self.raise_error()


class RepeatsErrorAsyncIO(_AsyncFault):
    """A background error is raised again by every later call."""

    clause = "ACKPT-5"
    rejected_by = "check_async_checkpoint_io_wait_raises_a_background_error_once"

    def raise_error(self) -> None:
        with self.lock:
            if not self.errors:
                return
            first = self.errors[0]
        raise first


FAULTS: tuple[type[CheckpointIO], ...] = (
    DropsDtypesTorchIO,
    ClonesTensorsTorchIO,
    ContiguousTorchIO,
    TuplesAsListsTorchIO,
    ReferenceKeepingMemoryIO,
    DropsNonTensorsSafetensorsIO,
    NoParentsTorchIO,
    InPlaceTorchIO,
    StagesInTmpdirReplaceTorchIO,
    StagesInTmpdirMoveTorchIO,
    RemovesFirstTorchIO,
    BackupLeavingTorchIO,
    MutatingTorchIO,
    IgnoresStorageOptionsTorchIO,
    RawOSErrorTorchIO,
    IgnoresMapLocationTorchIO,
    TrustingTorchIO,
    RawFileNotFoundTorchIO,
    RawDecodeErrorTorchIO,
    StrictRemoveTorchIO,
    ClosedAfterTeardownTorchIO,
    NoSnapshotAsyncIO,
    SwallowingAsyncIO,
    LoadDoesNotWaitAsyncIO,
    TeardownDropsPendingAsyncIO,
    WaitDoesNotWaitAsyncIO,
    RepeatsErrorAsyncIO,
)
"""Every fault-seeded checkpoint IO; ``clause`` / ``rejected_by`` / ``capabilities`` say how
it must be rejected."""


# --------------------------------------------------------------------------- third-party shaped


class PlainAtomicIO(CheckpointIO):
    """A CORRECT, minimal third-party IO written against the protocol only (no reference
    base): torch.save to a temporary file in the target's directory (locked while written),
    fsync, os.replace; a save removes the unlocked temporary files of killed writers.

    Correct for CKPT-1 ... CKPT-13. Like most code that hands ``torch.save`` an open file,
    it breaks CKPT-14 at a few points: an interrupt while torch's zip writer is being created
    leaves it unfinished, and its destructor aborts the process once the file is closed (the
    every-point interrupt check finds it; see ClosesUnderTorchWriterIO)."""

    @staticmethod
    def _remove_stale(directory: str, prefix: str) -> None:
        import fcntl

        for name in os.listdir(directory):
            if not name.startswith(prefix):
                continue
            try:
                with open(os.path.join(directory, name), "rb") as stale:
                    fcntl.flock(stale.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.remove(os.path.join(directory, name))  # its writer is gone
            except OSError:
                continue  # a live writer holds it, or it is already gone

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        import fcntl

        if storage_options:
            raise TypeError(f"unsupported storage_options {sorted(storage_options)}; none are")
        target = os.path.abspath(os.fspath(path))
        directory, prefix = os.path.dirname(target), f".{os.path.basename(target)}.plain-"
        try:
            os.makedirs(directory, exist_ok=True)
            self._remove_stale(directory, prefix)
            handle, staged = tempfile.mkstemp(dir=directory, prefix=prefix)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as exc:
            raise CheckpointWriteError(f"cannot write {target}: {exc}") from exc
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                self.sync(file.fileno())
            self.commit(staged, target)
        except OSError as exc:
            raise self.translate(exc, target) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(staged)

    def _prepare(self, path: PathLike) -> tuple[str, str, str]:
        """The absolute target, its directory (created, stale temporary files removed) and the
        prefix of its temporary files."""
        target = os.path.abspath(os.fspath(path))
        directory, prefix = os.path.dirname(target), f".{os.path.basename(target)}.plain-"
        os.makedirs(directory, exist_ok=True)
        self._remove_stale(directory, prefix)
        return target, directory, prefix

    # The steps the CKPT-6 faults override.

    def sync(self, fd: int) -> None:
        os.fsync(fd)

    def commit(self, staged: str, target: str) -> None:
        os.replace(staged, target)

    def translate(self, exc: OSError, target: str) -> Exception:
        return CheckpointWriteError(f"cannot write {target}: {exc}")

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        target = os.fspath(path)
        try:
            loaded: Checkpoint = torch.load(target, map_location=map_location, weights_only=True)
        except FileNotFoundError as exc:
            raise CheckpointNotFoundError(f"no checkpoint at {target}") from exc
        except Exception as exc:
            raise CheckpointCorruptedError(f"{target} is not a complete checkpoint") from exc
        return loaded

    def remove_checkpoint(self, path: PathLike) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.fspath(path))

    def teardown(self) -> None:
        return None


class PlainInPlaceIO(PlainAtomicIO):
    """Third-party shaped, not atomic: torch.save straight onto the path."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target = os.fspath(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        torch.save(checkpoint, target)


class SwallowsRenameFailureIO(PlainAtomicIO):
    """Ignores a refused final rename: nothing is written, and no error is raised."""

    clause: ClassVar[str] = "CKPT-6"
    rejected_by: ClassVar[str] = (
        "check_checkpoint_io_refused_rename_raises_write_error_and_keeps_the_old"
    )
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def commit(self, staged: str, target: str) -> None:
        with contextlib.suppress(OSError):
            super().commit(staged, target)


class SwallowsFsyncFailureIO(PlainAtomicIO):
    """Ignores a failed fsync and commits data that may never reach the disk."""

    clause: ClassVar[str] = "CKPT-6"
    rejected_by: ClassVar[str] = (
        "check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old"
    )
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def sync(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            super().sync(fd)


class RawOSErrorOnRefusalIO(PlainAtomicIO):
    """Lets storage's OSError escape instead of raising CheckpointWriteError."""

    clause: ClassVar[str] = "CKPT-6"
    rejected_by: ClassVar[str] = (
        "check_checkpoint_io_refused_write_raises_write_error_and_keeps_the_old"
    )
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def translate(self, exc: OSError, target: str) -> Exception:
        return exc


class ReplacesBeforeWritingIO(PlainAtomicIO):
    """Truncates the old checkpoint before writing the new one in place: a refused write
    raises CheckpointWriteError but the old checkpoint is gone."""

    clause: ClassVar[str] = "CKPT-6"
    rejected_by: ClassVar[str] = (
        "check_checkpoint_io_refused_write_raises_write_error_and_keeps_the_old"
    )
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target = os.fspath(path)
        try:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            with open(target, "wb") as file:
                torch.save(checkpoint, file)
        except OSError as exc:
            raise CheckpointWriteError(f"cannot write {target}: {exc}") from exc


CKPT_6_FAULTS: tuple[type[CheckpointIO], ...] = (
    SwallowsRenameFailureIO,
    SwallowsFsyncFailureIO,
    RawOSErrorOnRefusalIO,
    ReplacesBeforeWritingIO,
)
"""Third-party shaped IOs that mishandle a refused stage of a write (CKPT-6)."""


# --------------------------------------------------------------------------- CKPT-13


def _special_type(path: str) -> str | None:
    import stat

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISDIR(mode):
        return "directory"
    return "FIFO" if stat.S_ISFIFO(mode) else "device" if stat.S_ISCHR(mode) else "special file"


class SpecialFileSafeIO(PlainAtomicIO):
    """CORRECT, third-party shaped: refuses anything but a regular file at the path, and loads
    through a non-blocking open of a regular file only."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def refuse_special(self, path: PathLike) -> None:
        kind = _special_type(os.fspath(path))
        if kind is not None:
            raise CheckpointWriteError(f"{os.fspath(path)} is a {kind}, not a checkpoint file")

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        self.refuse_special(path)
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path: PathLike) -> None:
        self.refuse_special(path)
        super().remove_checkpoint(path)

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        import stat

        target = os.fspath(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError as exc:
            raise CheckpointNotFoundError(f"no checkpoint at {target}") from exc
        except OSError as exc:  # a socket cannot be opened
            raise CheckpointCorruptedError(f"{target} is not a checkpoint file: {exc}") from exc
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CheckpointCorruptedError(f"{target} is not a regular file")
            try:
                loaded: Checkpoint = torch.load(file, map_location=map_location, weights_only=True)
            except Exception as exc:
                raise CheckpointCorruptedError(f"{target} is not a complete checkpoint") from exc
        return loaded


class ReplacesFifoOnSaveIO(SpecialFileSafeIO):
    """Saves over whatever is at the path: a FIFO there is replaced by a regular file."""

    clause: ClassVar[str] = "CKPT-13"
    rejected_by: ClassVar[str] = "check_checkpoint_io_save_refuses_special_files_and_keeps_them"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        PlainAtomicIO.save_checkpoint(self, checkpoint, path, storage_options)


class DeletesDeviceOnRemoveIO(SpecialFileSafeIO):
    """remove_checkpoint unlinks whatever is at the path, a device node included."""

    clause: ClassVar[str] = "CKPT-13"
    rejected_by: ClassVar[str] = "check_checkpoint_io_remove_refuses_special_files_and_keeps_them"

    def remove_checkpoint(self, path: PathLike) -> None:
        PlainAtomicIO.remove_checkpoint(self, path)


class BlocksOnFifoLoadIO(SpecialFileSafeIO):
    """load_checkpoint opens the path with a plain blocking open: a FIFO waits for a writer."""

    clause: ClassVar[str] = "CKPT-13"
    rejected_by: ClassVar[str] = "check_checkpoint_io_load_refuses_special_files_without_blocking"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        return PlainAtomicIO.load_checkpoint(self, path, map_location)


CKPT_13_FAULTS: tuple[type[CheckpointIO], ...] = (
    ReplacesFifoOnSaveIO,
    DeletesDeviceOnRemoveIO,
    BlocksOnFifoLoadIO,
)
"""Third-party shaped IOs that destroy, or block on, special files (CKPT-13)."""


# --------------------------------------------------------------------------- CKPT-14


class TranslatesInterruptTorchIO(_TorchFault):
    """Turns anything a save raises, Ctrl-C included, into CheckpointWriteError."""

    clause = "CKPT-14"
    rejected_by = "check_checkpoint_io_interrupted_save_raises_the_interrupt"

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        try:
            super().save_checkpoint(checkpoint, path, storage_options)
        except BaseException as exc:
            raise CheckpointWriteError(f"cannot save {os.fspath(path)}: {exc!r}") from exc


class TranslatesInterruptOnLoadTorchIO(_TorchFault):
    """Reports an interrupted load as a corrupted checkpoint."""

    clause = "CKPT-14"
    rejected_by = "check_checkpoint_io_interrupted_load_raises_the_interrupt"

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        try:
            return super().load_checkpoint(path, map_location)
        except KeyboardInterrupt as exc:
            raise CheckpointCorruptedError(f"{os.fspath(path)} could not be read") from exc


class SwallowsInterruptIO(PlainAtomicIO):
    """Third-party shaped: catches KeyboardInterrupt during a save and returns as if saved."""

    clause: ClassVar[str] = "CKPT-14"
    rejected_by: ClassVar[str] = "check_checkpoint_io_interrupted_save_raises_the_interrupt"
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        with contextlib.suppress(KeyboardInterrupt):
            super().save_checkpoint(checkpoint, path, storage_options)


class LeavesStagedFileOnInterruptIO(PlainAtomicIO):
    """Third-party shaped: removes its staged file only when an Exception is raised, and never
    cleans stale ones, so an interrupted save leaves its staged file forever."""

    clause: ClassVar[str] = "CKPT-14"
    rejected_by: ClassVar[str] = "check_checkpoint_io_interrupted_save_raises_the_interrupt"
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    @staticmethod
    def _remove_stale(directory: str, prefix: str) -> None:
        return None

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target = os.path.abspath(os.fspath(path))
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        handle, staged = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.")
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(staged, target)
        except Exception:
            os.remove(staged)
            raise


class ClosesUnderTorchWriterIO(PlainAtomicIO):
    """Third-party shaped: passes torch.save a wrapper that raises once its file is closed,
    and closes the file when the save fails. An interrupt before torch's zip writer is
    finished (a few points of a save: declare ``interrupt_points=0`` to reach them) leaves a
    writer whose destructor later writes into the closed file, which aborts the process."""

    clause: ClassVar[str] = "CKPT-14"
    rejected_by: ClassVar[str] = "check_checkpoint_io_interrupted_save_raises_the_interrupt"
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})
    conformance_options: ClassVar[dict[str, object]] = {"interrupt_points": 0}

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target, directory, prefix = self._prepare(path)
        handle, staged = tempfile.mkstemp(dir=directory, prefix=prefix)
        file = os.fdopen(handle, "wb")
        failed: BaseException | None = None
        try:
            torch.save(checkpoint, _ClosedRaises(file))
            file.flush()
            os.fsync(file.fileno())
            file.close()
            os.replace(staged, target)
        except BaseException as exc:
            file.close()  # the fault: torch's writer may still write here when it is freed
            with contextlib.suppress(FileNotFoundError):
                os.remove(staged)
            failed = _interruption_in(exc) or exc  # otherwise careful: the interrupt itself
        if failed is not None:
            raise failed


def _interruption_in(exc: BaseException) -> BaseException | None:
    """The first BaseException that is not an Exception in ``exc``'s cause/context chain."""
    current: BaseException | None = exc
    while current is not None:
        if not isinstance(current, Exception):
            return current
        current = current.__cause__ or current.__context__
    return None


class _ClosedRaises:
    """A file-like for torch.save: ``write`` raises ValueError once ``file`` is closed."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def write(self, data: bytes) -> int:
        return int(self._file.write(data))

    def flush(self) -> None:
        self._file.flush()


class NamedTemporaryFileIO(PlainAtomicIO):
    """A CORRECT third-party shaped IO, CKPT-14 included: serialises into memory (so torch's
    writer never outlives the file it writes to), then stages through
    ``tempfile.NamedTemporaryFile``, whose closer has a Python ``__del__``: an interrupt
    raised there is dropped by CPython, outside this package, which CKPT-14 does not hold
    against it."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        target, directory, prefix = self._prepare(path)
        staged = None
        try:
            encoded = io.BytesIO()
            torch.save(checkpoint, encoded)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=prefix, delete=False) as file:
                staged = file.name
                file.write(encoded.getbuffer())
                file.flush()
                os.fsync(file.fileno())
            os.replace(staged, target)
        except BaseException:
            if staged is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(staged)
            raise


class FsspecExistsIO(NamedTemporaryFileIO):
    """A CORRECT third-party shaped IO whose load asks fsspec whether the file exists first,
    as Lightning's does: fsspec's ``exists`` returns False from a bare ``except:``, so an
    interrupt raised there is lost in the library and the load raises
    ``CheckpointNotFoundError``. CKPT-14 does not hold that against the IO (undecided)."""

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        import fsspec

        if not fsspec.filesystem("file").exists(os.fspath(path)):
            raise CheckpointNotFoundError(f"no checkpoint at {os.fspath(path)}")
        return super().load_checkpoint(path, map_location)


class OwnBareExceptLoadIO(FsspecExistsIO):
    """Third-party shaped: the same check written in the IO's own code with a bare
    ``except:``, which swallows an interrupt raised there; the load then reports a missing
    checkpoint instead of the interrupt."""

    clause: ClassVar[str] = "CKPT-14"
    rejected_by: ClassVar[str] = "check_checkpoint_io_interrupted_load_raises_the_interrupt"
    capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        if not self._exists(os.fspath(path)):
            raise CheckpointNotFoundError(f"no checkpoint at {os.fspath(path)}")
        return PlainAtomicIO.load_checkpoint(self, path, map_location)

    @staticmethod
    def _exists(path: str) -> bool:
        try:
            os.stat(path)
            return os.path.isfile(path)
        except:  # noqa: E722 -- the fault
            return False


CKPT_14_FAULTS: tuple[type[CheckpointIO], ...] = (
    TranslatesInterruptTorchIO,
    TranslatesInterruptOnLoadTorchIO,
    SwallowsInterruptIO,
    LeavesStagedFileOnInterruptIO,
    ClosesUnderTorchWriterIO,
    OwnBareExceptLoadIO,
)
"""IOs that translate, swallow or mishandle a KeyboardInterrupt (CKPT-14)."""


FAULTS = (*FAULTS, *CKPT_6_FAULTS, *CKPT_13_FAULTS, *CKPT_14_FAULTS)
