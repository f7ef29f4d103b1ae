"""COLL-6, COLL-7: all_reduce reduces element-wise for every op, layout and dtype, mean is
sum divided by world size, and an unknown reduce op raises ConfigurationError."""

from __future__ import annotations

import inspect
from functools import partial
from typing import TYPE_CHECKING, Final, cast

import torch

from trainspec.conformance._helpers import describe_exception, expect_raises, failure
from trainspec.conformance.checks.collective._fixtures import (
    _DTYPES,
    _LAYOUT_DTYPES,
    _int_input_line,
    _layout_snippet,
    _layouts,
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

_BAD_REDUCE_OPS: Final = ("avg", "SUM", "average", "")


# --------------------------------------------------------------------------- COLL-6, COLL-7


@check("COLL-6", "collective")
def check_collective_all_reduce_defaults_to_mean(target: Target[Collective]) -> None:
    """all_reduce's reduce_op must default to "mean"."""
    with _set_up(target) as collective:
        device = device_option(target)
        parameter = inspect.signature(collective.all_reduce).parameters.get("reduce_op")
        default = None if parameter is None else parameter.default
        if default != "mean":
            raise failure(
                target,
                "COLL-6",
                expected='declare all_reduce(tensor, reduce_op="mean", ...)',
                actual=f"reduce_op default {default!r}",
                hint="Every collective and strategy uses the same default: mean.",
                snippet=_snippet(
                    target,
                    "import inspect\nprint(inspect.signature(collective.all_reduce))",
                    set_up=False,
                ),
            )
        mine = contribution(collective.rank, device, torch.int64)
        result = collective.all_reduce(mine)
        contributions = [contribution(r, device, torch.int64) for r in range(collective.world_size)]
        if not result.is_floating_point() or not tensors_match(
            result, expected_reduction(contributions, "mean")
        ):
            raise failure(
                target,
                "COLL-6",
                expected="compute the mean when all_reduce is called without reduce_op",
                actual=f"{show(result)} for contributions {show(contributions)}",
                snippet=_snippet(
                    target, _int_input_line(device) + "print(collective.all_reduce(t))"
                ),
            )


@check("COLL-6", "collective")
def check_collective_all_reduce_computes_every_reduce_op(target: Target[Collective]) -> None:
    """all_reduce must compute every op in REDUCE_OPS element-wise over the ranks.

    The dtype is kept, except that the mean of integers is floating point."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        for dtype in _DTYPES:
            contributions = [contribution(r, device, dtype) for r in range(world)]
            for op in REDUCE_OPS:
                for scalar in (False, True):
                    mine = contribution(rank, device, dtype)
                    inputs = contributions
                    if scalar:  # a 0-d tensor: the first element
                        mine = mine[0, 0].clone()
                        inputs = [value[0, 0] for value in contributions]
                    result = collective.all_reduce(mine, op)
                    expected = expected_reduction(inputs, op)
                    int_mean = op == "mean" and not dtype.is_floating_point
                    dtype_ok = result.is_floating_point() if int_mean else result.dtype == dtype
                    if not isinstance(result, torch.Tensor) or not (
                        dtype_ok and tensors_match(result, expected)
                    ):
                        want_dtype = "a floating dtype" if int_mean else str(dtype)
                        raise failure(
                            target,
                            "COLL-6",
                            expected=f"return {values(expected)} with {want_dtype} from "
                            f"all_reduce(t, {op!r}) on rank {rank} of {world}",
                            actual=show(result),
                            hint='"mean" is the sum divided by world_size.',
                            snippet=_snippet(
                                target,
                                _int_input_line(device, dtype)
                                + ("t = t[0, 0].clone()\n" if scalar else "")
                                + f"print(collective.all_reduce(t, {op!r}))",
                            ),
                        )


@check("COLL-6", "collective")
def check_collective_all_reduce_accepts_any_layout_and_dtype(target: Target[Collective]) -> None:
    """all_reduce must reduce non-contiguous, 0-d and empty tensors of common dtypes."""
    with _set_up(target) as collective:
        device = device_option(target)
        rank, world = collective.rank, collective.world_size
        for dtype in _LAYOUT_DTYPES:
            reduced = expected_reduction(
                [contribution(r, device, dtype) for r in range(world)], "sum"
            )
            mine = _layouts(contribution(rank, device, dtype))
            wanted = _layouts(reduced)
            for (layout, tensor), (_, expected) in zip(mine, wanted, strict=True):
                before = tensor.clone()
                try:
                    result: object = collective.all_reduce(tensor, "sum")
                except Exception as error:
                    result = error
                ok = (
                    isinstance(result, torch.Tensor)
                    and result.dtype == dtype
                    and tensors_match(result, expected)
                )
                if ok and not torch.equal(tensor, before):
                    # A right result with a modified input breaks the common rule, not COLL-6.
                    raise failure(
                        target,
                        "COLL-1",
                        expected=f"leave the input of all_reduce(t, 'sum') unchanged for a "
                        f"{dtype} tensor in layout {layout!r}",
                        actual=f"input was {show(before)}, now {show(tensor)}",
                        hint="Reduce into a new tensor (or a contiguous copy), never into the "
                        "caller's tensor.",
                        snippet=_layout_snippet(target, dtype, 'all_reduce(t, "sum")'),
                    )
                if not ok:
                    raise failure(
                        target,
                        "COLL-6",
                        expected=f"return {values(expected)} from all_reduce(t, 'sum') for a "
                        f"{dtype} tensor in layout {layout!r}",
                        actual=describe_exception(result)
                        if isinstance(result, BaseException)
                        else f"{show(result)}, input now {show(tensor)}",
                        hint="Make a contiguous copy before handing a tensor to the backend.",
                        snippet=_layout_snippet(target, dtype, 'all_reduce(t, "sum")'),
                    )


@check("COLL-6", "collective")
def check_collective_all_reduce_mean_is_sum_over_world_size(target: Target[Collective]) -> None:
    """all_reduce "mean" must equal "sum" / world_size, as floating point for integers."""
    with _set_up(target) as collective:
        device = device_option(target)
        world = collective.world_size
        for dtype in _DTYPES:
            # A fresh input per call: an input modified in place is COLL-1's to report.
            total = collective.all_reduce(contribution(collective.rank, device, dtype), "sum")
            mean = collective.all_reduce(contribution(collective.rank, device, dtype), "mean")
            wanted = total.detach().to("cpu", torch.float64) / world
            if not mean.is_floating_point() or not tensors_match(mean, wanted):
                raise failure(
                    target,
                    "COLL-6",
                    expected=f"return all_reduce(t, 'sum') / {world} as a floating-point tensor "
                    f"from all_reduce(t, 'mean') for {dtype}",
                    actual=f"sum {show(total)}, mean {show(mean)}",
                    hint="Compute the mean as sum then divide (true division) where the "
                    "backend has no average.",
                    snippet=_snippet(
                        target,
                        _int_input_line(device, dtype)
                        + 'print(collective.all_reduce(t, "sum"))\n'
                        + 'print(collective.all_reduce(t, "mean"))',
                    ),
                )


@check("COLL-7", "collective")
def check_collective_rejects_unknown_reduce_ops(target: Target[Collective]) -> None:
    """An op outside REDUCE_OPS must raise ConfigurationError (all_reduce, reduce_scatter)."""
    with _set_up(target) as collective:
        device = device_option(target)
        world = collective.world_size
        mine = contribution(collective.rank, device, torch.float32)
        listed = [mine.clone() for _ in range(world)]
        for bad_name in _BAD_REDUCE_OPS:
            bad = cast("ReduceOp", bad_name)  # deliberately outside the vocabulary
            calls: tuple[tuple[str, Callable[[], object]], ...] = (
                (f"all_reduce(t, {bad!r})", partial(collective.all_reduce, mine, bad)),
                (
                    f"reduce_scatter([t] * world_size, {bad!r})",
                    partial(collective.reduce_scatter, listed, bad),
                ),
            )
            for text, call in calls:
                expect_raises(
                    target,
                    "COLL-7",
                    ConfigurationError,
                    call,
                    expected=f"raise ConfigurationError naming the valid ops from {text}",
                    hint=f"Accept exactly {', '.join(REDUCE_OPS)} (trainspec.REDUCE_OPS).",
                    snippet=_snippet(
                        target,
                        _int_input_line(device, torch.float32)
                        + "world_size = collective.world_size\n"
                        + f"collective.{text}",
                    ),
                )
