"""Fixtures for the reference checkpoint IO tests: every implementation as a case.

A case says how to make the IO, how to name a checkpoint path for it, how to plant raw bytes
at such a path (to simulate damage), and what it declares: the full CKPT-1 value set or
tensors only, and whether it has directories.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import fsspec
import pytest
import torch

from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from trainspec import CheckpointIO

_unique = itertools.count()


@dataclass
class Case:
    """One implementation under test, with what it declares."""

    name: str
    make: Callable[[], CheckpointIO]
    full_values: bool  # the whole CKPT-1 value set (else flat str -> Tensor only)
    keeps_layout: bool  # strides and storage shared between views survive a round trip
    has_directories: bool
    local: bool  # paths are local files

    def path(self, tmp_path: Path, name: str = "ckpt.pt") -> str:
        if self.name == "torch-memory-url":
            return f"memory://trainspec-tests/{next(_unique)}/{name}"
        if self.name in ("memory", "background-memory"):
            return f"store/{next(_unique)}/{name}"
        return str(tmp_path / name)

    def plant(self, io: CheckpointIO, path: str, data: bytes) -> None:
        """Put raw ``data`` where ``io`` would look for ``path``."""
        if isinstance(io, BackgroundCheckpointIO):
            io.wait()
            io = io.inner
        if isinstance(io, MemoryCheckpointIO):
            io.store[path] = data
        elif path.startswith("memory://"):
            fsspec.filesystem("memory").pipe_file(path, data)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).write_bytes(data)


CASES = {
    "torch": Case("torch", TorchCheckpointIO, True, True, True, True),
    "background": Case("background", BackgroundCheckpointIO, True, True, True, True),
    "background-memory": Case(
        "background-memory",
        lambda: BackgroundCheckpointIO(MemoryCheckpointIO(), max_pending=2),
        True,
        True,
        False,
        False,
    ),
    "memory": Case("memory", MemoryCheckpointIO, True, True, False, False),
    "torch-memory-url": Case("torch-memory-url", TorchCheckpointIO, True, True, True, False),
    "safetensors": Case("safetensors", SafetensorsCheckpointIO, False, False, True, True),
}
FULL = [name for name, case in CASES.items() if case.full_values]


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    """Every implementation."""
    return CASES[request.param]


@pytest.fixture(params=FULL)
def full_case(request: pytest.FixtureRequest) -> Case:
    """Implementations that store the whole CKPT-1 value set."""
    return CASES[request.param]


@pytest.fixture
def io(case: Case) -> Iterator[CheckpointIO]:
    instance = case.make()
    yield instance
    instance.teardown()


@pytest.fixture
def full_io(full_case: Case) -> Iterator[CheckpointIO]:
    instance = full_case.make()
    yield instance
    instance.teardown()


@pytest.fixture(autouse=True)
def _clean_memory_filesystem() -> Iterator[None]:
    yield
    fs = fsspec.filesystem("memory")
    if fs.exists("/trainspec-tests"):
        fs.rm("/trainspec-tests", recursive=True)


def tensor_checkpoint() -> dict[str, torch.Tensor]:
    """A flat tensor checkpoint every implementation can store."""
    return {
        "weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "bias": torch.tensor([1.5, -2.0]),
        "step": torch.tensor(7),
    }


@pytest.fixture
def make_checkpoint(case: Case) -> Callable[[], dict[str, object]]:
    """A checkpoint suited to the case: nested for full-value IOs, flat tensors otherwise."""

    def make() -> dict[str, object]:
        flat: dict[str, object] = dict(tensor_checkpoint())
        if case.full_values:
            flat["nested"] = {"lr": 0.1, "names": ["a", "b"], "none": None, "pair": (1, True)}
        return flat

    return make


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def assert_same(loaded: object, saved: object, *, layout: bool = True, where: str = "ckpt") -> None:
    """``loaded`` equals ``saved`` value for value: container types and keys, tensor dtype,
    shape, bits, requires_grad and (with ``layout``) strides and storage offset."""
    if isinstance(saved, torch.Tensor):
        assert isinstance(loaded, torch.Tensor), f"{where}: {type(loaded)} is not a tensor"
        assert loaded.dtype == saved.dtype, f"{where}: dtype {loaded.dtype} != {saved.dtype}"
        assert loaded.shape == saved.shape, f"{where}: shape {loaded.shape} != {saved.shape}"
        assert torch.equal(_bits(loaded), _bits(saved)), f"{where}: values differ"
        if layout:
            assert loaded.stride() == saved.stride(), f"{where}: strides differ"
            assert loaded.storage_offset() == saved.storage_offset(), f"{where}: offset differs"
            assert loaded.requires_grad == saved.requires_grad, f"{where}: requires_grad"
        return
    assert type(loaded) is type(saved), f"{where}: {type(loaded)} is not {type(saved)}"
    if isinstance(saved, dict):
        assert isinstance(loaded, dict)
        assert list(loaded) == list(saved), f"{where}: keys {list(loaded)} != {list(saved)}"
        for key in saved:
            assert_same(loaded[key], saved[key], layout=layout, where=f"{where}[{key!r}]")
    elif isinstance(saved, (list, tuple)):
        assert isinstance(loaded, (list, tuple))
        assert len(loaded) == len(saved), f"{where}: length differs"
        for i, (a, b) in enumerate(zip(loaded, saved, strict=True)):
            assert_same(a, b, layout=layout, where=f"{where}[{i}]")
    else:
        assert loaded == saved, f"{where}: {loaded!r} != {saved!r}"


@pytest.fixture
def same() -> Callable[..., None]:
    """The deep-equality assertion used by the round-trip tests."""
    return assert_same


_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


class LockHolder:
    """Another process that holds an exclusive ``flock`` on files, as a live writer does on
    its temporary file (see ``_storage``); each lock lasts until :meth:`release_all`."""

    def __init__(self) -> None:
        self._children: list[subprocess.Popen[str]] = []

    def hold(self, path: Path) -> int:
        """Lock ``path`` in a new process; return once the lock is held. Returns its pid."""
        child = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._children.append(child)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked", "the lock holder did not start"
        return child.pid

    def release_all(self) -> None:
        for child in self._children:
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
            assert child.stdout is not None
            child.stdout.close()
        self._children.clear()


@pytest.fixture
def lock_holder() -> Iterator[LockHolder]:
    """Holds ``flock`` locks in other processes; released at the end of the test."""
    if sys.platform == "win32":
        pytest.skip("flock is POSIX")
    holder = LockHolder()
    yield holder
    holder.release_all()
