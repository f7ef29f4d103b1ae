"""What the conformance kit does not decide: this package's own promises."""

from __future__ import annotations

import gzip
import os
from typing import TYPE_CHECKING

import pytest
import torch
from trainspec import CheckpointCorruptedError, ConfigurationError, UnsafeCheckpointError

from trainspec_example import CompressedCheckpointIO, VirtualCPUAccelerator

if TYPE_CHECKING:
    from pathlib import Path


def test_checkpoint_file_is_gzip_around_torch_save(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt"
    CompressedCheckpointIO().save_checkpoint({"w": torch.zeros(4096)}, path)
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert gzip.decompress(raw)[:2] == b"PK"  # torch.save's zip archive
    assert len(raw) < 4096 * 4 // 10  # zeros compress well


def test_compresslevel_storage_option_is_honoured(tmp_path: Path) -> None:
    io = CompressedCheckpointIO()
    values = {"w": torch.arange(20000, dtype=torch.float32)}
    io.save_checkpoint(values, tmp_path / "fast.ckpt", {"compresslevel": 0})
    io.save_checkpoint(values, tmp_path / "small.ckpt", {"compresslevel": 9})
    assert os.path.getsize(tmp_path / "small.ckpt") < os.path.getsize(tmp_path / "fast.ckpt")
    assert torch.equal(io.load_checkpoint(tmp_path / "fast.ckpt")["w"], values["w"])
    with pytest.raises(ConfigurationError):
        io.save_checkpoint(values, tmp_path / "bad.ckpt", {"compresslevel": 10})
    with pytest.raises(TypeError, match="compresslevel"):
        io.save_checkpoint(values, tmp_path / "bad.ckpt", {"level": 1})


def test_a_plain_torch_save_file_is_corrupted_not_unsafe(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(2)}, path)  # not gzip-compressed
    with pytest.raises(CheckpointCorruptedError, match="gzip"):
        CompressedCheckpointIO().load_checkpoint(path)


class _Unsafe:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("loading ran code",))


def test_code_running_content_needs_the_explicit_opt_in(tmp_path: Path) -> None:
    path = tmp_path / "unsafe.ckpt"
    CompressedCheckpointIO().save_checkpoint({"payload": _Unsafe()}, path)
    with pytest.raises(UnsafeCheckpointError, match="weights_only=False"):
        CompressedCheckpointIO().load_checkpoint(path)


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt"
    stale = tmp_path / ".model.ckpt.999999999.abcd1234.tmp"  # no such process
    stale.write_bytes(b"partial")
    mine = tmp_path / f".model.ckpt.{os.getpid()}.abcd1234.tmp"  # a live writer's
    mine.write_bytes(b"in progress")
    CompressedCheckpointIO().save_checkpoint({"w": torch.ones(1)}, path)
    assert not stale.exists()
    assert mine.exists()


def test_thread_budget_applies_during_setup_and_is_restored() -> None:
    before = torch.get_num_threads()
    budget = 1 if before != 1 else 2
    accelerator = VirtualCPUAccelerator(threads_per_device=budget)
    accelerator.setup_device(torch.device("cpu"))
    accelerator.setup_device(torch.device("cpu"))
    try:
        assert torch.get_num_threads() == budget
        stats = accelerator.get_device_stats(torch.device("cpu"))
        assert stats == {"intra_op_threads": float(budget)}
    finally:
        accelerator.teardown()
    assert torch.get_num_threads() == before
    accelerator.teardown()
    assert torch.get_num_threads() == before


def test_default_vcpu_leaves_torch_threads_alone() -> None:
    before = torch.get_num_threads()
    accelerator = VirtualCPUAccelerator()
    accelerator.setup_device(torch.device("cpu"))
    assert torch.get_num_threads() == before
    accelerator.teardown()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_constructor_refuses_bad_budgets(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        VirtualCPUAccelerator(threads_per_device=bad)  # type: ignore[arg-type]
