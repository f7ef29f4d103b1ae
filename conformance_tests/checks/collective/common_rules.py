"""COLL-1 ... COLL-3: collectives leave their inputs unchanged and return new tensors,
time out instead of hanging, and a dead peer makes the others raise CollectiveError."""

from __future__ import annotations

import time
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import describe_exception, expect_raises, failure
from trainspec.conformance.checks.collective._fixtures import (
    _TIMEOUT,
    BASE,
    _int_input_line,
    _set_up,
    _snippet,
    contribution,
    device_option,
    shares_storage,
    show,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.errors import CollectiveError, CollectiveTimeoutError, LifecycleError
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.collective import Collective


def _operations(
    collective: Collective, device: torch.device, dtype: torch.dtype
) -> list[tuple[str, list[torch.Tensor], Callable[[], object]]]:
    """(call text, input tensors, call) for every tensor operation, on this rank."""
    rank, world = collective.rank, collective.world_size
    mine = contribution(rank, device, dtype)
    listed = [contribution(rank, device, dtype, index=i) for i in range(world)]
    scatter_in = listed if rank == 0 else None
    ops: list[tuple[str, list[torch.Tensor], Callable[[], object]]] = []
    for op in REDUCE_OPS:
        ops.append((f"all_reduce(t, {op!r})", [mine], partial(collective.all_reduce, mine, op)))
    ops += [
        ("all_gather(t)", [mine], lambda: collective.all_gather(mine)),
        ("broadcast(t, src=0)", [mine], lambda: collective.broadcast(mine, 0)),
        ("gather(t, dst=0)", [mine], lambda: collective.gather(mine, 0)),
        (
            "scatter([t, ...], src=0)",
            listed if rank == 0 else [],
            lambda: collective.scatter(scatter_in, 0),
        ),
        ("reduce_scatter([t, ...])", listed, lambda: collective.reduce_scatter(listed)),
        ("all_to_all([t, ...])", listed, lambda: collective.all_to_all(listed)),
    ]
    return ops


def _result_tensors(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [item for item in result if isinstance(item, torch.Tensor)]
    return []


# --------------------------------------------------------------------------- COLL-1


@check("COLL-1", "collective")
def check_collective_operations_leave_inputs_unchanged_and_return_new_tensors(
    target: Target[Collective],
) -> None:
    """Operations must not modify inputs and must return new tensors on the input's device."""
    with _set_up(target) as collective:
        device = device_option(target)
        for text, inputs, call in _operations(collective, device, torch.float32):
            before = [tensor.clone() for tensor in inputs]
            versions = [tensor._version for tensor in inputs]
            result = call()
            repro = _snippet(
                target,
                f"t = torch.tensor({list(map(list, BASE))}, dtype=torch.float32, "
                f'device="{device}")\nbefore = t.clone()\nresult = collective.{text}\n'
                "assert torch.equal(t, before) and result is not t",
            )
            for tensor, old, version in zip(inputs, before, versions, strict=True):
                if tensor._version != version or not torch.equal(tensor, old):
                    raise failure(
                        target,
                        "COLL-1",
                        expected=f"leave the input of {text} unchanged",
                        actual=(
                            f"the input changed from {show(old)} to {show(tensor)} "
                            f"(version counter {version} -> {tensor._version})"
                        ),
                        hint="Compute into a new tensor (clone first if the backend works "
                        "in place).",
                        snippet=repro,
                    )
            for out in _result_tensors(result):
                for tensor in inputs:
                    if out is tensor or shares_storage(out, tensor):
                        raise failure(
                            target,
                            "COLL-1",
                            expected=f"return a new tensor from {text}",
                            actual="a result that is (or shares storage with) the input",
                            hint="Return a copy: callers may modify the result.",
                            snippet=repro,
                        )
                if out.device != device:
                    raise failure(
                        target,
                        "COLL-1",
                        expected=f"return {text}'s result on the input's device {device}",
                        actual=f"a result on {out.device}",
                        snippet=repro,
                    )


# --------------------------------------------------------------------------- COLL-2, COLL-3


@check("COLL-2", "collective")
def check_collective_operations_accept_a_timeout(target: Target[Collective]) -> None:
    """Every operation must accept timeout= and complete when every rank takes part."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        mine = contribution(rank, device, torch.float32)
        listed = [contribution(rank, device, torch.float32, index=i) for i in range(world)]
        calls: list[tuple[str, Callable[[], object]]] = [
            (
                "all_reduce(t, timeout=timeout)",
                lambda: collective.all_reduce(mine, timeout=_TIMEOUT),
            ),
            (
                "all_gather(t, timeout=timeout)",
                lambda: collective.all_gather(mine, timeout=_TIMEOUT),
            ),
            (
                "broadcast(t, 0, timeout=timeout)",
                lambda: collective.broadcast(mine, 0, timeout=_TIMEOUT),
            ),
            (
                "broadcast_object({}, 0, timeout=timeout)",
                lambda: collective.broadcast_object({}, 0, timeout=_TIMEOUT),
            ),
            (
                "all_gather_object({}, timeout=timeout)",
                lambda: collective.all_gather_object({}, timeout=_TIMEOUT),
            ),
            ("gather(t, 0, timeout=timeout)", lambda: collective.gather(mine, 0, timeout=_TIMEOUT)),
            (
                "scatter([t, ...], 0, timeout=timeout)",
                lambda: collective.scatter(listed if rank == 0 else None, 0, timeout=_TIMEOUT),
            ),
            (
                "reduce_scatter([t, ...], timeout=timeout)",
                lambda: collective.reduce_scatter(listed, timeout=_TIMEOUT),
            ),
            (
                "all_to_all([t, ...], timeout=timeout)",
                lambda: collective.all_to_all(listed, timeout=_TIMEOUT),
            ),
            ("barrier(timeout=timeout)", lambda: collective.barrier(timeout=_TIMEOUT)),
        ]
        for text, call in calls:
            try:
                call()
            except Exception as error:
                raise failure(
                    target,
                    "COLL-2",
                    expected=f"complete {text} with timeout=timedelta(seconds=120)",
                    actual=describe_exception(error),
                    hint="Every operation takes a keyword-only timeout (None means the "
                    "collective's default).",
                    snippet=_snippet(
                        target,
                        "from datetime import timedelta\ntimeout = timedelta(seconds=120)\n"
                        + _int_input_line(device, torch.float32)
                        + f"collective.{text}",
                    ),
                ) from error


@check("COLL-2", "collective", layer="distributed")
def check_collective_timeout_raises_and_tears_the_group_down(target: Target[Collective]) -> None:
    """An operation a rank never joins must raise CollectiveTimeoutError and end the group.

    Afterwards the collective refuses calls with LifecycleError until setup runs again."""
    with _set_up(target) as collective:
        world, rank = collective.world_size, collective.rank
        if world < 2:
            raise CheckSkipped("needs a world of at least 2 ranks (distributed harness)")
        short = timedelta(seconds=1)
        if rank == world - 1:
            # The absent rank: stay out of the barrier until the others have timed out.
            time.sleep(short.total_seconds() * 3)
            return
        started = time.monotonic()
        expect_raises(
            target,
            "COLL-2",
            CollectiveTimeoutError,
            lambda: collective.barrier(timeout=short),
            expected=f"raise CollectiveTimeoutError on rank {rank} when rank {world - 1} "
            "never joins barrier(timeout=1s)",
            hint="Pass the timeout to the backend and translate its timeout error.",
        )
        waited = time.monotonic() - started
        if waited > short.total_seconds() * 10:
            raise failure(
                target,
                "COLL-2",
                expected="give up close to the timeout of 1 second",
                actual=f"waited {waited:.1f} seconds",
            )
        expect_raises(
            target,
            "COLL-2",
            LifecycleError,
            collective.barrier,
            expected="refuse calls with LifecycleError after a timeout tore the group down",
        )


@check("COLL-3", "collective", layer="distributed")
def check_collective_peer_that_leaves_makes_others_raise_collective_error(
    target: Target[Collective],
) -> None:
    """When a rank leaves, an operation on the others must raise CollectiveError, not hang.

    PeerFailureError or CollectiveTimeoutError are both allowed."""
    with _set_up(target) as collective:
        world, rank = collective.world_size, collective.rank
        if world < 2:
            raise CheckSkipped("needs a world of at least 2 ranks (distributed harness)")
        if rank == world - 1:
            collective.teardown()
            return
        expect_raises(
            target,
            "COLL-3",
            CollectiveError,
            lambda: collective.barrier(timeout=timedelta(seconds=10)),
            expected=f"raise CollectiveError on rank {rank} after rank {world - 1} left",
            hint="Translate the backend's connection errors into PeerFailureError.",
        )
