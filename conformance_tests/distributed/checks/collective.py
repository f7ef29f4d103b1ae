"""Distributed checks of :class:`trainspec.Collective` (COLL-2, 4, 6, 8 ... 16): every
operation against a direct computation on generated inputs, ranks distinct and in order,
the barrier waits, a timeout raises."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, cast

import torch
from hypothesis import strategies as st

from trainspec.conformance.distributed.checks._inputs import (
    Movement,
    Reduction,
    all_gather_problem,
    all_reduce_problem,
    broadcast_object_problem,
    broadcast_problem,
    movements,
    picklable_objects,
    reduction_problem,
    reductions,
    same_bits,
    same_list,
    variant,
)
from trainspec.conformance.distributed.checks._support import (
    SHORT_TIMEOUT,
    TIMEOUT_SLACK_S,
    agree,
    barrier_problem,
    device_option,
    distributed_check,
    guarded,
    max_examples,
    run_examples,
    set_up_collective,
    show,
    timeout_problem,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from hypothesis.strategies import SearchStrategy

    from trainspec.collective import Collective
    from trainspec.conformance.core import Target
    from trainspec.types import ReduceOp


__all__ = [
    "check_collective_all_gather_matches_direct_computation",
    "check_collective_all_gather_object_matches_direct_computation",
    "check_collective_all_reduce_matches_direct_computation",
    "check_collective_all_reduce_raises_timeout_error_within_its_timeout",
    "check_collective_all_to_all_matches_direct_computation",
    "check_collective_barrier_waits_for_the_last_rank",
    "check_collective_broadcast_matches_direct_computation",
    "check_collective_broadcast_object_matches_direct_computation",
    "check_collective_gather_matches_direct_computation",
    "check_collective_ranks_are_distinct_and_in_all_gather_order",
    "check_collective_reduce_scatter_matches_direct_computation",
    "check_collective_scatter_matches_direct_computation",
]

_T = TypeVar("_T")

# --------------------------------------------------------------------------- collective checks


@distributed_check("COLL-4", "collective")
def check_collective_ranks_are_distinct_and_in_all_gather_order(
    target: Target[Collective],
) -> None:
    """Across ranks, world_size must agree and all_gather of the ranks must be 0, 1, ..., N-1."""
    with set_up_collective(target) as (collective, context):

        def body() -> str | None:
            rank, world = collective.rank, collective.world_size
            if world != context.world_size:
                return f"world_size={world!r} in a world of {context.world_size} ranks"
            gathered = collective.all_gather(
                torch.tensor([rank], device=device_option(cast("Target[object]", target)))
            )
            order = [int(t.item()) for t in gathered]
            if order != list(range(world)):
                return f"rank={rank}, all_gather of every rank's rank gave {order}"
            return None

        agree(
            cast("Target[object]", target),
            context,
            "COLL-4",
            guarded(body),
            expected="report distinct ranks 0..N-1 that all_gather returns in rank order",
        )


def _collective_property(
    target: Target[Collective],
    clause: str,
    expected: str,
    strategy: Callable[[int], SearchStrategy[_T]],
    body: Callable[[Collective, _T, int, int, torch.device], str | None],
    hint: str = "",
) -> None:
    plain = cast("Target[object]", target)
    device = device_option(plain)
    with set_up_collective(target) as (collective, context):
        world, rank = context.world_size, context.rank

        def test(example: _T) -> None:
            problem = guarded(lambda: body(collective, example, rank, world, device))
            agree(plain, context, clause, problem, expected=expected, hint=hint)

        run_examples(strategy(world), test, max_examples(plain))


@distributed_check("COLL-6", "collective")
def check_collective_all_reduce_matches_direct_computation(target: Target[Collective]) -> None:
    """all_reduce on N ranks must equal the reduction computed directly, for every op."""
    _collective_property(
        target,
        "COLL-6",
        "return the element-wise reduction over ranks from all_reduce (mean = sum / N)",
        lambda world: reductions(world, world),
        all_reduce_problem,
        hint='The default op is "mean": the sum divided by world_size, floating for integers.',
    )


@distributed_check("COLL-8", "collective")
def check_collective_all_gather_matches_direct_computation(target: Target[Collective]) -> None:
    """all_gather on N ranks must return every rank's tensor bit for bit, in rank order."""
    _collective_property(
        target,
        "COLL-8",
        "return every rank's tensor from all_gather, indexed by rank",
        lambda world: movements(world),
        all_gather_problem,
        hint="Result i is rank i's input; non-contiguous inputs must work.",
    )


@distributed_check("COLL-9", "collective")
def check_collective_broadcast_matches_direct_computation(target: Target[Collective]) -> None:
    """broadcast(t, src) on N ranks must give every rank rank src's tensor, for every src."""
    _collective_property(
        target,
        "COLL-9",
        "return rank src's tensor from broadcast(t, src) on every rank",
        lambda world: movements(world),
        broadcast_problem,
        hint="Honour the src argument; every rank, src included, gets src's tensor.",
    )


@distributed_check("COLL-10", "collective")
def check_collective_broadcast_object_matches_direct_computation(
    target: Target[Collective],
) -> None:
    """broadcast_object(obj, src) must give every rank an object equal to rank src's."""
    _collective_property(
        target,
        "COLL-10",
        "return rank src's object from broadcast_object(obj, src) on every rank",
        lambda world: st.tuples(picklable_objects(), st.integers(0, world - 1)),
        lambda comm, example, rank, world, device: broadcast_object_problem(comm, example, rank),
    )


