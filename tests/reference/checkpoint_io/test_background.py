"""ACKPT-1 ... ACKPT-5 for BackgroundCheckpointIO, with an inner IO whose writes wait on a gate.

"Still blocked" is checked by joining a thread with a short timeout and finding it alive: a
correct implementation is blocked whatever the timing, so these checks cannot flake on a
slow machine (a wrong one might slip through on a very slow one, never the reverse).
"""

from __future__ import annotations

import os
import threading

import pytest
import torch

from trainspec import CheckpointNotFoundError, CheckpointWriteError
from trainspec.reference.checkpoint_io import (
    BackgroundCheckpointIO,
    MemoryCheckpointIO,
    TorchCheckpointIO,
)

BLOCKED_S = 0.2
DONE_S = 30.0


class GatedIO(MemoryCheckpointIO):
    """A memory IO whose saves wait until ``gate`` is set; ``fail`` makes saves raise."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Semaphore(0)
        self.fail: BaseException | None = None
        self.saved_paths: list[str] = []
        self.teardowns = 0

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.started.release()
        assert self.gate.wait(DONE_S), "test gate never opened"
        if self.fail is not None:
            raise self.fail
        super().save_checkpoint(checkpoint, path, storage_options)
        self.saved_paths.append(str(path))

    def teardown(self) -> None:
        self.teardowns += 1


@pytest.fixture
def gated() -> GatedIO:
    return GatedIO()


@pytest.fixture
def bg(gated):
    io = BackgroundCheckpointIO(gated)
    yield io
    gated.gate.set()
    gated.fail = None
    try:
        io.teardown()
    except Exception:
        pass


def _in_thread(fn, *args):
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trainspec-checkpoint-writer"]


# --- ACKPT-1 ---------------------------------------------------------------------------------


def test_save_returns_before_the_write_and_snapshots_at_call_time(bg, gated):
    weight = torch.zeros(4)
    view = weight[1:3]
    checkpoint = {"weight": weight, "view": view, "meta": {"step": 1, "tags": ["a"]}}
    gated.gate.clear()
    bg.save_checkpoint(checkpoint, "k")
    assert gated.started.acquire(timeout=DONE_S), "the worker must start the write"
    assert "k" not in gated.store, "save must return before the write completes"
    weight.add_(5)
    checkpoint["meta"]["step"] = 2
    checkpoint["meta"]["tags"].append("b")
    checkpoint["extra"] = torch.ones(1)
    gated.gate.set()
    bg.wait()
    loaded = bg.load_checkpoint("k")
    assert torch.equal(loaded["weight"], torch.zeros(4))
    assert loaded["meta"] == {"step": 1, "tags": ["a"]}
    assert "extra" not in loaded
    assert (
        loaded["view"].untyped_storage().data_ptr() == loaded["weight"].untyped_storage().data_ptr()
    )


def test_snapshot_keeps_parameters_and_repeated_tensors(tmp_path):
    io = BackgroundCheckpointIO()
    shared = torch.arange(6.0)
    checkpoint = {
        "p": torch.nn.Parameter(torch.ones(2)),
        "a": shared,
        "b": shared,
        "t": shared.view(2, 3).t(),
    }
    io.save_checkpoint(checkpoint, tmp_path / "c.pt")
    loaded = io.load_checkpoint(tmp_path / "c.pt")
    io.teardown()
    assert isinstance(loaded["p"], torch.nn.Parameter)
    assert loaded["t"].stride() == (1, 3)
    ptrs = {loaded[k].untyped_storage().data_ptr() for k in ("a", "b", "t")}
    assert len(ptrs) == 1


# --- ACKPT-2 / ACKPT-5 -----------------------------------------------------------------------


@pytest.mark.parametrize("surface", ["save", "load", "remove", "wait", "teardown"])
def test_a_background_error_surfaces_once_on_the_next_call(bg, gated, surface):
    # max_pending=1: a second save waits for the failing one, so every call below sees it.
    gated.fail = CheckpointWriteError("disk full (simulated)")
    bg.save_checkpoint({"a": torch.ones(1)}, "k")
    calls = {
        "save": lambda: bg.save_checkpoint({"a": torch.ones(1)}, "other"),
        "load": lambda: bg.load_checkpoint("k"),
        "remove": lambda: bg.remove_checkpoint("k"),
        "wait": bg.wait,
        "teardown": bg.teardown,
    }
    with pytest.raises(CheckpointWriteError, match="simulated"):
        calls[surface]()
    gated.fail = None
    bg.wait()  # reported already: must not raise again
    bg.teardown()
    assert gated.saved_paths == []


def test_the_call_that_raises_does_not_do_its_own_work(bg, gated):
    gated.fail = CheckpointWriteError("simulated")
    bg.save_checkpoint({"a": torch.ones(1)}, "first")
    with pytest.raises(CheckpointWriteError):
        bg.save_checkpoint({"b": torch.ones(1)}, "second")
    gated.fail = None
    bg.wait()
    assert gated.saved_paths == []
    bg.save_checkpoint({"b": torch.ones(1)}, "second")
    bg.wait()
    assert gated.saved_paths == ["second"]


def test_later_errors_are_summarised_on_the_first(tmp_path):
    gated = GatedIO()
    io = BackgroundCheckpointIO(gated, max_pending=3)
    gated.gate.clear()
    gated.fail = CheckpointWriteError("simulated")
    for name in ("a", "b", "c"):
        io.save_checkpoint({"x": torch.ones(1)}, name)
    gated.gate.set()
    with pytest.raises(CheckpointWriteError) as info:
        io.wait()
    assert "2 later background save(s) also failed" in "".join(getattr(info.value, "__notes__", []))
    io.wait()
    io.teardown()


def test_argument_errors_raise_at_the_call(bg):
    with pytest.raises(TypeError):
        bg.save_checkpoint([1, 2], "k")  # type: ignore[arg-type]
    bg.wait()


# --- ACKPT-3 ---------------------------------------------------------------------------------


def test_load_of_a_path_with_a_pending_save_waits_for_it(bg, gated):
    bg.save_checkpoint({"v": torch.tensor(1)}, "k")
    bg.wait()
    gated.gate.clear()
    bg.save_checkpoint({"v": torch.tensor(2)}, "k")
    thread, box = _in_thread(bg.load_checkpoint, "k")
    thread.join(BLOCKED_S)
    assert thread.is_alive(), "load must wait for the pending save of its path"
    gated.gate.set()
    thread.join(DONE_S)
    assert box["result"]["v"].item() == 2


def test_load_of_another_path_does_not_wait(bg, gated):
    bg.save_checkpoint({"v": torch.tensor(1)}, "ready")
    bg.wait()
    gated.gate.clear()
    bg.save_checkpoint({"v": torch.tensor(2)}, "pending")
    thread, box = _in_thread(bg.load_checkpoint, "ready")
    thread.join(DONE_S)
    assert not thread.is_alive()
    assert box["result"]["v"].item() == 1
    gated.gate.set()


def test_remove_of_a_path_with_a_pending_save_waits_then_removes(bg, gated):
    gated.gate.clear()
    bg.save_checkpoint({"v": torch.tensor(1)}, "k")
    thread, box = _in_thread(bg.remove_checkpoint, "k")
    thread.join(BLOCKED_S)
    assert thread.is_alive(), "remove must wait for the pending save of its path"
    gated.gate.set()
    thread.join(DONE_S)
    assert "error" not in box
    with pytest.raises(CheckpointNotFoundError):
        bg.load_checkpoint("k")


def test_relative_and_absolute_spellings_of_a_path_are_one_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    io = BackgroundCheckpointIO()
    io.save_checkpoint({"v": torch.tensor(3)}, "c.pt")
    assert io.load_checkpoint(tmp_path / "c.pt")["v"].item() == 3
    io.teardown()


class GatedFileIO(TorchCheckpointIO):
    """A file IO whose saves wait until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.started.release()
        assert self.gate.wait(DONE_S), "test gate never opened"
        super().save_checkpoint(checkpoint, path, storage_options)


