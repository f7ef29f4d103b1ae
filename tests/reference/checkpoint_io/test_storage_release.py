"""Freeing a replaced checkpoint off the saving thread (``_storage`` module docstring).

The replaced file is opened before ``os.replace`` and its descriptor closed on a daemon thread,
so the rename does not pay for freeing hundreds of MiB. These tests pin what that must not
change: atomicity (CKPT-3), nothing left in the directory, no descriptor leaked on failure.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec import CheckpointWriteError
from trainspec.reference.checkpoint_io import SafetensorsCheckpointIO, TorchCheckpointIO, _storage

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the deferral is POSIX-only")


def _state(value: float) -> dict[str, object]:
    return {"weight": torch.full((1024,), value)}


def _open_fds() -> set[str]:
    """What this process's descriptors refer to (the one that listed them is gone)."""
    targets = set()
    for fd in _fd_numbers():
        try:
            targets.add(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:
            continue
    return targets


def _fd_numbers() -> list[str]:
    try:
        return os.listdir("/proc/self/fd")
    except FileNotFoundError:  # pragma: no cover - not Linux
        pytest.skip("needs /proc/self/fd")


def _overwrite(tmp_path: Path) -> Path:
    """Save a checkpoint, then save another over it; return the path."""
    io = TorchCheckpointIO()
    path = tmp_path / "ckpt.pt"
    io.save_checkpoint(_state(1.0), path)
    io.save_checkpoint(_state(2.0), path)
    return path


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[os.stat_result]:
    """Lower the threshold to 0 and record, for every descriptor handed to the release
    thread, what it refers to at that moment (the release still happens)."""
    monkeypatch.setattr(_storage, "DEFERRED_RELEASE_MIN_BYTES", 0)
    seen: list[os.stat_result] = []
    release = _storage._release

    def recording(fd: int) -> None:
        seen.append(os.fstat(fd))
        release(fd)

    monkeypatch.setattr(_storage, "_release", recording)
    return seen


@pytest.mark.parametrize("make", [TorchCheckpointIO, SafetensorsCheckpointIO])
def test_the_replaced_file_is_released_unlinked_and_the_new_one_is_in_place(
    make: type[TorchCheckpointIO | SafetensorsCheckpointIO],
    tmp_path: Path,
    released: list[os.stat_result],
) -> None:
    io = make()
    path = tmp_path / "ckpt.pt"
    io.save_checkpoint(_state(1.0), path)
    assert released == []  # nothing replaced by the first save
    old_inode = os.stat(path).st_ino
    io.save_checkpoint(_state(2.0), path)
    assert len(released) == 1
    assert released[0].st_ino == old_inode
    assert released[0].st_nlink == 0  # already unlinked when handed over: the rename is done
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
    loaded = io.load_checkpoint(path)
    assert torch.equal(loaded["weight"], torch.full((1024,), 2.0))  # type: ignore[arg-type]


def test_the_release_thread_closes_the_descriptor(
    tmp_path: Path, released: list[os.stat_result]
) -> None:
    _overwrite(tmp_path)
    _storage.wait_for_releases(timeout=10)
    assert len(released) == 1
    assert not any(target.endswith("ckpt.pt (deleted)") for target in _open_fds())


def test_small_files_are_replaced_without_a_release_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(_storage, "_release", calls.append)
    path = _overwrite(tmp_path)
    assert os.path.getsize(path) < _storage.DEFERRED_RELEASE_MIN_BYTES
    assert calls == []


def test_a_file_with_another_hard_link_is_not_held(
    tmp_path: Path, released: list[os.stat_result]
) -> None:
    io = TorchCheckpointIO()
    path = tmp_path / "ckpt.pt"
    io.save_checkpoint(_state(1.0), path)
    os.link(path, tmp_path / "keep.pt")  # freeing the old file would free nothing
    io.save_checkpoint(_state(2.0), path)
    assert released == []
    kept = io.load_checkpoint(tmp_path / "keep.pt")
    assert torch.equal(kept["weight"], torch.full((1024,), 1.0))  # type: ignore[arg-type]


def test_a_failed_rename_closes_the_held_descriptor_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, released: list[os.stat_result]
) -> None:
    io = TorchCheckpointIO()
    path = tmp_path / "ckpt.pt"
    io.save_checkpoint(_state(1.0), path)
    before = _open_fds()

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_storage.os, "replace", failing_replace)
    with pytest.raises(CheckpointWriteError):
        io.save_checkpoint(_state(2.0), path)
    monkeypatch.undo()
    assert _open_fds() == before  # the descriptor opened for the release was closed
    assert released == []
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
    loaded = io.load_checkpoint(path)
    assert torch.equal(loaded["weight"], torch.full((1024,), 1.0))  # type: ignore[arg-type]


def test_no_release_when_a_thread_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_storage, "DEFERRED_RELEASE_MIN_BYTES", 0)

    class _NoThreads:
        def __init__(self, **_: object) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_storage.threading, "Thread", _NoThreads)
    _overwrite(tmp_path)  # the second save closes the descriptor itself
    assert not any(target.endswith("ckpt.pt (deleted)") for target in _open_fds())
