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


# --------------------------------------------------------------- pickle protocols 2, 4 and 5
# torch names a refused global only for protocol 2's GLOBAL opcode; protocols 4 and 5 (FRAME,
# STACK_GLOBAL) fail in torch as "Unsupported operand", which the loader used to report as
# corruption. The payloads below are hand-assembled so their opcodes are known exactly.


def _text(value: str) -> bytes:
    data = value.encode()
    return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _calling_pickle(protocol: int, module: str, name: str, argument: str) -> bytes:
    """A pickle whose loading calls ``module.name(argument)``."""
    if protocol < 4:
        body = b"c" + f"{module}\n{name}\n".encode()  # GLOBAL
        return (
            b"\x80\x02"
            + body
            + b"X"
            + len(argument.encode()).to_bytes(4, "little")
            + (
                argument.encode() + b"\x85R."  # BINUNICODE, TUPLE1, REDUCE, STOP
            )
        )
    body = _text(module) + b"\x94" + _text(name) + b"\x94\x93"  # MEMOIZE, STACK_GLOBAL
    body += _text(argument) + b"\x85R."
    return b"\x80" + bytes([protocol]) + b"\x95" + len(body).to_bytes(8, "little") + body


def _in_torch_zip(pickled: bytes) -> bytes:
    """A real ``torch.save`` zip checkpoint whose ``data.pkl`` is replaced by ``pickled``."""
    import zipfile

    original = io.BytesIO()
    torch.save({"weights": torch.ones(2)}, original)
    out = io.BytesIO()
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            content = source.read(info.filename)
            target.writestr(info, pickled if info.filename.endswith("/data.pkl") else content)
    return out.getvalue()


@pytest.mark.parametrize("container", ["zip", "raw"])
@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize(
    ("module", "name"), [("os", "system"), ("builtins", "eval")], ids=["os.system", "eval"]
)
def test_a_dangerous_call_is_unsafe_in_every_pickle_protocol(
    tmp_path, marker, container, protocol, module, name
):
    command = f"touch {shlex.quote(str(marker))}"
    argument = command if name == "system" else f"__import__('os').system({command!r})"
    pickled = _calling_pickle(protocol, module, name, argument)
    path = tmp_path / "exploit.pt"
    path.write_bytes(_in_torch_zip(pickled) if container == "zip" else pickled)
    with pytest.raises(UnsafeCheckpointError) as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert not marker.exists(), "loading must not have run the payload"
    message = str(info.value)
    assert str(path) in message
    assert name in message, "the message names the refused global"
    assert "weights_only=False" in message


@pytest.mark.parametrize("container", ["zip", "raw"])
def test_a_global_the_loader_cannot_name_is_unsafe_or_corrupted(tmp_path, container):
    # STACK_GLOBAL fed by a tuple rather than strings: the name is unknowable without running.
    body = _text("os") + b")\x93" + _text("x") + b"\x85R."  # EMPTY_TUPLE, STACK_GLOBAL
    pickled = b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body
    path = tmp_path / "odd.pt"
    path.write_bytes(_in_torch_zip(pickled) if container == "zip" else pickled)
    with pytest.raises(UnsafeCheckpointError, match="unsafe or corrupted") as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert str(path) in str(info.value)


def test_a_protocol_4_file_of_allowed_objects_is_not_called_unsafe(tmp_path):
    from collections import OrderedDict

    path = tmp_path / "protocol4.pt"
    torch.save({"od": OrderedDict(w=torch.ones(2))}, path, pickle_protocol=4)
    with pytest.raises(CheckpointCorruptedError) as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert not isinstance(info.value, UnsafeCheckpointError)
    assert torch.equal(
        TorchCheckpointIO(weights_only=False).load_checkpoint(path)["od"]["w"], torch.ones(2)
    )


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_raw_pickle_of_plain_data_is_corrupted_not_unsafe(tmp_path, protocol):
    from collections import OrderedDict

    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(OrderedDict(a=1), protocol=protocol))
    with pytest.raises(CheckpointCorruptedError):
        TorchCheckpointIO().load_checkpoint(path)
