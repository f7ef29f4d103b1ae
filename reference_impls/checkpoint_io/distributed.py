"""``DCPCheckpointIO``: sharded checkpoints through ``torch.distributed.checkpoint`` (DCP).

A :class:`trainspec.DistributedCheckpointIO`: every rank passes its part (sharded tensors as
``DTensor``), DCP writes each rank's shards, and the checkpoint is committed only after every
rank wrote. It loads on any number of ranks (DCP reshards), and on one rank (not set up) it is a
plain :class:`trainspec.CheckpointIO` (CKPT-1 ... CKPT-12).

On disk, ``path`` is a directory::

    path/trainspec-dcp.json      the commit pointer: {"format": ..., "committed": "v-<token>"}
    path/v-<token>/              one committed save: DCP's .metadata and __<rank>_<n>.distcp
                                 files, plus skeleton.pt (the non-tensor structure)
    path/.staging-<token>/       a save in progress (removed by the next successful save)

Save (every rank, DCKPT-2)::

    1) each rank splits its part into tensors (for DCP) and a skeleton (containers, Python
       values, tensor slots); a value outside the value set is a TypeError on that rank
    2) every rank reports its outcome and rank 0 a fresh token (one all_gather_object):
       any failure fails every rank before anything is written
    3) dcp.save(tensors) into path/.staging-<token> on every rank (DCP creates the directory
       and raises a rank's write error on every rank); rank 0 adds skeleton.pt
    4) every rank reports its outcome: any failure fails every rank, nothing is committed
    5) rank 0 commits: renames the staging directory to v-<token>, replaces the pointer
       atomically (write, fsync, os.replace, fsync the directory), removes older saves
    6) every rank agrees on the commit, then returns

A reader follows the pointer, so it sees the previous save or the new one, never a mix; a save
killed before 5) leaves only a staging directory, which loads as the previous checkpoint.
A directory written by plain ``dcp.save`` (a ``.metadata`` file at ``path``) loads too.

Loading is safe (DCKPT-3): DCP's own reader unpickles ``.metadata`` with plain ``pickle``,
which runs any code a crafted file holds; this reader allows only DCP's metadata classes, and
the skeleton loads with ``torch.load(weights_only=True)``. A plain DCP checkpoint with pickled
objects (DCP's "bytes" entries) raises :class:`~trainspec.UnsafeCheckpointError` unless
``weights_only=False``.

Local paths only in this version; an fsspec URL raises :class:`~trainspec.UnsupportedError`.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import secrets
import shutil
import stat
import warnings
from contextlib import contextmanager
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    StorageMeta,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from trainspec.distributed_checkpoint_io import DistributedCheckpointIO
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    UnsafeCheckpointError,
    UnsupportedError,
)
from trainspec.reference.checkpoint_io._checks import (
    apply_map_location,
    check_checkpoint,
    check_map_location,
)
from trainspec.reference.checkpoint_io._errors import UnsafeContentError
from trainspec.reference.checkpoint_io.torch_io import decode_torch, finish_abandoned_writers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec.collective import Collective
    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["DCPCheckpointIO"]

POINTER: Final = "trainspec-dcp.json"
SKELETON: Final = "skeleton.pt"
VERSION_PREFIX: Final = "v-"
STAGING_PREFIX: Final = ".staging-"
_FORMAT: Final = "trainspec-dcp/1"
_DCP_METADATA: Final = ".metadata"
_SCALARS: Final = (int, float, bool, str, type(None))


class _Slot:
    """Where a tensor was in the part: its key among the tensors handed to DCP."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


# --------------------------------------------------------------------------- safe metadata

