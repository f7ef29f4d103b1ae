"""The strategy checks: every clause is covered, the reference single-device strategy passes
with every precision this machine runs, a correct two-rank data-parallel strategy passes the
same checks, and every fault-seeded strategy is rejected by the check that names its clause."""

from __future__ import annotations

import textwrap
from functools import partial
from typing import TYPE_CHECKING

import pytest
import torch

from tests.conformance.faults.faults_collective import ThreadWorld, run_on_threads
from tests.conformance.faults.faults_strategy import (
    FAULTS,
    MetaDeviceStrategy,
    ThreadDataParallelStrategy,
)
from trainspec.conformance.capabilities import STRUCTURAL_CAPABILITIES
from trainspec.conformance.checks import strategy as strategy_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.reference.precisions import precision_for_flag
from trainspec.reference.strategies.ddp import DDPStrategy
from trainspec.reference.strategies.single_device import SingleDeviceStrategy

if TYPE_CHECKING:
    from trainspec.strategy import Strategy

CHECKS = checks_for("strategy")
FLAGS = ("32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")


def _single_device(flag: str) -> Target[Strategy]:
    return Target(
        "strategy",
        lambda: SingleDeviceStrategy(precision=precision_for_flag(flag)),
        name=f"SingleDeviceStrategy[{flag}]",
        capabilities=frozenset({"backward_sync"}),
    )


def _ids(check: Check) -> str:
    return check.name


def test_every_strategy_clause_has_a_check() -> None:
    wanted = {f"STRAT-{i}" for i in range(1, 18)} | {"SYNC-1", "SHARD-1", "STEP-1"}
    assert {c.clause for c in CHECKS} == wanted
    known = set(strategy_checks.CAPABILITIES) | set(STRUCTURAL_CAPABILITIES["strategy"])
    for c in CHECKS:
        assert c.name.startswith("check_strategy_") and c.layer == "behaviour", c.name
        assert c.doc.endswith("."), c.name
        assert c.requires <= known, c.name


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("check", CHECKS, ids=_ids)
def test_reference_single_device_strategy_passes(check: Check, flag: str) -> None:
    try:
        check.run(_single_device(flag))
    except CheckSkipped as skipped:
        assert check.clause in ("SHARD-1", "STEP-1"), skipped.reason


@pytest.mark.parametrize("check", CHECKS, ids=_ids)
def test_reference_ddp_strategy_passes_on_a_world_of_one(check: Check) -> None:
    # One rank, gloo in this process: no processes are started.
    target: Target[Strategy] = Target(
        "strategy",
        DDPStrategy,
        name="DDPStrategy",
        capabilities=frozenset({"backward_sync", "data_parallel"}),
    )
    try:
        check.run(target)
    except CheckSkipped as skipped:
        assert check.clause in ("SHARD-1", "STEP-1"), skipped.reason


def test_checks_leave_the_global_torch_state_alone() -> None:
    dtype, state = torch.get_default_dtype(), torch.random.get_rng_state()
    for c in CHECKS:
        try:
            c.run(_single_device("64-true"))
        except CheckSkipped:
            pass
    assert torch.get_default_dtype() == dtype
    assert torch.equal(torch.random.get_rng_state(), state)


def test_checkpoint_checks_pass_on_a_meta_root_device() -> None:
    # The correct counterpart of LoadIgnoresRootDeviceStrategy.
    target: Target[Strategy] = Target("strategy", MetaDeviceStrategy, name="MetaDeviceStrategy")
    for c in CHECKS:
        if c.clause == "STRAT-17":
            c.run(target)


def _thread_targets(world_size: int) -> list[Target[Strategy]]:
    world = ThreadWorld(world_size)
    return [
        Target(
            "strategy",
            partial(ThreadDataParallelStrategy, world, rank),
            name=f"ThreadDataParallelStrategy[rank {rank}]",
            capabilities=frozenset({"data_parallel", "backward_sync"}),
        )
        for rank in range(world_size)
    ]


@pytest.mark.parametrize("check", CHECKS, ids=_ids)
def test_every_check_passes_on_two_data_parallel_ranks(check: Check) -> None:
    outcomes = run_on_threads(check, _thread_targets(2))
    for outcome in outcomes:
        if isinstance(outcome, CheckSkipped):
            assert check.clause in ("SHARD-1", "STEP-1"), outcome.reason
        else:
            assert outcome is None, outcome


