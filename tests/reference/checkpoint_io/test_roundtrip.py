"""CKPT-1: a saved checkpoint loads back equal, for every reference checkpoint IO.

Each round trip first checks that what is at the path before the save differs from what is
saved, and that the loaded tensors are fresh memory, so an IO that returns its input or
ignores saves cannot pass.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_DTYPE_NAMES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
)
DTYPES = [d for n in _DTYPE_NAMES if isinstance(d := getattr(torch, n, None), torch.dtype)]


def _values(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 100, shape, generator=gen)
    if dtype == torch.bool:
        return raw % 2 == 1
    if dtype.is_complex:
        return torch.complex(raw.double(), -raw.double()).to(dtype)
    return raw.to(dtype)


def _round_trip(io, path, checkpoint, same, *, layout=True):
    io.save_checkpoint({"different": torch.zeros(1)}, path)
    before = io.load_checkpoint(path)
    assert list(before) != list(checkpoint), "the path must hold something else first"
    io.save_checkpoint(checkpoint, path)
    loaded = io.load_checkpoint(path)
    assert loaded is not checkpoint
    same(loaded, checkpoint, layout=layout)
    source_ptrs = {
        v.untyped_storage().data_ptr()
        for v in checkpoint.values()
        if isinstance(v, torch.Tensor) and v.untyped_storage().nbytes()
    }
    for value in loaded.values():
        if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes():
            assert value.untyped_storage().data_ptr() not in source_ptrs, "not a fresh copy"
    return loaded


def test_every_dtype_round_trips(case, io, tmp_path, same):
    from trainspec.reference.checkpoint_io.safetensors_io import SUPPORTED_DTYPES

    dtypes = DTYPES if case.full_values else [d for d in DTYPES if d in SUPPORTED_DTYPES]
    assert len(dtypes) >= 14
    checkpoint = {str(d): _values(d, (2, 3), seed=i) for i, d in enumerate(dtypes)}
    _round_trip(io, case.path(tmp_path), checkpoint, same, layout=case.keeps_layout)


def test_zero_dim_and_empty_tensors_round_trip(case, io, tmp_path, same):
    checkpoint = {
        "scalar": torch.tensor(3.5),
        "int_scalar": torch.tensor(-2, dtype=torch.int64),
        "empty": torch.empty(0),
        "empty_2d": torch.empty(0, 4, dtype=torch.float16),
        "empty_mid": torch.empty(3, 0, 2, dtype=torch.int32),
    }
    _round_trip(io, case.path(tmp_path), checkpoint, same, layout=case.keeps_layout)


def test_non_contiguous_tensors_keep_values(case, io, tmp_path, same):
    base = torch.arange(24.0).reshape(4, 6)
    checkpoint = {
        "transposed": base.t(),
        "strided": base[:, ::2],
        "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),
    }
    loaded = _round_trip(io, case.path(tmp_path), checkpoint, same, layout=case.keeps_layout)
    if case.keeps_layout:
        assert loaded["transposed"].stride() == (1, 6)
        assert loaded["strided"].stride() == (6, 2)
        assert loaded["expanded"].stride() == (0, 1)


def test_views_still_share_storage_after_loading(full_case, full_io, tmp_path, same):
    base = torch.arange(10.0)
    checkpoint = {"base": base, "view": base[2:7], "other": {"alias": base.view(2, 5)}}
    path = full_case.path(tmp_path)
    loaded = _round_trip(full_io, path, checkpoint, same)
    ptr = loaded["base"].untyped_storage().data_ptr()
    assert loaded["view"].untyped_storage().data_ptr() == ptr
    assert loaded["other"]["alias"].untyped_storage().data_ptr() == ptr
    loaded["base"][3] = -1.0
    assert loaded["view"][1].item() == -1.0, "a write through one view shows in the other"


def test_nested_containers_and_python_values_round_trip(full_case, full_io, tmp_path, same):
    checkpoint = {
        "int": 3,
        "big_int": 2**70,
        "float": -0.25,
        "bool": False,
        "str": "héllo",
        "none": None,
        "bytes": b"\x00\x01",
        "list": [1, [2, [3, torch.ones(2)]], "x"],
        "tuple": (1, (2.0, None), torch.zeros(1, dtype=torch.int8)),
        "ordered": OrderedDict([("b", 1), ("a", torch.tensor(2))]),
        "param": torch.nn.Parameter(torch.ones(3)),
        "grad_leaf": torch.ones(2, requires_grad=True),
        "empty_containers": {"d": {}, "l": [], "t": ()},
    }
    loaded = _round_trip(full_io, full_case.path(tmp_path), checkpoint, same)
    assert isinstance(loaded["param"], torch.nn.Parameter)
    assert loaded["grad_leaf"].requires_grad


def test_tensor_only_io_refuses_other_values(tmp_path):
    from trainspec.reference.checkpoint_io import SafetensorsCheckpointIO

    io = SafetensorsCheckpointIO()
    for bad in ({"n": 1}, {"nested": {"t": torch.ones(1)}}, {"s": "x"}, {"none": None}):
        with pytest.raises(TypeError):
            io.save_checkpoint(bad, tmp_path / "x.safetensors")
    with pytest.raises(TypeError):
        io.save_checkpoint({"sparse": torch.eye(2).to_sparse()}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="complex128"):
        io.save_checkpoint(
            {"c": torch.zeros(1, dtype=torch.complex128)}, tmp_path / "x.safetensors"
        )
    assert not (tmp_path / "x.safetensors").exists()


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, width=64),
    st.text(max_size=8),
    st.builds(
        _values,
        st.sampled_from(DTYPES),
        st.lists(st.integers(0, 3), max_size=3).map(tuple),
        st.integers(0, 100),
    ),
)
_trees = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=5), children, max_size=3),
    ),
    max_leaves=8,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(checkpoint=st.dictionaries(st.text(min_size=1, max_size=6), _trees, max_size=4))
def test_arbitrary_nested_checkpoints_round_trip(tmp_path_factory, same, checkpoint):
    from trainspec.reference.checkpoint_io import MemoryCheckpointIO, TorchCheckpointIO

    directory = tmp_path_factory.mktemp("hyp")
    for io, path in ((TorchCheckpointIO(), str(directory / "c.pt")), (MemoryCheckpointIO(), "k")):
        io.save_checkpoint(checkpoint, path)
        same(io.load_checkpoint(path), checkpoint)
