"""Generated inputs that every rank can rebuild, and the expected results of each
collective operation computed directly from them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import torch
from hypothesis import strategies as st

from trainspec.conformance.distributed.checks._support import (
    Communicates,
    show,
)
from trainspec.conformance.hypothesis_strategies import reduce_ops, tensors

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hypothesis.strategies import SearchStrategy

    from trainspec.types import ReduceOp


__all__ = [
    "Movement",
    "Reduction",
    "all_gather_problem",
    "all_reduce_problem",
    "broadcast_object_problem",
    "broadcast_problem",
    "movements",
    "picklable_objects",
    "raw_bytes",
    "reduction_problem",
    "reductions",
    "same_bits",
    "same_list",
    "variant",
]

_MOVABLE_DTYPES: Final = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
"""Dtypes every c10d backend moves (gloo has no int16, uint16/32/64 or float8)."""
_REDUCE_DTYPES: Final = (torch.int32, torch.int64, torch.float32, torch.float64)

# --------------------------------------------------------------------------- generated inputs


def raw_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values as a flat uint8 CPU tensor (bit-exact; empty for no elements)."""
    # A fresh 1-D tensor has stride 1 even where contiguous() would keep a size-1 view's.
    dense = torch.empty(tensor.numel(), dtype=tensor.dtype)
    dense.copy_(tensor.detach().to("cpu").reshape(-1))
    return dense.view(torch.uint8)


def variant(template: torch.Tensor, key: int, device: torch.device) -> torch.Tensor:
    """A tensor with ``template``'s dtype, shape and strides whose bits depend on ``key``.

    Every rank can rebuild any rank's variant, so expected results are computed directly.
    """
    out = torch.empty_strided(
        tuple(template.shape), template.stride(), dtype=template.dtype, device=device
    )
    if template.numel() == 0:
        return out
    if template.dtype == torch.bool:
        values = torch.logical_xor(template.detach().to("cpu"), torch.tensor(key % 2 == 1))
    else:
        shifted = (raw_bytes(template).to(torch.int16) + key + 1) % 256
        values = shifted.to(torch.uint8).view(template.dtype).reshape(template.shape)
    out.copy_(values)
    return out


def same_bits(got: object, want: torch.Tensor) -> bool:
    """Whether ``got`` is a tensor of ``want``'s dtype and shape with the same bits."""
    if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape:
        return False
    return bool(torch.equal(raw_bytes(got), raw_bytes(want)))


def same_list(got: object, want: Sequence[torch.Tensor]) -> bool:
    return (
        isinstance(got, (list, tuple))
        and len(got) == len(want)
        and all(same_bits(g, w) for g, w in zip(got, want, strict=True))
    )


@dataclass(frozen=True)
class Movement:
    """A data-movement example: a template tensor and a rank (source or destination)."""

    template: torch.Tensor
    root: int


def movements(world: int) -> SearchStrategy[Movement]:
    return st.builds(
        Movement,
        tensors(dtypes=_MOVABLE_DTYPES, device="cpu", max_dims=3, max_side=4),
        st.integers(0, world - 1),
    )


