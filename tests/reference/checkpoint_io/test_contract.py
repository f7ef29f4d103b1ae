"""CKPT-2 ... CKPT-12 for every reference checkpoint IO (CKPT-1 is in test_roundtrip.py)."""

from __future__ import annotations

import io as stdlib_io
import json
import os
import subprocess
import sys
import threading
import time
import zipfile

import pytest
import torch

import trainspec
from trainspec import (
    AsyncCheckpointIO,
    CheckpointCorruptedError,
    CheckpointIO,
    CheckpointNotFoundError,
    CheckpointWriteError,
    ConfigurationError,
    DeviceUnavailableError,
    UnsafeCheckpointError,
)
from trainspec.reference import checkpoint_io as package
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)
from trainspec.reference.checkpoint_io._storage import STALE_TEMP_AGE_S, temp_prefix


def _torch_bytes(obj: object) -> bytes:
    buffer = stdlib_io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _settle(io: CheckpointIO) -> None:
    """Surface background errors now (a no-op for synchronous IOs)."""
    if isinstance(io, AsyncCheckpointIO):
        io.wait()


# --- structure -------------------------------------------------------------------------------


def test_every_class_subclasses_its_protocol_explicitly():
    for cls in (TorchCheckpointIO, BackgroundCheckpointIO, SafetensorsCheckpointIO):
        assert CheckpointIO in cls.__mro__
    assert CheckpointIO in MemoryCheckpointIO.__mro__
    assert AsyncCheckpointIO in BackgroundCheckpointIO.__mro__
    assert isinstance(BackgroundCheckpointIO(), AsyncCheckpointIO)
    assert not isinstance(TorchCheckpointIO(), AsyncCheckpointIO)


def test_package_all_is_sorted_and_complete():
    public = {
        name
        for name, value in vars(package).items()
        if isinstance(value, type) and not name.startswith("_")
    }
    assert package.__all__ == sorted(package.__all__)
    assert set(package.__all__) == public


def test_instances_satisfy_the_protocol(io):
    assert isinstance(io, CheckpointIO)


# --- CKPT-2 ----------------------------------------------------------------------------------


def test_missing_parent_directories_are_created(case, io, tmp_path, make_checkpoint):
    path = case.path(tmp_path / "a" / "b" / "c", "deep.ckpt")
    checkpoint = make_checkpoint()
    io.save_checkpoint(checkpoint, path)
    assert io.load_checkpoint(path).keys() == checkpoint.keys()
    if case.local:
        assert (tmp_path / "a" / "b" / "c").is_dir()


# --- CKPT-3 ----------------------------------------------------------------------------------


def test_a_save_leaves_only_the_checkpoint_file(case, io, tmp_path, make_checkpoint):
    if not case.local:
        pytest.skip("checks a local directory listing")
    path = case.path(tmp_path)
    for _ in range(3):
        io.save_checkpoint(make_checkpoint(), path)
    _settle(io)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]


def test_a_save_over_a_memory_url_leaves_no_temporary_file(tmp_path):
    import fsspec

    io = TorchCheckpointIO()
    path = "memory://trainspec-tests/tmpcheck/ckpt.pt"
    io.save_checkpoint({"a": torch.ones(2)}, path)
    io.save_checkpoint({"a": torch.zeros(2)}, path)
    names = [
        p.rsplit("/", 1)[-1]
        for p in fsspec.filesystem("memory").ls("/trainspec-tests/tmpcheck", detail=False)
    ]
    assert names == ["ckpt.pt"]
    assert torch.equal(io.load_checkpoint(path)["a"], torch.zeros(2))


