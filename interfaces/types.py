"""Type aliases and flag vocabularies shared by every protocol.

Nothing here imports torch at run time: aliases that mention torch types are written as
strings and only resolved by type checkers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, Union

if TYPE_CHECKING:
    import os

    import torch

__all__ = [
    "PRECISION_FLAGS",
    "REDUCE_OPS",
    "Checkpoint",
    "DeviceRequest",
    "MapLocation",
    "PathLike",
    "PrecisionFlag",
    "ReduceOp",
    "StateDict",
    "StorageOptions",
]

PrecisionFlag: TypeAlias = Literal[
    "32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"
]
"""A precision flag. ``*-true`` keeps parameters and compute in that dtype; ``*-mixed`` keeps
float32 parameters and computes under autocast in the half dtype."""

PRECISION_FLAGS: Final[tuple[PrecisionFlag, ...]] = (
    "32-true",
    "64-true",
    "16-true",
    "bf16-true",
    "16-mixed",
    "bf16-mixed",
)
"""Every :data:`PrecisionFlag`, in documentation order."""

ReduceOp: TypeAlias = Literal["sum", "mean", "min", "max", "product"]
"""A reduction for ``all_reduce`` and ``reduce_scatter``. The default everywhere is ``"mean"``."""

REDUCE_OPS: Final[tuple[ReduceOp, ...]] = ("sum", "mean", "min", "max", "product")
"""Every :data:`ReduceOp`."""

DeviceRequest: TypeAlias = int | str | Sequence[int]
"""What a user may pass as ``devices``: a count (``2``), ``-1`` (all), ``"auto"``, a count or an
index list as a string (``"2"``, ``"0,1"``, ``"1,"``), or an index list (``[0, 1]``)."""

PathLike: TypeAlias = Union[str, "os.PathLike[str]"]
"""A local path or an fsspec URL (``memory://...``, ``s3://...``)."""

MapLocation: TypeAlias = Union[str, "torch.device", Mapping[str, str], None]
"""Where loaded tensors go: ``None`` (where they were saved), a device, or a device mapping."""

StorageOptions: TypeAlias = Mapping[str, object] | None
"""Extra, implementation-defined options for a save; an option an implementation does not
understand raises ``TypeError``."""

# Checkpoints are a documented pass-through slot: a trainer may put any value it can get back
# (tensors, containers, numbers, strings, None, and whatever the implementation declares).
Checkpoint: TypeAlias = dict[str, Any]
"""A checkpoint: a string-keyed dict of tensors, containers and Python scalars."""

StateDict: TypeAlias = dict[str, Any]
"""A component's state, as returned by ``state_dict()`` (pass-through like :data:`Checkpoint`)."""