@pytest.mark.parametrize("spelling", ["c.pt", "sub/../c.pt", "file://c.pt"])
def test_a_relative_path_is_resolved_when_save_is_called(tmp_path, monkeypatch, spelling):
    """ACKPT-1: a chdir between save_checkpoint and the background write changes nothing."""
    first, second = tmp_path / "first", tmp_path / "second"
    for directory in (first, second, first / "sub", second / "sub"):
        directory.mkdir(exist_ok=True)
    monkeypatch.chdir(first)
    inner = GatedFileIO()
    inner.gate.clear()
    io = BackgroundCheckpointIO(inner)
    io.save_checkpoint({"v": torch.tensor(5)}, spelling)
    assert inner.started.acquire(timeout=DONE_S)
    monkeypatch.chdir(second)
    inner.gate.set()
    io.wait()
    assert os.listdir(second) == ["sub"], "the save followed the chdir"
    assert TorchCheckpointIO().load_checkpoint(first / "c.pt")["v"].item() == 5
    monkeypatch.chdir(first)
    assert io.load_checkpoint(spelling)["v"].item() == 5
    io.remove_checkpoint(spelling)
    assert not (first / "c.pt").exists()
    io.teardown()


def test_memory_keys_are_not_turned_into_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inner = MemoryCheckpointIO()
    io = BackgroundCheckpointIO(inner)
    io.save_checkpoint({"v": torch.tensor(1)}, "store/k")
    io.wait()
    assert list(inner.store) == ["store/k"]
    io.teardown()


