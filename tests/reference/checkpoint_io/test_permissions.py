"""An overwrite keeps the replaced checkpoint's permission bits, owner and group.

An atomic save writes a new file and renames it over the old one, so without care the new
file gets the umask's mode (a 0600 checkpoint became 0644) and the writer's owner. A new
checkpoint gets what a plain ``open`` would give it: ``0o666 & ~umask``.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from trainspec import CheckpointIO

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")

NOBODY = 65534
STATE = {"w": torch.arange(4, dtype=torch.float32)}
IOS: dict[str, Callable[[], CheckpointIO]] = {
    "torch": TorchCheckpointIO,
    "safetensors": SafetensorsCheckpointIO,
    "background": BackgroundCheckpointIO,
}


@pytest.fixture(params=list(IOS))
def save(request: pytest.FixtureRequest) -> Iterator[Callable[[Path], None]]:
    io = IOS[request.param]()

    def run(path: Path) -> None:
        io.save_checkpoint(STATE, path)
        if isinstance(io, BackgroundCheckpointIO):
            io.wait()

    yield run
    io.teardown()


def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    for _ in _umask(request.param):
        yield request.param


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664, 0o444])
def test_an_overwrite_keeps_the_replaced_files_mode(tmp_path, save, umask, mode):
    path = tmp_path / "ckpt.pt"
    save(path)
    os.chmod(path, mode)
    before = os.stat(path).st_ino
    save(path)
    assert os.stat(path).st_ino != before, "the file was not replaced: nothing was tested"
    assert _mode(path) == mode, f"{oct(_mode(path))} after overwriting a {oct(mode)} file"


def test_a_new_checkpoint_gets_the_mode_a_plain_open_gives(tmp_path, save):
    for _ in _umask(0o027):
        save(tmp_path / "new.pt")
        with open(tmp_path / "plain", "wb"):
            pass
    assert _mode(tmp_path / "new.pt") == _mode(tmp_path / "plain") == 0o640


def test_an_overwrite_through_a_symlink_keeps_the_target_mode(tmp_path):
    target = tmp_path / "real.pt"
    TorchCheckpointIO().save_checkpoint(STATE, target)
    os.chmod(target, 0o600)
    os.symlink(target, tmp_path / "link.pt")
    TorchCheckpointIO().save_checkpoint(STATE, tmp_path / "link.pt")
    assert _mode(target) == 0o600
    assert os.path.islink(tmp_path / "link.pt")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
def test_an_overwrite_by_root_keeps_the_owner_and_group(tmp_path, save):
    path = tmp_path / "ckpt.pt"
    save(path)
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o640)
    save(path)
    info = os.stat(path)
    assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY)
    assert stat.S_IMODE(info.st_mode) == 0o640, "chown must not undo the mode"


def test_the_temporary_file_is_never_wider_than_the_replaced_file(tmp_path, monkeypatch):
    from trainspec.reference.checkpoint_io import _storage

    path = tmp_path / "ckpt.pt"
    TorchCheckpointIO().save_checkpoint(STATE, path)
    os.chmod(path, 0o600)
    seen: list[int] = []
    create = _storage._create_temp

    def recording(directory, name, replaced):
        temp = create(directory, name, replaced)
        seen.append(stat.S_IMODE(os.fstat(temp.file.fileno()).st_mode))
        return temp

    monkeypatch.setattr(_storage, "_open_temp", recording)
    for _ in _umask(0o022):
        TorchCheckpointIO().save_checkpoint(STATE, path)
    assert seen == [0o600], "the checkpoint's bytes must not be readable by others meanwhile"