def test_a_failed_save_keeps_the_previous_checkpoint(case, io, tmp_path, make_checkpoint, same):
    path = case.path(tmp_path)
    previous = make_checkpoint()
    io.save_checkpoint(previous, path)
    _settle(io)
    bad = {"lock": threading.Lock()} if case.full_values else {"text": "not a tensor"}
    with pytest.raises(TypeError):
        io.save_checkpoint(bad, path)
        _settle(io)
    same(io.load_checkpoint(path), previous, layout=case.keeps_layout)
    if case.local:
        assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_next_save_removes_stale_temporaries_and_keeps_live_ones(tmp_path, lock_holder):
    from trainspec.reference.checkpoint_io import _storage

    io = TorchCheckpointIO()
    path = tmp_path / "model.pt"
    io.save_checkpoint({"v": torch.ones(1)}, path)
    prefix = temp_prefix("model.pt")
    host = _storage._HOST
    dead = tmp_path / f"{prefix}{host}-{_dead_pid()}-0badc0de"
    live = tmp_path / f"{prefix}{host}-{os.getpid()}-0000beef"
    old_live = tmp_path / f"{prefix}{host}-{os.getpid()}-00000001"
    remote_young = tmp_path / f"{prefix}otherhost-1-00000002"
    remote_old = tmp_path / f"{prefix}otherhost-1-00000003"
    other_target = tmp_path / f"{temp_prefix('other.pt')}{host}-{_dead_pid()}-00000004"
    unrelated = tmp_path / "notes.txt"
    for f in (dead, live, old_live, remote_young, remote_old, other_target, unrelated):
        f.write_bytes(b"partial")
    long_ago = time.time() - STALE_TEMP_AGE_S - 60
    for f in (old_live, remote_old):
        os.utime(f, (long_ago, long_ago))
    lock_holder.hold(live)  # a live writer holds the lock on its temporary file

    io.save_checkpoint({"v": torch.zeros(1)}, path)

    left = set(os.listdir(tmp_path))
    assert dead.name not in left, "a dead writer's temporary file must be removed"
    assert old_live.name not in left and remote_old.name not in left, "old ones too"
    assert {live.name, remote_young.name, other_target.name, unrelated.name} <= left
    io.remove_checkpoint(path)
    assert live.name in os.listdir(tmp_path)


def test_concurrent_readers_see_whole_checkpoints(tmp_path):
    io = TorchCheckpointIO()
    path = tmp_path / "shared.pt"
    versions = [{"tag": tag, "w": torch.full((50_000,), float(i))} for i, tag in enumerate("AB")]
    io.save_checkpoint(versions[0], path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            io.save_checkpoint(versions[i % 2], path)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(60):
            loaded = io.load_checkpoint(path)
            want = versions[0] if loaded["tag"] == "A" else versions[1]
            if not torch.equal(loaded["w"], want["w"]):
                errors.append(AssertionError(f"torn read of {loaded['tag']}"))
    finally:
        stop.set()
        thread.join()
    assert not errors


# --- CKPT-4 ----------------------------------------------------------------------------------


def test_saving_does_not_modify_the_checkpoint(case, io, tmp_path, make_checkpoint, same):
    checkpoint = make_checkpoint()
    checkpoint["view"] = checkpoint["weight"][1]
    expected = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in checkpoint.items()}
    ptrs = {k: v.data_ptr() for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}
    strides = {k: v.stride() for k, v in checkpoint.items() if isinstance(v, torch.Tensor)}
    keys = list(checkpoint)
    io.save_checkpoint(checkpoint, case.path(tmp_path))
    _settle(io)
    assert list(checkpoint) == keys
    same(checkpoint, expected, layout=False)
    assert {k: v.data_ptr() for k, v in checkpoint.items() if isinstance(v, torch.Tensor)} == ptrs
    assert {k: v.stride() for k, v in checkpoint.items() if isinstance(v, torch.Tensor)} == strides


# --- CKPT-5 ----------------------------------------------------------------------------------


def test_unknown_storage_options_raise_type_error(case, io, tmp_path, make_checkpoint):
    path = case.path(tmp_path)
    with pytest.raises(TypeError, match="no_such_option"):
        io.save_checkpoint(make_checkpoint(), path, {"no_such_option": 1})
        _settle(io)
    io.save_checkpoint(make_checkpoint(), path, {})
    io.save_checkpoint(make_checkpoint(), path, None)
    _settle(io)


def test_fsspec_urls_accept_their_file_system_options():
    io = TorchCheckpointIO()
    path = "memory://trainspec-tests/opts/c.pt"
    io.save_checkpoint({"a": torch.ones(1)}, path, {"skip_instance_cache": False})
    with pytest.raises(TypeError, match=r"supported keys: .*skip_instance_cache"):
        io.save_checkpoint({"a": torch.ones(1)}, path, {"endpoint_url": "http://x"})


def test_local_paths_ignore_the_instances_fsspec_options(tmp_path):
    io = TorchCheckpointIO(storage_options={"anon": True})
    io.save_checkpoint({"a": torch.ones(1)}, tmp_path / "c.pt")
    assert torch.equal(io.load_checkpoint(tmp_path / "c.pt")["a"], torch.ones(1))


# --- CKPT-6 ----------------------------------------------------------------------------------


