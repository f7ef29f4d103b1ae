"""Dtype conversion shared by the reference precisions: modules, inputs, the default dtype.

Everything here is on or near the hot path, so it allocates only what the result needs: no
validation per call, no copies of tensors that already have the target dtype.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar, cast

import torch

from trainspec.reference._containers import map_tensors

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

__all__ = ["DefaultDtype", "cast_floating_tensors", "cast_module"]

_T = TypeVar("_T")


class DefaultDtype(AbstractContextManager[None]):
    """Set ``torch``'s default floating-point dtype for the body of a ``with`` block.

    On exit, normally or by an exception, the default dtype is the one seen on entry
    (PREC-5). One instance serves one ``with`` block at a time; create one per use (cheap).
    """

    __slots__ = ("_dtype", "_previous")

    def __init__(self, dtype: torch.dtype) -> None:
        self._dtype = dtype
        self._previous = dtype

    def __enter__(self) -> None:
        # Setting the default dtype costs a microsecond; skip it when it is already right.
        self._previous = previous = torch.get_default_dtype()
        if previous != self._dtype:
            torch.set_default_dtype(self._dtype)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if torch.get_default_dtype() != self._previous:
            torch.set_default_dtype(self._previous)


def cast_module(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Cast ``module``'s floating-point parameters, their gradients, and floating-point
    buffers to ``dtype``, in place; return ``module`` (PREC-3).

    Integer, bool and complex tensors are left alone (``Module.to(dtype)`` would also cast
    complex tensors). Parameters keep their identity, so references to them stay valid.
    """
    for submodule in module.modules():
        for parameter in submodule.parameters(recurse=False):
            if parameter.is_floating_point() and parameter.dtype != dtype:
                parameter.data = parameter.data.to(dtype)
                if parameter.grad is not None:
                    parameter.grad = parameter.grad.to(dtype)
        for name, buffer in submodule.named_buffers(recurse=False):
            if buffer.is_floating_point() and buffer.dtype != dtype:
                setattr(submodule, name, buffer.to(dtype))
    return module


def cast_floating_tensors(data: _T, dtype: torch.dtype) -> _T:
    """``data`` with every floating-point tensor cast to ``dtype`` (PREC-4).

    Lists, tuples, named tuples, mappings (``dict``, ``OrderedDict``, ``defaultdict``, and
    any mapping type constructible from a dict) and dataclass instances are rebuilt with the
    same type and keys, by the walker ``batch_to_device`` uses too
    (:func:`~trainspec.reference._containers.map_tensors`); every other value, and every
    tensor already of ``dtype``, is returned as it is.

    Raises:
        ConfigurationError: a mapping or dataclass type that cannot be rebuilt.
    """
    caster = _CASTERS.get(dtype)
    if caster is None:
        caster = _CASTERS[dtype] = _cast_tensor(dtype)
    if type(data) is torch.Tensor:  # the most common input, without the walk
        return cast("_T", caster(cast("torch.Tensor", data)))
    return cast("_T", map_tensors(data, caster, "convert_input"))


_CASTERS: dict[torch.dtype, Callable[[torch.Tensor], torch.Tensor]] = {}
"""One cast function per dtype, made once (the walk is on every step's path)."""


def _cast_tensor(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast_one(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point() and tensor.dtype != dtype:
            return tensor.to(dtype)
        return tensor

    return cast_one
