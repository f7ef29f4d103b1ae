"""The one container walker of the reference implementations: apply a function to every
tensor of a nested batch, keeping its structure.

``Strategy.batch_to_device`` (STRAT-7, moving tensors) and ``Precision.convert_input``
(PREC-4, casting floating-point tensors) both walk the same shapes of data, so they share
:func:`map_tensors` and treat every container alike:

| value | result |
| --- | --- |
| a tensor (or a subclass) | ``fn(tensor)`` |
| ``tuple``, ``list``, ``dict`` | a new one of the same type with the same keys |
| a named tuple | its type, built from the mapped fields positionally |
| another ``tuple`` or ``list`` subclass | its type, built from a list of the mapped items |
| a ``defaultdict`` | its type with the same ``default_factory`` |
| another mapping | its type, built from a ``dict`` of the mapped values |
| a dataclass instance | ``dataclasses.replace`` with every ``init`` field mapped |
| anything else (numbers, strings, ``None``, other objects) | the value itself |

A mapping or dataclass that cannot be rebuilt that way raises
:class:`~trainspec.ConfigurationError` naming the caller and what it accepts. The input is
never modified. The walk is on every step's hot path: exact-type tests for the common shapes
come first, and nothing is allocated beyond the result.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import cast

import torch

from trainspec.errors import ConfigurationError

__all__ = ["map_tensors"]

_LEAVES = (str, bytes, int, float, complex, type(None))


def map_tensors(data: object, fn: Callable[[torch.Tensor], torch.Tensor], owner: str) -> object:
    """``data`` with ``fn`` applied to every tensor in it, in the same structure (see the
    module docstring); ``owner`` names the caller in errors (``"convert_input"``)."""
    kind = type(data)
    # Exact-type checks first: they are the common batch shapes and the cheapest tests; a
    # plain tensor inside a plain container is mapped without a recursive call.
    if kind is torch.Tensor or isinstance(data, torch.Tensor):
        return fn(cast("torch.Tensor", data))
    tensor = torch.Tensor
    if kind is tuple:
        return tuple(
            [
                fn(item) if type(item) is tensor else map_tensors(item, fn, owner)
                for item in cast("tuple[object]", data)
            ]
        )
    if kind is list:
        return [
            fn(item) if type(item) is tensor else map_tensors(item, fn, owner)
            for item in cast("list[object]", data)
        ]
    if kind is dict:
        return {
            key: fn(value) if type(value) is tensor else map_tensors(value, fn, owner)
            for key, value in cast("dict[object, object]", data).items()
        }
    if isinstance(data, _LEAVES):
        return data
    rebuild = cast("Callable[..., object]", kind)
    if isinstance(data, tuple):
        items = [map_tensors(item, fn, owner) for item in data]
        if hasattr(data, "_fields"):  # a named tuple takes its fields positionally
            return rebuild(*items)
        return rebuild(items)
    if isinstance(data, list):
        return rebuild([map_tensors(item, fn, owner) for item in data])
    if isinstance(data, Mapping):
        pairs = {
            key: map_tensors(value, fn, owner)
            for key, value in cast("Mapping[object, object]", data).items()
        }
        if isinstance(data, defaultdict):
            return rebuild(data.default_factory, pairs)
        try:
            return rebuild(pairs)
        except TypeError as error:
            raise _cannot_rebuild(owner, kind, error) from error
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {
            field.name: map_tensors(getattr(data, field.name), fn, owner)
            for field in dataclasses.fields(data)
            if field.init
        }
        try:
            return dataclasses.replace(data, **changes)
        except (TypeError, ValueError) as error:  # an InitVar without a default
            raise _cannot_rebuild(owner, kind, error) from error
    return data


def _cannot_rebuild(owner: str, kind: type, error: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"{owner} cannot rebuild a {kind.__name__} from its mapped items ({error}); pass "
        "dicts, lists, tuples, named tuples, dataclasses or mappings constructible from a dict"
    )
