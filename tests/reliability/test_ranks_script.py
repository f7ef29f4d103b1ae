"""Hung and dying ranks never hang a script-launched DDP run and never leave processes behind.

The same guarantees as ``test_ranks_spawn.py`` on the other reference launcher: a script
written into ``tmp_path`` runs ``Runner(DDPStrategy(start_method="subprocess",
timeout=5 s)).launch(fn)``; its process is rank 0 and ``SubprocessScriptLauncher`` starts rank
1 by re-running it. One ``subprocess.run`` per case: rank 1 hangs in ``all_reduce``
(ignoring SIGTERM), or segfaults before ``barrier``. The script's rank 0 reports what its
launch raised and which of its children are alive afterwards; this process then searches the
machine for anything carrying the case's marker (rank 1 re-runs the script with the marker
on its command line).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
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
    pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX signals"),
]

CASES = {
    "hang-rank1-all_reduce": rs.Case("hang", 1, "all_reduce", "subprocess"),
    "segv-rank1-barrier": rs.Case("segv", 1, "barrier", "subprocess"),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    results: dict[str, Any] = {}
    try:
        for name, case in CASES.items():
            results[name] = rs.run_script_case(case, tmp_path_factory.mktemp(name))
        yield results
    finally:
        for outcome in results.values():
            rs.kill_marked(outcome.marker)


@pytest.mark.parametrize("name", list(CASES))
def test_the_launch_raises_launch_error_naming_the_culprit(
    outcomes: dict[str, Any], name: str
) -> None:
    outcome = outcomes[name]
    assert outcome.error_type == "LaunchError", outcome.message
    assert outcome.error_rank == CASES[name].culprit, outcome.message
    assert f"rank {CASES[name].culprit}" in outcome.message.splitlines()[0]


def test_a_segfault_is_reported_by_its_signal_name(outcomes: dict[str, Any]) -> None:
    message = outcomes["segv-rank1-barrier"].message
    assert "SIGSEGV" in message and "exited with code" not in message, message


@pytest.mark.parametrize("name", list(CASES))
def test_rank_zero_in_the_launching_process_raises_instead_of_waiting(
    outcomes: dict[str, Any], name: str
) -> None:
    case = CASES[name]
    report = outcomes[name].reports[case.survivor]
    assert report["entered"] == case.operation
    assert report["error"] in case.expected_survivor_errors(), report


@pytest.mark.parametrize("name", list(CASES))
def test_the_launch_returns_within_the_bound_after_the_fault(
    outcomes: dict[str, Any], name: str
) -> None:
    after = outcomes[name].after_fault_s
    assert after is not None, "the culprit never recorded its fault"
    assert 0 <= after <= rs.time_bound(), after


@pytest.mark.parametrize("name", list(CASES))
def test_no_rank_process_is_left(outcomes: dict[str, Any], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.leftover_children == []
    assert outcome.leftover_ranks == []
    pids = {report["pid"] for report in outcome.reports.values()}
    assert len(pids) == 2


@pytest.mark.parametrize("name", list(CASES))
def test_the_processes_the_culprit_started_are_stopped(outcomes: dict[str, Any], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.helper_pid is not None
    assert outcome.leftover_helper == []