_SAFE_GLOBALS: Final = {
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata`` allowing only its own plain-data classes."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == dcp_metadata.__name__:
            value = getattr(dcp_metadata, name, None)
            if isinstance(value, type):
                return value
        raise _UnsafeMetadataError(f"{module}.{name}")


class _UnsafeMetadataError(pickle.UnpicklingError):
    pass


class _SafeReader(FileSystemReader):
    """DCP's file-system reader with a metadata unpickler that cannot run code; the metadata
    is read once per reader (the load reads it, then hands the reader to ``dcp.load``)."""

    _cached: Metadata | None = None

    def read_metadata(self, *args: object, **kwargs: object) -> Metadata:
        del args, kwargs
        loaded = self._cached
        if loaded is None:
            with open(os.path.join(str(self.path), _DCP_METADATA), "rb") as file:
                unpickled = _MetadataUnpickler(io.BytesIO(file.read())).load()
            if not isinstance(unpickled, Metadata):
                raise ValueError(
                    f"{_DCP_METADATA} holds a {type(unpickled).__name__}, not DCP metadata"
                )
            loaded = self._cached = unpickled
        if getattr(loaded, "storage_meta", None) is None:
            loaded.storage_meta = StorageMeta()
        assert loaded.storage_meta is not None
        loaded.storage_meta.load_id = self.load_id
        return loaded


# --------------------------------------------------------------------------- the IO


class DCPCheckpointIO(DistributedCheckpointIO):
    """Sharded checkpoints on local paths through ``torch.distributed.checkpoint``.

    Args:
        weights_only: refuse content whose loading would run code (the safe default, CKPT-8,
            DCKPT-3). ``False`` also loads plain DCP checkpoints with pickled objects; use it
            only for trusted files.
        thread_count: DCP writer threads per rank.

    Value set: dicts with ``str`` keys, nested dicts (any hashable keys), lists, tuples,
    ``int``, ``float``, ``bool``, ``str``, ``None`` and tensors; tensors come back contiguous
    and unshared (strides and storage sharing are not kept). Anything else raises
    ``TypeError`` before anything is written. ``storage_options`` must be ``None`` or empty.

    Thread-safety: none; one save at a time per path.
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset(
        {"local_paths", "python_objects"}
    )
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""

    def __init__(self, *, weights_only: bool = True, thread_count: int = 1) -> None:
        if not isinstance(weights_only, bool):
            raise TypeError(f"weights_only must be a bool; got {weights_only!r}")
        if isinstance(thread_count, bool) or not isinstance(thread_count, int) or thread_count < 1:
            raise UnsupportedError(
                f"DCPCheckpointIO: thread_count must be an int >= 1; got {thread_count!r}"
            )
        self._weights_only = weights_only
        self._thread_count = thread_count
        self._collective: Collective | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights_only={self._weights_only})"

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_collective"] = None  # a binding does not travel to other processes
        return state

    @property
    def weights_only(self) -> bool:
        """Whether loads refuse content that would run code."""
        return self._weights_only

    @property
    def world_size(self) -> int:
        """The number of ranks a save spans: the bound collective's, or 1."""
        return 1 if self._collective is None else self._collective.world_size

    @property
    def rank(self) -> int:
        """This rank in the bound collective, or 0."""
        return 0 if self._collective is None else self._collective.rank

    # -- binding (DCKPT-7) ---------------------------------------------------------------

    def setup(self, collective: Collective) -> None:
        """Bind to ``collective``. With more than one rank, DCP needs torch's default process
        group over the same ranks; otherwise :class:`~trainspec.UnsupportedError`."""
        if collective.world_size > 1 and not (
            dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() == collective.world_size
            and dist.get_rank() == collective.rank
        ):
            raise UnsupportedError(
                "DCPCheckpointIO.setup: torch.distributed.checkpoint needs the default torch "
                f"process group over the collective's {collective.world_size} ranks; set up a "
                "trainspec.reference.collectives.TorchCollective (or another collective that "
                "initialises torch.distributed) first."
            )
        self._collective = collective

    def teardown(self) -> None:
        """Unbind (idempotent); the instance then works on one rank."""
        self._collective = None

    # -- save (DCKPT-1, DCKPT-2, DCKPT-6) --------------------------------------------------

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Write this rank's part, commit after every rank wrote, return after the commit."""
        where = _local_path(path, "save_checkpoint")
        if storage_options:
            key = next(iter(storage_options))
            raise TypeError(
                f"DCPCheckpointIO.save_checkpoint does not support storage option {key!r}; "
                "supported keys: none (local paths only)"
            )
        tensors: dict[str, torch.Tensor] = {}
        skeleton: object = None
        error: TypeError | CheckpointWriteError | None = None
        try:
            check_checkpoint(checkpoint, "DCPCheckpointIO.save_checkpoint")
            skeleton = _split(checkpoint, tensors)
            _check_directory_slot(where)
        except (TypeError, CheckpointWriteError) as caught:
            error = caught
        # One collective: every rank's outcome, and rank 0's name for the staging directory.
        token = self._agree("prepare", where, error, secrets.token_hex(8))
        if error is not None:
            raise error
        staging = os.path.join(where, STAGING_PREFIX + token)
        # DCP creates the staging directory (and its parents) on every rank in its planning
        # step, whose errors it raises on every rank.
        self._step("write", where, lambda: self.write_part(tensors, skeleton, staging))
        self._step("commit", where, lambda: self.commit(where, staging, token), rank_zero=True)

    def write_part(self, tensors: dict[str, torch.Tensor], skeleton: object, staging: str) -> None:
        """Write this rank's shards into ``staging`` (every rank, collectively through DCP);
        rank 0 also writes the skeleton. Step 3 of a save; overridable for instrumentation."""
        writer = FileSystemWriter(staging, sync_files=True, thread_count=self._thread_count)
        with _quiet_single_process():
            dcp_save(tensors, storage_writer=writer, no_dist=self.world_size == 1)
        if self.rank == 0:
            # Encoded in memory first: torch's zip writer must never outlive the file it was
            # given (an interrupted torch.save's writer writes into it when freed, and into a
            # closed file that aborts the process).
            encoded = io.BytesIO()
            torch.save(_encode_slots(skeleton), encoded)
            _write_file(os.path.join(staging, SKELETON), lambda f: f.write(encoded.getbuffer()))

    def commit(self, where: str, staging: str, token: str) -> None:
        """Make the staged save the checkpoint at ``where`` (rank 0 only, after every rank
        wrote): rename, replace the pointer atomically, remove older saves. Step 5."""
        version = VERSION_PREFIX + token
        os.rename(staging, os.path.join(where, version))
        pointer = {"format": _FORMAT, "committed": version}
        _write_file(
            os.path.join(where, POINTER + ".tmp"),
            lambda f: f.write(json.dumps(pointer).encode()),
        )
        os.replace(os.path.join(where, POINTER + ".tmp"), os.path.join(where, POINTER))
        _fsync_directory(where)
        for entry in os.listdir(where):
            if entry not in (POINTER, version):
                _remove_quietly(os.path.join(where, entry))

    # -- load (DCKPT-1, DCKPT-3, DCKPT-5) --------------------------------------------------

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """The complete checkpoint at ``path`` on this rank (no collective).

        A save that commits while this load reads removes the save being read; the load then
        follows the new pointer and starts again, so it returns the previous or the new
        checkpoint (DCKPT-2, CKPT-3). It starts again as long as every failed read raced a
        new commit (a reader slower than a writer that saves back to back is not starved
        after a fixed number of tries); a failure with the same save still committed is
        real damage and is raised."""
        where = _local_path(path, "load_checkpoint")
        check_map_location(map_location)
        version = _committed_directory(where)
        while True:
            try:
                return self._load_version(where, version, map_location)
            except CheckpointError:
                latest = _committed_directory_quietly(where)
                if latest is None or latest == version:
                    raise  # nothing was committed meanwhile: the damage is real
                version = latest

    def _load_version(self, where: str, version: str, map_location: MapLocation) -> Checkpoint:
        try:
            reader = _SafeReader(version)
            metadata = reader.read_metadata()
        except _UnsafeMetadataError as error:
            raise UnsafeCheckpointError(
                f"{where}: the DCP metadata names {error}, which is not DCP metadata; loading it "
                "would run code, which is refused."
            ) from error
        except FileNotFoundError as error:
            raise CheckpointCorruptedError(
                f"{where} is not a complete DCP checkpoint: its metadata is missing"
            ) from error
        except Exception as error:
            raise CheckpointCorruptedError(
                f"{where} is not a complete DCP checkpoint: its metadata is damaged"
            ) from error
        flat: dict[str, Any] = {}
        for key, item in metadata.state_dict_metadata.items():
            if isinstance(item, TensorStorageMetadata):
                flat[key] = torch.empty(item.size, dtype=item.properties.dtype)
            elif isinstance(item, BytesStorageMetadata):
                if self._weights_only:
                    raise UnsafeCheckpointError(
                        f"{where} holds pickled objects (DCP bytes entry {key!r}); loading them "
                        "would run code, which is refused. If the checkpoint comes from a source "
                        "you trust, load it with DCPCheckpointIO(weights_only=False)."
                    )
                flat[key] = None
        try:
            if flat:
                with _quiet_single_process():
                    dcp_load(flat, storage_reader=reader, no_dist=True)
        except (Exception, CheckpointException) as error:  # DCP's is a BaseException
            interrupted = _interruption(error, 0)  # no_dist: DCP files it as rank 0
            if interrupted is not None:
                raise interrupted from None  # Ctrl-C during the read (CKPT-14)
            raise CheckpointCorruptedError(
                f"{where} is not a complete DCP checkpoint (a part is missing, truncated or "
                "damaged)"
            ) from error
        skeleton_path = os.path.join(version, SKELETON)
        if version == where and not os.path.exists(skeleton_path):  # written by plain dcp.save
            return {key: _placed(value, map_location) for key, value in flat.items()}
        skeleton = _read_skeleton(where, skeleton_path)
        try:
            loaded = _join(skeleton, flat, map_location)
        except KeyError as error:
            raise CheckpointCorruptedError(
                f"{where} is not a complete DCP checkpoint: tensor {error} is missing"
            ) from error
        if not isinstance(loaded, dict):
            raise CheckpointCorruptedError(f"{where} does not hold a checkpoint dict")
        return cast("Checkpoint", loaded)

    # -- remove (DCKPT-4) ------------------------------------------------------------------

    def remove_checkpoint(self, path: PathLike) -> None:
        """Remove the checkpoint directory (rank 0), every rank returning after it."""
        where = _local_path(path, "remove_checkpoint")
        self._step("remove", where, lambda: _remove_tree(where), rank_zero=True)

    # -- coordination ----------------------------------------------------------------------

    def _step(
        self, what: str, where: str, action: Callable[[], None], *, rank_zero: bool = False
    ) -> None:
        error: BaseException | None = None
        if not rank_zero or self.rank == 0:
            try:
                action()
            except BaseException as caught:  # DCP's CheckpointException is a BaseException
                error = caught
        interrupted = None if error is None else _interruption(error, self.rank)
        if interrupted is not None:
            # DCP's writer hands each tensor to torch.save with a stream it closes itself.
            finish_abandoned_writers(interrupted)
        # Even an interrupted rank tells the others (they raise CheckpointWriteError instead
        # of waiting for it), then raises the interruption itself (CKPT-14).
        self._agree(what, where, error)
        if interrupted is not None:
            raise interrupted
        if error is not None:
            if isinstance(error, CheckpointError):
                raise error
            if isinstance(error, OSError):
                raise CheckpointWriteError(
                    f"DCPCheckpointIO could not {what} the checkpoint at {where!r}: {error}"
                ) from error
            raise CheckpointWriteError(
                f"DCPCheckpointIO could not {what} the checkpoint at {where!r} "
                f"({type(error).__name__}: {error})"
            ) from error

    def _agree(self, what: str, where: str, error: BaseException | None, token: str = "") -> str:
        """Every rank learns every rank's outcome; a rank whose own step succeeded raises
        :class:`~trainspec.CheckpointWriteError` naming the ranks that failed. Returns rank
        0's ``token``."""
        if self._collective is None or self._collective.world_size == 1:
            return token
        mine = None if error is None else f"{type(error).__name__}: {error}"
        outcomes = self._collective.all_gather_object((mine, token))
        failed = [(rank, text) for rank, (text, _) in enumerate(outcomes) if text is not None]
        if failed and error is None:
            detail = "; ".join(f"rank {rank}: {text}" for rank, text in failed)
            raise CheckpointWriteError(
                f"DCPCheckpointIO: the {what} step of the checkpoint at {where!r} failed on "
                f"another rank ({detail}); the previous checkpoint is unchanged."
            )
        return outcomes[0][1]


# --------------------------------------------------------------------------- helpers


def _interruption(error: BaseException, rank: int) -> BaseException | None:
    """The ``KeyboardInterrupt``, ``SystemExit``, ... (a ``BaseException`` that is not an
    ``Exception``) of this rank in ``error``: itself, its cause/context chain, or this rank's
    failure among those DCP gathers into a ``CheckpointException`` (a ``BaseException`` that
    is not one). Another rank's interruption is that rank's: here it is a failed step."""
    pending: list[BaseException] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CheckpointException):
            failure = current.failures.get(rank)
            wrapped = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(wrapped, BaseException):
                pending.append(wrapped)
        elif not isinstance(current, Exception):
            return current
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def _local_path(path: PathLike, method: str) -> str:
    if isinstance(path, str) and "://" in path:
        raise UnsupportedError(
            f"DCPCheckpointIO.{method}: {path!r} is a URL; this version supports local paths "
            "only (a str or os.PathLike)."
        )
    if not isinstance(path, (str, PurePath)) and not hasattr(path, "__fspath__"):
        raise TypeError(
            f"DCPCheckpointIO.{method}: path must be a str or os.PathLike; got {path!r}"
        )
    return os.path.abspath(os.fspath(path))


