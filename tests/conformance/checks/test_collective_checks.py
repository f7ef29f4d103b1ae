"""The collective checks: every clause is covered, the reference collective passes, a correct
two-rank collective passes the same checks, and every fault-seeded collective is rejected by
the check that names its clause."""

from __future__ import annotations

import textwrap
from functools import partial
from typing import TYPE_CHECKING

import pytest
import torch

from tests.conformance.faults.faults_collective import (
    FAULTS,
    ThreadCollective,
    ThreadWorld,
    run_on_threads,
)
from trainspec.conformance.checks import collective as collective_checks
from trainspec.conformance.core import Check, CheckFailure, CheckSkipped, Target, checks_for
from trainspec.conformance.fakes import StaticEnvironment
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.reference.collectives.torch_dist import TorchCollective

if TYPE_CHECKING:
    from datetime import timedelta

    from trainspec.collective import Collective
    from trainspec.types import ReduceOp

CHECKS = checks_for("collective")
SINGLE_RANK = [c for c in CHECKS if c.layer != "distributed"]
REFERENCE: Target[Collective] = Target(
    "collective", SingleProcessCollective, name="SingleProcessCollective"
)
# torch.distributed on a world of one (gloo, in this process): no processes are started.
TORCH: Target[Collective] = Target("collective", TorchCollective, name="TorchCollective")


def _ids(check: Check) -> str:
    return check.name


def test_every_collective_clause_has_a_check() -> None:
    assert {c.clause for c in CHECKS} == {f"COLL-{i}" for i in range(1, 17)}


def test_collective_checks_are_named_as_rules_with_a_stated_rule() -> None:
    for c in CHECKS:
        assert c.name.startswith("check_collective_"), c.name
        assert c.doc.endswith("."), c.name  # the first docstring line is the whole rule
        assert c.layer in ("behaviour", "distributed"), c.name
    assert collective_checks.CAPABILITIES == {}


@pytest.mark.parametrize("target", [REFERENCE, TORCH], ids=lambda t: t.name)
@pytest.mark.parametrize("check", SINGLE_RANK, ids=_ids)
def test_reference_collectives_pass(check: Check, target: Target[Collective]) -> None:
    check.run(target)


@pytest.mark.parametrize("check", [c for c in CHECKS if c.layer == "distributed"], ids=_ids)
def test_distributed_checks_skip_on_a_world_of_one(check: Check) -> None:
    with pytest.raises(CheckSkipped, match="at least 2 ranks"):
        check.run(REFERENCE)


def _thread_targets(world_size: int) -> list[Target[Collective]]:
    world = ThreadWorld(world_size)
    return [
        Target(
            "collective",
            partial(ThreadCollective, world),
            name=f"ThreadCollective[rank {rank}]",
            options={"environment_factory": partial(_rank_environment, world_size, rank)},
        )
        for rank in range(world_size)
    ]


def _rank_environment(world_size: int, rank: int) -> StaticEnvironment:
    return StaticEnvironment(world_size=world_size, global_rank=rank, main_port=29500)


@pytest.mark.parametrize("check", CHECKS, ids=_ids)
def test_every_check_passes_on_two_ranks(check: Check) -> None:
    outcomes = run_on_threads(check, _thread_targets(2))
    assert outcomes == [None, None]


def test_two_rank_checks_compute_rank_dependent_expectations() -> None:
    # A collective that answers for one rank only must fail at world size 2: the checks'
    # expectations really depend on the other rank's contribution.
    class LocalOnly(ThreadCollective):
        def all_gather(self, tensor, *, timeout=None):  # type: ignore[no-untyped-def]
            super().all_gather(tensor, timeout=timeout)
            return [tensor.clone() for _ in range(self.world_size)]

    world = ThreadWorld(2)
    targets: list[Target[Collective]] = [
        Target(
            "collective",
            partial(LocalOnly, world),
            options={"environment_factory": partial(_rank_environment, 2, rank)},
        )
        for rank in range(2)
    ]
    (gather_check,) = [
        c
        for c in CHECKS
        if c.name == "check_collective_all_gather_returns_every_rank_in_rank_order"
    ]
    outcomes = run_on_threads(gather_check, targets)
    assert all(isinstance(o, CheckFailure) and o.clause == "COLL-8" for o in outcomes)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_fault_is_rejected_by_the_check_of_its_clause(fault: type[Collective]) -> None:
    clause: str = fault.clause  # type: ignore[attr-defined]
    target: Target[Collective] = Target("collective", fault, name=fault.__name__)
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
        message = str(caught)
        assert caught.clause == clause
        assert message.startswith(f"{fault.__name__} must ")
        assert f"({clause}); got " in message
        assert "To reproduce:" in message and "collective" in caught.snippet


