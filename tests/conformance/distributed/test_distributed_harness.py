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
    process that uses multiprocessing, owned by Python, not by the harness) and the CKPT-3
    kill server (one per process that ran a kill check, closed at exit; not the world's)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            if "resource_tracker" in command or "_checkpoint_kill.py" in command:
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


def test_the_ranks_derive_their_kinds_modules_and_checks_from_the_kinds_table(
    world: World,
) -> None:
    from trainspec.conformance.core import checks_for
    from trainspec.conformance.distributed import _worker
    from trainspec.conformance.distributed.verify import DEFAULT_LAYERS, DISTRIBUTED_KINDS
    from trainspec.conformance.kinds import KIND_TABLE

    with_ranks = [kind for kind, spec in KIND_TABLE.items() if spec.distributed_check_modules]
    assert list(DISTRIBUTED_KINDS) == with_ranks
    for kind in with_ranks:
        spec = KIND_TABLE[kind]
        modules = {*spec.check_modules, *spec.distributed_check_modules}
        assert modules <= set(_worker.DEFAULT_PRELOAD)
    for target in (COLLECTIVE, STRATEGY):
        plan = world.plan(target, DEFAULT_LAYERS, None, 120)
        planned = [c["name"] for c in plan["checks"]]  # type: ignore[attr-defined]
        expected = checks_for(target.kind, distributed=True)
        assert planned == [c.name for c in expected if c.layer in DEFAULT_LAYERS]


def test_the_report_lists_the_effective_capabilities(world: World) -> None:
    """Declared on the implementation and inferred on the ranks, not only those given."""
    from trainspec.conformance.builtin_targets import ddp_strategy_for_this_world
    from trainspec.conformance.kinds import infer_structural

    factory = "trainspec.conformance.builtin_targets:ddp_strategy_for_this_world"
    report = verify_distributed(
        TargetSpec("strategy", factory), world=world, select=["STRAT-2"], timeout_s=120
    )
    inferred = infer_structural("strategy", ddp_strategy_for_this_world())
    assert inferred  # DDPStrategy implements optional protocols
    assert set(report.targets[0].capabilities) == {"data_parallel", *inferred}


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


# --------------------------------------------------------------------------- each clause alone


def _distributed_checks(kind: str) -> list[str]:
    """The functional distributed checks of ``kind`` (the collective and strategy modules)."""
    from trainspec.conformance.distributed.checks import DISTRIBUTED_CHECKS

    module = f"trainspec.conformance.distributed.checks.{kind}"
    return [c.name for c in DISTRIBUTED_CHECKS if c.kind == kind and c.func.__module__ == module]


@pytest.mark.parametrize(
    ("spec", "timeout_check"),
    [
        (
            TargetSpec("collective", f"{_HERE}.faults:timeout_refusing_collective"),
            "check_collective_all_reduce_raises_timeout_error_within_its_timeout",
        ),
        (
            TargetSpec("collective", f"{_HERE}.faults:timeout_ignoring_collective"),
            "check_collective_all_reduce_raises_timeout_error_within_its_timeout",
        ),
        (
            dataclasses.replace(STRATEGY, factory=f"{_HERE}.faults:timeout_refusing_strategy"),
            "check_strategy_barrier_raises_timeout_error_within_its_timeout",
        ),
    ],
    ids=["collective-refusing", "collective-ignoring", "strategy-refusing"],
)
def test_a_plugin_without_per_call_timeouts_fails_only_the_timeout_check(
    world: World, spec: TargetSpec, timeout_check: str
) -> None:
    """Only the timeout checks pass timeout=; the others leave hangs to the watchdog."""
    report = verify_distributed(
        spec, world=world, select=_distributed_checks(spec.kind), timeout_s=120
    )
    bad = {r.check: r.message for r in report.results if r.status in FAILING_STATUSES}
    assert set(bad) == {timeout_check}, bad
    assert "ConfigurationError" in bad[timeout_check] or "only after" in bad[timeout_check]
    ran = [r for r in report.results if r.layer != "structure"]
    assert len(ran) == len(_distributed_checks(spec.kind))
    assert all(r.status in ("passed", "failed", "skipped") for r in ran)


# --------------------------------------------------------------------------- observe, not repair


@pytest.mark.parametrize(
    ("spec", "reference", "check", "clause"),
    [
        (
            TargetSpec("collective", f"{_HERE}.faults:group_keeping_collective"),
            COLLECTIVE,
            "check_collective_ranks_are_distinct_and_in_all_gather_order",
            "COLL-5",
        ),
        (
            TargetSpec("strategy", f"{_HERE}.faults:group_keeping_strategy"),
            STRATEGY,
            "check_strategy_ranks_agree_across_ranks",
            "STRAT-4",
        ),
    ],
    ids=["collective", "strategy"],
)
def test_a_teardown_that_leaves_the_process_group_fails_the_lifecycle_clause(
    world: World, spec: TargetSpec, reference: TargetSpec, check: str, clause: str
) -> None:
    result = world.run(check, spec)
    assert result.status == "passed", result.message  # the check's own clause holds
    [problem] = result.teardown_problems
    assert problem.startswith("on ranks 0, 1: the default torch.distributed process group")
    report = verify_distributed(spec, world=world, select=[check])
    rows = {r.check: r for r in report.results}
    assert rows[check].status == "passed"
    lifecycle = rows[f"teardown:{check}"]
    assert (lifecycle.status, lifecycle.clause) == ("failed", clause)
    assert "process group" in lifecycle.message
    assert not report.ok
    # Reported once per run, for the first check that leaves it.
    two = [check, "check_collective_barrier_waits_for_the_last_rank"]
    if spec.kind == "strategy":
        two[1] = "check_strategy_barrier_waits_for_the_last_rank"
    twice = verify_distributed(spec, world=world, select=two)
    assert [r.check for r in twice.results if r.check.startswith("teardown:")] == [
        f"teardown:{check}"
    ]
    # The harness cleaned up after observing: a correct target runs clean right after.
    after = world.run(check, reference)
    assert after.status == "passed", after.message
    assert after.teardown_problems == ()


def test_a_teardown_that_raises_fails_the_lifecycle_clause_not_the_check(world: World) -> None:
    spec = TargetSpec("collective", f"{_HERE}.faults:raising_teardown_collective")
    check = "check_collective_all_gather_matches_direct_computation"
    result = world.run(check, spec)
    assert result.status == "passed", result.message
    [problem] = result.teardown_problems
    assert problem.startswith("on ranks 0, 1: RaisingTeardownCollective.teardown() raised")
    report = verify_distributed(spec, world=world, select=[check])
    rows = {r.check: r for r in report.results}
    assert (rows[check].status, rows[check].clause) == ("passed", "COLL-8")
    lifecycle = rows[f"teardown:{check}"]
    assert (lifecycle.status, lifecycle.clause) == ("failed", "COLL-5")
    assert "teardown went wrong" in lifecycle.message


# --------------------------------------------------------------------------- blame and hangs


def test_the_headline_names_the_primary_rank_not_its_echo(world: World) -> None:
    result = world.run(f"{_HERE}.faults:check_raises_its_own_error_on_rank_one", COLLECTIVE)
    assert result.status == "error"
    assert result.ranks[0].secondary  # PeerFailureError: rank 1 left the exchange
    assert not result.ranks[1].secondary
    assert result.message.splitlines()[0] == "ValueError: rank 1's own mistake"
    spec = TargetSpec("collective", f"{_HERE}.faults:raising_on_last_rank_all_gather")
    plugin = world.run("check_collective_ranks_are_distinct_and_in_all_gather_order", spec, 60)
    assert plugin.status == "failed", plugin.message
    summary = plugin.message.split("\n\n")[0]
    assert "CollectiveTimeoutError" in summary  # rank 0's echo is kept, after the cause
    assert summary.index("on rank 1:") < summary.index("on rank 0:"), summary


def test_a_member_that_hung_blocks_the_later_checks_that_call_it(world: World) -> None:
    spec = TargetSpec("collective", f"{_HERE}.faults:hanging_barrier_everywhere")
    first = "check_collective_barrier_returns_once_every_rank_arrived"
    hung = world.run(first, spec, 10)
    assert hung.status == "failed"
    assert hung.timed_out_ranks == (0, 1)
    assert hung.hung_in == ("barrier",)
    assert "hung inside barrier()" in hung.message
    assert set(world.blocked_members(spec)) == {"barrier"}
    again = world.run("check_collective_barrier_waits_for_the_last_rank", spec, 10)
    assert again.status == "blocked", again.message
    assert "barrier()" in again.message and first in again.message
    assert not again.restarted  # it stopped at the call instead of hanging
    untouched = world.run("check_collective_all_gather_matches_direct_computation", spec, 60)
    assert untouched.status == "passed", untouched.message
    # In a report: checks of other clauses that call barrier() are blocked with the cause.
    others = [
        "check_collective_operations_accept_a_timeout",
        "check_collective_peer_that_leaves_makes_others_raise_collective_error",
    ]
    report = verify_distributed(spec, world=world, select=others, timeout_s=10)
    rows = {r.check: r for r in report.results if r.check in others}
    assert {name: row.status for name, row in rows.items()} == dict.fromkeys(others, "blocked")
    assert all(first in row.message for row in rows.values())
    assert world.blocked_members(COLLECTIVE) == {}  # other targets are not affected


def test_a_factory_that_hung_blocks_every_later_check_of_the_target(world: World) -> None:
    spec = TargetSpec("collective", f"{_HERE}.faults:never_returning_factory")
    hung = world.run(f"{_HERE}.faults:check_hangs_while_making_the_target_on_rank_one", spec, 10)
    assert hung.status == "failed"
    assert hung.timed_out_ranks == (1,)
    later = world.run("check_collective_all_gather_matches_direct_computation", spec, 10)
    assert later.status == "blocked"
    assert "never_returning_factory" in later.message
    assert [r.status for r in later.ranks] == ["blocked", "blocked"]


# --------------------------------------------------------------------------- launch failures


@pytest.mark.parametrize("fault", ["exit", "hang"])
def test_a_rank_that_dies_or_hangs_loading_the_factory_fails_the_target_in_its_report(
    fault: str,
) -> None:
    env = {"OMP_NUM_THREADS": "1", "TRAINSPEC_TEST_FAULT_AT_IMPORT": fault}
    with World(2, env=env) as faulty:
        target = ("collective", f"{_HERE}.import_faults:torch_collective")
        report = verify_distributed(target, world=faulty, timeout_s=10)
    assert not report.ok
    [problem] = report.targets[0].problems
    assert "rank 0" in problem
    assert ("exit code 7" if fault == "exit" else "within the timeout of 10 s") in problem


def test_ranks_that_cannot_be_started_fail_the_target_in_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing.context

    def refuse(self: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", refuse)
    report = verify_distributed(COLLECTIVE, world_size=2)
    assert not report.ok
    [problem] = report.targets[0].problems
    assert "rank 0 of 2 could not be started" in problem
    assert "BlockingIOError" in problem


def test_a_world_larger_than_the_machine_can_run_is_refused_naming_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainspec.conformance.distributed import MAX_WORLD_SIZE_VARIABLE, max_world_size

    monkeypatch.delenv(MAX_WORLD_SIZE_VARIABLE, raising=False)
    limit = max_world_size()
    assert limit >= 8
    with pytest.raises(ConfigurationError, match=f"at most {limit} ") as caught:
        World(9999)
    assert MAX_WORLD_SIZE_VARIABLE in str(caught.value)
    monkeypatch.setenv(MAX_WORLD_SIZE_VARIABLE, "3")
    with pytest.raises(ConfigurationError, match="at most 3 "):
        verify_distributed(COLLECTIVE, world_size=4)
    World(3).close()  # within the limit: nothing starts until used
    monkeypatch.setenv(MAX_WORLD_SIZE_VARIABLE, "lots")
    with pytest.raises(ConfigurationError, match=MAX_WORLD_SIZE_VARIABLE):
        World(2)


# --------------------------------------------------------------------------- last: closing


def test_closing_the_world_leaves_no_process_behind(world: World) -> None:
    world.start()  # running again if the last check before restarted it
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
