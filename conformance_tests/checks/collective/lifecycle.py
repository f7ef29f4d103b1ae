"""COLL-4, COLL-5: ranks are consistent, and the group lifecycle (setup, teardown, set up
again) is explicit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import describe_exception, expect_raises, failure
from trainspec.conformance.checks.collective._fixtures import (
    _int_input_line,
    _set_up,
    _snippet,
    _teardown_quietly,
    contribution,
    device_option,
    environment_option,
    show,
)
from trainspec.conformance.core import Target, check
from trainspec.errors import LifecycleError

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.collective import Collective

# --------------------------------------------------------------------------- COLL-4, COLL-5


@check("COLL-4", "collective")
def check_collective_rank_is_within_world_size(target: Target[Collective]) -> None:
    """After setup, world_size must be an int >= 1 and rank an int in [0, world_size)."""
    with _set_up(target) as collective:
        rank, world = collective.rank, collective.world_size
        if not _is_int(world) or world < 1 or not _is_int(rank) or not 0 <= rank < world:
            raise failure(
                target,
                "COLL-4",
                expected="report an int world_size >= 1 and an int rank in [0, world_size)",
                actual=f"rank={rank!r}, world_size={world!r}",
                snippet=_snippet(target, "print(collective.rank, collective.world_size)"),
            )


@check("COLL-5", "collective")
def check_collective_refuses_operations_before_setup(target: Target[Collective]) -> None:
    """Before setup, is_initialized is False and every operation raises LifecycleError."""
    collective = target.make()
    device = device_option(target)
    if collective.is_initialized is not False:
        raise failure(
            target,
            "COLL-5",
            expected="report is_initialized == False before setup",
            actual=f"is_initialized == {collective.is_initialized!r}",
            snippet=_snippet(target, "print(collective.is_initialized)", set_up=False),
        )
    t = contribution(0, device, torch.float32)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("all_reduce(t)", lambda: collective.all_reduce(t)),
        ("all_gather(t)", lambda: collective.all_gather(t)),
        ("broadcast(t)", lambda: collective.broadcast(t)),
        ("broadcast_object({})", lambda: collective.broadcast_object({})),
        ("all_gather_object({})", lambda: collective.all_gather_object({})),
        ("gather(t)", lambda: collective.gather(t)),
        ("scatter([t])", lambda: collective.scatter([t])),
        ("reduce_scatter([t])", lambda: collective.reduce_scatter([t])),
        ("all_to_all([t])", lambda: collective.all_to_all([t])),
        ("barrier()", collective.barrier),
    ]
    for text, call in calls:
        expect_raises(
            target,
            "COLL-5",
            LifecycleError,
            call,
            expected=f"raise LifecycleError from {text} before setup",
            hint="Check the lifecycle state first in every operation.",
            snippet=_snippet(
                target, _int_input_line(device, torch.float32) + f"collective.{text}", set_up=False
            ),
        )


@check("COLL-5", "collective")
def check_collective_setup_adopts_the_environment_ranks(target: Target[Collective]) -> None:
    """After setup, rank and world_size must equal the environment's.

    is_initialized must be True as well."""
    collective = target.make()
    environment = environment_option(target)
    collective.setup(environment, device_option(target))
    try:
        got = (collective.is_initialized, collective.rank, collective.world_size)
        want = (True, environment.global_rank, environment.world_size)
        if got != want:
            raise failure(
                target,
                "COLL-5",
                expected="report (is_initialized, rank, world_size) == "
                f"{want} after setup with that environment",
                actual=str(got),
                snippet=_snippet(
                    target,
                    "print(collective.is_initialized, collective.rank, collective.world_size)",
                ),
            )
    finally:
        _teardown_quietly(collective)


@check("COLL-5", "collective")
def check_collective_teardown_is_idempotent_and_allows_setup_again(
    target: Target[Collective],
) -> None:
    """Teardown must end the group, be idempotent and allow setup to run again.

    After teardown is_initialized is False and operations raise LifecycleError."""
    collective = target.make()
    device = device_option(target)
    collective.setup(environment_option(target), device)
    t = contribution(0, device, torch.float32)
    again = _snippet(target, "collective.teardown()\ncollective.teardown()\n")
    try:
        collective.teardown()
        if collective.is_initialized:
            raise failure(
                target,
                "COLL-5",
                expected="report is_initialized == False after teardown",
                actual="is_initialized == True",
                snippet=_snippet(target, "collective.teardown()\nprint(collective.is_initialized)"),
            )
        expect_raises(
            target,
            "COLL-5",
            LifecycleError,
            lambda: collective.all_reduce(t),
            expected="raise LifecycleError from all_reduce after teardown",
            snippet=_snippet(target, "collective.teardown()\ncollective.all_reduce(torch.ones(2))"),
        )
        try:
            collective.teardown()
        except Exception as error:
            raise failure(
                target,
                "COLL-5",
                expected="accept a second teardown (teardown is idempotent)",
                actual=describe_exception(error),
                hint="Make teardown a no-op when the collective is not set up.",
                snippet=again,
            ) from error
        try:
            collective.setup(environment_option(target), device)
            result = collective.all_reduce(t, "sum")
        except Exception as error:
            raise failure(
                target,
                "COLL-5",
                expected="support setup again after teardown",
                actual=describe_exception(error),
                hint="Reset all per-group state in teardown.",
                snippet=_snippet(
                    target,
                    "collective.teardown()\ncollective.setup(SingleProcessEnvironment(), "
                    f'torch.device("{device}"))\ncollective.all_reduce(torch.ones(2), "sum")',
                ),
            ) from error
        if not collective.is_initialized or not isinstance(result, torch.Tensor):
            raise failure(
                target,
                "COLL-5",
                expected="work again after teardown and a new setup",
                actual=f"is_initialized={collective.is_initialized!r}, "
                f"all_reduce returned {show(result)}",
            )
    finally:
        _teardown_quietly(collective)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
