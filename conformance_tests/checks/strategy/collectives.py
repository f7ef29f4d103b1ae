"""STRAT-12, STRAT-13: the strategy collectives behave as the Collective's, and boolean
decisions agree on every rank."""

from __future__ import annotations

import inspect
from functools import partial
from typing import TYPE_CHECKING

import torch

from trainspec.collective import Collective
from trainspec.conformance._helpers import describe_value, expect_raises, failure
from trainspec.conformance.checks.collective import (
    contribution,
    expected_reduction,
    shares_storage,
    show,
    tensors_match,
    values,
)
from trainspec.conformance.checks.strategy._fixtures import _set_up, _snippet
from trainspec.conformance.core import Target, check
from trainspec.errors import ConfigurationError
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.strategy import Strategy

# --------------------------------------------------------------------------- STRAT-12, STRAT-13


@check("STRAT-12", "strategy")
def check_strategy_collective_defaults_match_the_collective_protocol(
    target: Target[Strategy],
) -> None:
    """The strategy's collective methods must take Collective's parameters and defaults."""
    strategy = target.make()
    for name in ("all_reduce", "all_gather", "broadcast", "broadcast_object", "barrier"):
        protocol = inspect.signature(getattr(Collective, name))
        mine = inspect.signature(getattr(strategy, name))
        for parameter in list(protocol.parameters.values())[1:]:  # skip self
            found = mine.parameters.get(parameter.name)
            if (
                found is None
                or found.default != parameter.default
                or (parameter.kind is parameter.KEYWORD_ONLY) != (found.kind is found.KEYWORD_ONLY)
            ):
                default = "" if parameter.default is parameter.empty else f"={parameter.default!r}"
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"declare {name}(..., {parameter.name}{default}) as "
                    f"Collective.{name} does",
                    actual=f"{name}{mine}",
                    hint="Every strategy uses the Collective's defaults: reduce_op='mean', "
                    "src=0, timeout=None (keyword-only).",
                    snippet=_snippet(
                        target,
                        f"import inspect\nprint(inspect.signature(strategy.{name}))",
                        set_up=False,
                    ),
                )


@check("STRAT-12", "strategy")
def check_strategy_all_reduce_computes_every_reduce_op(target: Target[Strategy]) -> None:
    """all_reduce must compute every op over the ranks (default mean), not modifying inputs."""
    with _set_up(target) as strategy:
        device, rank, world = strategy.root_device, strategy.global_rank, strategy.world_size
        for dtype in (torch.float32, torch.int64):
            contributions = [contribution(r, device, dtype) for r in range(world)]
            ops: list[str | None] = [None, *REDUCE_OPS]
            for op in ops:
                mine = contribution(rank, device, dtype)
                before = mine.clone()
                if op is None:
                    result = strategy.all_reduce(mine)
                else:
                    result = strategy.all_reduce(mine, op)  # type: ignore[arg-type]
                expected = expected_reduction(contributions, "mean" if op is None else op)  # type: ignore[arg-type]
                is_mean = op in (None, "mean")
                dtype_ok = (
                    result.is_floating_point()
                    if is_mean and not dtype.is_floating_point
                    else result.dtype == dtype
                )
                call = "all_reduce(t)" if op is None else f"all_reduce(t, {op!r})"
                repro = _snippet(
                    target,
                    f"t = torch.tensor([[1, -2, 3], [-4, 5, 0]], dtype={dtype}) * "
                    "(strategy.global_rank + 1)\n"
                    f"print(strategy.{call})",
                )
                if not (dtype_ok and tensors_match(result, expected)):
                    raise failure(
                        target,
                        "STRAT-12",
                        expected=f"return {values(expected)} from {call} on rank {rank} of {world}",
                        actual=show(result),
                        hint='The default reduce_op is "mean" (sum / world_size), as on every '
                        "Collective.",
                        snippet=repro,
                    )
                if not torch.equal(mine, before) or result is mine or shares_storage(result, mine):
                    raise failure(
                        target,
                        "STRAT-12",
                        expected=f"leave the input of {call} unchanged and return a new tensor",
                        actual=f"input now {show(mine)}",
                        snippet=repro,
                    )


