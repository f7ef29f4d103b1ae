"""CKPT-8: a checkpoint that would run code when loaded is refused by default.

The payload is real: its ``__reduce__`` calls ``os.system`` to create a marker file. Each test
checks the marker is absent after a refused load, and the opt-in test shows it does appear
when loading is allowed, so the refusal is what kept it away.
"""

from __future__ import annotations

import io
import os
import pickle
import shlex

import pytest
import torch

from trainspec import CheckpointCorruptedError, UnsafeCheckpointError
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)


class Exploit:
    """Unpickling this runs ``touch <marker>`` through ``os.system``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "code-ran"
    yield path
    # never leave a marker for another test to misread
    if path.exists():
        path.unlink()


def _torch_payload(marker, *, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    checkpoint = {"weights": torch.ones(2), "payload": Exploit(str(marker))}
    torch.save(checkpoint, buffer, _use_new_zipfile_serialization=not legacy)
    return buffer.getvalue()


@pytest.mark.parametrize("legacy", [False, True], ids=["zip-format", "legacy-format"])
@pytest.mark.parametrize(
    "make_io", [TorchCheckpointIO, BackgroundCheckpointIO], ids=["torch", "background"]
)
def test_a_code_running_checkpoint_is_refused_by_default(tmp_path, marker, legacy, make_io):
    path = tmp_path / "exploit.pt"
    path.write_bytes(_torch_payload(marker, legacy=legacy))
    loader = make_io()
    with pytest.raises(UnsafeCheckpointError) as info:
        loader.load_checkpoint(path)
    loader.teardown()
    assert not marker.exists(), "loading must not have run the payload"
    message = str(info.value)
    assert str(path) in message
    assert "system" in message, "the message names the refused global"
    assert "weights_only=False" in message, "the message says how to opt in"


def test_a_plain_pickle_with_a_payload_is_refused(tmp_path, marker):
    path = tmp_path / "exploit.pkl"
    path.write_bytes(pickle.dumps({"payload": Exploit(str(marker))}))
    with pytest.raises((UnsafeCheckpointError, CheckpointCorruptedError)):
        TorchCheckpointIO().load_checkpoint(path)
    assert not marker.exists()


def test_the_memory_store_refuses_planted_payloads(marker):
    loader = MemoryCheckpointIO()
    loader.store["planted"] = _torch_payload(marker)
    with pytest.raises(UnsafeCheckpointError):
        loader.load_checkpoint("planted")
    assert not marker.exists()


def test_safetensors_never_runs_code(tmp_path, marker):
    path = tmp_path / "exploit.safetensors"
    path.write_bytes(_torch_payload(marker))
    with pytest.raises(CheckpointCorruptedError):
        SafetensorsCheckpointIO().load_checkpoint(path)
    assert not marker.exists()


def test_opting_in_runs_the_payload_which_proves_the_refusal_mattered(tmp_path, marker):
    path = tmp_path / "exploit.pt"
    path.write_bytes(_torch_payload(marker))
    loaded = TorchCheckpointIO(weights_only=False).load_checkpoint(path)
    assert marker.exists(), "with weights_only=False the payload runs (trusted files only)"
    assert loaded["payload"] == 0  # os.system's exit status replaced the object
    assert torch.equal(loaded["weights"], torch.ones(2))


def test_allowlisted_classes_load_with_weights_only(tmp_path):
    from collections import OrderedDict

    path = tmp_path / "plain.pt"
    checkpoint = {"od": OrderedDict(a=torch.ones(1)), "param": torch.nn.Parameter(torch.ones(2))}
    TorchCheckpointIO().save_checkpoint(checkpoint, path)
    loaded = TorchCheckpointIO().load_checkpoint(path)
    assert isinstance(loaded["od"], OrderedDict)
    assert isinstance(loaded["param"], torch.nn.Parameter)
