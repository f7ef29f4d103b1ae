"""The conformance kit's ranks die with the process that drives them, even while one holds
the GIL.

CI runners end a job that runs too long with SIGTERM; a user presses Ctrl-C; an OOM killer
sends SIGKILL. A process driving a kit ``World`` (as ``trainspec verify --world-size`` does)
that dies of SIGTERM or SIGKILL runs no clean-up, so the ranks must notice by themselves. A
Python thread that polls the parent cannot run in a rank stuck in C code holding the GIL; the
kernel's parent-death signal (``PR_SET_PDEATHSIG``) needs no GIL. The multiprocessing
resource tracker the parent started must go too.

Each case is one real world (``rank_scenarios.run_kit_signal_case``): a script in its own
session starts ``World(2)`` and runs a check in which rank 1 matches a catastrophically
backtracking regular expression (C code that never releases the GIL) while rank 0 returns;
once rank 1 has announced the hang, the script gets the signal. Every process carries a
marker in its environment, and none may be left. Before the fix, SIGTERM and SIGKILL left
the hung rank and the resource tracker running.
"""

from __future__ import annotations

import importlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType


def _load_scenarios() -> ModuleType:
    saved = list(sys.path)
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        return importlib.import_module("rank_scenarios")
    finally:
        sys.path[:] = saved


rs = _load_scenarios()

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux"),
]


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=lambda s: s.name
)
def test_ranks_and_the_resource_tracker_die_with_the_driving_process(
    tmp_path: Path, signum: signal.Signals
) -> None:
    outcome = rs.run_kit_signal_case(signum, tmp_path)
    assert len(outcome.pids) == 2
    assert int((tmp_path / "hung").read_text()) == outcome.pids[1]
    # Not vacuous: the ranks and the tracker carried the marker while rank 1 hung.
    before = outcome.marked_before
    assert {p["pid"] for p in before} >= set(outcome.pids), before
    assert any("resource_tracker" in str(p["cmdline"]) for p in before), before
    if signum != signal.SIGINT:  # SIGINT is a KeyboardInterrupt: the script cleans up
        assert outcome.returncode == -signum
    else:
        assert outcome.returncode is not None
    assert outcome.leftover == []
