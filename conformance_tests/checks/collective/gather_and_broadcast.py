"""COLL-8 ... COLL-11: all_gather and all_gather_object return every rank's value in rank
order; broadcast and broadcast_object deliver the source rank's tensor or a copy of its object."""

from __future__ import annotations

import copy
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
    _DTYPES,
    _LAYOUT_DTYPES,
    _int_input_line,
    _layout_snippet,
    _layouts,
    _list_matches,
    _set_up,
    _snippet,
    contribution,
    device_option,
    show,
    tensors_match,
    values,
)
from trainspec.conformance.core import Target, check
from trainspec.errors import ConfigurationError

if TYPE_CHECKING:
    from trainspec.collective import Collective


def _object_of(rank: int) -> dict[str, object]:
    """A picklable, mutable, rank-specific payload for the object collectives."""
    return {"rank": rank, "items": [rank, "x", None, 2.5], "nested": {"pair": (rank, "y")}}


@check("COLL-8", "collective")
def check_collective_all_gather_accepts_any_layout_and_dtype(target: Target[Collective]) -> None:
    """all_gather must gather non-contiguous, 0-d and empty tensors of common dtypes."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        for dtype in _LAYOUT_DTYPES:
            everyone = [_layouts(contribution(r, device, dtype)) for r in range(world)]
            for index, (layout, tensor) in enumerate(everyone[rank]):
                expected = [layouts[index][1] for layouts in everyone]
                try:
                    result: object = collective.all_gather(tensor)
                except Exception as error:
                    result = error
                if not _list_matches(result, expected):
                    raise failure(
                        target,
                        "COLL-8",
                        expected=f"return {values(expected)} from all_gather(t) for a {dtype} "
                        f"tensor in layout {layout!r}",
                        actual=describe_exception(result)
                        if isinstance(result, BaseException)
                        else show(result),
                        hint="Make a contiguous copy before handing a tensor to the backend.",
                        snippet=_layout_snippet(target, dtype, "all_gather(t)"),
                    )


# --------------------------------------------------------------------------- COLL-8 ... COLL-11


@check("COLL-8", "collective")
def check_collective_all_gather_returns_every_rank_in_rank_order(
    target: Target[Collective],
) -> None:
    """all_gather must return a list of world_size tensors, entry r being rank r's tensor."""
    with _set_up(target) as collective:
        device = device_option(target)
        world = collective.world_size
        for dtype in _DTYPES:
            result = collective.all_gather(contribution(collective.rank, device, dtype))
            expected = [contribution(r, device, dtype) for r in range(world)]
            if not _list_matches(result, expected):
                raise failure(
                    target,
                    "COLL-8",
                    expected=f"return {values(expected)} from all_gather on {world} rank(s)",
                    actual=show(result),
                    hint="Entry r of the list is rank r's tensor, with its dtype and shape.",
                    snippet=_snippet(
                        target, _int_input_line(device, dtype) + "print(collective.all_gather(t))"
                    ),
                )


@check("COLL-9", "collective")
def check_collective_broadcast_delivers_the_source_rank_tensor(
    target: Target[Collective],
) -> None:
    """broadcast(tensor, src) must return rank src's tensor on every rank, for every src."""
    with _set_up(target) as collective:
        device = device_option(target)
        for src in range(collective.world_size):
            for dtype in _DTYPES:
                result = collective.broadcast(contribution(collective.rank, device, dtype), src)
                expected = contribution(src, device, dtype)
                if not (
                    isinstance(result, torch.Tensor)
                    and result.dtype == dtype
                    and tensors_match(result, expected)
                ):
                    raise failure(
                        target,
                        "COLL-9",
                        expected=f"return rank {src}'s {values(expected)} from "
                        f"broadcast(t, src={src}) on rank {collective.rank}",
                        actual=show(result),
                        snippet=_snippet(
                            target,
                            _int_input_line(device, dtype)
                            + f"print(collective.broadcast(t, src={src}))",
                        ),
                    )


