"""Special files at a checkpoint path: FIFOs, device nodes, sockets, files larger than memory.

Saving over ``/dev/null`` as root used to replace the device with a regular file, removing it
deleted it, and loading a FIFO blocked forever. Every file-backed reference IO must refuse to
replace or remove anything that is not a regular file (``CheckpointWriteError`` naming the
path and its type) and must never block on, or read whole, something it cannot load.

Never run against real ``/dev`` nodes: FIFOs, sockets and device nodes (with ``/dev/null``'s
major and minor numbers) are made in temporary directories; device nodes need ``CAP_MKNOD``
and skip without it.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec import CheckpointCorruptedError, CheckpointError, CheckpointWriteError
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
    _storage,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec import CheckpointIO

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and device nodes are POSIX")

HANG_GUARD_S = 60.0  # only for a load that would block forever; never a timing assertion
STATE = {"w": torch.arange(6, dtype=torch.float32)}


def _settle(io: CheckpointIO) -> None:
    if isinstance(io, BackgroundCheckpointIO):
        io.wait()


@dataclass(frozen=True)
class Node:
    """A special file made for a test: where it is, what its type is called in messages."""

    path: Path
    kind: str

    def status(self) -> tuple[int, int]:
        info = os.lstat(self.path)
        return info.st_mode, info.st_rdev


def _make_fifo(path: Path) -> Node:
    os.mkfifo(path)
    return Node(path, "FIFO")


def _make_device(kind: str, flag: int) -> Callable[[Path], Node]:
    def make(path: Path) -> Node:
        null = os.stat("/dev/null").st_rdev  # only its numbers; /dev/null itself is not touched
        try:
            os.mknod(path, flag | 0o666, null)
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD")
        return Node(path, kind)

    return make


def _make_socket(path: Path) -> Node:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
    finally:
        server.close()  # the socket file stays
    return Node(path, "socket")


MAKERS: dict[str, Callable[[Path], Node]] = {
    "fifo": _make_fifo,
    "character-device": _make_device("character device", stat.S_IFCHR),
    "block-device": _make_device("block device", stat.S_IFBLK),
    "socket": _make_socket,
}

IOS: dict[str, Callable[[], CheckpointIO]] = {
    "torch": TorchCheckpointIO,
    "safetensors": SafetensorsCheckpointIO,
    "background": BackgroundCheckpointIO,
}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a UNIX socket path has ~100 bytes at most)."""
    path = tempfile.mkdtemp(prefix="ts-special-", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=list(MAKERS))
def node(request: pytest.FixtureRequest, short_dir: Path) -> Node:
    return MAKERS[request.param](short_dir / "ckpt.pt")


@pytest.fixture(params=list(IOS))
def io(request: pytest.FixtureRequest) -> Iterator[CheckpointIO]:
    instance = IOS[request.param]()
    yield instance
    try:
        instance.teardown()
    except CheckpointError:
        pass


@pytest.fixture(params=["path", "file-url", "symlink"])
def spelling(request: pytest.FixtureRequest) -> Callable[[Node], str]:
    """How the test names the node: its path, a file:// URL, or a symlink to it."""

    def name(node: Node) -> str:
        if request.param == "file-url":
            return f"file://{node.path}"
        if request.param == "symlink":
            link = node.path.with_name("link.pt")
            os.symlink(node.path, link)
            return str(link)
        return str(node.path)

    return name


def _only(directory: Path, *names: str) -> None:
    assert sorted(os.listdir(directory)) == sorted(names), "nothing else may be left behind"


def test_saving_over_a_special_file_is_refused_and_keeps_it(io, node, spelling):
    before = node.status()
    path = spelling(node)
    with pytest.raises(CheckpointWriteError) as info:
        io.save_checkpoint(STATE, path)
        _settle(io)
    assert path in str(info.value) and node.kind in str(info.value)
    assert node.status() == before, f"the {node.kind} must be left as it was"
    _only(node.path.parent, *{node.path.name, Path(path).name} - {"file:"})


def test_removing_a_special_file_is_refused_and_keeps_it(io, node):
    before = node.status()
    with pytest.raises(CheckpointWriteError) as info:
        io.remove_checkpoint(node.path)
    assert str(node.path) in str(info.value) and node.kind in str(info.value)
    assert node.status() == before