def _split(value: object, tensors: dict[str, torch.Tensor]) -> object:
    """``value`` with every tensor replaced by a :class:`_Slot`, the tensors collected."""
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = value if isinstance(value, DTensor) else value.detach()
        return _Slot(key)
    if isinstance(value, dict):
        return {key: _split(item, tensors) for key, item in value.items()}
    if type(value) is list:
        return [_split(item, tensors) for item in value]
    if type(value) is tuple:
        return tuple(_split(item, tensors) for item in value)
    if isinstance(value, _SCALARS):
        return value
    raise TypeError(
        f"DCPCheckpointIO cannot store a {type(value).__name__} ({value!r:.60}); supported: "
        "dicts, lists, tuples, tensors, int, float, bool, str and None"
    )


def _encode_slots(value: object) -> object:
    if isinstance(value, _Slot):
        return {"__trainspec_dcp_tensor__": value.key}
    if isinstance(value, dict):
        return {"d": [[key, _encode_slots(item)] for key, item in value.items()]}
    if isinstance(value, list):
        return {"l": [_encode_slots(item) for item in value]}
    if isinstance(value, tuple):
        return {"t": [_encode_slots(item) for item in value]}
    return value


def _join(encoded: object, flat: dict[str, Any], map_location: MapLocation) -> object:
    if isinstance(encoded, dict):
        node = cast("dict[str, Any]", encoded)
        if "__trainspec_dcp_tensor__" in node:
            return _placed(flat[node["__trainspec_dcp_tensor__"]], map_location)
        if "d" in node:
            return {key: _join(item, flat, map_location) for key, item in node["d"]}
        if "l" in node:
            return [_join(item, flat, map_location) for item in node["l"]]
        if "t" in node:
            return tuple(_join(item, flat, map_location) for item in node["t"])
        raise KeyError("skeleton node")
    return encoded


