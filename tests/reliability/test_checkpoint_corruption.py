"""CKPT-10 under damage: every truncation point, random bytes, other formats.

A damaged checkpoint must raise CheckpointCorruptedError naming the path, never load
partially and never leak a raw torch, pickle, zip or safetensors exception.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainspec import CheckpointCorruptedError, UnsafeCheckpointError
from trainspec.reference.checkpoint_io import (
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)

CHECKPOINT = {
    "weight": torch.arange(2048, dtype=torch.float32).reshape(32, 64),
    "bias": torch.ones(64, dtype=torch.bfloat16),
    "step": torch.tensor(10),
}
TORCH_FULL = {**CHECKPOINT, "meta": {"epoch": 3, "names": ["a", "b"], "none": None}}


def _encoded(kind: str) -> bytes:
    buffer = io.BytesIO()
    if kind == "safetensors":
        import safetensors.torch

        return safetensors.torch.save(dict(CHECKPOINT))
    torch.save(TORCH_FULL, buffer, _use_new_zipfile_serialization=kind != "torch-legacy")
    return buffer.getvalue()


def _cut_points(size: int) -> list[int]:
    """Every byte of the first and last 64, and 64 points evenly spread in between."""
    points = set(range(min(64, size))) | set(range(max(0, size - 64), size))
    points |= {size * i // 64 for i in range(64)}
    return sorted(p for p in points if p < size)


def _io(kind: str):
    return SafetensorsCheckpointIO() if kind == "safetensors" else TorchCheckpointIO()


@pytest.mark.parametrize("kind", ["torch", "torch-legacy", "safetensors"])
def test_every_truncation_is_reported_as_corruption(tmp_path, kind):
    valid = _encoded(kind)
    path = tmp_path / "ckpt"
    loader = _io(kind)
    path.write_bytes(valid)
    assert loader.load_checkpoint(path).keys() >= CHECKPOINT.keys()
    failures = []
    for cut in _cut_points(len(valid)):
        path.write_bytes(valid[:cut])
        try:
            loader.load_checkpoint(path)
        except CheckpointCorruptedError as exc:
            if str(path) not in str(exc):
                failures.append(f"cut {cut}: message does not name the path")
        except Exception as exc:
            failures.append(f"cut {cut}: {type(exc).__name__}: {exc}")
        else:
            failures.append(f"cut {cut}: a truncated file loaded")
    assert not failures, failures[:10]


def test_truncated_bytes_in_the_memory_store_are_corruption():
    loader = MemoryCheckpointIO()
    loader.save_checkpoint(TORCH_FULL, "k")
    valid = loader.store["k"]
    for cut in _cut_points(len(valid))[::4]:
        loader.store["k"] = valid[:cut]
        with pytest.raises(CheckpointCorruptedError, match="k"):
            loader.load_checkpoint("k")


def _zip_without_torch_layout() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"not a pickle")
        archive.writestr("readme.txt", "hello")
    return buffer.getvalue()


OTHER_FORMATS = {
    "zero-length": b"",
    "json": json.dumps({"weight": [[1.0, 2.0]], "step": 3}).encode(),
    "zip-not-torch": _zip_without_torch_layout(),
    "numpy-npy": b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    + b" " * 50
    + b"\n"
    + b"\x00" * 8,
    "gzip": b"\x1f\x8b\x08\x00" + os.urandom(200),
    "utf16-text": "checkpoint".encode("utf-16"),
}


@pytest.mark.parametrize("fmt", list(OTHER_FORMATS))
@pytest.mark.parametrize("kind", ["torch", "safetensors"])
def test_other_formats_are_corruption(tmp_path, kind, fmt):
    path = tmp_path / "ckpt"
    path.write_bytes(OTHER_FORMATS[fmt])
    with pytest.raises(CheckpointCorruptedError) as info:
        _io(kind).load_checkpoint(path)
    assert str(path) in str(info.value)


def test_each_format_rejects_the_other(tmp_path):
    (tmp_path / "a.pt").write_bytes(_encoded("safetensors"))
    (tmp_path / "b.safetensors").write_bytes(_encoded("torch"))
    with pytest.raises(CheckpointCorruptedError):
        TorchCheckpointIO().load_checkpoint(tmp_path / "a.pt")
    with pytest.raises(CheckpointCorruptedError):
        SafetensorsCheckpointIO().load_checkpoint(tmp_path / "b.safetensors")


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_random_bytes_never_load_and_never_leak_raw_errors(tmp_path, data):
    path = tmp_path / "random"
    path.write_bytes(data)
    for loader in (TorchCheckpointIO(), SafetensorsCheckpointIO()):
        with pytest.raises((CheckpointCorruptedError, UnsafeCheckpointError)):
            loader.load_checkpoint(path)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(0, 10_000), value=st.integers(0, 255))
def test_a_damaged_header_byte_is_corruption_or_loads_whole(tmp_path, position, value):
    # Flipping a byte in tensor data cannot be detected (torch keeps no checksums), so only
    # bytes outside the data records are damaged here: the result must be a whole checkpoint,
    # a CheckpointCorruptedError, or (when the damage turned one allowed class name into
    # another valid name) an UnsafeCheckpointError -- never a raw exception.
    valid = bytearray(_encoded("torch"))
    position %= len(valid)
    valid[position] = value
    path = tmp_path / "damaged.pt"
    path.write_bytes(bytes(valid))
    try:
        loaded = TorchCheckpointIO().load_checkpoint(path)
    except (CheckpointCorruptedError, UnsafeCheckpointError):
        return
    assert set(loaded) == set(TORCH_FULL)
    assert loaded["weight"].shape == CHECKPOINT["weight"].shape


def test_a_damaged_key_name_in_data_pkl_is_corruption_not_a_renamed_key(tmp_path):
    # torch's zip reader does not check CRC-32s: one changed byte of a key in data.pkl used to
    # load as a checkpoint whose key was renamed ('meta' -> '\x00eta').
    valid = bytearray(_encoded("torch"))
    position = valid.find(b"meta")
    assert position > 0
    valid[position] = 0
    path = tmp_path / "renamed.pt"
    path.write_bytes(bytes(valid))
    with pytest.raises(CheckpointCorruptedError):
        TorchCheckpointIO().load_checkpoint(path)
