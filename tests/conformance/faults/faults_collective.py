"""Fault-seeded collectives: each subclasses the reference ``SingleProcessCollective`` and
breaks exactly one rule; ``clause`` names the clause whose check must reject it.

Also :class:`ThreadCollective`, a correct collective for a world of N ranks that are threads
of this process, so the tests can run every collective check at world size 2 without
starting processes.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar, TypeVar

import torch

from trainspec.collective import Collective
from trainspec.conformance.fakes import SingleProcessEnvironment
from trainspec.errors import (
    CollectiveTimeoutError,
    ConfigurationError,
    LifecycleError,
    PeerFailureError,
)
from trainspec.reference.collectives._validation import (
    check_initialized,
    check_rank,
    check_reduce_op,
    check_tensor,
    check_tensor_list,
)
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.types import REDUCE_OPS

if TYPE_CHECKING:
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.conformance.core import Check, Target
    from trainspec.types import ReduceOp

_T = TypeVar("_T")


# --------------------------------------------------------------------------- a correct N-rank one


class ThreadWorld:
    """Shared state of a world whose ranks are threads: numbered rounds of deposits.

    Every rank's n-th collective call (``setup`` included) is round n; a call returns once
    every rank has deposited its value for that round. A rank that has left (teardown)
    without depositing makes the others raise ``PeerFailureError``; a rank that never comes
    makes them raise ``CollectiveTimeoutError``.
    """

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._cond = threading.Condition()
        self._rounds: dict[int, dict[int, object]] = {}
        self._next_round = [0] * world_size
        self._left: set[int] = set()

    def exchange(
        self, rank: int, value: object, timeout: float, *, joining: bool = False
    ) -> list[object]:
        with self._cond:
            number = self._next_round[rank]
            self._next_round[rank] += 1
            if joining:
                self._left.discard(rank)
            deposits = self._rounds.setdefault(number, {})
            deposits[rank] = value
            self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while len(deposits) < self.world_size:
                gone = sorted(r for r in self._left if r not in deposits)
                if gone and not joining:
                    raise PeerFailureError(f"rank(s) {gone} left the group during round {number}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = sorted(set(range(self.world_size)) - set(deposits))
                    raise CollectiveTimeoutError(
                        f"round {number}: rank(s) {missing} did not arrive within {timeout}s"
                    )
                self._cond.wait(remaining)
            return [deposits[r] for r in range(self.world_size)]

    def leave(self, rank: int) -> None:
        with self._cond:
            self._left.add(rank)
            self._cond.notify_all()


class ThreadCollective(Collective):
    """A correct collective for the ranks of a :class:`ThreadWorld` (one instance per rank)."""

    def __init__(self, world: ThreadWorld, *, timeout: timedelta = timedelta(seconds=30)) -> None:
        self._world = world
        self._timeout = timeout
        self._rank = 0
        self._initialized = False

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world.world_size

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        if environment.world_size != self._world.world_size:
            raise ConfigurationError(
                f"environment world size {environment.world_size} != {self._world.world_size}"
            )
        self._rank = environment.global_rank
        self._world.exchange(self._rank, None, self._timeout.total_seconds(), joining=True)
        self._initialized = True

    def teardown(self) -> None:
        if self._initialized:
            self._initialized = False
            self._world.leave(self._rank)

    def _exchange(self, operation: str, value: object, timeout: timedelta | None) -> list[object]:
        check_initialized(self._initialized, "ThreadCollective", operation)
        seconds = (timeout or self._timeout).total_seconds()
        try:
            return self._world.exchange(self._rank, value, seconds)
        except (CollectiveTimeoutError, PeerFailureError):
            self.teardown()
            raise

    def _tensors(
        self, operation: str, value: object, timeout: timedelta | None
    ) -> list[torch.Tensor]:
        return [v for v in self._exchange(operation, value, timeout) if isinstance(v, torch.Tensor)]

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        check_initialized(self._initialized, "ThreadCollective", "all_reduce")
        op = check_reduce_op(reduce_op, "all_reduce")
        values = self._tensors("all_reduce", check_tensor(tensor, "all_reduce").clone(), timeout)
        return _reduce(values, op)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return [v.clone() for v in self._tensors("all_gather", tensor.clone(), timeout)]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        check_initialized(self._initialized, "ThreadCollective", "broadcast")
        check_rank(src, self.world_size, "broadcast")
        return self._tensors("broadcast", tensor.clone(), timeout)[src].clone()

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        check_initialized(self._initialized, "ThreadCollective", "broadcast_object")
        check_rank(src, self.world_size, "broadcast_object")
        import copy

        values = self._exchange("broadcast_object", copy.deepcopy(obj), timeout)
        result: _T = copy.deepcopy(values[src])  # type: ignore[assignment]
        return result

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        import copy

        values = self._exchange("all_gather_object", copy.deepcopy(obj), timeout)
        return [copy.deepcopy(v) for v in values]  # type: ignore[misc]

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        check_initialized(self._initialized, "ThreadCollective", "gather")
        check_rank(dst, self.world_size, "gather", role="dst")
        values = self._tensors("gather", tensor.clone(), timeout)
        return [v.clone() for v in values] if self._rank == dst else None

    def scatter(
        self, tensors: list[torch.Tensor] | None, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        check_initialized(self._initialized, "ThreadCollective", "scatter")
        check_rank(src, self.world_size, "scatter")
        mine = None
        if self._rank == src:
            mine = [t.clone() for t in check_tensor_list(tensors, self.world_size, "scatter")]
        values = self._exchange("scatter", mine, timeout)
        listed = values[src]
        assert isinstance(listed, list)
        return listed[self._rank].clone()  # type: ignore[no-any-return]

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        check_initialized(self._initialized, "ThreadCollective", "reduce_scatter")
        op = check_reduce_op(reduce_op, "reduce_scatter")
        mine = [t.clone() for t in check_tensor_list(tensors, self.world_size, "reduce_scatter")]
        values = self._exchange("reduce_scatter", mine, timeout)
        return _reduce([v[self._rank] for v in values], op)  # type: ignore[index]

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        check_initialized(self._initialized, "ThreadCollective", "all_to_all")
        mine = [t.clone() for t in check_tensor_list(tensors, self.world_size, "all_to_all")]
        values = self._exchange("all_to_all", mine, timeout)
        return [v[self._rank].clone() for v in values]  # type: ignore[index]

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        self._exchange("barrier", None, timeout)


def _reduce(values: list[torch.Tensor], op: ReduceOp) -> torch.Tensor:
    stacked = torch.stack(values)
    if op == "sum":
        return stacked.sum(dim=0, dtype=values[0].dtype)
    if op == "mean":
        return torch.true_divide(stacked.sum(dim=0, dtype=values[0].dtype), len(values))
    if op == "min":
        return stacked.amin(dim=0)
    if op == "max":
        return stacked.amax(dim=0)
    return stacked.prod(dim=0, dtype=values[0].dtype)


# --------------------------------------------------------------------------- the faults


class _Fault(SingleProcessCollective):
    clause: ClassVar[str]


class MeanSumsCollective(_Fault):
    """all_reduce computes the sum for "mean" (never divides by world size)."""

    clause = "COLL-6"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return super().all_reduce(
            tensor, "sum" if reduce_op == "mean" else reduce_op, timeout=timeout
        )


class DefaultSumCollective(_Fault):
    """all_reduce defaults to "sum" instead of "mean"."""

    clause = "COLL-6"

    def all_reduce(
        self, tensor: torch.Tensor, reduce_op: ReduceOp = "sum", *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return super().all_reduce(tensor, reduce_op, timeout=timeout)


class InPlaceAllReduceCollective(_Fault):
    """all_reduce writes the result into its input and returns the input."""

    clause = "COLL-1"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        result = super().all_reduce(tensor, reduce_op, timeout=timeout)
        if result.dtype != tensor.dtype:
            return result
        return tensor.copy_(result)


class AllGatherAliasesInputCollective(_Fault):
    """all_gather returns a list holding the caller's tensor itself, not a copy."""

    clause = "COLL-1"

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        super().all_gather(tensor, timeout=timeout)
        return [tensor]


