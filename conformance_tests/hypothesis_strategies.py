"""Hypothesis strategies for plugin authors, the same ones the conformance kit uses.

The module is named after what it holds, hypothesis ``SearchStrategy`` factories, so that it
is not mistaken for anything about the :class:`~trainspec.Strategy` protocol (the old name,
``trainspec.conformance.strategies``, is a deprecated alias of this module).

- :func:`tensors` -- tensors of every dtype a device supports: 0-d, empty, non-contiguous
  (transposed, strided slices, narrowed) and views into a larger storage;
- :func:`state_dicts` -- checkpoints: nested dicts, lists and tuples of tensors, Python
  scalars, strings and ``None``, with views that share storage;
- :func:`device_requests` -- valid and invalid ``devices=`` requests, each labelled with what a
  conforming ``Accelerator.parse_devices`` must do with it;
- :func:`precision_flags`, :func:`reduce_ops` -- the flag vocabularies;
- :func:`assert_checkpoints_equal` -- exact checkpoint equality (dtype, shape, strides, values
  with NaN positions, storage sharing, exact Python types).

Example::

    from hypothesis import given
    from trainspec.conformance.hypothesis_strategies import assert_checkpoints_equal, state_dicts

    @given(state_dicts())
    def test_my_io_round_trips(tmp_path_factory, checkpoint):
        path = tmp_path_factory.mktemp("ckpt") / "model.ckpt"
        io = MyCheckpointIO()
        io.save_checkpoint(checkpoint, path)
        assert_checkpoints_equal(checkpoint, io.load_checkpoint(path))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from hypothesis import strategies as st

from trainspec.conformance._helpers import (
    CheckpointMismatch,
    assert_checkpoints_equal,
    checkpoint_differences,
)
from trainspec.types import PRECISION_FLAGS, REDUCE_OPS, Checkpoint, PrecisionFlag, ReduceOp

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hypothesis.strategies import SearchStrategy

__all__ = [
    "EXTENDED_DTYPES",
    "MALFORMED_REQUESTS",
    "STANDARD_DTYPES",
    "CheckpointMismatch",
    "DeviceRequestCase",
    "RequestKind",
    "assert_checkpoints_equal",
    "checkpoint_differences",
    "device_requests",
    "precision_flags",
    "reduce_ops",
    "state_dicts",
    "supported_dtypes",
    "tensors",
]

STANDARD_DTYPES: tuple[torch.dtype, ...] = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)
"""The dtypes every checkpoint format with full tensor support is expected to store."""

EXTENDED_DTYPES: tuple[torch.dtype, ...] = tuple(
    dtype
    for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
    if isinstance(dtype := getattr(torch, name, None), torch.dtype)
)
"""Barebones dtypes (storage and copies only) that this torch build has."""


def _probe(dtype: torch.dtype, device: torch.device) -> bool:
    try:
        value = torch.zeros(2, 2, dtype=dtype, device=device).t().contiguous()
        value.reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def supported_dtypes(device: str | torch.device = "cpu") -> tuple[torch.dtype, ...]:
    """The standard and extended dtypes that can be created and copied on ``device``.

    Creates small tensors on ``device`` (so it initialises the device).
    """
    dev = torch.device(device)
    return tuple(d for d in STANDARD_DTYPES + EXTENDED_DTYPES if _probe(d, dev))


_SPECIAL_DTYPES = frozenset(
    {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128}
)
_SPECIAL_VALUES = (math.nan, math.inf, -math.inf, -0.0)


def _shapes(max_dims: int, max_side: int) -> SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(0, max_side), min_size=0, max_size=max_dims).map(tuple)


@st.composite
def _tensor(
    draw: st.DrawFn,
    dtypes: Sequence[torch.dtype],
    device: torch.device,
    max_dims: int,
    max_side: int,
    non_contiguous: bool,
) -> torch.Tensor:
    dtype = draw(st.sampled_from(list(dtypes)))
    # Draw a base one element larger in each dimension so slices and narrows have room.
    shape = draw(_shapes(max_dims, max_side))
    numel = 1
    for side in shape:
        numel *= side
    itemsize = torch.empty((), dtype=dtype).element_size()
    if dtype == torch.bool:
        values = draw(st.lists(st.booleans(), min_size=numel, max_size=numel))
        base = torch.tensor(values, dtype=torch.bool).reshape(shape)
    else:
        # Raw bytes reach every bit pattern: NaN, inf, -0.0, subnormals, extreme integers.
        raw = draw(st.binary(min_size=numel * itemsize, max_size=numel * itemsize))
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0)
        base = flat.to(torch.uint8).view(dtype).reshape(shape).clone()
        if dtype in _SPECIAL_DTYPES and numel:
            # Raw bytes rarely hit NaN or inf; plant some where equality is most fragile.
            specials = draw(
                st.lists(
                    st.tuples(st.integers(0, numel - 1), st.sampled_from(_SPECIAL_VALUES)),
                    max_size=3,
                )
            )
            for index, special in specials:
                base.view(-1)[index] = special
    base = base.to(device)
    if not non_contiguous or base.dim() == 0:
        return base
    view = draw(st.sampled_from(["none", "transpose", "step", "narrow"]))
    if view == "transpose" and base.dim() >= 2:
        return base.transpose(0, base.dim() - 1)
    if view == "step":
        dim = draw(st.integers(0, base.dim() - 1))
        step = draw(st.integers(2, 3))
        slices = [slice(None)] * base.dim()
        slices[dim] = slice(None, None, step)
        return base[tuple(slices)]
    if view == "narrow":
        dim = draw(st.integers(0, base.dim() - 1))
        size = base.shape[dim]
        start = draw(st.integers(0, size))
        length = draw(st.integers(0, size - start))
        return base.narrow(dim, start, length)
    return base


def tensors(
    dtypes: Sequence[torch.dtype] | None = None,
    device: str | torch.device = "cpu",
    *,
    max_dims: int = 3,
    max_side: int = 4,
    non_contiguous: bool = True,
) -> SearchStrategy[torch.Tensor]:
    """Tensors of ``dtypes`` (default: :func:`supported_dtypes` of ``device``) on ``device``.

    Shapes have up to ``max_dims`` dimensions of up to ``max_side`` elements, including 0-d
    and empty tensors. Values are arbitrary bit patterns, with NaN, inf and ``-0.0`` planted
    in floating-point and complex tensors (``bool`` tensors hold only ``True``/``False``).
    With ``non_contiguous`` some tensors are transposed, strided or narrowed views whose
    storage is larger than the view.
    """
    dev = torch.device(device)
    chosen = tuple(dtypes) if dtypes is not None else supported_dtypes(dev)
    if not chosen:
        raise ValueError(f"no dtype to draw tensors from on device {dev}")
    return _tensor(chosen, dev, max_dims, max_side, non_contiguous)


_SCALARS: SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)


def _shared_view(tensor: torch.Tensor, how: int) -> torch.Tensor:
    """A view sharing ``tensor``'s storage (the tensor itself when no smaller view exists)."""
    if tensor.dim() == 0 or tensor.numel() == 0:
        return tensor.view(tensor.shape)
    if how == 0:
        return tensor.view(tensor.shape) if not tensor.is_contiguous() else tensor.view(-1)
    if how == 1:
        return tensor[0]
    return tensor.narrow(0, tensor.shape[0] // 2, tensor.shape[0] - tensor.shape[0] // 2)


def _collect_tensors(value: object, into: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        into.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_tensors(item, into)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_tensors(item, into)


@st.composite
def _state_dict(
    draw: st.DrawFn,
    leaves: SearchStrategy[object],
    nested: bool,
    max_leaves: int,
    shared_views: bool,
) -> Checkpoint:
    keys = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8)
    if nested:
        values: SearchStrategy[object] = st.recursive(
            leaves,
            lambda inner: st.one_of(
                st.lists(inner, max_size=3),
                st.lists(inner, max_size=3).map(tuple),
                st.dictionaries(keys, inner, max_size=3),
            ),
            max_leaves=max_leaves,
        )
    else:
        values = leaves
    checkpoint: Checkpoint = draw(st.dictionaries(keys, values, max_size=max_leaves))
    if shared_views:
        found: list[torch.Tensor] = []
        _collect_tensors(checkpoint, found)
        if found:
            count = draw(st.integers(0, 3))
            for index in range(count):
                source = draw(st.sampled_from(found))
                how = draw(st.integers(0, 2))
                checkpoint[f"__view{index}"] = _shared_view(source, how)
    return checkpoint


def state_dicts(
    *,
    tensor_strategy: SearchStrategy[torch.Tensor] | None = None,
    python_objects: bool = True,
    shared_views: bool = True,
    max_leaves: int = 8,
) -> SearchStrategy[Checkpoint]:
    """Checkpoints: string-keyed dicts, ``max_leaves`` values at most per level.

    With ``python_objects`` (default) values nest dicts, lists and tuples of tensors,
    ``None``, bools, ints (int64 range), floats (NaN and inf included) and strings; without
    it the checkpoint is a flat ``dict[str, Tensor]``. With ``shared_views`` some extra
    top-level ``"__view<i>"`` entries are views sharing storage with a tensor elsewhere in
    the checkpoint. ``tensor_strategy`` defaults to :func:`tensors` on the CPU.
    """
    tensor_values: SearchStrategy[object] = (
        tensor_strategy if tensor_strategy is not None else tensors()
    )
    # Tensors are what checkpoints are about: two of every three leaves are tensors.
    leaves = st.one_of(tensor_values, tensor_values, _SCALARS) if python_objects else tensor_values
    return _state_dict(leaves, python_objects, max_leaves, shared_views)


RequestKind = Literal["valid", "malformed", "too_many"]
"""``valid`` must parse (ACC-4); ``malformed`` must raise ConfigurationError (ACC-5);
``too_many`` must raise DeviceUnavailableError or ConfigurationError (ACC-6)."""


@dataclass(frozen=True)
class DeviceRequestCase:
    """A ``devices=`` request with what a conforming parser must do with it.

    ``indices`` is the exact device index list a valid request selects, or ``None`` where the
    parser may choose (``"auto"``) or where devices may carry no index. ``count`` is the
    exact number of devices, or ``None`` where the parser may choose.
    """

    request: object
    kind: RequestKind
    label: str
    count: int | None = None
    indices: tuple[int, ...] | None = None


def _valid_requests(device_count: int) -> SearchStrategy[DeviceRequestCase]:
    every = tuple(range(device_count))
    n = st.integers(1, device_count)
    index_lists = st.lists(
        st.integers(0, device_count - 1), min_size=1, max_size=device_count, unique=True
    )
    return st.one_of(
        n.map(lambda k: DeviceRequestCase(k, "valid", "int count", k, tuple(range(k)))),
        n.map(lambda k: DeviceRequestCase(str(k), "valid", "digit string", k, tuple(range(k)))),
        st.just(DeviceRequestCase(-1, "valid", "-1 (all)", device_count, every)),
        st.just(DeviceRequestCase("-1", "valid", '"-1" (all)', device_count, every)),
        st.just(DeviceRequestCase("auto", "valid", '"auto"')),
        index_lists.map(
            lambda ix: DeviceRequestCase(list(ix), "valid", "index list", len(ix), tuple(ix))
        ),
        index_lists.map(
            lambda ix: DeviceRequestCase(tuple(ix), "valid", "index tuple", len(ix), tuple(ix))
        ),
        index_lists.map(
            lambda ix: DeviceRequestCase(
                # one index needs the trailing comma: "1" alone is a count
                ",".join(map(str, ix)) + ("," if len(ix) == 1 else ""),
                "valid",
                "comma-separated indices",
                len(ix),
                tuple(ix),
            )
        ),
        st.integers(0, device_count - 1).map(
            lambda i: DeviceRequestCase(f"{i},", "valid", "single index with comma", 1, (i,))
        ),
    )


MALFORMED_REQUESTS: tuple[tuple[object, str], ...] = (
    (0, "zero devices"),
    ("0", "zero devices as a string"),
    (True, "a bool"),
    (False, "a bool"),
    (-2, "a negative count other than -1"),
    ("-2", "a negative count other than -1"),
    ("", "an empty string"),
    ("a", "a non-numeric string"),
    ("auto,", "a malformed index list"),
    (",", "a comma without indices"),
    ("0,0", "duplicate indices"),
    ([0, 0], "duplicate indices"),
    ([], "an empty index list"),
    ([-1], "a negative index"),
    ([True], "a bool index"),
    ([0.0], "a float index"),
    (1.5, "a float"),
    (None, "None"),
    ({0: 1}, "a dict"),
    (b"0", "bytes"),
)
"""Requests every parser must refuse with ConfigurationError (ACC-5), whatever the device count."""


def device_requests(
    device_count: int, *, kinds: Sequence[RequestKind] = ("valid", "malformed", "too_many")
) -> SearchStrategy[DeviceRequestCase]:
    """Labelled device requests for an accelerator that sees ``device_count`` devices.

    ``kinds`` selects which: ``valid`` (every accepted form: counts, ``-1``, ``"-1"``,
    ``"auto"``, digit strings, index lists and tuples, comma-separated and trailing-comma
    strings), ``malformed`` (:data:`MALFORMED_REQUESTS` plus generated bad strings) and
    ``too_many`` (counts above ``device_count`` and indices ``>= device_count``). With
    ``device_count == 0`` there are no valid requests and every count is too many.
    """
    options: list[SearchStrategy[DeviceRequestCase]] = []
    if "valid" in kinds and device_count > 0:
        options.append(_valid_requests(device_count))
    if "malformed" in kinds:
        options.append(
            st.sampled_from(
                [DeviceRequestCase(r, "malformed", label) for r, label in MALFORMED_REQUESTS]
            )
        )
        options.append(
            st.integers(-(2**31), -2).map(
                lambda k: DeviceRequestCase(k, "malformed", "a negative count other than -1")
            )
        )
    if "too_many" in kinds:
        above = st.integers(device_count + 1, device_count + 64)
        options.append(
            above.map(lambda k: DeviceRequestCase(k, "too_many", "more devices than exist"))
        )
        options.append(
            above.map(lambda k: DeviceRequestCase(str(k), "too_many", "more devices than exist"))
        )
        options.append(
            st.integers(device_count, device_count + 64).map(
                lambda i: DeviceRequestCase([i], "too_many", "an index that does not exist")
            )
        )
        options.append(
            st.integers(device_count, device_count + 64).map(
                lambda i: DeviceRequestCase(f"{i},", "too_many", "an index that does not exist")
            )
        )
    if not options:
        raise ValueError(f"no device requests of kinds {tuple(kinds)} for {device_count} devices")
    return st.one_of(options)


def precision_flags() -> SearchStrategy[PrecisionFlag]:
    """Every precision flag (:data:`trainspec.PRECISION_FLAGS`)."""
    return st.sampled_from(PRECISION_FLAGS)


def reduce_ops() -> SearchStrategy[ReduceOp]:
    """Every reduce op (:data:`trainspec.REDUCE_OPS`)."""
    return st.sampled_from(REDUCE_OPS)