@check("STRAT-12", "strategy")
def check_strategy_broadcast_and_gather_follow_the_collective_rules(
    target: Target[Strategy],
) -> None:
    """all_gather, broadcast, broadcast_object and barrier must behave as the Collective's."""
    with _set_up(target) as strategy:
        device, rank, world = strategy.root_device, strategy.global_rank, strategy.world_size
        gathered = strategy.all_gather(contribution(rank, device, torch.float32))
        expected = [contribution(r, device, torch.float32) for r in range(world)]
        if not (
            isinstance(gathered, list)
            and len(gathered) == world
            and all(tensors_match(g, e) for g, e in zip(gathered, expected, strict=True))
        ):
            raise failure(
                target,
                "STRAT-12",
                expected=f"return {values(expected)} from all_gather",
                actual=show(gathered),
                snippet=_snippet(target, "print(strategy.all_gather(torch.ones(2)))"),
            )
        for src in range(world):
            result = strategy.broadcast(contribution(rank, device, torch.float32), src)
            if not tensors_match(result, contribution(src, device, torch.float32)):
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"return rank {src}'s tensor from broadcast(t, src={src})",
                    actual=show(result),
                    snippet=_snippet(target, f"print(strategy.broadcast(torch.ones(2), {src}))"),
                )
            obj = {"rank": rank, "items": [rank, "x"]}
            received = strategy.broadcast_object(obj, src)
            # COLL-10: equal to src's object everywhere; a new object on every other rank
            # (rank src itself may get its own object back).
            shared = rank != src and (
                received is obj
                or (isinstance(received, dict) and received.get("items") is obj["items"])
            )
            if received != {"rank": src, "items": [src, "x"]} or shared:
                raise failure(
                    target,
                    "STRAT-12",
                    expected=f"return rank {src}'s object from broadcast_object, a new object "
                    "on every rank but src",
                    actual=describe_value(received) + (" (the caller's object)" if shared else ""),
                    snippet=_snippet(
                        target, f"obj = {{'rank': 0}}\nprint(strategy.broadcast_object(obj, {src}))"
                    ),
                )
        expect_raises(
            target,
            "STRAT-12",
            ConfigurationError,
            partial(strategy.broadcast, contribution(rank, device, torch.float32), world),
            expected=f"raise ConfigurationError for broadcast(t, src={world}) with world_size "
            f"{world}",
            snippet=_snippet(target, f"strategy.broadcast(torch.ones(2), src={world})"),
        )
        arrived: object = strategy.barrier()
        if arrived is not None:
            raise failure(
                target,
                "STRAT-12",
                expected="return None from barrier()",
                actual=describe_value(arrived),
                snippet=_snippet(target, "print(strategy.barrier())"),
            )


@check("STRAT-13", "strategy")
def check_strategy_reduce_boolean_decision_agrees_across_ranks(target: Target[Strategy]) -> None:
    """reduce_boolean_decision must be the all/any of every rank's decision, on every rank."""
    with _set_up(target) as strategy:
        rank, world = strategy.global_rank, strategy.world_size
        scenarios: list[tuple[str, Callable[[int], bool]]] = [
            ("every rank True", lambda r: True),
            ("every rank False", lambda r: False),
            ("only rank 0 True", lambda r: r == 0),
            (f"only rank {world - 1} False", lambda r: r != world - 1),
        ]
        for what, decide in scenarios:
            decisions = [decide(r) for r in range(world)]
            for all_ in (True, False):
                wanted = all(decisions) if all_ else any(decisions)
                got = strategy.reduce_boolean_decision(decide(rank), all=all_)
                if not isinstance(got, bool) or got != wanted:
                    raise failure(
                        target,
                        "STRAT-13",
                        expected=f"return {wanted} from reduce_boolean_decision(..., "
                        f"all={all_}) with {what} on {world} rank(s)",
                        actual=describe_value(got),
                        hint="all=True is True iff every rank decided True; all=False is True "
                        "iff any rank did.",
                        snippet=_snippet(
                            target,
                            f"print(strategy.reduce_boolean_decision({decide(rank)}, all={all_}))",
                        ),
                    )
