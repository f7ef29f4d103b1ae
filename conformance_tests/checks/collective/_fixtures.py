"""Fixtures and helpers shared by the Collective checks: every rank's contribution and the
expected results, comparisons, set-up and teardown, the operations table and snippets."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Final

import torch

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.conformance._helpers import describe_value, snippet
from trainspec.conformance.fakes import SingleProcessEnvironment

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from trainspec.collective import Collective
    from trainspec.conformance.core import Target
    from trainspec.types import ReduceOp

BASE: Final[tuple[tuple[int, int, int], ...]] = ((1, -2, 3), (-4, 5, 0))
"""The values every rank's contribution is built from: mixed signs, a zero, shape (2, 3)."""

_DTYPES: Final = (torch.float32, torch.float64, torch.int64)
_TIMEOUT: Final = timedelta(seconds=120)

# Relative / absolute tolerance per floating dtype (integers compare exactly).
_TOLERANCE: Final = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


# --------------------------------------------------------------------------- shared helpers


def contribution(
    rank: int, device: torch.device, dtype: torch.dtype, index: int = 0
) -> torch.Tensor:
    """What rank ``rank`` contributes: ``BASE * (rank + 1) + 10 * index`` (a fresh tensor)."""
    base = torch.tensor(BASE, dtype=torch.int64) * (rank + 1) + 10 * index
    return base.to(device=device, dtype=dtype)


def expected_reduction(values: Sequence[torch.Tensor], reduce_op: ReduceOp) -> torch.Tensor:
    """The element-wise reduction of ``values`` (one per rank) as float64 on the CPU;
    ``"mean"`` is the sum divided by the number of values."""
    stacked = torch.stack([value.detach().to("cpu", torch.float64) for value in values])
    if reduce_op == "sum":
        return stacked.sum(dim=0)
    if reduce_op == "mean":
        return stacked.sum(dim=0) / len(values)
    if reduce_op == "min":
        return stacked.amin(dim=0)
    if reduce_op == "max":
        return stacked.amax(dim=0)
    return stacked.prod(dim=0)


def tensors_match(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``actual`` has ``expected``'s shape and values (within ``actual``'s dtype's
    tolerance; integer and bool tensors exactly)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    got = actual.detach().to("cpu", torch.float64)
    want = expected.detach().to("cpu", torch.float64)
    rtol, atol = _TOLERANCE.get(actual.dtype, (0.0, 0.0))
    return bool(torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))


def values(tensor: torch.Tensor | Sequence[torch.Tensor]) -> str:
    """A tensor's values (rounded, at most 8 shown) without dtype or device, or a list of
    them: how a failure message states an expected result."""
    if not isinstance(tensor, torch.Tensor):
        return "[" + ", ".join(values(item) for item in tensor) + "]"
    if tensor.is_meta:
        return "<meta tensor>"
    flat = tensor.detach().to("cpu").reshape(-1)
    if tensor.numel() <= 12:
        shown = tensor.detach().to("cpu")
        if shown.is_floating_point():
            shown = shown.double().round(decimals=6)
        return str(shown.tolist())
    head = ", ".join(f"{float(v):.6g}" for v in flat[:8].tolist())
    return f"[{head}, ...] (shape {tuple(tensor.shape)})"


def show(value: object) -> str:
    """A short description of a value: tensors with their values, dtype and device."""
    if isinstance(value, torch.Tensor):
        return f"tensor({values(value)}, dtype={value.dtype}, device={value.device})"
    if isinstance(value, list):
        return "[" + ", ".join(show(item) for item in value) + "]"
    return describe_value(value)


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors use the same (non-empty) storage."""
    if a.device != b.device or a.is_meta or b.is_meta:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.nbytes() > 0 and sb.nbytes() > 0 and sa.data_ptr() == sb.data_ptr()


def device_option(target: Target[object]) -> torch.device:
    """The ``device`` option as a ``torch.device`` (default CPU); a wrong type is a usage
    error of the kit (``TypeError``)."""
    value = target.options.get("device", "cpu")
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        return torch.device(value)
    raise TypeError(f"conformance option 'device' must be a str or torch.device, got {value!r}")


def environment_option(target: Target[object]) -> ClusterEnvironment:
    """A fresh environment from the ``environment_factory`` option (default: a
    :class:`SingleProcessEnvironment`)."""
    factory = target.options.get("environment_factory")
    if factory is None:
        return SingleProcessEnvironment()
    if not callable(factory):
        raise TypeError(
            "conformance option 'environment_factory' must be a callable returning a "
            f"trainspec.ClusterEnvironment, got {factory!r}"
        )
    environment = factory()
    if not isinstance(environment, ClusterEnvironment):
        raise TypeError(
            "conformance option 'environment_factory' must return a "
            f"trainspec.ClusterEnvironment, got {environment!r}"
        )
    return environment


def _teardown_quietly(component: Collective) -> None:
    # Cleanup after a check: an error here must not hide the check's own outcome; the
    # teardown rules themselves are checked by COLL-5.
    try:
        component.teardown()
    except Exception:
        pass


@contextmanager
def _set_up(target: Target[Collective]) -> Iterator[Collective]:
    collective = target.make()
    collective.setup(environment_option(target), device_option(target))
    try:
        yield collective
    finally:
        _teardown_quietly(collective)


def _snippet(target: Target[Collective], body: str, *, set_up: bool = True) -> str:
    device = device_option(target)
    head = f'collective.setup(SingleProcessEnvironment(), torch.device("{device}"))\n'
    return snippet(
        target,
        (head if set_up else "") + body,
        var="collective",
        imports="from trainspec.conformance.fakes import SingleProcessEnvironment",
    )


def _int_input_line(device: torch.device, dtype: torch.dtype = torch.int64) -> str:
    return f't = torch.tensor({list(map(list, BASE))}, dtype={dtype}, device="{device}")\n'


_LAYOUT_DTYPES: Final = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
)


def _layouts(base: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """``base`` (shape (2, 3)) in layouts collectives must accept: contiguous, transposed, a
    strided view, a view at a storage offset, a 0-d view and an empty view."""
    strided = torch.zeros(4, 6, dtype=base.dtype, device=base.device)
    strided[::2, ::2] = base
    offset = torch.zeros(5, 3, dtype=base.dtype, device=base.device)
    offset[1:3] = base
    return [
        ("contiguous", base),
        ("transposed: t.t()", base.t()),
        ("strided view: big[::2, ::2]", strided[::2, ::2]),
        ("view at an offset: big.narrow(0, 1, 2)", offset.narrow(0, 1, 2)),
        ("0-d view: t[1, 2]", base[1, 2]),
        ("empty view: t[:0]", base[:0]),
    ]


def _layout_snippet(target: Target[Collective], dtype: torch.dtype, call: str) -> str:
    device = device_option(target)
    return _snippet(
        target,
        _int_input_line(device, dtype).replace("t = ", "base = ")
        + "for t in (base.t(), base[1, 2], base[:0]):\n"
        + f"    print(collective.{call})",
    )


def _list_matches(result: object, expected: list[torch.Tensor]) -> bool:
    return (
        isinstance(result, list)
        and len(result) == len(expected)
        and all(
            isinstance(got, torch.Tensor) and got.dtype == want.dtype and tensors_match(got, want)
            for got, want in zip(result, expected, strict=True)
        )
    )