def _placed(value: object, map_location: MapLocation) -> object:
    if isinstance(value, torch.Tensor):
        return apply_map_location(value, map_location)
    return value


@contextmanager
def _quiet_single_process() -> Iterator[None]:
    # DCP warns on every single-process call; single-process use is intended here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _write_file(path: str, write: Callable[[io.BufferedWriter], object]) -> None:
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _remove_tree(where: str) -> None:
    try:
        mode = os.lstat(where).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise CheckpointWriteError(
            f"refusing to remove {where}: it is a {_file_type(mode)}, not a DCP checkpoint "
            "directory"
        )
    shutil.rmtree(where)


def _check_directory_slot(where: str) -> None:
    """Raise CheckpointWriteError when something other than a directory is at ``where``."""
    try:
        mode = os.lstat(where).st_mode
    except FileNotFoundError:
        return
    except OSError as error:  # NotADirectoryError: a parent is a file
        raise CheckpointWriteError(f"cannot save a checkpoint at {where}: {error}") from error
    if not stat.S_ISDIR(mode):
        raise CheckpointWriteError(
            f"cannot save a checkpoint at {where}: it is a {_file_type(mode)}, not a DCP "
            "checkpoint directory (a sharded checkpoint is a directory)"
        )


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISREG, "regular file"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _committed_directory_quietly(where: str) -> str | None:
    try:
        return _committed_directory(where)
    except CheckpointError:
        return None


