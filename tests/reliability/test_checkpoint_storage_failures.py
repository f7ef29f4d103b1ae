"""Storage that refuses: full disks, read-only file systems, size limits, no permission.

CKPT-6: a refused write raises CheckpointWriteError, the previous checkpoint stays loadable
and no temporary file is left. The last test drives every row of the error translation table
(``trainspec.reference.checkpoint_io._errors.RULES``) with a real trigger.

Tests run as root, where permission bits do not deny anything: a forked child drops to the
``nobody`` user instead. Full and read-only disks use a small tmpfs mount; where mounting is
not allowed those tests skip with the reason, and the file-size-limit test (RLIMIT_FSIZE in a
forked child) still covers "storage refused the write".
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

from trainspec import CheckpointError, CheckpointWriteError
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
)
from trainspec.reference.checkpoint_io._errors import RULES


def _load_helpers():
    name = "trainspec_tests_checkpoint_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("checkpoint_helpers.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _load_helpers()
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses fork, setuid and mounts")

SMALL = {"w": torch.arange(100, dtype=torch.float32)}
BIG = {"w": torch.ones(1_000_000)}  # 4 MB

IOS = {
    "torch": TorchCheckpointIO,
    "safetensors": SafetensorsCheckpointIO,
    "background": BackgroundCheckpointIO,
}


def _save_and_settle(io, checkpoint, path):
    io.save_checkpoint(checkpoint, path)
    if isinstance(io, BackgroundCheckpointIO):
        io.wait()


@pytest.fixture
def open_dir():
    """A directory owned by root with mode 0755 (its parents traversable by anyone)."""
    path = tempfile.mkdtemp(prefix="trainspec-perm-", dir="/tmp")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def small_tmpfs():
    try:
        with H.tmpfs("2m") as mount:
            yield Path(mount)
    except H.MountUnavailable as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}); RLIMIT_FSIZE test covers the path")


# --- full disk, read-only, size limit, no permission -----------------------------------------


@pytest.mark.parametrize("kind", list(IOS))
def test_a_full_disk_is_a_write_error_and_keeps_the_previous_checkpoint(small_tmpfs, kind):
    io = IOS[kind]()
    path = small_tmpfs / "model.ckpt"
    _save_and_settle(io, SMALL, path)
    with pytest.raises(CheckpointWriteError) as info:
        _save_and_settle(io, BIG, path)
    assert info.value.errno == errno.ENOSPC
    assert str(path) in str(info.value)
    assert torch.equal(io.load_checkpoint(path)["w"], SMALL["w"])
    assert os.listdir(small_tmpfs) == ["model.ckpt"], "the temporary file must be removed"
    io.teardown()


def test_a_read_only_file_system_refuses_saves_and_removes(small_tmpfs):
    io = TorchCheckpointIO()
    path = small_tmpfs / "model.pt"
    io.save_checkpoint(SMALL, path)
    H.remount_readonly(str(small_tmpfs))
    with pytest.raises(CheckpointWriteError) as info:
        io.save_checkpoint(BIG, path)
    assert info.value.errno == errno.EROFS
    with pytest.raises(CheckpointWriteError):
        io.remove_checkpoint(path)
    assert torch.equal(io.load_checkpoint(path)["w"], SMALL["w"])


def _memory_limited(fn, headroom_bytes):
    """Run ``fn`` with at most ``headroom_bytes`` more address space than the child has."""
    import resource

    def run():
        with open("/proc/self/status") as status:
            size = int(status.read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + headroom_bytes, resource.RLIM_INFINITY))
        return fn()

    return run


def _limited(fn, limit_bytes):
    import resource

    def run():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))
        return fn()

    return run


@pytest.mark.parametrize("kind", ["torch", "safetensors"])
def test_a_file_size_limit_is_a_write_error_and_keeps_the_previous_checkpoint(tmp_path, kind):
    io = IOS[kind]()
    path = tmp_path / "model.ckpt"
    io.save_checkpoint(SMALL, path)
    outcome = H.run_forked(_limited(lambda: io.save_checkpoint(BIG, path), 64 * 1024))
    assert outcome.error_type == "trainspec.errors.CheckpointWriteError", outcome
    assert outcome.error_errno == errno.EFBIG
    assert torch.equal(io.load_checkpoint(path)["w"], SMALL["w"])
    assert os.listdir(tmp_path) == ["model.ckpt"]


def test_no_permission_is_a_write_error_and_keeps_the_previous_checkpoint(open_dir):
    io = TorchCheckpointIO()
    path = open_dir / "model.pt"
    io.save_checkpoint(SMALL, path)
    os.chmod(path, 0o600)

    saved = H.run_forked(H.as_nobody(lambda: io.save_checkpoint(BIG, path)))
    assert saved.error_type == "trainspec.errors.CheckpointWriteError", saved
    assert saved.error_errno == errno.EACCES
    loaded = H.run_forked(H.as_nobody(lambda: io.load_checkpoint(path)))
    assert loaded.error_type == "trainspec.errors.CheckpointError", loaded
    assert loaded.cause_type == "builtins.PermissionError"
    removed = H.run_forked(H.as_nobody(lambda: io.remove_checkpoint(path)))
    assert removed.error_type == "trainspec.errors.CheckpointWriteError", removed

    assert torch.equal(io.load_checkpoint(path)["w"], SMALL["w"])
    assert os.listdir(open_dir) == ["model.pt"]


def test_a_background_write_error_surfaces_and_the_io_recovers(tmp_path):
    io = BackgroundCheckpointIO()
    (tmp_path / "file").write_text("in the way")
    io.save_checkpoint(SMALL, tmp_path / "file" / "model.pt")
    with pytest.raises(CheckpointWriteError):
        io.wait()
    io.save_checkpoint(SMALL, tmp_path / "model.pt")
    io.teardown()
    assert torch.equal(io.load_checkpoint(tmp_path / "model.pt")["w"], SMALL["w"])


# --- every row of the translation table, each with a real trigger ----------------------------


class _RunsCode:
    def __reduce__(self):
        return (print, ("ran",))


_COMPLEX = torch.tensor([1 + 2j])  # saving it with a float view of it: torch's RuntimeError
_MODULE_LAMBDA = lambda: None  # noqa: E731 -- pickled by reference, which fails: PicklingError


def _local_object() -> object:
    class Local:
        pass

    return Local()


def _expect_error(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{fn} raised nothing")


def _summary(exc: BaseException, stage: str, source: type) -> tuple[str, int | None, bool]:
    """(raised class, index of the rule the cause matches first, cause is a ``source``)."""
    cause = exc.__cause__
    index = next(
        (
            i
            for i, rule in enumerate(RULES)
            if rule.stage == stage and isinstance(cause, rule.source)
        ),
        None,
    )
    return type(exc).__name__, index, isinstance(cause, source)


def _in_process(make):
    def trigger(tmp: Path, open_dir: Path, stage: str, source: type):
        return _summary(_expect_error(make(tmp)), stage, source)

    return trigger


def _forked(make, wrap):
    """``make(tmp, open_dir)`` prepares files (as root) and returns what the child runs."""

    def trigger(tmp: Path, open_dir: Path, stage: str, source: type):
        fn = make(tmp, open_dir)
        outcome = H.run_forked(wrap(lambda: _summary(_expect_error(fn), stage, source)))
        assert outcome.error_type is None, outcome
        return outcome.value

    return trigger


def _file(tmp: Path) -> Path:
    (tmp / "file").write_text("x")
    return tmp / "file"


def _loop(tmp: Path) -> Path:
    os.symlink(tmp / "loop", tmp / "loop")
    return tmp / "loop"


def _dir(tmp: Path) -> Path:
    os.makedirs(tmp / "dir" / "inner")
    return tmp / "dir"


def _unsafe(tmp: Path) -> Path:
    torch.save({"x": _RunsCode()}, tmp / "unsafe.pt")
    return tmp / "unsafe.pt"


def _unresolved(tmp: Path) -> Path:
    # protocol 4: STACK_GLOBAL fed by a tuple, so the global cannot be named without running
    body = b"\x8c\x02os)\x93\x8c\x01x\x85R."
    (tmp / "unresolved.pt").write_bytes(b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body)
    return tmp / "unresolved.pt"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "fifo.pt")
    return tmp / "fifo.pt"


def _large(tmp: Path) -> Path:
    torch.save({"w": torch.ones(16 * 2**20)}, tmp / "large.pt")  # 64 MiB
    return tmp / "large.pt"


def _random(tmp: Path) -> Path:
    (tmp / "random.pt").write_bytes(os.urandom(2048))
    return tmp / "random.pt"


def _root_file(open_dir: Path) -> Path:
    """A root-owned 0600 file in a root-owned 0755 directory."""
    torch.save(SMALL, open_dir / "model.pt")
    os.chmod(open_dir / "model.pt", 0o600)
    return open_dir / "model.pt"


def _nobody_loads(tmp: Path, open_dir: Path):
    path = _root_file(open_dir)
    return lambda: T.load_checkpoint(path)


def _nobody_saves(tmp: Path, open_dir: Path):
    path = _root_file(open_dir)
    return lambda: T.save_checkpoint(SMALL, path)


def _nobody_removes(tmp: Path, open_dir: Path):
    path = _root_file(open_dir)
    return lambda: T.remove_checkpoint(path)


T = TorchCheckpointIO()
SCENARIOS = {
    "read:FileNotFoundError": _in_process(lambda t: lambda: T.load_checkpoint(t / "missing")),
    "read:NotADirectoryError": _in_process(lambda t: lambda: T.load_checkpoint(_file(t) / "c")),
    "read:IsADirectoryError": _in_process(lambda t: lambda: T.load_checkpoint(_dir(t))),
    "read:SpecialFileError": _in_process(lambda t: lambda: T.load_checkpoint(_fifo(t))),
    "read:PermissionError": _forked(_nobody_loads, H.as_nobody),
    "read:OSError": _in_process(lambda t: lambda: T.load_checkpoint(_loop(t))),
    "decode:UnresolvedContentError": _in_process(
        lambda t: lambda: T.load_checkpoint(_unresolved(t))
    ),
    "decode:UnsafeContentError": _in_process(lambda t: lambda: T.load_checkpoint(_unsafe(t))),
    "decode:MemoryError": _forked(
        lambda t, _: (lambda path: lambda: T.load_checkpoint(path))(_large(t)),
        lambda fn: _memory_limited(fn, 16 * 2**20),
    ),
    "decode:Exception": _in_process(lambda t: lambda: T.load_checkpoint(_random(t))),
    "encode:PicklingError": _in_process(
        lambda t: lambda: T.save_checkpoint({"f": _MODULE_LAMBDA}, t / "c.pt")
    ),
    "encode:TypeError": _in_process(
        lambda t: lambda: T.save_checkpoint({"lock": threading.Lock()}, t / "c.pt")
    ),
    "encode:AttributeError": _in_process(
        lambda t: lambda: T.save_checkpoint({"obj": _local_object()}, t / "c.pt")
    ),
    "encode:RuntimeError": _in_process(
        lambda t: lambda: T.save_checkpoint({"c": _COMPLEX, "re": _COMPLEX.real}, t / "c.pt")
    ),
    "write:IsADirectoryError": _in_process(lambda t: lambda: T.save_checkpoint(SMALL, _dir(t))),
    "write:SpecialFileError": _in_process(lambda t: lambda: T.save_checkpoint(SMALL, _fifo(t))),
    "write:NotADirectoryError": _in_process(
        lambda t: lambda: T.save_checkpoint(SMALL, _file(t) / "sub" / "c.pt")
    ),
    "write:FileExistsError": _in_process(
        lambda t: lambda: T.save_checkpoint(SMALL, _file(t) / "c.pt")
    ),
    "write:PermissionError": _forked(_nobody_saves, H.as_nobody),
    "write:FileNotFoundError": _in_process(
        lambda t: lambda: T.save_checkpoint(SMALL, "/proc/self/no-such-dir/c.pt")
    ),
    "write:OSError": _forked(
        lambda t, _: lambda: T.save_checkpoint(BIG, t / "c.pt"), lambda fn: _limited(fn, 4096)
    ),
    "remove:IsADirectoryError": _in_process(lambda t: lambda: T.remove_checkpoint(_dir(t))),
    "remove:SpecialFileError": _in_process(lambda t: lambda: T.remove_checkpoint(_fifo(t))),
    "remove:PermissionError": _forked(_nobody_removes, H.as_nobody),
    "remove:OSError": _in_process(lambda t: lambda: T.remove_checkpoint(_loop(t) / "c.pt")),
}
ROWS = {
    f"{rule.stage}:{source.__name__}": (index, rule, source)
    for index, rule in enumerate(RULES)
    for source in rule.source
}


def test_every_translation_row_has_a_scenario_and_no_scenario_is_stale():
    assert sorted(SCENARIOS) == sorted(ROWS)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_every_translation_row_is_exercised_by_a_real_error(tmp_path, open_dir, row):
    index, rule, source = ROWS[row]
    raised, matched, cause_ok = SCENARIOS[row](tmp_path, open_dir, rule.stage, source)
    assert cause_ok, f"{row}: the cause is not a {source.__name__}"
    assert matched == index, f"{row}: the cause matched rule {matched}, not {index}"
    assert raised == rule.target.__name__, f"{row}: raised {raised}"


@pytest.mark.parametrize("kind", ["torch", "safetensors"])
def test_a_load_that_runs_out_of_memory_is_a_checkpoint_error_not_corruption(tmp_path, kind):
    io = IOS[kind]()
    path = tmp_path / "large.ckpt"
    io.save_checkpoint({"w": torch.ones(16 * 2**20)}, path)  # 64 MiB

    def load():
        try:
            io.load_checkpoint(path)
        except CheckpointError as exc:
            return type(exc).__name__, type(exc.__cause__).__name__, str(path) in str(exc)
        return None

    outcome = H.run_forked(_memory_limited(load, 16 * 2**20))
    assert outcome.error_type is None, outcome  # no bare MemoryError
    assert outcome.value == ("CheckpointError", "MemoryError", True)


def test_read_errors_are_checkpoint_errors_but_not_corruption(tmp_path):
    error = _expect_error(lambda: T.load_checkpoint(_loop(tmp_path)))
    assert isinstance(error, CheckpointError)
    assert type(error) is CheckpointError
