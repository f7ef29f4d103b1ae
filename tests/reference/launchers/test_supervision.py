"""How the launchers end a rank: an exited rank is held (a zombie) until what it left in its
process group is stopped, then reaped; errors are classified as secondary or not.

The processes here are ``sh`` and ``sleep``: no Python starts, so these run in milliseconds.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import TYPE_CHECKING

import psutil
import pytest

from trainspec import CollectiveTimeoutError, LaunchError, PeerFailureError
from trainspec.reference.launchers._supervision import (
    PopenRank,
    hung_rank_message,
    is_secondary,
    stop_ranks,
)

if TYPE_CHECKING:
    from pathlib import Path

posix = pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX process groups")


def _rank_leaving_a_process(tmp_path: Path, script: str) -> tuple[PopenRank, int]:
    """A rank (its own session) that starts ``sleep 60`` in its group, then runs ``script``;
    the rank and the sleep's pid."""
    pid_file = tmp_path / "left.pid"
    process = subprocess.Popen(
        ["sh", "-c", f'sleep 60 & echo $! > "{pid_file}"; {script}'],
        start_new_session=True,
    )
    rank = PopenRank(1, process)
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.01)
    return rank, int(pid_file.read_text())


def _wait_for_exit(rank: PopenRank) -> int:
    for _ in range(500):
        code = rank.exit_code()
        if code is not None:
            return code
        time.sleep(0.01)
    raise AssertionError("the rank did not exit")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@posix
def test_an_exited_rank_is_held_until_its_group_is_stopped_then_reaped(tmp_path: Path) -> None:
    rank, left = _rank_leaving_a_process(tmp_path, "exit 3")
    assert _wait_for_exit(rank) == 3
    # Not reaped: the rank is a zombie that keeps its pid (and so its group id) ...
    assert psutil.Process(rank.process.pid).status() == psutil.STATUS_ZOMBIE
    assert rank.process.returncode is None and not rank.released
    # ... and what it started is still running.
    assert not _gone(left)
    for _ in range(500):
        if rank.release(grace_period=5.0):
            break
        time.sleep(0.01)
    assert rank.released
    assert _gone(left), "the process the rank left in its group outlived it"
    assert rank.process.returncode == 3 and rank.exit_code() == 3
    assert not psutil.pid_exists(rank.process.pid) or _gone(rank.process.pid)


@posix
def test_stop_ranks_stops_the_group_of_a_rank_that_succeeded_and_of_a_running_one(
    tmp_path: Path,
) -> None:
    finished, left_by_finished = _rank_leaving_a_process(tmp_path, "exit 0")
    (tmp_path / "left.pid").unlink()
    running, left_by_running = _rank_leaving_a_process(tmp_path, "sleep 60")
    assert _wait_for_exit(finished) == 0
    assert running.exit_code() is None
    stop_ranks([finished, running], grace_period=5.0)
    assert finished.released and running.released
    assert running.exit_code() == -15  # SIGTERM was enough
    assert _gone(left_by_finished) and _gone(left_by_running)
    stop_ranks([finished, running], grace_period=5.0)  # again: nothing left to do


@posix
def test_stop_ranks_escalates_to_sigkill_for_a_rank_that_ignores_sigterm(tmp_path: Path) -> None:
    # A rank that ignores SIGTERM, and so does the sleep it starts (ignored signals stay
    # ignored across exec).
    ready = tmp_path / "ready"
    stubborn = subprocess.Popen(
        ["sh", "-c", f'trap "" TERM; sleep 60 & echo $! > "{ready}"; wait; exit 0'],
        start_new_session=True,
    )
    stubborn_rank = PopenRank(2, stubborn)
    for _ in range(500):
        if ready.exists() and ready.read_text().strip():
            break
        time.sleep(0.01)
    left = int(ready.read_text())
    started = time.monotonic()
    stop_ranks([stubborn_rank], grace_period=0.5)
    assert stubborn_rank.released and stubborn_rank.exit_code() == -9
    assert time.monotonic() - started >= 0.5
    assert _gone(left)


def test_collective_errors_are_secondary_and_others_are_not() -> None:
    assert is_secondary(CollectiveTimeoutError("timed out"))
    assert is_secondary(PeerFailureError("peer left"))
    assert not is_secondary(ValueError("boom"))
    assert not is_secondary(LaunchError("rank 1 failed", rank=1))


def test_the_hung_rank_message_names_it_first_and_keeps_the_secondary_error() -> None:
    message = hung_rank_message(
        [2, 3], 0, "Traceback ...\nCollectiveTimeoutError: x", 5.0, "File 'a.py' in f"
    )
    lines = message.splitlines()
    assert lines[0].startswith("rank 2 is presumed hung") and "rank 0" in lines[0]
    assert "rank(s) 3" in message
    assert "rank 2's threads when it was stopped:\nFile 'a.py' in f" in message
    assert message.endswith("rank 0 failed with:\nTraceback ...\nCollectiveTimeoutError: x")
    assert "threads" not in hung_rank_message([1], 0, "x", 1.0, "")


@posix
def test_what_an_exited_rank_left_gets_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    # The trap comes first, so the sleep the rank leaves behind ignores SIGTERM too.
    pid_file = tmp_path / "left.pid"
    process = subprocess.Popen(
        ["sh", "-c", f'trap "" TERM; sleep 60 & echo $! > "{pid_file}"; exit 0'],
        start_new_session=True,
    )
    rank = PopenRank(1, process)
    assert _wait_for_exit(rank) == 0
    left = int(pid_file.read_text())
    started = time.monotonic()
    assert not rank.release(grace_period=0.5)  # SIGTERM sent; the sleep ignores it
    assert not _gone(left)
    for _ in range(500):
        if rank.release(grace_period=0.5):
            break
        time.sleep(0.01)
    assert rank.released and time.monotonic() - started >= 0.5
    assert _gone(left)
