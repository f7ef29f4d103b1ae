"""Behaviour checks for :class:`trainspec.Collective` (COLL-1 ... COLL-16).

Every check makes a fresh collective, sets it up with an environment and a device, runs one
rule and tears it down. Expected results are functions of the collective's own ``rank`` and
``world_size``: rank *r* contributes ``BASE * (r + 1)`` (and, for list operations, entry *i*
is ``BASE * (r + 1) + 10 * i``), so the same check is correct on one rank and on N ranks run
by a distributed harness. Checks that need a second rank (a timeout, a peer that leaves) are
in the ``distributed`` layer and skip on a world of one.

Target options read here:

``device`` (``str`` or ``torch.device``, default ``"cpu"``)
    The device passed to ``setup`` and on which input tensors are made.
``environment_factory`` (zero-argument callable returning a :class:`trainspec.
ClusterEnvironment`, default :class:`~trainspec.conformance.fakes.SingleProcessEnvironment`)
    Called for every ``setup``; a harness running N ranks gives each rank its own description.

No optional capabilities: every member of the protocol is required.
"""

from __future__ import annotations

import copy
import inspect
import time
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Final, cast

import torch

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.conformance._helpers import (
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.conformance.fakes import SingleProcessEnvironment
from trainspec.errors import (
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    LifecycleError,
)
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from trainspec.collective import Collective
    from trainspec.types import ReduceOp

__all__ = [
    "BASE",
    "CAPABILITIES",
    "contribution",
    "expected_reduction",
    "show",
    "tensors_match",
    "values",
]

CAPABILITIES: Final[dict[str, str]] = {}
"""The collective kind has no optional capabilities."""

BASE: Final[tuple[tuple[int, int, int], ...]] = ((1, -2, 3), (-4, 5, 0))
"""The values every rank's contribution is built from: mixed signs, a zero, shape (2, 3)."""

_DTYPES: Final = (torch.float32, torch.float64, torch.int64)
_TIMEOUT: Final = timedelta(seconds=120)
_BAD_REDUCE_OPS: Final = ("avg", "SUM", "average", "")

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


def _object_of(rank: int) -> dict[str, object]:
    """A picklable, mutable, rank-specific payload for the object collectives."""
    return {"rank": rank, "items": [rank, "x", None, 2.5], "nested": {"pair": (rank, "y")}}


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
                    and torch.equal(tensor, before)
                )
                if not ok:
                    raise failure(
                        target,
                        "COLL-6",
                        expected=f"return {values(expected)} from all_reduce(t, 'sum') for a "
                        f"{dtype} tensor in layout {layout!r}, leaving t unchanged",
                        actual=describe_exception(result)
                        if isinstance(result, BaseException)
                        else f"{show(result)}, input now {show(tensor)}",
                        hint="Make a contiguous copy before handing a tensor to the backend.",
                        snippet=_layout_snippet(target, dtype, 'all_reduce(t, "sum")'),
                    )


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


@check("COLL-6", "collective")
def check_collective_all_reduce_mean_is_sum_over_world_size(target: Target[Collective]) -> None:
    """all_reduce "mean" must equal "sum" / world_size, as floating point for integers."""
    with _set_up(target) as collective:
        device = device_option(target)
        world = collective.world_size
        for dtype in _DTYPES:
            mine = contribution(collective.rank, device, dtype)
            total = collective.all_reduce(mine, "sum")
            mean = collective.all_reduce(mine, "mean")
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
    """broadcast_object(obj, src) must return a copy of rank src's object on every rank.

    Never the caller's object itself, and the caller's object is left unchanged."""
    with _set_up(target) as collective:
        for src in range(collective.world_size):
            mine = _object_of(collective.rank)
            pristine = copy.deepcopy(mine)
            result = collective.broadcast_object(mine, src)
            repro = _snippet(
                target,
                f"obj = {_object_of(0)!r}\nresult = collective.broadcast_object(obj, src={src})\n"
                "assert result == obj and result is not obj",
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
            if result is mine or (
                isinstance(result, dict) and result.get("items") is mine["items"]
            ):
                raise failure(
                    target,
                    "COLL-10",
                    expected="return a copy of the object, not the caller's object",
                    actual="the caller's object itself (or one of its parts)",
                    hint="Round-trip the payload through pickle on every rank, src included.",
                    snippet=repro,
                )
            if mine != pristine:
                raise failure(
                    target,
                    "COLL-10",
                    expected="leave the caller's object unchanged",
                    actual=f"{describe_value(mine)} (was {describe_value(pristine)})",
                    snippet=repro,
                )


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
    """barrier must return None once every rank has entered it, with or without a timeout."""
    with _set_up(target) as collective:
        calls: tuple[tuple[str, Callable[[], None]], ...] = (
            ("barrier()", collective.barrier),
            (
                "barrier(timeout=timedelta(seconds=120))",
                partial(collective.barrier, timeout=_TIMEOUT),
            ),
        )
        for text, call in calls:
            try:
                result = call()
            except Exception as error:
                raise failure(
                    target,
                    "COLL-16",
                    expected=f"return from {text} once every rank arrived",
                    actual=describe_exception(error),
                    snippet=_snippet(target, f"from datetime import timedelta\ncollective.{text}"),
                ) from error
            if result is not None:
                raise failure(
                    target,
                    "COLL-16",
                    expected=f"return None from {text}",
                    actual=describe_value(result),
                )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_matches(result: object, expected: list[torch.Tensor]) -> bool:
    return (
        isinstance(result, list)
        and len(result) == len(expected)
        and all(
            isinstance(got, torch.Tensor) and got.dtype == want.dtype and tensors_match(got, want)
            for got, want in zip(result, expected, strict=True)
        )
    )
