"""Typing cases for :class:`trainspec.CheckpointIO` and :class:`trainspec.AsyncCheckpointIO`.

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typing_extensions import assert_type

from trainspec import (
    AsyncCheckpointIO,
    Checkpoint,
    CheckpointIO,
    MapLocation,
    PathLike,
    StorageOptions,
)


class _CheckpointIOCore:
    """Every CheckpointIO member except ``load_checkpoint``."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        pass

    def remove_checkpoint(self, path: PathLike) -> None:
        pass

    def teardown(self) -> None:
        pass


# -- positive -------------------------------------------------------------------------------


class StructuralIO(_CheckpointIOCore):
    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        return {}


class StructuralAsyncIO(StructuralIO):
    def wait(self) -> None:
        pass


class ExplicitAsyncIO(AsyncCheckpointIO):
    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        pass

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        return {}

    def remove_checkpoint(self, path: PathLike) -> None:
        pass

    def teardown(self) -> None:
        pass

    def wait(self) -> None:
        pass


io: CheckpointIO = StructuralIO()
async_io: AsyncCheckpointIO = StructuralAsyncIO()
async_as_sync: CheckpointIO = StructuralAsyncIO()
explicit_async: AsyncCheckpointIO = ExplicitAsyncIO()


def use_checkpoint_io(io: CheckpointIO, async_io: AsyncCheckpointIO) -> None:
    io.save_checkpoint({"step": 1}, "ckpt.pt")
    io.save_checkpoint({"step": 1}, Path("ckpt.pt"), storage_options={"compress": True})
    assert_type(io.load_checkpoint("memory://ckpt.pt"), dict[str, Any])
    assert_type(io.load_checkpoint(Path("ckpt.pt"), map_location="cpu"), dict[str, Any])
    assert_type(io.load_checkpoint("ckpt.pt", map_location={"cuda:0": "cpu"}), dict[str, Any])
    assert_type(io.remove_checkpoint("ckpt.pt"), None)
    assert_type(async_io.wait(), None)


# -- negative -------------------------------------------------------------------------------


class MissingLoad(_CheckpointIOCore):
    pass


class NoMapLocation(_CheckpointIOCore):
    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        return {}


class LoadReturnsNone(_CheckpointIOCore):
    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> None:
        pass


class StrPathOnly(_CheckpointIOCore):
    def load_checkpoint(self, path: str, map_location: MapLocation = None) -> Checkpoint:
        return {}


class ExplicitMissingWait(AsyncCheckpointIO):
    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        pass

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        return {}

    def remove_checkpoint(self, path: PathLike) -> None:
        pass

    def teardown(self) -> None:
        pass


missing: CheckpointIO = MissingLoad()  # type: ignore[assignment]
no_map_location: CheckpointIO = NoMapLocation()  # type: ignore[assignment]
returns_none: CheckpointIO = LoadReturnsNone()  # type: ignore[assignment]
str_path_only: CheckpointIO = StrPathOnly()  # type: ignore[assignment]
sync_as_async: AsyncCheckpointIO = StructuralIO()  # type: ignore[assignment]
abstract = ExplicitMissingWait()  # type: ignore[abstract]


def misuse_checkpoint_io(io: CheckpointIO) -> None:
    io.save_checkpoint({1: "not a str key"}, "ckpt.pt")  # type: ignore[dict-item]
    io.save_checkpoint({"step": 1}, 42)  # type: ignore[arg-type]
    io.wait()  # type: ignore[attr-defined]
