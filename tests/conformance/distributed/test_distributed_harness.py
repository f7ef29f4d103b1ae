"""The distributed harness on 2 gloo ranks: one world for the whole module.

The reference TorchCollective and DDPStrategy pass every check (behaviour, distributed, end
to end); every fault-seeded implementation is rejected by the check that names its fault;
hangs, crashes and disagreements are reported by rank; and no process outlives the world.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.conformance.distributed.faults import FAULTS, Fault
from trainspec.conformance.distributed import (
    RankResult,
    TargetSpec,
    World,
    verify_distributed,
)
from trainspec.conformance.distributed.results import combine
from trainspec.conformance.report import FAILING_STATUSES
from trainspec.errors import ConfigurationError, LifecycleError

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.distributed

_HERE = "tests.conformance.distributed"
COLLECTIVE = TargetSpec("collective", f"{_HERE}.targets:torch_collective")
STRATEGY = TargetSpec(
    "strategy",
    f"{_HERE}.targets:ddp_strategy",
    capabilities=frozenset({"data_parallel", "backward_sync"}),
)


def _children() -> set[int]:
    """This process's descendants, except multiprocessing's resource tracker (one per
    process that uses multiprocessing, owned by Python, not by the harness)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        found.add(child.pid)
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    before = _children()
    started = World(2, env={"OMP_NUM_THREADS": "1"})
    try:
        started.start()
        yield started
    finally:
        started.close()
    leftover = _children() - before
    assert not leftover, f"processes left behind by the world: {sorted(leftover)}"


# --------------------------------------------------------------------------- no world needed


def _rank(rank: int, status: str, message: str = "") -> RankResult:
    return RankResult(rank=rank, status=status, message=message)  # type: ignore[arg-type]


def _combined(*ranks: RankResult) -> tuple[str, str]:
    result = combine(
        "check_x", "X-1", "distributed", ranks, duration_s=1.0, timeout_s=5.0, restarted=False
    )
    return result.status, result.message


def test_ranks_must_agree_on_a_verdict() -> None:
    assert _combined(_rank(0, "passed"), _rank(1, "passed")) == ("passed", "")
    assert _combined(_rank(0, "skipped", "n/a"), _rank(1, "skipped", "n/a")) == ("skipped", "n/a")
    status, message = _combined(_rank(0, "passed"), _rank(1, "skipped", "n/a"))
    assert status == "failed"
    assert "disagree" in message
    assert "passed on ranks 0" in message
    assert "skipped on ranks 1" in message
    result = combine(
        "c",
        "X-1",
        "distributed",
        [_rank(0, "passed")],
        duration_s=0.5,
        timeout_s=1,
        restarted=False,
    )
    assert dataclasses.asdict(result.to_check_result())["status"] == "passed"
    assert result.ranks[0].to_dict()["rank"] == 0


def test_the_root_cause_decides_the_combined_status() -> None:
    crashed = RankResult(rank=1, status="crashed", signal="SIGSEGV", exitcode=-11, stderr="boom")
    status, message = _combined(_rank(0, "timeout"), crashed)
    assert status == "error"
    assert "rank 1 died" in message
    assert "SIGSEGV" in message
    assert "boom" in message
    status, message = _combined(_rank(0, "failed", "wrong"), _rank(1, "timeout"))
    assert status == "failed"
    assert "did not finish within 5 s on ranks 1" in message
    assert "0 (failed)" in message
    status, message = _combined(_rank(0, "failed", "wrong"), _rank(1, "error", "raised"))
    assert (status, message.splitlines()[0]) == ("failed", "wrong")
    assert _combined(_rank(0, "error", "raised"), _rank(1, "passed"))[0] == "error"


def test_targets_must_be_importable_by_name_and_picklable() -> None:
    with pytest.raises(ConfigurationError, match="module-level"):
        TargetSpec.of(("collective", lambda: None))
    with pytest.raises(ConfigurationError, match=r"package\.module:attribute"):
        TargetSpec("collective", "no_colon_here")
    with pytest.raises(ConfigurationError, match="picklable"):
        TargetSpec("collective", "a.b:c", options={"bad": lambda: None})
    with pytest.raises(ConfigurationError, match="unknown kind"):
        TargetSpec("nonsense", "a.b:c")  # type: ignore[arg-type]
    spec = TargetSpec.of(("strategy", World), capabilities={"x"}, options={"a": 1})
    assert spec.factory == "trainspec.conformance.distributed.world:World"
    assert spec.capabilities == {"x"}