def test_a_directory_in_the_way_is_a_write_error(case, io, tmp_path, make_checkpoint):
    if not case.has_directories:
        pytest.skip("no directories in this store")
    path = case.path(tmp_path, "taken")
    if case.local:
        os.makedirs(path)
        (tmp_path / "taken" / "keep.txt").write_text("x")
    else:
        import fsspec

        fsspec.filesystem("memory").pipe_file(path + "/keep.txt", b"x")
    with pytest.raises(CheckpointWriteError, match="directory"):
        io.save_checkpoint(make_checkpoint(), path)
        _settle(io)
    if case.local:
        assert (tmp_path / "taken" / "keep.txt").read_text() == "x"
        assert os.listdir(tmp_path) == ["taken"]


def test_a_file_in_place_of_a_parent_is_a_write_error(case, io, tmp_path, make_checkpoint):
    if not case.local:
        pytest.skip("needs a local file system")
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file" / "c.pt", tmp_path / "file" / "sub" / "c.pt"):
        with pytest.raises(CheckpointWriteError):
            io.save_checkpoint(make_checkpoint(), path)
            _settle(io)
    assert (tmp_path / "file").read_text() == "x"


def test_a_full_memory_store_is_a_write_error_and_keeps_the_previous_entry(same):
    io = MemoryCheckpointIO(capacity_bytes=20_000)
    previous = {"small": torch.ones(10)}
    io.save_checkpoint(previous, "k")
    with pytest.raises(CheckpointWriteError) as info:
        io.save_checkpoint({"big": torch.ones(100_000)}, "k")
    assert isinstance(info.value, OSError)
    assert info.value.errno == 28
    same(io.load_checkpoint("k"), previous)


# --- CKPT-7 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "map_location",
    ["cpu", torch.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cpu"}, "meta", {"cpu": "meta"}],
    ids=str,
)
def test_map_location_places_tensors(case, io, tmp_path, make_checkpoint, map_location):
    path = case.path(tmp_path)
    io.save_checkpoint(make_checkpoint(), path)
    loaded = io.load_checkpoint(path, map_location=map_location)
    want = "meta" if "meta" in str(map_location) else "cpu"
    assert loaded["weight"].device.type == want
    if want == "cpu":
        assert torch.equal(loaded["weight"], make_checkpoint()["weight"])


def test_bad_map_locations_are_refused_before_reading(case, io, tmp_path, make_checkpoint):
    path = case.path(tmp_path)
    io.save_checkpoint(make_checkpoint(), path)
    with pytest.raises(ConfigurationError):
        io.load_checkpoint(path, map_location="no-such-device")
    with pytest.raises(TypeError):
        io.load_checkpoint(path, map_location=lambda storage, loc: storage)  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailableError):
            io.load_checkpoint(path, map_location="cuda:0")
        with pytest.raises(DeviceUnavailableError):
            io.load_checkpoint(path, map_location={"cpu": "cuda"})


# --- CKPT-8 ----------------------------------------------------------------------------------


class _RunsCode:
    def __reduce__(self) -> tuple[object, ...]:
        return (print, ("this ran while loading",))


def test_code_running_content_is_refused_by_default(case, io, tmp_path, capsys):
    path = case.path(tmp_path)
    case.plant(io, path, _torch_bytes({"payload": _RunsCode()}))
    expected = UnsafeCheckpointError if case.full_values else CheckpointCorruptedError
    with pytest.raises(expected) as info:
        io.load_checkpoint(path)
    assert path in str(info.value)
    assert "this ran" not in capsys.readouterr().out
    if expected is UnsafeCheckpointError:
        assert "weights_only=False" in str(info.value)


def test_opting_in_loads_trusted_pickles(tmp_path, capsys):
    path = tmp_path / "trusted.pt"
    path.write_bytes(_torch_bytes({"payload": _RunsCode()}))
    for io in (TorchCheckpointIO(weights_only=False), MemoryCheckpointIO(weights_only=False)):
        if isinstance(io, MemoryCheckpointIO):
            io.store["trusted"] = path.read_bytes()
            io.load_checkpoint("trusted")
        else:
            io.load_checkpoint(path)
    assert capsys.readouterr().out.count("this ran while loading") == 2


# --- CKPT-9 ----------------------------------------------------------------------------------


def test_a_missing_checkpoint_raises_not_found(case, io, tmp_path):
    path = case.path(tmp_path, "never-saved.pt")
    with pytest.raises(CheckpointNotFoundError) as info:
        io.load_checkpoint(path)
    assert isinstance(info.value, FileNotFoundError)
    assert path in str(info.value)


def test_a_path_under_a_file_is_not_found(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointNotFoundError):
        TorchCheckpointIO().load_checkpoint(tmp_path / "file" / "c.pt")


# --- CKPT-10 ---------------------------------------------------------------------------------