def test_removing_a_symlink_to_a_special_file_removes_only_the_link(node):
    link = node.path.with_name("link.pt")
    os.symlink(node.path, link)
    before = node.status()
    TorchCheckpointIO().remove_checkpoint(link)
    assert not os.path.lexists(link)
    assert node.status() == before


def _load_with_hang_guard(io: CheckpointIO, path: str) -> BaseException | None:
    box: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            io.load_checkpoint(path)
            box["error"] = None
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        if stat.S_ISFIFO(os.stat(path).st_mode):  # let the stuck open return
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(HANG_GUARD_S)
        pytest.fail(f"loading {path} blocked instead of raising")
    return box["error"]


def test_loading_a_special_file_raises_corrupted_without_blocking(io, node, spelling):
    before = node.status()
    path = spelling(node)
    error = _load_with_hang_guard(io, path)
    assert isinstance(error, CheckpointCorruptedError), repr(error)
    assert path in str(error) and "not a regular file" in str(error)
    assert node.status() == before


def test_a_special_file_that_appears_during_a_save_is_not_replaced(short_dir):
    path = short_dir / "ckpt.pt"
    TorchCheckpointIO().save_checkpoint(STATE, path)

    class SwapsInAFifo:
        def __reduce__(self):
            os.unlink(path)
            os.mkfifo(path)
            return (int, (1,))

    with pytest.raises(CheckpointWriteError, match="FIFO"):
        TorchCheckpointIO().save_checkpoint({"x": SwapsInAFifo()}, path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    _only(short_dir, "ckpt.pt")


def test_a_chained_fsspec_url_to_a_fifo_is_refused(short_dir):
    fifo = _make_fifo(short_dir / "ckpt.pt")
    url = f"simplecache::file://{fifo.path}"
    io = TorchCheckpointIO()
    with pytest.raises(CheckpointWriteError, match="FIFO"):
        io.save_checkpoint(STATE, url)
    with pytest.raises(CheckpointWriteError, match="FIFO"):
        io.remove_checkpoint(url)
    error = _load_with_hang_guard(io, url)
    assert isinstance(error, CheckpointCorruptedError), repr(error)
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode)


# --- files larger than memory -----------------------------------------------------------------


@pytest.mark.parametrize("url", [False, True])
def test_a_file_larger_than_memory_is_refused_before_reading(tmp_path, monkeypatch, url):
    path = tmp_path / "big.safetensors"
    SafetensorsCheckpointIO().save_checkpoint({"w": torch.ones(1 << 18)}, path)  # 1 MiB
    monkeypatch.setattr(_storage, "memory_limit", lambda: 4096)
    reads: list[int] = []
    real_read = _storage._open_local

    def counting(name: str):
        source = real_read(name)
        reads.append(1)
        return source

    monkeypatch.setattr(_storage, "_open_local", counting)
    shown = f"simplecache::file://{path}" if url else str(path)
    with pytest.raises(CheckpointError) as info:
        SafetensorsCheckpointIO().load_checkpoint(shown)
    assert type(info.value) is CheckpointError, "not corruption: the file may be fine"
    assert shown in str(info.value) and "memory" in str(info.value)
    assert isinstance(info.value.__cause__, MemoryError)


def test_a_sparse_file_larger_than_memory_raises_a_checkpoint_error(tmp_path):
    limit = _storage.memory_limit()
    if limit is None:
        pytest.skip("this platform does not say how much memory it has")
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        try:
            f.truncate(limit + (1 << 30))  # sparse: no blocks are written
        except OSError as exc:
            pytest.skip(f"this file system cannot hold a sparse file that large: {exc}")
    with pytest.raises(CheckpointError) as info:
        SafetensorsCheckpointIO().load_checkpoint(path)
    assert str(path) in str(info.value)


def test_torch_running_out_of_memory_is_not_reported_as_corruption(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    TorchCheckpointIO().save_checkpoint(STATE, path)

    def fail(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 400000000 bytes. Error code 12"
        )

    monkeypatch.setattr(torch, "load", fail)
    with pytest.raises(CheckpointError) as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert type(info.value) is CheckpointError
    assert "memory" in str(info.value)
