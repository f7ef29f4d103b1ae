"""Typing cases for :class:`trainspec.Collective` and the reduce-op vocabulary.

Negative cases carry the exact ``# type: ignore[code]`` mypy reports (see case_accelerator.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, TypeVar

import torch
from typing_extensions import assert_type

from trainspec import REDUCE_OPS, ClusterEnvironment, Collective, ReduceOp

_T = TypeVar("_T")


class _CollectiveCore:
    """Every Collective member except ``rank`` and ``broadcast_object``."""

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_initialized(self) -> bool:
        return True

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def all_reduce(
        self, tensor: torch.Tensor, reduce_op: ReduceOp = "mean", *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor.clone()

    def all_gather(self, tensor: torch.Tensor, *, timeout: timedelta | None = None) -> list[torch.Tensor]:
        return [tensor.clone()]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return tensor.clone()

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        return [obj]

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        return [tensor.clone()]

    def scatter(
        self, tensors: list[torch.Tensor] | None, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        assert tensors is not None
        return tensors[0].clone()

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensors[0].clone()

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return [t.clone() for t in tensors]

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        pass


# -- positive -------------------------------------------------------------------------------


class StructuralCollective(_CollectiveCore):
    @property
    def rank(self) -> int:
        return 0

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj


collective: Collective = StructuralCollective()
ops: tuple[ReduceOp, ...] = REDUCE_OPS


def use_collective(collective: Collective, tensor: torch.Tensor) -> None:
    assert_type(collective.rank, int)
    assert_type(collective.world_size, int)
    assert_type(collective.is_initialized, bool)
    assert_type(collective.all_reduce(tensor), torch.Tensor)
    assert_type(collective.all_reduce(tensor, "sum", timeout=timedelta(seconds=5)), torch.Tensor)
    assert_type(collective.all_gather(tensor), list[torch.Tensor])
    assert_type(collective.broadcast(tensor, src=1), torch.Tensor)
    assert_type(collective.broadcast_object({"a": 1}), dict[str, int])
    assert_type(collective.all_gather_object(3.0), list[float])
    assert_type(collective.gather(tensor, dst=0), list[torch.Tensor] | None)
    assert_type(collective.scatter(None, src=0), torch.Tensor)
    assert_type(collective.reduce_scatter([tensor], "max"), torch.Tensor)
    assert_type(collective.all_to_all([tensor]), list[torch.Tensor])
    assert_type(collective.barrier(timeout=None), None)


# -- negative -------------------------------------------------------------------------------


class ObjectBroadcast(_CollectiveCore):
    @property
    def rank(self) -> int:
        return 0

    def broadcast_object(self, obj: object, src: int = 0, *, timeout: timedelta | None = None) -> object:
        return obj


class NarrowReduceOps(StructuralCollective):
    def all_reduce(  # type: ignore[override]
        self,
        tensor: torch.Tensor,
        reduce_op: Literal["sum", "mean"] = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return tensor


class NoTimeout(_CollectiveCore):
    @property
    def rank(self) -> int:
        return 0

    def broadcast_object(self, obj: _T, src: int = 0) -> _T:
        return obj


class MissingRank(_CollectiveCore):
    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj


class StringRank(_CollectiveCore):
    @property
    def rank(self) -> str:
        return "0"

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        return obj


not_generic: Collective = ObjectBroadcast()  # type: ignore[assignment]
narrow_ops: Collective = NarrowReduceOps()  # type: ignore[assignment]
no_timeout: Collective = NoTimeout()  # type: ignore[assignment]
missing: Collective = MissingRank()  # type: ignore[assignment]
string_rank: Collective = StringRank()  # type: ignore[assignment]
avg: ReduceOp = "avg"  # type: ignore[assignment]


def misuse_collective(collective: Collective, tensor: torch.Tensor) -> None:
    collective.all_reduce(tensor, "avg")  # type: ignore[arg-type]
    collective.all_reduce(tensor, "sum", timedelta(seconds=1))  # type: ignore[call-arg]
    collective.broadcast(tensor, timeout=5.0)  # type: ignore[arg-type]
    collective.rank = 1  # type: ignore[misc]