@distributed_check("COLL-11", "collective")
def check_collective_all_gather_object_matches_direct_computation(
    target: Target[Collective],
) -> None:
    """all_gather_object must return every rank's object, in rank order."""

    def body(
        comm: Collective, value: object, rank: int, world: int, device: torch.device
    ) -> str | None:
        result = comm.all_gather_object({"rank": rank, "value": value})
        want = [{"rank": r, "value": value} for r in range(world)]
        if result == want:
            return None
        return f"all_gather_object(obj) returned {show(result)}, expected {show(want)}"

    _collective_property(
        target,
        "COLL-11",
        "return every rank's object from all_gather_object, indexed by rank",
        lambda world: picklable_objects(),
        body,
    )


@distributed_check("COLL-12", "collective")
def check_collective_gather_matches_direct_computation(target: Target[Collective]) -> None:
    """gather(t, dst) must give rank dst every rank's tensor in rank order and None elsewhere."""

    def body(
        comm: Collective, example: Movement, rank: int, world: int, device: torch.device
    ) -> str | None:
        mine = variant(example.template, rank, device)
        result = comm.gather(mine, example.root)
        if rank == example.root:
            want = [variant(example.template, r, device) for r in range(world)]
            if same_list(result, want):
                return None
            return f"gather(t, dst={example.root}) returned {show(result)}, expected {show(want)}"
        if result is None:
            return None
        return f"gather(t, dst={example.root}) returned {show(result)} on a non-destination rank"

    _collective_property(
        target,
        "COLL-12",
        "return every rank's tensor on rank dst (and None elsewhere) from gather",
        lambda world: movements(world),
        body,
    )


@distributed_check("COLL-13", "collective")
def check_collective_scatter_matches_direct_computation(target: Target[Collective]) -> None:
    """scatter(tensors, src) must give rank i the tensor tensors[i] of rank src."""

    def body(
        comm: Collective, example: Movement, rank: int, world: int, device: torch.device
    ) -> str | None:
        src = example.root
        listed = [
            variant(example.template, src * world + i, device).contiguous() for i in range(world)
        ]
        result = comm.scatter(listed if rank == src else None, src)
        want = variant(example.template, src * world + rank, device)
        if same_bits(result, want):
            return None
        return f"scatter(tensors, src={src}) returned {show(result)}, expected {show(want)}"

    _collective_property(
        target,
        "COLL-13",
        "return rank src's tensors[i] on rank i from scatter",
        lambda world: movements(world),
        body,
    )


@distributed_check("COLL-14", "collective")
def check_collective_reduce_scatter_matches_direct_computation(
    target: Target[Collective],
) -> None:
    """reduce_scatter must give rank i the reduction over ranks of their tensors[i]."""

    def body(
        comm: Collective, example: Reduction, rank: int, world: int, device: torch.device
    ) -> str | None:
        listed = [example.tensor(rank * world + i, device) for i in range(world)]
        if example.op is None:
            result = comm.reduce_scatter(listed)
            op: ReduceOp = "mean"
        else:
            result = comm.reduce_scatter(listed, example.op)
            op = example.op
        shares = [example.tensor(r * world + rank, device) for r in range(world)]
        problem = reduction_problem(result, shares, op)
        return None if problem is None else f"reduce_scatter(tensors, {op!r}) {problem}"

    _collective_property(
        target,
        "COLL-14",
        "return on rank i the reduction over ranks of their tensors[i] from reduce_scatter",
        lambda world: reductions(world, world * world),
        body,
    )


@distributed_check("COLL-15", "collective")
def check_collective_all_to_all_matches_direct_computation(target: Target[Collective]) -> None:
    """all_to_all must give rank i, at index j, rank j's tensors[i]."""

    def body(
        comm: Collective, example: Movement, rank: int, world: int, device: torch.device
    ) -> str | None:
        listed = [
            variant(example.template, rank * world + i, device).contiguous() for i in range(world)
        ]
        result = comm.all_to_all(listed)
        want = [variant(example.template, j * world + rank, device) for j in range(world)]
        if same_list(result, want):
            return None
        return f"all_to_all(tensors) returned {show(result)}, expected {show(want)}"

    _collective_property(
        target,
        "COLL-15",
        "return rank j's tensors[i] at index j on rank i from all_to_all",
        lambda world: movements(world),
        body,
    )


@distributed_check("COLL-16", "collective")
def check_collective_barrier_waits_for_the_last_rank(target: Target[Collective]) -> None:
    """No rank may leave barrier() before the last rank has entered it."""
    with set_up_collective(target) as (collective, context):
        problem = guarded(lambda: barrier_problem(collective, context))
        agree(
            cast("Target[object]", target),
            context,
            "COLL-16",
            problem,
            expected="return from barrier() only after every rank has entered it",
        )


@distributed_check("COLL-2", "collective")
def check_collective_all_reduce_raises_timeout_error_within_its_timeout(
    target: Target[Collective],
) -> None:
    """all_reduce that one rank never joins must raise CollectiveTimeoutError in time."""
    with set_up_collective(target) as (collective, context):
        device = device_option(cast("Target[object]", target))
        problem = timeout_problem(
            lambda: collective.all_reduce(torch.ones(3, device=device), timeout=SHORT_TIMEOUT),
            context,
            "all_reduce(t, timeout=1s)",
        )
        agree(
            cast("Target[object]", target),
            context,
            "COLL-2",
            problem,
            expected=f"raise CollectiveTimeoutError within 1 s + {TIMEOUT_SLACK_S:g} s slack "
            "when a rank never joins",
            hint="Pass the timeout to the backend and translate its timeout error.",
        )