@check("COLL-9", "collective")
def check_collective_broadcast_rejects_a_source_outside_the_world(
    target: Target[Collective],
) -> None:
    """broadcast must raise ConfigurationError for src outside [0, world_size)."""
    with _set_up(target) as collective:
        device = device_option(target)
        world = collective.world_size
        mine = contribution(collective.rank, device, torch.float32)
        for src in (world, world + 1, -1):
            expect_raises(
                target,
                "COLL-9",
                ConfigurationError,
                partial(collective.broadcast, mine, src),
                expected=f"raise ConfigurationError for broadcast(t, src={src}) with "
                f"world_size {world}",
                hint="Validate src against [0, world_size) before communicating.",
                snippet=_snippet(
                    target,
                    _int_input_line(device, torch.float32) + f"collective.broadcast(t, src={src})",
                ),
            )


@check("COLL-10", "collective")
def check_collective_broadcast_object_delivers_a_copy_of_the_source_object(
    target: Target[Collective],
) -> None:
    """broadcast_object(obj, src) must return rank src's object, a new one on every other rank.

    On rank ``src`` itself the result only has to equal ``obj`` (returning ``obj`` itself is
    allowed, as torch.distributed.broadcast_object_list does); on every other rank it is a new
    object sharing nothing with the caller's. The caller's object is left unchanged (§1.7)."""
    with _set_up(target) as collective:
        for src in range(collective.world_size):
            mine = _object_of(collective.rank)
            pristine = copy.deepcopy(mine)
            result = collective.broadcast_object(mine, src)
            repro = _snippet(
                target,
                f"obj = {_object_of(collective.rank)!r}\n"
                f"result = collective.broadcast_object(obj, src={src})\n"
                f"assert result == {_object_of(src)!r}"
                + ("" if collective.rank == src else " and result is not obj"),
            )
            if result != _object_of(src):
                raise failure(
                    target,
                    "COLL-10",
                    expected=f"return rank {src}'s object {_object_of(src)!r} from "
                    f"broadcast_object(obj, src={src})",
                    actual=describe_value(result),
                    snippet=repro,
                )
            if collective.rank != src and _shares_parts(result, mine):
                raise failure(
                    target,
                    "COLL-10",
                    expected=f"return a new object on rank {collective.rank} (not the source "
                    f"rank {src}), not the caller's object",
                    actual="the caller's object itself (or one of its parts)",
                    hint="Unpickle the payload into a new object on every rank but src.",
                    snippet=repro,
                )
            if mine != pristine:
                raise failure(
                    target,
                    "COLL-10",
                    expected="leave the caller's object unchanged (spec section 1.7)",
                    actual=f"{describe_value(mine)} (was {describe_value(pristine)})",
                    snippet=repro,
                )


def _shares_parts(result: object, mine: dict[str, object]) -> bool:
    """Whether ``result`` is the caller's payload ``mine`` or holds one of its mutable parts."""
    parts = {id(mine), id(mine["items"]), id(mine["nested"])}
    pending: list[object] = [result]
    visited: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in parts:
            return True
        if id(item) in visited:
            continue
        visited.add(id(item))
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


@check("COLL-11", "collective")
def check_collective_all_gather_object_returns_every_rank_in_rank_order(
    target: Target[Collective],
) -> None:
    """all_gather_object must return a copy of every rank's object, in rank order."""
    with _set_up(target) as collective:
        world = collective.world_size
        mine = _object_of(collective.rank)
        result = collective.all_gather_object(mine)
        expected = [_object_of(r) for r in range(world)]
        repro = _snippet(
            target, f"obj = {_object_of(0)!r}\nprint(collective.all_gather_object(obj))"
        )
        if not isinstance(result, list) or result != expected:
            raise failure(
                target,
                "COLL-11",
                expected=f"return {expected!r} from all_gather_object",
                actual=describe_value(result),
                snippet=repro,
            )
        if any(item is mine for item in result):
            raise failure(
                target,
                "COLL-11",
                expected="return copies of the objects",
                actual="a list holding the caller's object itself",
                snippet=repro,
            )