class FlatViewAllReduceCollective(_Fault):
    """all_reduce flattens its input with view(-1), which fails for non-contiguous tensors."""

    clause = "COLL-6"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        flat = tensor.view(-1)  # the seeded fault: should be reshape / contiguous()
        return super().all_reduce(flat, reduce_op, timeout=timeout).view(tensor.shape)


class UnknownOpKeyErrorCollective(_Fault):
    """all_reduce looks the op up in a dict and lets KeyError escape for an unknown op."""

    clause = "COLL-7"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        if reduce_op not in REDUCE_OPS:
            raise KeyError(reduce_op)
        return super().all_reduce(tensor, reduce_op, timeout=timeout)


class BroadcastAnySourceCollective(_Fault):
    """broadcast accepts a src outside [0, world_size)."""

    clause = "COLL-9"

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return super().broadcast(tensor, 0, timeout=timeout)


class InitialisedAtConstructionCollective(_Fault):
    """Joins its group in the constructor, so operations work before setup."""

    clause = "COLL-5"

    def __init__(self) -> None:
        super().__init__()
        self.setup(SingleProcessEnvironment(), torch.device("cpu"))


class TeardownTwiceRaisesCollective(_Fault):
    """A second teardown raises LifecycleError (teardown is not idempotent)."""

    clause = "COLL-5"

    def teardown(self) -> None:
        if not self.is_initialized:
            raise LifecycleError("teardown() called on a collective that is not set up")
        super().teardown()