@dataclass(frozen=True)
class Reduction:
    """A reduction example: dtype, shape, op (None: the default) and one value list per
    contribution (``world`` of them, or ``world * world`` for reduce_scatter)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    op: ReduceOp | None
    values: tuple[tuple[float, ...], ...]

    def tensor(self, index: int, device: torch.device) -> torch.Tensor:
        return (
            torch.tensor(self.values[index], dtype=torch.float64)
            .reshape(self.shape)
            .to(device=device, dtype=self.dtype)
        )


def reductions(world: int, contributions: int) -> SearchStrategy[Reduction]:
    @st.composite
    def build(draw: st.DrawFn) -> Reduction:
        dtype = draw(st.sampled_from(_REDUCE_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        numel = math.prod(shape)
        op = draw(st.none() | reduce_ops())
        element: SearchStrategy[float]
        if dtype.is_floating_point:
            element = st.floats(-100, 100, allow_nan=False, width=32)
        else:
            element = st.integers(-9, 9).map(float)
        values = tuple(
            tuple(draw(st.lists(element, min_size=numel, max_size=numel)))
            for _ in range(contributions)
        )
        return Reduction(dtype, shape, op, values)

    return build()


def reduction_problem(result: object, inputs: Sequence[torch.Tensor], op: ReduceOp) -> str | None:
    """What is wrong with ``result`` as the ``op`` reduction of ``inputs`` (None: nothing).

    Integer results are exact; floating ones within a few ulps of the sum of magnitudes."""
    first = inputs[0]
    if not isinstance(result, torch.Tensor):
        return f"returned {show(result)}, not a tensor"
    if result.shape != first.shape:
        return f"returned shape {tuple(result.shape)}, expected {tuple(first.shape)}"
    int_mean = op == "mean" and not first.is_floating_point()
    if int_mean and not result.is_floating_point():
        return f"returned dtype {result.dtype} for the mean of {first.dtype}; expected floating"
    if not int_mean and result.dtype != first.dtype:
        return f"returned dtype {result.dtype}, expected the input's {first.dtype}"
    stacked = torch.stack([t.detach().to("cpu", torch.float64) for t in inputs])
    count = len(inputs)
    if op == "sum":
        want, scale = stacked.sum(0), stacked.abs().sum(0)
    elif op == "mean":
        want, scale = stacked.sum(0) / count, stacked.abs().sum(0) / count
    elif op == "min":
        want, scale = stacked.amin(0), torch.zeros_like(stacked[0])
    elif op == "max":
        want, scale = stacked.amax(0), torch.zeros_like(stacked[0])
    else:
        want = stacked.prod(0)
        scale = want.abs() * count
    got = result.detach().to("cpu", torch.float64)
    if result.is_floating_point():
        eps = torch.finfo(result.dtype).eps
        bound = 4 * count * eps * scale + 4 * eps * want.abs() + 1e-30
    else:
        bound = torch.zeros_like(want)
    if bool(((got - want).abs() <= bound).all()):
        return None
    return f"returned {show(result)}, expected {show(want.to(result.dtype))}"


# --------------------------------------------------------------------------- operation bodies


def all_reduce_problem(
    comm: Communicates, example: Reduction, rank: int, world: int, device: torch.device
) -> str | None:
    mine = example.tensor(rank, device)
    if example.op is None:
        result = comm.all_reduce(mine)
        op: ReduceOp = "mean"
        call = "all_reduce(t)"
    else:
        result = comm.all_reduce(mine, example.op)
        op = example.op
        call = f"all_reduce(t, {op!r})"
    inputs = [example.tensor(r, device) for r in range(world)]
    problem = reduction_problem(result, inputs, op)
    if problem is None:
        return None
    return f"{call} with t={show(mine)} {problem}"


def all_gather_problem(
    comm: Communicates, example: Movement, rank: int, world: int, device: torch.device
) -> str | None:
    mine = variant(example.template, rank, device)
    result = comm.all_gather(mine)
    want = [variant(example.template, r, device) for r in range(world)]
    if same_list(result, want):
        return None
    return f"all_gather(t) with t={show(mine)} returned {show(result)}, expected {show(want)}"


def broadcast_problem(
    comm: Communicates, example: Movement, rank: int, world: int, device: torch.device
) -> str | None:
    mine = variant(example.template, rank, device)
    result = comm.broadcast(mine, example.root)
    want = variant(example.template, example.root, device)
    if same_bits(result, want):
        return None
    return (
        f"broadcast(t, src={example.root}) returned {show(result)}, expected rank "
        f"{example.root}'s {show(want)}"
    )


def picklable_objects() -> SearchStrategy[object]:
    leaves = (
        st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False)
    )
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=6,
    )


def broadcast_object_problem(
    comm: Communicates, example: tuple[object, int], rank: int
) -> str | None:
    value, src = example
    result = comm.broadcast_object({"rank": rank, "value": value}, src)
    want = {"rank": src, "value": value}
    if result == want:
        return None
    return f"broadcast_object(obj, src={src}) returned {show(result)}, expected {show(want)}"
