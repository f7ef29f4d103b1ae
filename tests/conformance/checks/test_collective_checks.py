"""The collective checks: every clause is covered, the reference collective passes, a correct
two-rank collective passes the same checks, and every fault-seeded collective is rejected by
the check that names its clause."""

from __future__ import annotations

import textwrap
from functools import partial
from typing import TYPE_CHECKING

import pytest

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
    from trainspec.collective import Collective

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