class NoSetupAfterTeardownCollective(_Fault):
    """setup refuses to run again after teardown."""

    clause = "COLL-5"

    def __init__(self) -> None:
        super().__init__()
        self.was_set_up = False

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        if self.was_set_up:
            raise LifecycleError("this collective has already been used")
        self.was_set_up = True
        super().setup(environment, device)


class OneBasedRankCollective(_Fault):
    """Reports a 1-based rank (rank 1 of world size 1)."""

    clause = "COLL-4"

    @property
    def rank(self) -> int:
        return super().rank + 1


class BroadcastObjectThroughJsonCollective(_Fault):
    """broadcast_object sends the payload as JSON: tuples come back as lists."""

    clause = "COLL-10"

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        import json

        super().broadcast_object(obj, src, timeout=timeout)
        result: _T = json.loads(json.dumps(obj))
        return result


class BroadcastObjectConsumesCallerCollective(_Fault):
    """broadcast_object empties the caller's list items (it "moves" the payload) and returns a
    copy of the original."""

    clause = "COLL-10"

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        import copy

        result = copy.deepcopy(super().broadcast_object(obj, src, timeout=timeout))
        if isinstance(obj, dict):
            for value in obj.values():
                if isinstance(value, list):
                    value.clear()
        return result


class SourceKeepsObjectThreadCollective(ThreadCollective):
    """A CORRECT collective shaped like torch.distributed.broadcast_object_list: rank src gets
    its own object back (no copy), every other rank a new unpickled one."""

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        result = super().broadcast_object(obj, src, timeout=timeout)
        return obj if self.rank == src else result


class NonSourceReusesCallerThreadCollective(ThreadCollective):
    """On ranks other than src, broadcast_object overwrites the caller's dict with the payload
    and returns it (not a new object)."""

    clause: ClassVar[str] = "COLL-10"

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        result = super().broadcast_object(obj, src, timeout=timeout)
        if self.rank != src and isinstance(obj, dict) and isinstance(result, dict):
            obj.clear()
            obj.update(result)
            return obj
        return result


class GatherOnWrongRankCollective(_Fault):
    """gather returns None on the destination rank (the list goes to the other ranks)."""

    clause = "COLL-12"

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        result = super().gather(tensor, dst, timeout=timeout)
        return None if self.rank == dst else result


class ScatterAnyLengthCollective(_Fault):
    """scatter on the source rank accepts a list of any length."""

    clause = "COLL-13"

    def scatter(
        self, tensors: list[torch.Tensor] | None, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        if not tensors:
            raise IndexError("scatter: empty list")
        return super().scatter(tensors[:1], src, timeout=timeout)


class ReduceScatterDefaultSumCollective(_Fault):
    """reduce_scatter defaults to "sum" instead of "mean"."""

    clause = "COLL-14"

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "sum",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        return super().reduce_scatter(tensors, reduce_op, timeout=timeout)


FAULTS: tuple[type[_Fault], ...] = (
    MeanSumsCollective,
    DefaultSumCollective,
    InPlaceAllReduceCollective,
    AllGatherAliasesInputCollective,
    FlatViewAllReduceCollective,
    UnknownOpKeyErrorCollective,
    BroadcastAnySourceCollective,
    InitialisedAtConstructionCollective,
    TeardownTwiceRaisesCollective,
    NoSetupAfterTeardownCollective,
    OneBasedRankCollective,
    BroadcastObjectThroughJsonCollective,
    BroadcastObjectConsumesCallerCollective,
    GatherOnWrongRankCollective,
    ScatterAnyLengthCollective,
    ReduceScatterDefaultSumCollective,
)
"""Every fault-seeded collective; each class's ``clause`` is the clause that rejects it."""


# --------------------------------------------------------------------------- a thread "harness"


def run_on_threads(
    check: Check, targets: list[Target[_T]], *, timeout_s: float = 120.0
) -> list[BaseException | None]:
    """Run ``check`` once per target, concurrently, one thread per rank; each rank's outcome
    (``None`` for a pass, else the exception). A hung rank fails the calling test."""
    outcomes: list[BaseException | None] = [None] * len(targets)

    def work(index: int) -> None:
        try:
            check.run(targets[index])
        except BaseException as error:  # collected and judged by the caller
            outcomes[index] = error

    threads = [
        threading.Thread(target=work, args=(i,), name=f"rank-{i}", daemon=True)
        for i in range(len(targets))
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    if hung:
        raise AssertionError(f"{check.name}: {', '.join(hung)} did not finish in {timeout_s}s")
    return outcomes
