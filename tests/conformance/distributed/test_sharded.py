"""The sharded layer of the kit on 2 gloo ranks (one world for the module): the reference
FSDPStrategy passes every check under both checkpoint layouts, and each fault-seeded sharded
implementation is rejected by the check that names its fault (STRAT-11, STRAT-14, SHARD-1,
DCKPT-2, including a kill of the ranks mid-save)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.conformance.distributed.sharded_targets import SHARDED_CAPABILITIES, SHARDED_FAULTS
from trainspec.conformance.distributed import TargetSpec, World, verify_distributed
from trainspec.conformance.report import FAILING_STATUSES

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conformance.distributed.faults import Fault

pytestmark = pytest.mark.distributed

_HERE = "tests.conformance.distributed.sharded_targets"
SHARDED = TargetSpec("strategy", f"{_HERE}:fsdp_strategy", capabilities=SHARDED_CAPABILITIES)
FULL = TargetSpec(
    "strategy",
    f"{_HERE}:fsdp_full_strategy",
    capabilities=SHARDED_CAPABILITIES - {"sharded_checkpoint"},
)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    started = World(2, env={"OMP_NUM_THREADS": "1"})
    try:
        started.start()
        yield started
    finally:
        started.close()


@pytest.mark.parametrize("spec", [SHARDED, FULL], ids=["sharded", "full"])
def test_reference_fsdp_strategy_passes_every_check_on_two_ranks(
    world: World, spec: TargetSpec
) -> None:
    report = verify_distributed(spec, world=world, timeout_s=180)
    bad = [r for r in report.results if r.status in FAILING_STATUSES]
    assert not bad, "\n\n".join(f"{r.check}: {r.message}" for r in bad)
    assert report.ok, report.targets[0].problems
    passed = {(r.layer, r.clause) for r in report.results if r.status == "passed"}
    wanted = {"E2E-1", "E2E-2", "E2E-3", "STRAT-11", "STRAT-14", "STRAT-16", "STRAT-17"}
    wanted |= {"SHARD-1", "LAYOUT-1", "SYNC-1"}
    if spec is SHARDED:
        wanted |= {f"DCKPT-{n}" for n in range(1, 8)}
    assert wanted <= {clause for _, clause in passed}, sorted(wanted - {c for _, c in passed})


_KILL_CHECK = "check_dckpt_killed_save_leaves_the_previous_or_the_new_checkpoint"


def test_the_kill_check_passes_the_reference_checkpoint_io(world: World) -> None:
    result = world.run(_KILL_CHECK, SHARDED, timeout_s=120)
    assert result.status == "passed", result.message
    assert result.clause == "DCKPT-2"


def test_the_kill_check_skips_a_factory_a_fresh_process_cannot_import(world: World) -> None:
    spec = TargetSpec("strategy", f"{_HERE}:unimportable_fsdp")
    result = world.run(_KILL_CHECK, spec, timeout_s=60)
    assert result.status == "skipped", result.message
    assert "not importable" in result.message
    assert [r.status for r in result.ranks] == ["skipped", "skipped"]


@pytest.mark.parametrize("fault", SHARDED_FAULTS, ids=lambda f: f.name.replace(" ", "_"))
def test_each_sharded_fault_is_rejected_by_the_check_that_names_it(
    world: World, fault: Fault
) -> None:
    spec = TargetSpec(fault.kind, fault.factory, capabilities=SHARDED_CAPABILITIES)  # type: ignore[arg-type]
    result = world.run(fault.check, spec, timeout_s=120)
    assert result.status == "failed", result.message
    assert result.clause == fault.clause
    assert [r.status for r in result.ranks] == ["failed", "failed"]
    assert f"({fault.clause})" in result.message