def test_bad_world_arguments_are_refused_before_anything_starts() -> None:
    for kwargs in ({"world_size": 0}, {"device": "cuda:0"}, {"init": "file"}, {"device": "hpu"}):
        with pytest.raises(ConfigurationError):
            World(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="collective, strategy"):
        verify_distributed(("accelerator", "trainspec.reference.accelerators.cpu:CPUAccelerator"))


def test_the_public_api_is_listed_sorted_and_importable_without_torch() -> None:
    import importlib
    import subprocess
    import sys

    package = importlib.import_module("trainspec.conformance.distributed")

    def order(name: str) -> tuple[int, str]:  # constants, classes, functions (isort style)
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert package.__all__ == sorted(package.__all__, key=order)
    for name in package.__all__:
        assert hasattr(package, name), name
    code = (
        "import sys, trainspec.conformance.distributed as d; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


_ABANDON = """
import os, signal, sys
from trainspec.conformance.distributed import World
world = World(1)
world.start()
print(" ".join(map(str, world.pids)), flush=True)
if sys.argv[1] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_ranks_die_with_a_parent_that_never_closed_its_world(how: str) -> None:
    """At exit the atexit hook kills the ranks; after SIGKILL each rank notices and exits."""
    import subprocess
    import sys
    import time

    done = subprocess.run(
        [sys.executable, "-c", _ABANDON, how], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == (0 if how == "exit" else -9), done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 1
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and _alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


# --------------------------------------------------------------------------- reference targets


def test_the_harness_channel_and_environment_reach_every_rank(world: World) -> None:
    result = world.run(f"{_HERE}.faults:check_exchange_gathers_in_rank_order", COLLECTIVE)
    assert result.status == "passed", result.message


def test_reference_collective_passes_every_check_on_two_ranks(world: World) -> None:
    pids = world.pids
    report = verify_distributed(COLLECTIVE, world=world, timeout_s=120)
    bad = [r for r in report.results if r.status in FAILING_STATUSES]
    assert not bad, "\n\n".join(f"{r.check}: {r.message}" for r in bad)
    assert report.ok, report.targets[0].problems
    layers = {r.layer for r in report.results if r.status == "passed"}
    assert layers == {"structure", "behaviour", "distributed"}
    assert not [r for r in report.results if r.status == "skipped"]
    assert world.pids == pids  # one world for every check


def test_reference_ddp_strategy_passes_every_check_on_two_ranks(world: World) -> None:
    report = verify_distributed(STRATEGY, world=world, timeout_s=120)
    bad = [r for r in report.results if r.status in FAILING_STATUSES]
    assert not bad, "\n\n".join(f"{r.check}: {r.message}" for r in bad)
    assert report.ok, report.targets[0].problems
    passed = {(r.layer, r.clause) for r in report.results if r.status == "passed"}
    for clause in ("E2E-1", "E2E-2", "E2E-3"):
        assert ("end_to_end", clause) in passed
    for clause in ("STRAT-2", "STRAT-8", "STRAT-11", "STRAT-12", "STRAT-13", "STRAT-16", "SYNC-1"):
        assert ("distributed", clause) in passed


def test_the_distributed_checks_skip_without_the_harness(world: World) -> None:
    for spec in (COLLECTIVE, STRATEGY):
        check = f"{_HERE}.faults:check_that_the_distributed_checks_skip_without_the_harness"
        result = world.run(check, spec)
        assert result.status == "passed", result.message


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name.replace(" ", "_"))
def test_each_fault_is_rejected_by_the_check_that_names_it(world: World, fault: Fault) -> None:
    spec = TargetSpec(fault.kind, fault.factory)  # type: ignore[arg-type]
    result = world.run(fault.check, spec, timeout_s=120)
    assert result.status == "failed", result.message
    assert result.clause == fault.clause
    assert [r.status for r in result.ranks] == ["failed", "failed"]  # every rank saw it
    assert f"({fault.clause})" in result.message
    assert not result.restarted


def test_ranks_that_disagree_are_a_failure(world: World) -> None:
    skips = world.run(f"{_HERE}.faults:check_skips_on_rank_one_only", COLLECTIVE)
    assert skips.status == "failed"
    assert [r.status for r in skips.ranks] == ["passed", "skipped"]
    assert "disagree" in skips.message
    fails = world.run(f"{_HERE}.faults:check_fails_on_rank_one_only", COLLECTIVE)
    assert fails.status == "failed"
    assert [r.status for r in fails.ranks] == ["passed", "failed"]
    assert "rank 1 disagrees" in fails.message
    agreed = world.run(f"{_HERE}.faults:check_skips_on_every_rank", COLLECTIVE)
    assert (agreed.status, agreed.message) == ("skipped", "not applicable anywhere")


def test_a_rank_that_hangs_in_barrier_is_reported_with_its_stack(world: World) -> None:
    old = world.pids
    spec = TargetSpec("collective", f"{_HERE}.faults:hanging_barrier")
    result = world.run("check_collective_barrier_returns_once_every_rank_arrived", spec, 12)
    assert result.status == "failed"
    assert result.timed_out_ranks == (1,)
    assert result.finished_ranks == (0,)  # its barrier timed out after 3 s
    assert result.ranks[0].status == "failed"
    assert "_hang_forever_in_barrier" in result.ranks[1].stack
    assert "_hang_forever_in_barrier" in result.message
    assert "did not finish within 12 s on ranks 1" in result.message
    assert result.restarted
    assert not any(_alive(pid) for pid in old)
    after = world.run(f"{_HERE}.faults:check_exchange_gathers_in_rank_order", COLLECTIVE)
    assert after.status == "passed", after.message
    assert set(world.pids).isdisjoint(old)


def test_a_rank_that_segfaults_is_reported_with_its_signal_and_stderr(world: World) -> None:
    old = world.pids
    spec = TargetSpec("collective", f"{_HERE}.faults:segfaulting_all_reduce")
    result = world.run("check_collective_all_reduce_matches_direct_computation", spec, 60)
    assert result.status == "error"
    assert result.crashed_ranks == (1,)
    crashed = result.ranks[1]
    assert crashed.signal == "SIGSEGV"
    assert crashed.exitcode == -11
    assert "Segmentation fault" in crashed.stderr
    assert "_crash_with_segfault" in crashed.stderr  # faulthandler's traceback
    assert "rank 1 died during the check (signal SIGSEGV)" in result.message
    assert result.ranks[0].finished  # the other rank saw its peer go and reported it
    assert result.restarted
    assert not any(_alive(pid) for pid in old)


def test_ranks_that_exit_or_are_killed_are_reported_by_rank(world: World) -> None:
    check = f"{_HERE}.faults:check_exits_on_rank_zero_and_is_killed_on_rank_one"
    result = world.run(check, COLLECTIVE, 60)
    assert result.status == "error"
    assert result.crashed_ranks == (0, 1)
    assert (result.ranks[0].exitcode, result.ranks[0].signal) == (3, None)
    assert (result.ranks[1].exitcode, result.ranks[1].signal) == (-9, "SIGKILL")


def test_verify_distributed_reports_faults_in_the_kits_report(world: World) -> None:
    fault = FAULTS[0]
    report = verify_distributed(
        (fault.kind, fault.factory), world=world, select=[fault.check], timeout_s=120
    )
    assert not report.ok
    [row] = [r for r in report.results if r.check == fault.check]
    assert (row.status, row.clause, row.layer) == ("failed", fault.clause, "distributed")
    assert "rank" in row.message
    expected = verify_distributed(
        (fault.kind, fault.factory),
        world=world,
        select=[fault.check],
        expected_failures={fault.clause: "seeded fault"},
    )
    assert expected.ok
    assert [r.status for r in expected.results if r.check == fault.check] == ["xfailed"]


def test_closing_the_world_leaves_no_process_behind(world: World) -> None:
    pids = world.pids
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    descendants = {p.pid for p in psutil.Process().children(recursive=True)}
    assert set(pids) <= descendants
    world.close()
    world.close()  # idempotent
    assert not any(_alive(pid) for pid in pids)
    assert not world.running
    assert not _children() & descendants
    with pytest.raises(LifecycleError, match="closed"):
        world.start()
    assert os.getpid() not in pids