def _returns(fn) -> bool:
    """Whether ``fn()`` returns (within DONE_S: only a hang guard, never a timing check)."""
    thread, box = _in_thread(fn)
    thread.join(DONE_S)
    return not thread.is_alive() and "error" not in box


@pytest.mark.parametrize("where", ["before-count", "after-count", "snapshot", "after-queue"])
def test_a_keyboard_interrupt_inside_save_leaves_consistent_counts(tmp_path, monkeypatch, where):
    """Ctrl-C lands anywhere in save_checkpoint: the save is either queued and written or
    never happened; wait() and teardown() (and so the exit hook) must not hang on a count
    that nobody will ever take back."""
    from trainspec.reference.checkpoint_io import background

    io = BackgroundCheckpointIO()
    points = {
        "before-count": (BackgroundCheckpointIO, "_count_locked", True),
        "after-count": (BackgroundCheckpointIO, "_count_locked", False),
        "snapshot": (background, "snapshot", True),
        "after-queue": (BackgroundCheckpointIO, "_ensure_worker_locked", True),
    }
    owner, name, before = points[where]
    real = getattr(owner, name)
    fired = []

    def interrupting(*args, **kwargs):
        if not fired:
            fired.append(True)
            if before:
                raise KeyboardInterrupt
            real(*args, **kwargs)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupting)
    path = tmp_path / "c.pt"
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"v": torch.tensor(1)}, path)
    assert _returns(io.wait), "wait() hangs on a leaked pending count"
    assert _returns(io.teardown)
    assert path.exists() == (where == "after-queue")
    io.save_checkpoint({"v": torch.tensor(2)}, path)
    assert io.load_checkpoint(path)["v"].item() == 2
    io.teardown()


# --- ACKPT-4 and CKPT-12 ---------------------------------------------------------------------


def test_teardown_waits_for_every_pending_save_and_stops_the_worker(gated):
    io = BackgroundCheckpointIO(gated, max_pending=3)
    gated.gate.clear()
    for name in ("a", "b", "c"):
        io.save_checkpoint({"x": torch.ones(1)}, name)
    thread, box = _in_thread(io.teardown)
    thread.join(BLOCKED_S)
    assert thread.is_alive(), "teardown must wait for pending saves"
    gated.gate.set()
    thread.join(DONE_S)
    assert "error" not in box
    assert gated.saved_paths == ["a", "b", "c"]
    assert gated.teardowns == 1
    assert not any(t.is_alive() for t in _writer_threads() if t is not threading.current_thread())
    io.teardown()
    assert gated.teardowns == 2


def test_the_io_is_usable_after_teardown(bg, gated):
    bg.save_checkpoint({"v": torch.tensor(1)}, "k")
    bg.teardown()
    bg.save_checkpoint({"v": torch.tensor(2)}, "k")
    assert bg.load_checkpoint("k")["v"].item() == 2


# --- ordering, back-pressure, threads --------------------------------------------------------


def test_saves_are_written_in_call_order(bg, gated):
    for i in range(10):
        bg.save_checkpoint({"v": torch.tensor(i)}, "k")
    assert bg.load_checkpoint("k")["v"].item() == 9


def test_max_pending_bounds_the_snapshots_in_flight(gated):
    io = BackgroundCheckpointIO(gated, max_pending=2)
    gated.gate.clear()
    io.save_checkpoint({"v": torch.tensor(1)}, "a")
    io.save_checkpoint({"v": torch.tensor(2)}, "b")
    thread, _ = _in_thread(io.save_checkpoint, {"v": torch.tensor(3)}, "c")
    thread.join(BLOCKED_S)
    assert thread.is_alive(), "a third save must wait while two are pending"
    gated.gate.set()
    thread.join(DONE_S)
    io.teardown()
    assert gated.saved_paths == ["a", "b", "c"]


