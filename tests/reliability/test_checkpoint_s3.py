"""Checkpoints on S3 through fsspec (s3fs), against a local moto server.

The server runs in this process on 127.0.0.1 (no network), once for the module. Connection
settings reach the IO through ``TorchCheckpointIO(storage_options=...)``, which loads and
removals also use. Object stores are written with one upload (no temporary object), so a
reader sees the old object or the new one.

Needs ``moto[server]`` and ``s3fs``; skips with that reason where they are not installed.
"""

from __future__ import annotations

import pytest
import torch

from trainspec import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    UnsafeCheckpointError,
)
from trainspec.conformance.fakes import free_port
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)

moto_server = pytest.importorskip("moto.server", reason="S3 tests need moto[server]")
s3fs = pytest.importorskip("s3fs", reason="S3 tests need s3fs")

BUCKET = "trainspec-checkpoints"


@pytest.fixture(scope="module")
def s3_options():
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
    }
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(BUCKET)
    try:
        yield options
    finally:
        server.stop()


@pytest.fixture
def fs(s3_options):
    return s3fs.S3FileSystem(**s3_options)


@pytest.fixture
def url(request, fs):
    path = f"{BUCKET}/{request.node.name}"
    yield f"s3://{path}/model.pt"
    if fs.exists(path):
        fs.rm(path, recursive=True)


A = {"w": torch.ones(3), "meta": {"step": 1}}
B = {"w": torch.zeros(3), "meta": {"step": 2}}


def test_save_load_overwrite_remove(s3_options, fs, url):
    io = TorchCheckpointIO(storage_options=s3_options)
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(url)
    io.save_checkpoint(A, url)
    assert io.load_checkpoint(url)["meta"] == {"step": 1}
    io.save_checkpoint(B, url)
    loaded = io.load_checkpoint(url)
    assert loaded["meta"] == {"step": 2}
    assert torch.equal(loaded["w"], B["w"])
    directory = url.removeprefix("s3://").rsplit("/", 1)[0]
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(directory)] == ["model.pt"], "no temp objects"
    io.remove_checkpoint(url)
    io.remove_checkpoint(url)
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(url)


def test_per_save_options_are_checked_against_s3fs(s3_options, url):
    io = TorchCheckpointIO(storage_options=s3_options)
    io.save_checkpoint(
        A, url, {"s3_additional_kwargs": {"ContentType": "application/octet-stream"}}
    )
    with pytest.raises(TypeError, match="endpoint_url"):
        io.save_checkpoint(A, url, {"not_an_s3fs_option": 1})
    assert io.load_checkpoint(url)["meta"] == {"step": 1}


def test_a_missing_bucket_is_a_clear_error(s3_options):
    io = TorchCheckpointIO(storage_options=s3_options)
    url = "s3://no-such-bucket-trainspec/model.pt"
    with pytest.raises(CheckpointWriteError, match="no-such-bucket-trainspec"):
        io.save_checkpoint(A, url)
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(url)


def test_a_failed_encode_leaves_the_previous_object(s3_options, url):
    import threading

    io = TorchCheckpointIO(storage_options=s3_options)
    io.save_checkpoint(A, url)
    with pytest.raises(TypeError):
        io.save_checkpoint({"lock": threading.Lock()}, url)
    assert io.load_checkpoint(url)["meta"] == {"step": 1}


def test_damaged_and_unsafe_objects_are_refused(s3_options, fs, url):
    io = TorchCheckpointIO(storage_options=s3_options)
    key = url.removeprefix("s3://")
    fs.pipe_file(key, b"definitely not a checkpoint")
    with pytest.raises(CheckpointCorruptedError, match="s3://"):
        io.load_checkpoint(url)

    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    import io as stdlib_io

    buffer = stdlib_io.BytesIO()
    torch.save({"p": Payload()}, buffer)
    fs.pipe_file(key, buffer.getvalue())
    with pytest.raises(UnsafeCheckpointError):
        io.load_checkpoint(url)


def test_background_and_safetensors_work_on_s3(s3_options, url):
    background = BackgroundCheckpointIO(TorchCheckpointIO(storage_options=s3_options))
    background.save_checkpoint(A, url)
    assert background.load_checkpoint(url)["meta"] == {"step": 1}
    background.teardown()
    tensors = SafetensorsCheckpointIO(storage_options=s3_options)
    st_url = url.replace("model.pt", "model.safetensors")
    tensors.save_checkpoint({"w": torch.arange(4)}, st_url)
    assert torch.equal(tensors.load_checkpoint(st_url)["w"], torch.arange(4))