# --------------------------------------------------------------------------- COLL-10 (issue 15)

COLL_10 = [c for c in SINGLE_RANK if c.clause == "COLL-10"]


def _world_targets(cls: type[ThreadCollective], world_size: int) -> list[Target[Collective]]:
    world = ThreadWorld(world_size)
    return [
        Target(
            "collective",
            partial(cls, world),
            name=f"{cls.__name__}[rank {rank}]",
            options={"environment_factory": partial(_rank_environment, world_size, rank)},
        )
        for rank in range(world_size)
    ]


@pytest.mark.parametrize("world_size", [1, 2])
def test_broadcast_object_may_return_the_source_object_itself_on_the_source_rank(
    world_size: int,
) -> None:
    # torch.distributed.broadcast_object_list leaves the source object in place: COLL-10 only
    # asks for a new object on the *other* ranks.
    from tests.conformance.faults.faults_collective import SourceKeepsObjectThreadCollective

    assert COLL_10
    for c in COLL_10:
        outcomes = run_on_threads(c, _world_targets(SourceKeepsObjectThreadCollective, world_size))
        assert outcomes == [None] * world_size, outcomes


def test_broadcast_object_must_return_a_new_object_on_the_other_ranks() -> None:
    from tests.conformance.faults.faults_collective import NonSourceReusesCallerThreadCollective

    for c in COLL_10:
        outcomes = run_on_threads(c, _world_targets(NonSourceReusesCallerThreadCollective, 2))
        # Rank 1 is not the source of the first broadcast (src=0): it must be rejected there.
        failed = [o for o in outcomes if isinstance(o, CheckFailure)]
        assert failed and all(o.clause == "COLL-10" for o in failed), outcomes
        assert any("new object" in o.expected for o in failed), outcomes


# ------------------------------------------------------------- root-cause blame (issue 15)


def _clauses_failed(target: Target[Collective]) -> set[str]:
    failed: set[str] = set()
    for c in SINGLE_RANK:
        try:
            c.run(target)
        except CheckFailure as caught:
            failed.add(caught.clause)
        except CheckSkipped:
            pass
    return failed


class _RefusesTimeouts(SingleProcessCollective):
    """A collective without per-call timeouts: every operation refuses a non-None timeout."""

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        if timeout is not None:
            raise NotImplementedError("per-call timeouts are not supported")
        super().barrier()

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        if timeout is not None:
            raise NotImplementedError("per-call timeouts are not supported")
        return super().all_reduce(tensor, reduce_op)


def test_a_collective_without_per_call_timeouts_fails_only_the_timeout_clause() -> None:
    failed = _clauses_failed(Target("collective", _RefusesTimeouts, name="RefusesTimeouts"))
    assert failed == {"COLL-2"}, failed


class _ReducesInPlace(SingleProcessCollective):
    """Correct results, but all_reduce then doubles its input in place (a COLL-1 fault): a
    check that reuses one input for two reductions would see the second one go wrong."""

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        result = super().all_reduce(tensor, reduce_op, timeout=timeout)
        if tensor.dtype != torch.bool:
            tensor.mul_(2)
        return result


def test_an_in_place_reduction_is_blamed_on_the_input_rule_not_on_the_mean_rule() -> None:
    failed = _clauses_failed(Target("collective", _ReducesInPlace, name="ReducesInPlace"))
    assert "COLL-1" in failed
    assert "COLL-6" not in failed, failed