def test_max_pending_must_be_positive():
    with pytest.raises(ValueError, match="max_pending"):
        BackgroundCheckpointIO(max_pending=0)


def test_several_threads_may_save_at_once(tmp_path):
    io = BackgroundCheckpointIO(max_pending=2)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(5):
                io.save_checkpoint({"n": n, "i": torch.tensor(i)}, tmp_path / f"{n}.pt")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DONE_S)
    io.teardown()
    assert not errors
    for n in range(4):
        loaded = io.load_checkpoint(tmp_path / f"{n}.pt")
        assert loaded["n"] == n and loaded["i"].item() == 4


# --- buffer reuse ----------------------------------------------------------------------------


class RecordingIO(MemoryCheckpointIO):
    """Records where the tensors it was asked to save live."""

    def __init__(self) -> None:
        super().__init__()
        self.pointers: list[int] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.pointers.append(checkpoint["w"].untyped_storage().data_ptr())
        super().save_checkpoint(checkpoint, path, storage_options)


def test_written_snapshots_lend_their_memory_to_the_next_one():
    inner = RecordingIO()
    io = BackgroundCheckpointIO(inner, reuse_buffers=True)
    for i in range(3):
        io.save_checkpoint({"w": torch.full((1000,), float(i))}, f"k{i}")
    io.teardown()
    assert inner.pointers[0] == inner.pointers[1] == inner.pointers[2], "buffers were not reused"
    for i in range(3):
        assert torch.equal(io.load_checkpoint(f"k{i}")["w"], torch.full((1000,), float(i)))


def test_reused_buffers_never_overwrite_a_pending_snapshot(gated):
    io = BackgroundCheckpointIO(gated, max_pending=2, reuse_buffers=True)
    gated.gate.clear()
    io.save_checkpoint({"w": torch.full((500,), 1.0)}, "a")
    io.save_checkpoint({"w": torch.full((500,), 2.0)}, "b")
    gated.gate.set()
    io.save_checkpoint({"w": torch.full((500,), 3.0)}, "c")
    io.save_checkpoint({"w": torch.full((500,), 4.0), "v": torch.ones(3)}, "d")
    io.teardown()
    for key, value in zip("abcd", (1.0, 2.0, 3.0, 4.0), strict=True):
        assert torch.equal(io.load_checkpoint(key)["w"], torch.full((500,), value)), key


class KeepingIO(MemoryCheckpointIO):
    """An inner IO that keeps the checkpoints it was given (allowed by the protocol)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[dict] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.kept.append(checkpoint)


@pytest.mark.parametrize("reuse", [None, True])
def test_reuse_is_off_by_default_for_inner_ios_that_may_keep_references(reuse):
    inner = KeepingIO()
    io = BackgroundCheckpointIO(inner, reuse_buffers=reuse)
    for i in range(3):
        io.save_checkpoint({"w": torch.full((100,), float(i))}, f"k{i}")
    io.teardown()
    intact = [
        torch.equal(kept["w"], torch.full((100,), float(i))) for i, kept in enumerate(inner.kept)
    ]
    # Default (None): off for foreign inner IOs, so what they keep stays intact. Forcing it on
    # with such an IO overwrites what it kept -- which is why it is not the default.
    assert all(intact) is (reuse is None)


def test_snapshots_store_what_a_synchronous_save_stores(tmp_path):
    from trainspec.reference.checkpoint_io import TorchCheckpointIO

    leaf = torch.ones(3, requires_grad=True)
    complex_values = torch.tensor([1 + 2j, 3 - 1j])
    checkpoint = {
        "conj": complex_values.conj(),
        "neg": torch.tensor([1 + 2j]).conj().imag,
        "non_leaf": leaf * 2,
        "int": torch.arange(3),
    }
    sync, background = TorchCheckpointIO(), BackgroundCheckpointIO()
    sync.save_checkpoint(checkpoint, tmp_path / "sync.pt")
    background.save_checkpoint(checkpoint, tmp_path / "bg.pt")
    background.teardown()
    want, got = sync.load_checkpoint(tmp_path / "sync.pt"), sync.load_checkpoint(tmp_path / "bg.pt")
    for key in checkpoint:
        assert torch.equal(
            got[key].detach().resolve_conj().resolve_neg(),
            want[key].detach().resolve_conj().resolve_neg(),
        ), key
        assert got[key].requires_grad == want[key].requires_grad, key
