"""A script that launches three ranks and makes one of them fail in a chosen way.

Run as ``python launch_cases.py LAUNCHER CASE WORKDIR`` (LAUNCHER: ``script`` or ``spawn``).
The launching process prints one line ``RESULT <json>`` describing what ``launch`` returned or
raised and which of its child processes are still alive afterwards. Imports no torch, so the
ranks start fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from trainspec import CollectiveTimeoutError, LaunchError, PeerFailureError
from trainspec.reference.launchers import MultiprocessingLauncher, SubprocessScriptLauncher
from trainspec.reference.launchers.subprocess_script import CHILD_RANK_VARIABLE

WORLD = 3
GRACE = 2.0


def _wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _start_helper(root: Path, name: str) -> None:
    """A process of this rank's own (in its process group), its pid in ``root / name``."""
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (root / name).write_text(str(helper.pid))


def work(case: str, workdir: str) -> dict[str, str]:
    rank = int(os.environ["RANK"])
    root = Path(workdir)
    seen = {
        name: os.environ[name]
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    (root / f"rank-{rank}.json").write_text(json.dumps(seen))
    if case == "ok":
        if rank > 0:
            # Left behind by a rank that succeeds: must not outlive the launch either.
            _start_helper(root, f"helper-of-rank-{rank}.pid")
        return seen
    if rank == 2:
        # A long-running rank with a process of its own: both must be stopped.
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        (root / "grandchild.pid").write_text(str(helper.pid))
        time.sleep(120)
        (root / "rank-2-finished").write_text("the launcher let rank 2 run to the end")
        return seen
    if rank == 1:
        _wait_for(root / "grandchild.pid")
        if case in ("exit", "segv"):
            # A rank that dies on its own: what it started must be stopped all the same.
            _start_helper(root, "helper-of-rank-1.pid")
        if case in ("raise", "blame"):
            time.sleep(0.5 if case == "blame" else 0)
            raise ValueError("boom from rank 1")
        if case == "exit":
            os._exit(7)
        if case == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        return seen
    # rank 0
    if case == "rank0":
        _wait_for(root / "grandchild.pid")
        raise RuntimeError("boom from rank 0")
    if case == "blame":
        raise PeerFailureError("simulated: a peer closed its connection")
    if case == "hang":
        # Rank 2 never arrives (it sleeps): rank 0's collective times out, rank 1 finishes.
        _wait_for(root / "grandchild.pid")
        raise CollectiveTimeoutError("simulated: all_reduce did not complete within 1 s")
    return seen


def main() -> None:
    kind, case, workdir = sys.argv[1:4]
    launcher: SubprocessScriptLauncher | MultiprocessingLauncher
    if kind == "script":
        launcher = SubprocessScriptLauncher(WORLD, grace_period=GRACE)
    else:
        launcher = MultiprocessingLauncher(WORLD, kind, grace_period=GRACE)  # type: ignore[arg-type]
    outcome: dict[str, object]
    try:
        outcome = {"result": launcher.launch(work, case, workdir)}
    except LaunchError as error:
        outcome = {"error": "LaunchError", "rank": error.rank, "message": str(error)}
    if CHILD_RANK_VARIABLE in os.environ:
        return  # a started rank: only the launching process reports
    alive = [
        child.pid
        for child in psutil.Process().children(recursive=True)
        if child.status() != psutil.STATUS_ZOMBIE
        and "resource_tracker" not in " ".join(child.cmdline())
    ]
    outcome["alive_children"] = alive
    outcome["rank_variable_left"] = "RANK" in os.environ
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