def _committed_directory(where: str) -> str:
    """The directory of the committed save at ``where``; raises the checkpoint errors."""
    if not os.path.exists(where):
        raise CheckpointNotFoundError(f"no checkpoint exists at {where}")
    if not os.path.isdir(where):
        raise CheckpointCorruptedError(
            f"{where} is not a DCP checkpoint: a sharded checkpoint is a directory"
        )
    pointer = os.path.join(where, POINTER)
    if not os.path.exists(pointer):
        if os.path.exists(os.path.join(where, _DCP_METADATA)):
            return where  # a plain dcp.save directory
        entries = os.listdir(where)
        if entries and all(entry.startswith(STAGING_PREFIX) for entry in entries):
            raise CheckpointNotFoundError(
                f"no checkpoint exists at {where} (only an unfinished save is there)"
            )
        raise CheckpointCorruptedError(
            f"{where} is not a DCP checkpoint: it has neither {POINTER} nor {_DCP_METADATA}"
        )
    try:
        with open(pointer, "rb") as file:
            record = json.loads(file.read().decode())
        version = record["committed"]
        if record.get("format") != _FORMAT or not isinstance(version, str):
            raise ValueError(f"unknown pointer {record!r}")
    except Exception as error:
        raise CheckpointCorruptedError(
            f"{where} is not a DCP checkpoint: {POINTER} is damaged"
        ) from error
    directory = os.path.join(where, os.path.basename(version))
    if not os.path.isdir(directory):
        raise CheckpointCorruptedError(
            f"{where} is not a complete DCP checkpoint: the committed save {version!r} is missing"
        )
    return directory


def _read_skeleton(where: str, skeleton_path: str) -> object:
    try:
        with open(skeleton_path, "rb") as file:
            data = file.read()
    except FileNotFoundError as error:
        raise CheckpointCorruptedError(
            f"{where} is not a complete DCP checkpoint: {SKELETON} is missing"
        ) from error
    try:
        return decode_torch(io.BytesIO(data), None, weights_only=True)
    except UnsafeContentError as error:
        raise UnsafeCheckpointError(
            f"{where}: {SKELETON} contains objects that are not plain data ({error}); loading "
            "it would run code, which is refused."
        ) from error
    except Exception as error:
        raise CheckpointCorruptedError(f"{where}: {SKELETON} is damaged") from error
