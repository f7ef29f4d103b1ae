"""PREC-1, PREC-3, PREC-4, PREC-5: the dtype table, module and input conversion, init context."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import NamedTuple

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trainspec import PRECISION_FLAGS, ConfigurationError, Precision
from trainspec.reference.precisions import precision_for_flag

CPU = torch.device("cpu")

# PREC-1 as written in the spec: flag -> (parameter dtype, compute dtype)
TABLE = {
    "32-true": (torch.float32, torch.float32),
    "64-true": (torch.float64, torch.float64),
    "16-true": (torch.float16, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)  # float buffers + an int64 counter
        self.register_buffer("steps", torch.zeros(2, dtype=torch.int32))
        self.register_buffer("phase", torch.ones(2, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def test_the_table_covers_every_flag() -> None:
    assert set(TABLE) == set(PRECISION_FLAGS)


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_flag_dtypes_match_the_table_on_cpu(flag: str) -> None:
    param_dtype, compute_dtype = TABLE[flag]
    precision = precision_for_flag(flag)
    assert isinstance(precision, Precision)
    assert (precision.flag, precision.param_dtype, precision.compute_dtype) == (
        flag,
        param_dtype,
        compute_dtype,
    )
    precision.setup(CPU)
    module = precision.convert_module(Net())
    assert {p.dtype for p in module.parameters()} == {param_dtype}
    assert module.norm.running_mean.dtype == param_dtype
    with precision.forward_context():
        output = module.linear(precision.convert_input(torch.randn(5, 4, dtype=torch.float64)))
    assert output.dtype == compute_dtype
    precision.teardown()


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_convert_module_leaves_non_floating_tensors_alone(flag: str) -> None:
    net = Net()
    steps, phase = net.steps, net.phase
    weight = net.linear.weight
    module = precision_for_flag(flag).convert_module(net)
    assert module.norm.num_batches_tracked.dtype == torch.int64
    assert module.steps is steps
    assert module.phase is phase
    assert module.phase.dtype == torch.complex64
    assert module.linear.weight is weight, "parameters keep their identity"


def test_convert_module_casts_existing_gradients_with_the_parameters() -> None:
    net = torch.nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    precision_for_flag("64-true").convert_module(net)
    assert net.weight.grad is not None
    assert net.weight.grad.dtype == torch.float64


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_module_init_context_creates_parameters_in_param_dtype(flag: str) -> None:
    precision = precision_for_flag(flag)
    before = torch.get_default_dtype()
    with precision.module_init_context():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.dtype == TABLE[flag][0]
    assert torch.get_default_dtype() == before


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_module_init_context_restores_the_default_dtype_when_the_body_raises(flag: str) -> None:
    precision = precision_for_flag(flag)
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(KeyError), precision.module_init_context():
            assert torch.get_default_dtype() == TABLE[flag][0]
            raise KeyError("boom")
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


class Pair(NamedTuple):
    first: object
    second: object


_leaves = st.one_of(
    st.sampled_from([torch.float16, torch.float32, torch.float64, torch.bfloat16]).map(
        lambda dtype: torch.arange(3, dtype=torch.float32).to(dtype)
    ),
    st.sampled_from([torch.int64, torch.bool, torch.complex64]).map(
        lambda dtype: torch.ones(2, dtype=dtype)
    ),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.none(),
)
_batches = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.tuples(children, children).map(lambda items: Pair(*items)),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(OrderedDict),
    ),
    max_leaves=8,
)


def _assert_converted(original: object, converted: object, dtype: torch.dtype) -> None:
    assert type(converted) is type(original)
    if isinstance(original, torch.Tensor):
        assert isinstance(converted, torch.Tensor)
        if original.is_floating_point():
            assert converted.dtype == dtype
            torch.testing.assert_close(converted, original.to(dtype))
        else:
            assert converted is original
    elif isinstance(original, dict):
        assert isinstance(converted, dict)
        assert list(converted) == list(original)
        for key, value in original.items():
            _assert_converted(value, converted[key], dtype)
    elif isinstance(original, (list, tuple)):
        assert isinstance(converted, (list, tuple))
        assert len(converted) == len(original)
        for before, after in zip(original, converted, strict=True):
            _assert_converted(before, after, dtype)
    else:
        assert converted is original


@pytest.mark.parametrize("flag", ["16-true", "64-true", "bf16-mixed"])
@given(batch=_batches)
def test_convert_input_keeps_the_structure_and_casts_floating_tensors(
    flag: str, batch: object
) -> None:
    precision = precision_for_flag(flag)
    _assert_converted(batch, precision.convert_input(batch), precision.param_dtype)


def test_convert_input_rebuilds_defaultdicts_with_their_factory() -> None:
    data: defaultdict[str, object] = defaultdict(list, {"x": torch.ones(1)})
    converted = precision_for_flag("64-true").convert_input(data)
    assert isinstance(converted, defaultdict)
    assert converted.default_factory is list
    assert converted["x"].dtype == torch.float64


def test_convert_input_returns_tensors_of_the_right_dtype_unchanged() -> None:
    tensor = torch.ones(2)
    assert precision_for_flag("32-true").convert_input(tensor) is tensor


def test_convert_input_refuses_a_mapping_it_cannot_rebuild() -> None:
    class Frozen(dict[str, object]):
        def __init__(self, key: str, value: object) -> None:
            super().__init__({key: value})

    with pytest.raises(ConfigurationError, match="Frozen"):
        precision_for_flag("64-true").convert_input(Frozen("x", torch.ones(1)))
