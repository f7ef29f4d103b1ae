"""Functions the launcher checks run on every launched rank.

They live in a module of their own so that any launcher can import them in a new process
(``spawn`` pickles functions by module and name), and they import nothing heavy (no torch):
starting a rank stays cheap. Each rank learns its rank from an environment variable the
launcher sets (the check's ``rank_variable`` option) and leaves marker files in a directory,
``<event>-<rank>-<pid>.json``, from which the launching process learns which processes ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["fail_on_last_rank", "read_markers", "report_and_return"]


def _rank(rank_variable: str) -> int:
    return int(os.environ.get(rank_variable, "0"))


def _mark(marker_dir: str, rank: int, event: str) -> None:
    path = Path(marker_dir) / f"{event}-{rank}-{os.getpid()}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"rank": rank, "pid": os.getpid()}))
    os.replace(temporary, path)  # readers never see a partial marker


def read_markers(marker_dir: str, event: str) -> list[tuple[int, int]]:
    """``(rank, pid)`` of every rank that left an ``event`` marker, sorted."""
    found = []
    for path in Path(marker_dir).glob(f"{event}-*.json"):
        data = json.loads(path.read_text())
        found.append((int(data["rank"]), int(data["pid"])))
    return sorted(found)


def report_and_return(
    marker_dir: str, rank_variable: str, payload: object, linger_s: float
) -> tuple[int, object]:
    """Mark the start, let ranks other than 0 linger ``linger_s`` seconds (so a launcher
    that returns with rank 0 alone is caught), mark the end and return ``(rank, payload)``."""
    rank = _rank(rank_variable)
    _mark(marker_dir, rank, "started")
    if rank != 0:
        time.sleep(linger_s)
    _mark(marker_dir, rank, "finished")
    return rank, payload


def fail_on_last_rank(
    marker_dir: str, rank_variable: str, world_size: int, linger_s: float, wait_s: float
) -> tuple[int, None]:
    """Rank ``world_size - 1`` raises ``RuntimeError`` once every rank has started (or after
    ``wait_s`` seconds); the others sleep ``linger_s`` seconds, mark the end and return."""
    rank = _rank(rank_variable)
    _mark(marker_dir, rank, "started")
    if rank == world_size - 1:
        deadline = time.monotonic() + wait_s
        while len(read_markers(marker_dir, "started")) < world_size:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError(f"conformance check: deliberate failure on rank {rank}")
    time.sleep(linger_s)
    _mark(marker_dir, rank, "finished")
    return rank, None
