"""Minimal reproducers of the launcher faults found by ``test_ranks_spawn.py`` and
``test_ranks_script.py``: the ``MultiprocessingLauncher`` alone, two ranks that import no
torch, a one-second grace period. Both faults are fixed; these keep them fixed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from trainspec import LaunchError
from trainspec.reference.launchers import MultiprocessingLauncher

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

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals")


def test_a_hung_rank_is_blamed_rather_than_the_peer_that_timed_out() -> None:
    launcher = MultiprocessingLauncher(2, "spawn", grace_period=1.0)
    with rs.importable(), pytest.raises(LaunchError) as caught:
        launcher.launch(rs.hung_peer_of_a_timed_out_rank)
    assert "CollectiveTimeoutError" in str(caught.value)  # rank 0's error is reported ...
    assert caught.value.rank == 1  # ... but the hung rank 1 is the one to blame


def test_the_children_of_a_rank_that_died_are_stopped(tmp_path: Path) -> None:
    launcher = MultiprocessingLauncher(2, "spawn", grace_period=1.0)
    with rs.importable(), pytest.raises(LaunchError) as caught:
        launcher.launch(rs.dying_rank_with_a_child, str(tmp_path))
    assert caught.value.rank == 1
    helper = psutil.Process(int((tmp_path / "helper.pid").read_text()))
    try:
        alive = helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        alive = False
    finally:
        try:
            helper.kill()
        except psutil.NoSuchProcess:
            pass
    assert not alive, f"rank 1's child {helper.pid} outlived the launch"