def _non_torch_zip() -> bytes:
    buffer = stdlib_io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a checkpoint")
    return buffer.getvalue()


def _damaged_variants(valid: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "truncated-half": valid[: len(valid) // 2],
        "truncated-tail": valid[:-10],
        "one-byte": valid[:1],
        "random": os.urandom(4096),
        "json": json.dumps({"weight": [1, 2, 3]}).encode(),
        "zip": _non_torch_zip(),
        "text": b"hello world\n" * 50,
    }


@pytest.mark.parametrize(
    "variant",
    ["empty", "truncated-half", "truncated-tail", "one-byte", "random", "json", "zip", "text"],
)
def test_damaged_files_raise_corrupted_naming_the_path(
    case, io, tmp_path, make_checkpoint, variant
):
    path = case.path(tmp_path)
    io.save_checkpoint(make_checkpoint(), path)
    _settle(io)
    valid = (
        (tmp_path / os.path.basename(path)).read_bytes()
        if case.local
        else _torch_bytes(make_checkpoint())
    )
    case.plant(io, path, _damaged_variants(valid)[variant])
    with pytest.raises(CheckpointCorruptedError) as info:
        io.load_checkpoint(path)
    assert path in str(info.value)
    assert info.value.__cause__ is not None


def test_another_checkpoint_format_is_corrupted(case, io, tmp_path):
    path = case.path(tmp_path)
    if case.full_values:
        import safetensors.torch

        other = safetensors.torch.save({"w": torch.ones(2)})
    else:
        other = _torch_bytes({"w": torch.ones(2)})
    case.plant(io, path, other)
    with pytest.raises(CheckpointCorruptedError):
        io.load_checkpoint(path)


def test_a_torch_file_that_is_not_a_dict_is_corrupted(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save(torch.ones(3), path)
    with pytest.raises(CheckpointCorruptedError, match="not a checkpoint dict"):
        TorchCheckpointIO().load_checkpoint(path)


def test_a_directory_is_not_a_checkpoint(case, io, tmp_path):
    if not case.local:
        pytest.skip("needs a local file system")
    os.makedirs(tmp_path / "dir.pt")
    with pytest.raises(CheckpointCorruptedError, match="directory"):
        io.load_checkpoint(tmp_path / "dir.pt")


# --- CKPT-11 ---------------------------------------------------------------------------------


def test_remove_is_idempotent_and_makes_loads_fail(case, io, tmp_path, make_checkpoint):
    path = case.path(tmp_path)
    io.save_checkpoint(make_checkpoint(), path)
    io.remove_checkpoint(path)
    io.remove_checkpoint(path)
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(path)
    io.remove_checkpoint(case.path(tmp_path, "never-existed.pt"))


def test_remove_refuses_to_delete_a_directory(tmp_path):
    os.makedirs(tmp_path / "dir.pt" / "inner")
    with pytest.raises(CheckpointWriteError, match="directory"):
        TorchCheckpointIO().remove_checkpoint(tmp_path / "dir.pt")
    assert (tmp_path / "dir.pt" / "inner").is_dir()


# --- CKPT-12 ---------------------------------------------------------------------------------


def test_teardown_is_idempotent_and_the_io_stays_usable(case, io, tmp_path, make_checkpoint):
    path = case.path(tmp_path)
    io.save_checkpoint(make_checkpoint(), path)
    io.teardown()
    io.teardown()
    io.save_checkpoint(make_checkpoint(), path)
    assert io.load_checkpoint(path).keys() == make_checkpoint().keys()


# --- optional dependencies -------------------------------------------------------------------


def test_a_missing_fsspec_is_a_configuration_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    io = TorchCheckpointIO()
    with pytest.raises(ConfigurationError, match=r"trainspec\[fsspec\]"):
        io.save_checkpoint({"a": torch.ones(1)}, "memory://x/c.pt")
    io.save_checkpoint({"a": torch.ones(1)}, tmp_path / "local.pt")  # local paths need no fsspec


def test_a_missing_safetensors_is_a_configuration_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ConfigurationError, match=r"trainspec\[safetensors\]"):
        SafetensorsCheckpointIO()


def test_an_unknown_url_protocol_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="no-such-proto"):
        TorchCheckpointIO().save_checkpoint({"a": torch.ones(1)}, "no-such-proto://bucket/c.pt")


def test_errors_are_trainspec_errors_with_the_cause_kept(tmp_path):
    with pytest.raises(trainspec.CheckpointError) as info:
        TorchCheckpointIO().load_checkpoint(tmp_path / "missing.pt")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert info.value.errno == 2
