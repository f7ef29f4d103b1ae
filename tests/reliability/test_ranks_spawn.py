"""Hung and dying ranks never hang a spawn-launched DDP run and never leave processes behind.

Each case is one real two-rank gloo run of
``Runner(DDPStrategy(parallel_devices=[cpu, cpu], start_method="spawn", timeout=5 s))
.launch(fn)`` from this test process, in which the culprit rank hangs, exits, segfaults or
raises where it should call ``all_reduce`` or ``barrier``, and the other rank (the survivor)
calls it (see ``rank_scenarios.py``). The six launches run once for the module (about a
minute here); each test then checks one guarantee on every case:

1. the launch raises ``LaunchError`` whose ``.rank`` is the culprit;
2. its message says how the culprit failed (exit code, signal name, traceback);
3. the survivor's collective raised ``CollectiveTimeoutError`` (hang) or
   ``PeerFailureError`` (death) instead of waiting;
4. the launch returned within timeout + 2 grace periods + 30 s of the fault (the one timing
   bound of the issue: "returns at all" matters, so the slack is generous, see
   ``rank_scenarios.SLACK_S``);
5. no rank process is left: none of this process's new children, and no process anywhere
   whose environment or command line carries the case's marker;
6. the processes the culprit itself started are stopped too.

The two launcher faults these tests found (a hung rank not blamed; the children of a rank
that died on its own left running) are fixed; see docs/reliability.md ("Hung and dying ranks").
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
    """``rank_scenarios`` under its own name, so spawned ranks can unpickle its functions."""
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
    "hang-rank1-all_reduce": rs.Case("hang", 1, "all_reduce"),
    "exit-rank1-barrier": rs.Case("exit", 1, "barrier"),
    "segv-rank1-all_reduce": rs.Case("segv", 1, "all_reduce"),
    # No helper: whether it is stopped depends on whether the launcher reads the traceback
    # before the rank exits (a race; the exit and segv cases show the fault deterministically).
    "raise-rank1-barrier": rs.Case("raise", 1, "barrier", helper=False),
    "hang-rank0-barrier": rs.Case("hang", 0, "barrier"),
    "segv-rank0-all_reduce": rs.Case("segv", 0, "all_reduce"),
}


def _params(names: list[str] | None = None) -> list[str]:
    return names if names is not None else list(CASES)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    results: dict[str, Any] = {}
    try:
        with rs.importable():
            for name, case in CASES.items():
                results[name] = rs.run_spawn_case(case, tmp_path_factory.mktemp(name))
        yield results
    finally:
        for outcome in results.values():
            rs.kill_marked(outcome.marker)


@pytest.mark.parametrize("name", _params())
def test_the_launch_raises_launch_error_naming_the_culprit(
    outcomes: dict[str, Any], name: str
) -> None:
    outcome = outcomes[name]
    case = CASES[name]
    assert outcome.error_type == "LaunchError", outcome.message
    assert outcome.error_rank == case.culprit, outcome.message
    first_line = outcome.message.splitlines()[0]
    assert f"rank {case.culprit}" in first_line


@pytest.mark.parametrize("name", _params([n for n, c in CASES.items() if c.fault != "hang"]))
def test_the_message_says_how_the_culprit_failed(outcomes: dict[str, Any], name: str) -> None:
    message: str = outcomes[name].message
    case = CASES[name]
    assert case.expected_in_message() in message, message
    if case.fault == "raise":
        assert f"RuntimeError: injected failure on rank {case.culprit}" in message
    if case.fault == "segv":
        assert "exited with code" not in message


@pytest.mark.parametrize("name", _params())
def test_the_survivor_collective_raises_instead_of_waiting(
    outcomes: dict[str, Any], name: str
) -> None:
    outcome = outcomes[name]
    case = CASES[name]
    report = outcome.reports[case.survivor]
    assert report["entered"] == case.operation
    assert report["error"] in case.expected_survivor_errors(), report
    if case.fault == "hang":
        assert f"timeout of {rs.COLLECTIVE_TIMEOUT_S:g} s" in report["error_text"]
        # It gave up near its timeout (not at the 30-minute default).
        waited = report["error_at"] - report["entered_at"]
        assert rs.COLLECTIVE_TIMEOUT_S - 0.5 <= waited < rs.time_bound(), waited


@pytest.mark.parametrize("name", _params())
def test_the_launch_returns_within_the_bound_after_the_fault(
    outcomes: dict[str, Any], name: str
) -> None:
    outcome = outcomes[name]
    after = outcome.after_fault_s
    assert after is not None, "the culprit never recorded its fault"
    assert 0 <= after <= rs.time_bound(), (after, outcome.launch_s)


@pytest.mark.parametrize("name", _params())
def test_no_rank_process_is_left(outcomes: dict[str, Any], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.leftover_children == []
    assert outcome.leftover_ranks == []
    # Not vacuous: both ranks ran, in processes other than this one.
    pids = {report["pid"] for report in outcome.reports.values()}
    assert len(pids) == 2 and not pids & {None}


@pytest.mark.parametrize("name", _params([n for n, c in CASES.items() if c.helper]))
def test_the_processes_the_culprit_started_are_stopped(outcomes: dict[str, Any], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.helper_pid is not None
    assert outcome.leftover_helper == []
