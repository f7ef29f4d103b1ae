"""SingleProcessCollective: the protocol's signatures, identity semantics that never alias the
input, argument validation and the lifecycle."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trainspec import (
    REDUCE_OPS,
    Collective,
    ConfigurationError,
    LifecycleError,
)
from trainspec.reference.collectives import SingleProcessCollective
from trainspec.reference.collectives._validation import (
    check_rank,
    check_reduce_op,
    check_tensor_list,
    check_timeout,
)

from .conftest import FakeEnvironment

CPU = torch.device("cpu")

OPERATIONS: dict[str, Any] = {
    "all_reduce": lambda c, t: c.all_reduce(t),
    "all_gather": lambda c, t: c.all_gather(t),
    "broadcast": lambda c, t: c.broadcast(t),
    "broadcast_object": lambda c, t: c.broadcast_object({"a": 1}),
    "all_gather_object": lambda c, t: c.all_gather_object([1]),
    "gather": lambda c, t: c.gather(t),
    "scatter": lambda c, t: c.scatter([t]),
    "reduce_scatter": lambda c, t: c.reduce_scatter([t]),
    "all_to_all": lambda c, t: c.all_to_all([t]),
    "barrier": lambda c, t: c.barrier(),
}


@pytest.fixture
def collective() -> SingleProcessCollective:
    c = SingleProcessCollective()
    c.setup(FakeEnvironment(), CPU)
    return c


def _members(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if getattr(value, "__isabstractmethod__", False) and not isinstance(value, property)
    ]


def test_operations_list_covers_every_collective_method() -> None:
    assert set(OPERATIONS) == set(_members(Collective)) - {"setup", "teardown"}


@pytest.mark.parametrize("name", _members(Collective))
def test_signature_matches_the_protocol_exactly(name: str) -> None:
    expected = inspect.signature(getattr(Collective, name))
    actual = inspect.signature(getattr(SingleProcessCollective, name))
    assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == [
        (p.name, p.kind, p.default) for p in expected.parameters.values()
    ]


def test_is_a_collective_of_one_rank() -> None:
    c = SingleProcessCollective()
    assert isinstance(c, Collective)
    assert (c.rank, c.world_size, c.is_initialized) == (0, 1, False)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_operations_before_setup_raise_lifecycle_error(name: str) -> None:
    with pytest.raises(LifecycleError, match=name):
        OPERATIONS[name](SingleProcessCollective(), torch.ones(2))


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_operations_after_teardown_raise_and_work_again_after_setup(
    collective: SingleProcessCollective, name: str
) -> None:
    collective.teardown()
    collective.teardown()  # idempotent
    assert not collective.is_initialized
    with pytest.raises(LifecycleError):
        OPERATIONS[name](collective, torch.ones(2))
    collective.setup(FakeEnvironment(), CPU)
    assert collective.is_initialized
    OPERATIONS[name](collective, torch.ones(2))


def test_setup_refuses_an_environment_of_several_ranks() -> None:
    with pytest.raises(ConfigurationError, match="ddp"):
        SingleProcessCollective().setup(FakeEnvironment(world_size=2, global_rank=1), CPU)


def test_setup_refuses_a_device_that_is_not_a_torch_device() -> None:
    with pytest.raises(ConfigurationError):
        SingleProcessCollective().setup(FakeEnvironment(), "cpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_all_reduce_is_a_new_tensor_equal_to_the_input(
    collective: SingleProcessCollective, op: Any
) -> None:
    tensor = torch.tensor([1.5, -2.0, 3.0])
    before = tensor.clone()
    result = collective.all_reduce(tensor, op)
    assert torch.equal(result, before)
    assert result.data_ptr() != tensor.data_ptr()
    result.add_(1)
    assert torch.equal(tensor, before)


def test_all_reduce_defaults_to_mean_which_is_floating_for_integers(
    collective: SingleProcessCollective,
) -> None:
    integers = torch.tensor([1, 2, 3])
    mean = collective.all_reduce(integers)
    assert mean.is_floating_point()
    assert torch.equal(mean, torch.tensor([1.0, 2.0, 3.0]))
    summed = collective.all_reduce(integers, "sum")
    assert summed.dtype == torch.int64
    assert collective.reduce_scatter([integers]).is_floating_point()


@pytest.mark.parametrize("op", ["avg", "MEAN", "", None, 1])
def test_unknown_reduce_op_raises_configuration_error_naming_the_valid_ops(
    collective: SingleProcessCollective, op: object
) -> None:
    for call in (
        lambda: collective.all_reduce(torch.ones(1), op),  # type: ignore[arg-type]
        lambda: collective.reduce_scatter([torch.ones(1)], op),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError) as info:
            call()
        assert all(repr(valid) in str(info.value) for valid in REDUCE_OPS)


@pytest.mark.parametrize("rank", [1, -1, True, 0.0, "0"])
def test_src_and_dst_outside_the_world_raise(
    collective: SingleProcessCollective, rank: object
) -> None:
    t = torch.ones(1)
    for call in (
        lambda: collective.broadcast(t, rank),  # type: ignore[arg-type]
        lambda: collective.broadcast_object(1, rank),  # type: ignore[arg-type]
        lambda: collective.gather(t, rank),  # type: ignore[arg-type]
        lambda: collective.scatter([t], rank),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError, match=r"\[0, 1\)"):
            call()


@pytest.mark.parametrize("tensors", [None, [], [torch.ones(1), torch.ones(1)], [1.0], "x"])
def test_list_operations_need_exactly_one_tensor(
    collective: SingleProcessCollective, tensors: object
) -> None:
    for call in (
        lambda: collective.scatter(tensors),  # type: ignore[arg-type]
        lambda: collective.reduce_scatter(tensors),  # type: ignore[arg-type]
        lambda: collective.all_to_all(tensors),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError):
            call()


def test_tensor_operations_refuse_non_tensors(collective: SingleProcessCollective) -> None:
    for call in (
        lambda: collective.all_reduce([1.0]),  # type: ignore[arg-type]
        lambda: collective.all_gather(1.0),  # type: ignore[arg-type]
        lambda: collective.broadcast(None),  # type: ignore[arg-type]
        lambda: collective.gather("x"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError):
            call()


def test_gather_scatter_all_to_all_and_all_gather_copy(
    collective: SingleProcessCollective,
) -> None:
    t = torch.arange(4.0)
    results = [
        *collective.all_gather(t),
        *(collective.gather(t) or []),
        collective.scatter([t]),
        *collective.all_to_all([t]),
        collective.broadcast(t),
    ]
    assert len(results) == 5
    for result in results:
        assert torch.equal(result, t)
        assert result.data_ptr() != t.data_ptr()


def test_object_operations_return_copies(collective: SingleProcessCollective) -> None:
    obj = {"step": 3, "values": [1, 2], "tensor": torch.ones(2)}
    copy = collective.broadcast_object(obj)
    [gathered] = collective.all_gather_object(obj)
    for result in (copy, gathered):
        assert result is not obj
        assert result["values"] is not obj["values"]
        assert result["step"] == 3
        assert torch.equal(result["tensor"], obj["tensor"])


def test_object_operations_refuse_unpicklable_objects(
    collective: SingleProcessCollective,
) -> None:
    with pytest.raises(ConfigurationError, match="picklable"):
        collective.broadcast_object(lambda: 1)
    with pytest.raises(ConfigurationError, match="picklable"):
        collective.all_gather_object(lambda: 1)


def test_timeouts_are_accepted_and_validated(collective: SingleProcessCollective) -> None:
    collective.barrier(timeout=timedelta(seconds=1))
    collective.all_reduce(torch.ones(1), timeout=timedelta(milliseconds=1))
    with pytest.raises(ConfigurationError):
        collective.barrier(timeout=timedelta(seconds=-1))
    with pytest.raises(ConfigurationError):
        collective.barrier(timeout=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SingleProcessCollective(timeout=timedelta(0))
    assert SingleProcessCollective(timeout=timedelta(seconds=7)).timeout == timedelta(seconds=7)


@given(
    values=st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=8),
    op=st.sampled_from(REDUCE_OPS),
)
def test_all_reduce_never_modifies_its_input(values: list[float], op: Any) -> None:
    collective = SingleProcessCollective()
    collective.setup(FakeEnvironment(), CPU)
    tensor = torch.tensor(values)
    before = tensor.clone()
    result = collective.all_reduce(tensor, op)
    assert torch.equal(tensor, before)
    assert torch.equal(result, before)


def test_validation_helpers_accept_valid_values() -> None:
    assert check_reduce_op("sum", "op") == "sum"
    assert check_rank(2, 3, "op") == 2
    assert check_timeout(None, "op") is None
    tensors = (torch.ones(1), torch.zeros(1))
    assert check_tensor_list(tensors, 2, "op") == list(tensors)
