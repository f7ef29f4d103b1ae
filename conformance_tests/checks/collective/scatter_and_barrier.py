"""COLL-12 ... COLL-16: gather, scatter, reduce_scatter and all_to_all route item i to rank
i, and barrier returns only after every rank has entered it."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
)
from trainspec.conformance.checks.collective._fixtures import (
    _int_input_line,
    _list_matches,
    _set_up,
    _snippet,
    contribution,
    device_option,
    expected_reduction,
    show,
    tensors_match,
    values,
)
from trainspec.conformance.core import Target, check
from trainspec.errors import ConfigurationError
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.collective import Collective
    from trainspec.types import ReduceOp

# --------------------------------------------------------------------------- COLL-12 ... COLL-16


@check("COLL-12", "collective")
def check_collective_gather_collects_on_the_destination_only(target: Target[Collective]) -> None:
    """gather(tensor, dst) must return every rank's tensor on rank dst and None elsewhere."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        expected = [contribution(r, device, torch.float32) for r in range(world)]
        for dst in range(world):
            result = collective.gather(contribution(rank, device, torch.float32), dst)
            ok = _list_matches(result, expected) if rank == dst else result is None
            if not ok:
                want = values(expected) if rank == dst else "None"
                raise failure(
                    target,
                    "COLL-12",
                    expected=f"return {want} from gather(t, dst={dst}) on rank {rank}",
                    actual=show(result),
                    snippet=_snippet(
                        target,
                        _int_input_line(device, torch.float32)
                        + f"print(collective.gather(t, dst={dst}))",
                    ),
                )


@check("COLL-13", "collective")
def check_collective_scatter_delivers_each_rank_its_tensor(target: Target[Collective]) -> None:
    """scatter(tensors, src) must give rank i the tensor tensors[i] of rank src."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        for src in range(world):
            listed = [contribution(src, device, torch.float32, index=i) for i in range(world)]
            result = collective.scatter(listed if rank == src else None, src)
            expected = contribution(src, device, torch.float32, index=rank)
            if not (isinstance(result, torch.Tensor) and tensors_match(result, expected)):
                raise failure(
                    target,
                    "COLL-13",
                    expected=f"return {values(expected)} (rank {src}'s tensors[{rank}]) from "
                    f"scatter on rank {rank}",
                    actual=show(result),
                    snippet=_snippet(
                        target,
                        _int_input_line(device, torch.float32)
                        + "tensors = [t + 10 * i for i in range(collective.world_size)]\n"
                        + f"print(collective.scatter(tensors, src={src}))",
                    ),
                )


@check("COLL-13", "collective")
def check_collective_scatter_rejects_a_list_of_the_wrong_length(
    target: Target[Collective],
) -> None:
    """scatter on rank src must raise ConfigurationError for a list not of world_size."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        src = 0
        if rank != src:
            return  # only the source validates its list; the others must not wait for it
        t = contribution(rank, device, torch.float32)
        for length in (world + 1, world - 1):
            expect_raises(
                target,
                "COLL-13",
                ConfigurationError,
                partial(collective.scatter, [t.clone() for _ in range(length)], src),
                expected=f"raise ConfigurationError for scatter with {length} tensor(s) on a "
                f"world of {world}",
                hint="Check len(tensors) == world_size on the source rank before sending.",
                snippet=_snippet(
                    target,
                    _int_input_line(device, torch.float32)
                    + f"collective.scatter([t] * {length}, src=0)",
                ),
            )


@check("COLL-14", "collective")
def check_collective_reduce_scatter_reduces_each_rank_its_share(
    target: Target[Collective],
) -> None:
    """reduce_scatter must give rank i the reduction over ranks of their tensors[i].

    Every op in REDUCE_OPS, with "mean" as the default."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        for dtype in (torch.float32, torch.int64):
            listed = [contribution(rank, device, dtype, index=i) for i in range(world)]
            shares = [contribution(r, device, dtype, index=rank) for r in range(world)]
            ops: list[ReduceOp | None] = [None, *REDUCE_OPS]
            for op in ops:
                if op is None:
                    result = collective.reduce_scatter(listed)
                    expected = expected_reduction(shares, "mean")
                else:
                    result = collective.reduce_scatter(listed, op)
                    expected = expected_reduction(shares, op)
                int_mean = op in (None, "mean") and not dtype.is_floating_point
                dtype_ok = isinstance(result, torch.Tensor) and (
                    result.is_floating_point() if int_mean else result.dtype == dtype
                )
                if not (dtype_ok and tensors_match(result, expected)):
                    call = (
                        "reduce_scatter(tensors)"
                        if op is None
                        else f"reduce_scatter(tensors, {op!r})"
                    )
                    raise failure(
                        target,
                        "COLL-14",
                        expected=f"return {values(expected)} from {call} on rank {rank} of {world}",
                        actual=show(result),
                        hint="Rank i receives the reduction of every rank's tensors[i]; the "
                        'default op is "mean".',
                        snippet=_snippet(
                            target,
                            _int_input_line(device, dtype)
                            + "tensors = [t + 10 * i for i in range(collective.world_size)]\n"
                            + f"print(collective.{call})",
                        ),
                    )


@check("COLL-15", "collective")
def check_collective_all_to_all_exchanges_by_rank(target: Target[Collective]) -> None:
    """all_to_all must give rank i, at index j, rank j's tensors[i]."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        listed = [contribution(rank, device, torch.float32, index=i) for i in range(world)]
        result = collective.all_to_all(listed)
        expected = [contribution(j, device, torch.float32, index=rank) for j in range(world)]
        if not _list_matches(result, expected):
            raise failure(
                target,
                "COLL-15",
                expected=f"return {values(expected)} from all_to_all on rank {rank}",
                actual=show(result),
                snippet=_snippet(
                    target,
                    _int_input_line(device, torch.float32)
                    + "tensors = [t + 10 * i for i in range(collective.world_size)]\n"
                    + "print(collective.all_to_all(tensors))",
                ),
            )


@check("COLL-16", "collective")
def check_collective_barrier_returns_once_every_rank_arrived(target: Target[Collective]) -> None:
    """barrier must return None once every rank has entered it.

    Only ``barrier()`` is called: whether ``timeout=`` is accepted is COLL-2's to decide, so a
    collective without per-call timeouts fails that clause alone.
    """
    with _set_up(target) as collective:
        calls: tuple[tuple[str, Callable[[], None]], ...] = (("barrier()", collective.barrier),)
        for text, call in calls:
            try:
                result = call()
            except Exception as error:
                raise failure(
                    target,
                    "COLL-16",
                    expected=f"return from {text} once every rank arrived",
                    actual=describe_exception(error),
                    snippet=_snippet(target, f"collective.{text}"),
                ) from error
            if result is not None:
                raise failure(
                    target,
                    "COLL-16",
                    expected=f"return None from {text}",
                    actual=describe_value(result),
                )
