"""Who owns a temporary file: decided by an advisory lock, not by the pid in its name.

A writer in another PID namespace on the same host (a container sharing the checkpoint
directory and the host name) records a pid that means nothing here: it may name no process,
or an unrelated one. Deciding liveness by pid deleted live writers' temporary files and broke
their saves. A writer now holds ``flock`` on its temporary file until the rename; a cleaner
deletes only a file whose lock it can take. "Another namespace" is simulated by a temporary
file whose recorded pid is dead (or alive but unrelated) while another process holds its lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from trainspec.reference.checkpoint_io import TorchCheckpointIO, _storage
from trainspec.reference.checkpoint_io._storage import (
    STALE_TEMP_AGE_S,
    clean_stale_temps,
    temp_prefix,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

STATE = {"w": torch.ones(10)}
DONE_S = 60.0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _temp(tmp_path, pid: int, token: str, host: str | None = None):
    path = tmp_path / f"{temp_prefix('ckpt.pt')}{host or _storage._HOST}-{pid}-{token}"
    path.write_bytes(b"partial")
    return path


def test_a_locked_temp_file_is_kept_though_its_recorded_pid_is_dead(tmp_path, lock_holder):
    temp = _temp(tmp_path, _dead_pid(), "0000abcd")
    lock_holder.hold(temp)
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == []
    TorchCheckpointIO().save_checkpoint(STATE, tmp_path / "ckpt.pt")
    TorchCheckpointIO().remove_checkpoint(tmp_path / "ckpt.pt")
    assert temp.exists(), "a live writer's temporary file must never be deleted"


def test_a_locked_temp_file_is_kept_whatever_its_age(tmp_path, lock_holder):
    temp = _temp(tmp_path, _dead_pid(), "0000abce")
    long_ago = time.time() - STALE_TEMP_AGE_S - 60
    os.utime(temp, (long_ago, long_ago))
    lock_holder.hold(temp)
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == []
    assert temp.exists()


def test_an_unlocked_temp_file_of_this_host_is_stale_though_its_pid_is_alive(tmp_path):
    # The pid of a writer that died in another namespace may name a live process here.
    temp = _temp(tmp_path, os.getpid(), "0000abcf")
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == [str(temp)]


def test_an_unlocked_temp_file_of_another_host_is_kept_until_it_is_old(tmp_path):
    young = _temp(tmp_path, 1, "00000001", host="otherhost")
    old = _temp(tmp_path, 1, "00000002", host="otherhost")
    long_ago = time.time() - STALE_TEMP_AGE_S - 60
    os.utime(old, (long_ago, long_ago))
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == [str(old)]
    assert young.exists()


def test_something_that_is_not_a_regular_file_is_never_deleted(tmp_path):
    fifo = tmp_path / f"{temp_prefix('ckpt.pt')}{_storage._HOST}-{_dead_pid()}-00000003"
    os.mkfifo(fifo)
    long_ago = time.time() - STALE_TEMP_AGE_S - 60
    os.utime(fifo, (long_ago, long_ago))
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == []
    assert fifo.exists()


def test_without_locks_the_pid_and_age_decide(tmp_path, monkeypatch):
    monkeypatch.setattr(_storage, "_lock", lambda fd, *, wait: None)
    dead = _temp(tmp_path, _dead_pid(), "00000004")
    live = _temp(tmp_path, os.getpid(), "00000005")
    assert clean_stale_temps(str(tmp_path), "ckpt.pt") == [str(dead)]
    assert live.exists()


@pytest.mark.parametrize("locks", ["flock", "nfs-like"])
def test_a_paused_save_is_not_broken_by_a_concurrent_save(tmp_path, monkeypatch, locks):
    """Two saves of one path in one process; the first is paused mid-write with a temporary
    file whose name records a pid that is dead here (as one from another namespace would).
    The second save's cleaner must leave it alone -- also where, as on NFS, flock is emulated
    with POSIX locks that never conflict within one process ("nfs-like": every lock is
    granted)."""
    if locks == "nfs-like":
        monkeypatch.setattr(_storage, "_lock", lambda fd, *, wait: True)
    dead = _dead_pid()
    monkeypatch.setattr(
        _storage,
        "_temp_name",
        lambda name: f"{temp_prefix(name)}{_storage._HOST}-{dead}-{os.urandom(4).hex()}",
    )
    path = tmp_path / "ckpt.pt"
    inside, release = threading.Event(), threading.Event()

    class Paused:
        def __reduce__(self):
            inside.set()
            assert release.wait(DONE_S), "the test never released the paused save"
            return (int, (1,))

    box: dict[str, BaseException | None] = {}

    def first() -> None:
        try:
            TorchCheckpointIO().save_checkpoint({"tag": "first", "x": Paused()}, path)
            box["error"] = None
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=first, daemon=True)
    thread.start()
    assert inside.wait(DONE_S)
    (paused,) = [n for n in os.listdir(tmp_path) if n.startswith(temp_prefix("ckpt.pt"))]
    TorchCheckpointIO().save_checkpoint({"tag": "second"}, path)
    assert paused in os.listdir(tmp_path), "the paused writer's temporary file was deleted"
    release.set()
    thread.join(DONE_S)
    assert box.get("error", "unfinished") is None, box
    assert TorchCheckpointIO(weights_only=False).load_checkpoint(path)["tag"] == "first"
    assert os.listdir(tmp_path) == ["ckpt.pt"]


def test_a_writer_whose_new_file_a_cleaner_took_starts_again(tmp_path, monkeypatch):
    """The instant between creating a temporary file and locking it: a cleaner that got the
    lock first deletes the file; the writer finds its name gone and uses a new one."""
    lock = _storage._lock
    taken: list[str] = []

    def cleaner_first(fd: int, *, wait: bool):
        if wait and not taken:
            name = os.readlink(f"/proc/self/fd/{fd}")
            os.unlink(name)
            taken.append(name)
        return lock(fd, wait=wait)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    monkeypatch.setattr(_storage, "_lock", cleaner_first)
    path = tmp_path / "ckpt.pt"
    TorchCheckpointIO().save_checkpoint(STATE, path)
    assert len(taken) == 1
    assert os.listdir(tmp_path) == ["ckpt.pt"]
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path)["w"], STATE["w"])
