"""Ctrl-C (and any BaseException that is not an Exception) during a save or load.

torch's zip writer calls back into Python for every write; a ``KeyboardInterrupt`` raised
there comes out of ``torch.save`` as a ``RuntimeError`` whose ``__context__`` is the
interrupt, which the error table used to turn into "a value torch.save cannot store"
(``TypeError``). An interruption must propagate as itself, the previous checkpoint intact and
no temporary file left. The random-signal version is ``scripts/soak_checkpoint_crash.py``
(``tests/reliability/test_checkpoint_crash.py``).
"""

from __future__ import annotations

import io as stdlib_io
import os
import threading
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec.reference.checkpoint_io import (
    MemoryCheckpointIO,
    SafetensorsCheckpointIO,
    TorchCheckpointIO,
    _storage,
)

if TYPE_CHECKING:
    from pathlib import Path

OLD = {"w": torch.zeros(1000)}
NEW = {"w": torch.ones(1000), "v": torch.arange(1000)}
INTERRUPTS = [KeyboardInterrupt, SystemExit, GeneratorExit]


class _Interrupting(stdlib_io.RawIOBase):
    """Passes writes (or reads) to ``raw`` until the ``after``-th, which raises ``error``."""

    def __init__(self, raw, error: type[BaseException], after: int) -> None:
        super().__init__()
        self._raw = raw
        self._error = error
        self._left = after

    def _tick(self) -> None:
        self._left -= 1
        if self._left < 0:
            raise self._error()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._raw.seekable()

    def write(self, data) -> int:
        self._tick()
        return self._raw.write(data)

    def read(self, size: int = -1) -> bytes:
        self._tick()
        return self._raw.read(size)

    def readinto(self, buffer) -> int:
        self._tick()
        return self._raw.readinto(buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        super().close()
        self._raw.close()


@pytest.fixture
def interrupt_writes(monkeypatch):
    """Make the temporary file raise ``error`` on its ``after``-th write."""

    def arm(error: type[BaseException], after: int) -> None:
        create = _storage._create_temp

        def interrupting(directory, name, replaced):
            temp = create(directory, name, replaced)
            temp.file = _Interrupting(temp.file, error, after)
            return temp

        monkeypatch.setattr(_storage, "_open_temp", interrupting)

    return arm


def _temps(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if ".tmp-" in n]


@pytest.mark.parametrize("error", INTERRUPTS)
@pytest.mark.parametrize("after", [0, 2, 5])
def test_an_interrupted_torch_save_raises_the_interrupt_itself(
    tmp_path, interrupt_writes, error, after
):
    path = tmp_path / "ckpt.pt"
    io = TorchCheckpointIO()
    io.save_checkpoint(OLD, path)
    interrupt_writes(error, after)
    with pytest.raises(BaseException) as info:
        io.save_checkpoint(NEW, path)
    assert type(info.value) is error, f"got {info.value!r} caused by {info.value.__context__!r}"
    assert _temps(tmp_path) == []
    assert torch.equal(io.load_checkpoint(path)["w"], OLD["w"])


def test_ctrl_c_inside_torchs_writer_callback_is_a_keyboard_interrupt(tmp_path, monkeypatch):
    # What a SIGINT during torch.save does: the interrupt is raised in a write torch's C++
    # writer called, and torch re-raises it as RuntimeError (__context__: the interrupt).
    path = tmp_path / "ckpt.pt"
    io = TorchCheckpointIO()
    io.save_checkpoint(OLD, path)
    writes = [0]
    real_write = _storage._TrackedWriter.write

    def write(self, data):
        writes[0] += 1
        if writes[0] == 3:
            raise KeyboardInterrupt
        return real_write(self, data)

    monkeypatch.setattr(_storage._TrackedWriter, "write", write)
    with pytest.raises(BaseException) as info:
        io.save_checkpoint(NEW, path)
    assert type(info.value) is KeyboardInterrupt, f"got {info.value!r}"
    assert _temps(tmp_path) == []
    monkeypatch.undo()
    assert torch.equal(io.load_checkpoint(path)["w"], OLD["w"])


@pytest.mark.parametrize("error", INTERRUPTS)
def test_an_interrupted_safetensors_save_raises_the_interrupt_itself(
    tmp_path, interrupt_writes, error
):
    path = tmp_path / "ckpt.safetensors"
    io = SafetensorsCheckpointIO()
    io.save_checkpoint(OLD, path)
    interrupt_writes(error, 0)
    with pytest.raises(error):
        io.save_checkpoint(NEW, path)
    assert _temps(tmp_path) == []
    assert torch.equal(io.load_checkpoint(path)["w"], OLD["w"])


def test_an_interrupt_wrapped_by_torch_is_not_a_type_error_in_memory_io(monkeypatch):
    io = MemoryCheckpointIO()
    io.save_checkpoint(OLD, "k")

    def wrapped(checkpoint, file):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None

    from trainspec.reference.checkpoint_io import memory

    monkeypatch.setattr(memory, "encode_torch", wrapped)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint(NEW, "k")
    assert torch.equal(io.load_checkpoint("k")["w"], OLD["w"])


@pytest.mark.parametrize("after", [0, 1, 3])
def test_an_interrupted_load_raises_the_interrupt_itself(tmp_path, monkeypatch, after):
    path = tmp_path / "ckpt.pt"
    io = TorchCheckpointIO()
    io.save_checkpoint(NEW, path)
    real_open = _storage._open_local
    monkeypatch.setattr(
        _storage,
        "_open_local",
        lambda name: _Interrupting(real_open(name), KeyboardInterrupt, after),
    )
    with pytest.raises(BaseException) as info:
        io.load_checkpoint(path)
    assert type(info.value) is KeyboardInterrupt, repr(info.value)


def test_a_real_encoding_error_is_still_a_type_error(tmp_path):
    import threading

    with pytest.raises(TypeError):
        TorchCheckpointIO().save_checkpoint({"lock": threading.Lock()}, tmp_path / "c.pt")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("step", ["os.open", "open", "fstat", "lock"])
def test_an_interrupt_while_the_temporary_file_is_created_leaves_nothing(
    tmp_path, monkeypatch, step
):
    """A signal that arrives during the open system call is handled as it returns: the new
    file exists but nothing refers to it yet. Nothing may be left behind."""
    import builtins

    path = tmp_path / "ckpt.pt"
    io = TorchCheckpointIO()
    io.save_checkpoint(OLD, path)
    fired: list[bool] = []

    def after(real):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            creating = step in ("fstat", "lock") or ".tmp-" in str(args[0])
            if creating and not fired:
                fired.append(True)
                if hasattr(result, "close"):
                    result.close()  # what collecting the orphaned file object does
                raise KeyboardInterrupt
            return result

        return call

    if step == "lock":
        monkeypatch.setattr(_storage, "_lock", after(_storage._lock))
    else:
        owner, name = {"os.open": (os, "open"), "open": (builtins, "open")}.get(step, (os, step))
        arm = after(getattr(owner, name))

        def armed_create(directory, name_, replaced):
            with monkeypatch.context() as patch:
                patch.setattr(owner, name, arm)
                return _storage._create_temp(directory, name_, replaced)

        monkeypatch.setattr(_storage, "_open_temp", armed_create)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint(NEW, path)
    assert fired
    assert _temps(tmp_path) == []
    assert torch.equal(io.load_checkpoint(path)["w"], OLD["w"])


def test_teardown_returns_when_an_interrupt_left_the_lock_held(tmp_path: Path) -> None:
    # CPython may raise KeyboardInterrupt right after a Python-level `with` took a lock and
    # before its body is protected: the thread keeps one level of the reentrant lock. teardown
    # then must still stop the worker instead of joining it forever (seen in the SIGINT soak).
    from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
    from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

    io = BackgroundCheckpointIO(TorchCheckpointIO())
    outcome: list[BaseException | None] = []

    def interrupted_caller() -> None:
        try:
            io.save_checkpoint({"w": torch.ones(4)}, tmp_path / "c.pt")
            io._lock.acquire()  # the level an interrupted `with` could leave behind
            io.teardown()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    caller = threading.Thread(target=interrupted_caller, daemon=True)
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "teardown hung joining the worker"
    assert outcome == [None]
    assert torch.equal(TorchCheckpointIO().load_checkpoint(tmp_path / "c.pt")["w"], torch.ones(4))


def _abandon_a_writer(finish: bool) -> None:
    """In a forked child: an interrupted torch.save into a file that is then closed; the
    traceback keeps torch's unfinished zip writer alive until it is freed."""
    import gc

    from trainspec.reference.checkpoint_io.torch_io import finish_abandoned_writers

    class Plain:  # a file-like with no finalizer, raising once its file is closed
        def __init__(self, raw):
            self.raw = raw

        def write(self, data):
            return self.raw.write(data)

        def flush(self):
            self.raw.flush()

    raw = stdlib_io.BytesIO()
    real_init = torch.serialization._opener.__init__

    def interrupted_init(self, file_like):
        real_init(self, file_like)
        raise KeyboardInterrupt  # what a Ctrl-C right after the writer was made does

    torch.serialization._opener.__init__ = interrupted_init  # type: ignore[method-assign]
    try:
        torch.save({"w": torch.ones(3)}, Plain(raw))
    except KeyboardInterrupt as exc:
        raw.close()
        if finish:
            finish_abandoned_writers(exc)
        del exc
    gc.collect()


@pytest.mark.parametrize("finish", [True, False])
def test_an_abandoned_torch_writer_is_finished_before_it_can_abort(finish: bool) -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _abandon_a_writer(finish)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if finish:
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    else:  # the hazard itself, so the test above can fail
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 6
