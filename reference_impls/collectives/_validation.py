"""Argument checks shared by the reference collectives.

Every helper raises :class:`~trainspec.ConfigurationError` (or
:class:`~trainspec.LifecycleError`) with a message that names the operation, the value given
and what is allowed, so that every collective rejects bad input the same way (COLL-7, COLL-9,
COLL-13). They are cheap enough to run on every call.
"""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import TYPE_CHECKING, Final

import torch

from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from trainspec.types import ReduceOp

__all__ = [
    "check_initialized",
    "check_rank",
    "check_reduce_op",
    "check_tensor",
    "check_tensor_list",
    "check_timeout",
    "object_to_bytes",
]

_REDUCE_OPS: Final = frozenset(REDUCE_OPS)


def check_reduce_op(reduce_op: object, operation: str) -> ReduceOp:
    """``reduce_op`` if it is one of :data:`trainspec.REDUCE_OPS`; otherwise
    :class:`~trainspec.ConfigurationError` naming the valid ops (COLL-7)."""
    if isinstance(reduce_op, str) and reduce_op in _REDUCE_OPS:
        return reduce_op
    raise ConfigurationError(
        f"{operation}: reduce_op must be one of {', '.join(map(repr, REDUCE_OPS))} "
        f"(trainspec.REDUCE_OPS); got {reduce_op!r}."
    )


def check_rank(rank: object, world_size: int, operation: str, role: str = "src") -> int:
    """``rank`` if it is an int in ``[0, world_size)``; otherwise
    :class:`~trainspec.ConfigurationError` naming the valid range (COLL-9)."""
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < world_size:
        return rank
    raise ConfigurationError(
        f"{operation}: {role} must be a rank in [0, {world_size}) (world size {world_size}); "
        f"got {rank!r}."
    )


def check_tensor(tensor: object, operation: str, name: str = "tensor") -> torch.Tensor:
    """``tensor`` if it is a ``torch.Tensor``; otherwise
    :class:`~trainspec.ConfigurationError`."""
    if isinstance(tensor, torch.Tensor):
        return tensor
    raise ConfigurationError(
        f"{operation}: {name} must be a torch.Tensor; got {type(tensor).__name__}."
    )


def check_tensor_list(
    tensors: object, world_size: int, operation: str, name: str = "tensors"
) -> list[torch.Tensor]:
    """``tensors`` if it is a list or tuple of exactly ``world_size`` tensors; otherwise
    :class:`~trainspec.ConfigurationError` naming the expected length (COLL-13)."""
    if not isinstance(tensors, (list, tuple)):
        raise ConfigurationError(
            f"{operation}: {name} must be a list of {world_size} tensor(s) (one per rank); "
            f"got {type(tensors).__name__}."
        )
    if len(tensors) != world_size:
        raise ConfigurationError(
            f"{operation}: {name} must hold exactly world_size={world_size} tensor(s), one "
            f"per rank; got {len(tensors)}."
        )
    for index, tensor in enumerate(tensors):
        check_tensor(tensor, operation, f"{name}[{index}]")
    return list(tensors)


def check_timeout(timeout: object, operation: str) -> timedelta | None:
    """``timeout`` if it is ``None`` or a positive ``timedelta``; otherwise
    :class:`~trainspec.ConfigurationError`."""
    if timeout is None or (isinstance(timeout, timedelta) and timeout > timedelta(0)):
        return timeout
    raise ConfigurationError(
        f"{operation}: timeout must be None or a positive datetime.timedelta; got {timeout!r}."
    )


def check_initialized(initialized: bool, owner: str, operation: str) -> None:
    """Raise :class:`~trainspec.LifecycleError` unless ``initialized`` (COLL-5)."""
    if not initialized:
        raise LifecycleError(
            f"{owner}.{operation}() needs a set-up collective; call setup(environment, "
            "device) first (or again after teardown() or a timeout)."
        )


def object_to_bytes(obj: object, operation: str) -> bytes:
    """``obj`` pickled; a value pickle refuses raises :class:`~trainspec.ConfigurationError`
    naming its type (object collectives need picklable payloads, COLL-10, COLL-11)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as error:
        raise ConfigurationError(
            f"{operation}: the object must be picklable; {type(obj).__name__} is not "
            f"({type(error).__name__}: {error})."
        ) from error
