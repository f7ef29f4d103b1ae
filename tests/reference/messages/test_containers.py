"""One container walker for ``batch_to_device`` and ``convert_input``: the same shapes, alike."""

from __future__ import annotations

import dataclasses
import types
from collections import OrderedDict, defaultdict
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import pytest
import torch

from trainspec import ConfigurationError
from trainspec.reference import _containers
from trainspec.reference.precisions import conversion
from trainspec.reference.strategies import base

META = torch.device("meta")


class _Pair(NamedTuple):
    x: torch.Tensor
    label: str


@dataclasses.dataclass(frozen=True)
class _Batch:
    x: torch.Tensor
    ids: list[int]


class _Tagged(dict[str, object]):
    """A dict subclass that a plain ``dict`` copy would lose."""


class _Tuple(tuple[object, ...]):
    __slots__ = ()


class _View(Mapping[str, object]):
    """A read-only mapping that is not a dict, constructible from one."""

    def __init__(self, data: Mapping[str, object]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> object:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _containers_of(tensor: torch.Tensor) -> dict[str, object]:
    return {
        "tensor": tensor,
        "list": [tensor, 3, "s", None],
        "tuple": (tensor, 1.5),
        "named": _Pair(tensor, "lbl"),
        "tuple_subclass": _Tuple((tensor, 2)),
        "ordered": OrderedDict(k=tensor),
        "default": defaultdict(list, {"a": [tensor]}),
        "tagged": _Tagged(k=tensor),
        "view": _View({"k": tensor}),
        "proxy": types.MappingProxyType({"k": tensor}),
        "data": _Batch(tensor, [1, 2]),
    }


def _tensors(value: object) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _containers.map_tensors(value, lambda t: found.append(t) or t, "test")
    return found


def _assert_same_shape(before: object, after: object) -> None:
    assert type(after) is type(before), f"{type(before).__name__} became {type(after).__name__}"
    if isinstance(before, torch.Tensor):
        return
    if isinstance(before, Mapping):
        assert list(after) == list(before)  # type: ignore[call-overload]
        for key in before:
            _assert_same_shape(before[key], after[key])  # type: ignore[index]
    elif isinstance(before, (list, tuple)):
        assert len(after) == len(before)  # type: ignore[arg-type]
        for a, b in zip(before, after, strict=True):  # type: ignore[call-overload]
            _assert_same_shape(a, b)
    elif dataclasses.is_dataclass(before):
        for field in dataclasses.fields(before):
            _assert_same_shape(getattr(before, field.name), getattr(after, field.name))
    else:
        assert after == before


def test_both_callers_use_the_one_walker() -> None:
    assert base.map_tensors is _containers.map_tensors
    assert conversion.map_tensors is _containers.map_tensors


@pytest.mark.parametrize("name", list(_containers_of(torch.ones(1))))
def test_batch_to_device_moves_the_tensors_of_every_container_and_keeps_its_type(
    name: str,
) -> None:
    batch = _containers_of(torch.ones(2))[name]
    moved = base._move(batch, META, non_blocking=False)
    _assert_same_shape(batch, moved)
    assert _tensors(moved), name
    assert all(t.device == META for t in _tensors(moved)), name
    assert all(t.device.type == "cpu" for t in _tensors(batch)), "the input was modified"


@pytest.mark.parametrize("name", list(_containers_of(torch.ones(1))))
def test_convert_input_casts_the_tensors_of_every_container_and_keeps_its_type(
    name: str,
) -> None:
    data = _containers_of(torch.ones(2))[name]
    converted = conversion.cast_floating_tensors(data, torch.float64)
    _assert_same_shape(data, converted)
    assert all(t.dtype == torch.float64 for t in _tensors(converted)), name
    assert all(t.dtype == torch.float32 for t in _tensors(data)), "the input was modified"


def test_a_mapping_that_cannot_be_rebuilt_names_the_caller() -> None:
    class Frozen(dict[str, object]):
        def __init__(self, key: str, value: object) -> None:
            super().__init__({key: value})

    for owner, call in (
        ("batch_to_device", lambda d: base._move(d, META, non_blocking=False)),
        ("convert_input", lambda d: conversion.cast_floating_tensors(d, torch.float64)),
    ):
        with pytest.raises(ConfigurationError, match=f"{owner} cannot rebuild a Frozen"):
            call(Frozen("x", torch.ones(1)))


def test_a_dataclass_that_cannot_be_rebuilt_is_a_configuration_error() -> None:
    @dataclasses.dataclass
    class WithInitVar:
        x: torch.Tensor
        scale: dataclasses.InitVar[int]

        def __post_init__(self, scale: int) -> None:
            del scale

    with pytest.raises(ConfigurationError, match="convert_input cannot rebuild a WithInitVar"):
        conversion.cast_floating_tensors(WithInitVar(torch.ones(1), 2), torch.float64)


def test_values_that_are_not_containers_are_returned_as_they_are() -> None:
    marker = object()
    for value in (1, 1.5, 2j, "s", b"b", None, marker, torch.float32):
        assert _containers.map_tensors(value, lambda t: t * 0, "test") is value