def test_gradient_checks_skip_on_two_ranks_without_data_parallel() -> None:
    world = ThreadWorld(2)
    targets: list[Target[Strategy]] = [
        Target("strategy", partial(ThreadDataParallelStrategy, world, rank)) for rank in range(2)
    ]
    (backward,) = [c for c in CHECKS if c.clause == "STRAT-9"]
    outcomes = run_on_threads(backward, targets)
    assert all(isinstance(o, CheckSkipped) and "data_parallel" in o.reason for o in outcomes)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[SingleDeviceStrategy]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    target: Target[Strategy] = Target(
        "strategy",
        fault.make,  # type: ignore[attr-defined]
        name=fault.__name__,
        capabilities=frozenset({"backward_sync"}),
    )
    failures: list[CheckFailure] = []
    for c in CHECKS:
        if c.clause != clause:
            continue
        try:
            c.run(target)
        except CheckFailure as caught:
            failures.append(caught)
        except CheckSkipped:
            pass
    assert failures, f"no {clause} check rejected {fault.__name__}"
    for caught in failures:
        compile(textwrap.dedent(caught.snippet), "<snippet>", "exec")  # valid Python
        assert caught.clause == clause
        assert str(caught).startswith(f"{fault.__name__} must ")
        assert f"({clause}); got " in str(caught) and "strategy" in caught.snippet


class _NoGradientSync(ThreadDataParallelStrategy):
    """Each rank keeps its local gradients (no averaging): wrong at world size 2."""

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        self.require_set_up("backward")
        self.precision.backward(tensor, module)


class _WholeDatasetOnEveryRank(ThreadDataParallelStrategy):
    """Every rank gets the whole dataset: shares overlap at world size 2."""

    def process_dataloader(self, dataloader):  # type: ignore[no-untyped-def]
        self.require_set_up("process_dataloader")
        return dataloader


@pytest.mark.parametrize(
    ("cls", "clause"), [(_NoGradientSync, "STRAT-9"), (_WholeDatasetOnEveryRank, "STRAT-8")]
)
def test_two_rank_faults_are_rejected_on_every_rank(
    cls: type[ThreadDataParallelStrategy], clause: str
) -> None:
    # Faults invisible on one rank: the checks' expectations really involve the other rank.
    world = ThreadWorld(2)
    targets: list[Target[Strategy]] = [
        Target("strategy", partial(cls, world, rank), capabilities=frozenset({"data_parallel"}))
        for rank in range(2)
    ]
    (check,) = [c for c in CHECKS if c.clause == clause]
    outcomes = run_on_threads(check, targets)
    assert all(isinstance(o, CheckFailure) and o.clause == clause for o in outcomes), outcomes
    single = Target("strategy", partial(cls, ThreadWorld(1), 0))
    check.run(single)  # the same fault passes on a world of one


class _SourceKeepsObject(ThreadDataParallelStrategy):
    """CORRECT: broadcast_object returns the caller's own object on the source rank, as
    torch.distributed.broadcast_object_list does (COLL-10 asks a new object elsewhere only)."""

    def broadcast_object(self, obj, src=0, *, timeout=None):  # type: ignore[no-untyped-def]
        result = super().broadcast_object(obj, src, timeout=timeout)
        return obj if self.global_rank == src else result


class _NonSourceReusesCaller(ThreadDataParallelStrategy):
    """On ranks other than src, broadcast_object refills and returns the caller's dict."""

    def broadcast_object(self, obj, src=0, *, timeout=None):  # type: ignore[no-untyped-def]
        result = super().broadcast_object(obj, src, timeout=timeout)
        if self.global_rank != src and isinstance(obj, dict) and isinstance(result, dict):
            obj.clear()
            obj.update(result)
            return obj
        return result


def _strat_12_behaviour() -> list[Check]:
    found = [c for c in CHECKS if c.clause == "STRAT-12" and c.layer == "behaviour"]
    assert found
    return found


@pytest.mark.parametrize("world_size", [1, 2])
def test_strategy_broadcast_object_may_return_the_source_object_on_the_source_rank(
    world_size: int,
) -> None:
    world = ThreadWorld(world_size)
    targets: list[Target[Strategy]] = [
        Target("strategy", partial(_SourceKeepsObject, world, rank)) for rank in range(world_size)
    ]
    for check in _strat_12_behaviour():
        assert run_on_threads(check, targets) == [None] * world_size


def test_strategy_broadcast_object_must_return_a_new_object_on_other_ranks() -> None:
    world = ThreadWorld(2)
    targets: list[Target[Strategy]] = [
        Target("strategy", partial(_NonSourceReusesCaller, world, rank)) for rank in range(2)
    ]
    outcomes = [o for c in _strat_12_behaviour() for o in run_on_threads(c, targets)]
    failed = [o for o in outcomes if isinstance(o, CheckFailure)]
    assert failed and all(o.clause == "STRAT-12" for o in failed), outcomes
