"""Fault-seeded distributed implementations, and checks that misbehave on purpose.

Each implementation breaks exactly one rule of a correct reference (``TorchCollective`` or
``DDPStrategy``); :data:`FAULTS` names the check that must reject it and the clause. The
``check_*`` functions at the end are run by name (``"module:function"``) to make ranks
disagree, crash or exit, so the harness's reports can be tested. Everything is at module
level so that every rank of a world can import it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch.utils.data import DataLoader

from tests.conformance.distributed.targets import COLLECTIVE_TIMEOUT
from trainspec.conformance.core import CheckFailure, CheckSkipped, Target
from trainspec.errors import ConfigurationError
from trainspec.reference.collectives.torch_dist import TorchCollective
from trainspec.reference.strategies.ddp import DDPStrategy

if TYPE_CHECKING:
    from trainspec.types import Checkpoint, PathLike, ReduceOp, StorageOptions

_T = TypeVar("_T")

# --------------------------------------------------------------------------- collectives


class WrongOrderAllGatherCollective(TorchCollective):
    """all_gather returns the ranks' tensors in reverse order (COLL-8)."""

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        return list(reversed(super().all_gather(tensor, timeout=timeout)))


class BroadcastIgnoresSrcCollective(TorchCollective):
    """broadcast always sends rank 0's tensor, whatever src says (COLL-9)."""

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        return super().broadcast(tensor, 0, timeout=timeout)


class MeanSumsCollective(TorchCollective):
    """all_reduce's "mean" (the default) returns the sum (COLL-6)."""

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


def _hang_forever_in_barrier() -> None:
    while True:  # the harness's stack dump must name this function
        time.sleep(0.05)


class HangingBarrierCollective(TorchCollective):
    """The last rank never returns from barrier; the others time out after 3 s."""

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        if self.rank == self.world_size - 1:
            _hang_forever_in_barrier()
        super().barrier(timeout=timeout)


def _crash_with_segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


class SegfaultingCollective(TorchCollective):
    """all_reduce segfaults on the last rank."""

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        if self.rank == self.world_size - 1:
            _crash_with_segfault()
        return super().all_reduce(tensor, reduce_op, timeout=timeout)


def _hang_forever_everywhere() -> None:
    while True:
        time.sleep(0.05)


class HangingEverywhereBarrierCollective(TorchCollective):
    """barrier never returns on any rank (a plugin that hangs in every barrier)."""

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        _hang_forever_everywhere()


class RaisingOnLastRankAllGatherCollective(TorchCollective):
    """all_gather raises its own RuntimeError on the last rank, before the collective: the
    other ranks' all_gather times out, an echo of the last rank's error."""

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        if self.rank == self.world_size - 1:
            raise RuntimeError("the last rank's own all_gather bug")
        return super().all_gather(tensor, timeout=timeout)


class GroupKeepingCollective(TorchCollective):
    """teardown forgets the process group without destroying it (COLL-5 / STRAT-4); a later
    setup adopts the group that is still there, so the lifecycle seems to work."""

    def teardown(self) -> None:
        self._group = None
        self._owns_group = False


class RaisingTeardownCollective(TorchCollective):
    """teardown releases the group, then raises (COLL-5: teardown must not raise)."""

    def teardown(self) -> None:
        super().teardown()
        raise RuntimeError("teardown went wrong after releasing the group")


_TIMEOUT_TAKING = (
    "all_reduce",
    "all_gather",
    "broadcast",
    "broadcast_object",
    "all_gather_object",
    "gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "barrier",
)


def _refusing_timeouts(cls: type[_T], names: tuple[str, ...]) -> type[_T]:
    """``cls`` whose operations ``names`` raise ConfigurationError for any ``timeout=``
    other than None (a correct plugin in every respect but COLL-2's per-call timeouts)."""

    def refusing(name: str) -> Any:
        original = getattr(cls, name)

        @functools.wraps(original)
        def operation(self: object, *args: object, **kwargs: object) -> object:
            if kwargs.get("timeout") is not None:
                raise ConfigurationError(f"{name}: per-call timeouts are not supported")
            return original(self, *args, **kwargs)

        return operation

    for name in names:
        setattr(cls, name, refusing(name))
    return cls


def _ignoring_timeouts(cls: type[_T]) -> type[_T]:
    """``cls`` whose operations drop ``timeout=`` (always the default timeout set at
    construction): correct in every respect but COLL-2's per-call timeouts."""

    def ignoring(name: str) -> Any:
        original = getattr(cls, name)

        @functools.wraps(original)
        def operation(self: object, *args: object, **kwargs: object) -> object:
            kwargs.pop("timeout", None)
            return original(self, *args, **kwargs)

        return operation

    for name in _TIMEOUT_TAKING:
        setattr(cls, name, ignoring(name))
    return cls


@_ignoring_timeouts
class TimeoutIgnoringCollective(TorchCollective):
    """Every operation ignores its timeout argument (COLL-2 only)."""


@functools.partial(_refusing_timeouts, names=_TIMEOUT_TAKING)
class TimeoutRefusingCollective(TorchCollective):
    """Every operation raises ConfigurationError when given a timeout (COLL-2 only)."""


@functools.partial(
    _refusing_timeouts,
    names=("all_reduce", "all_gather", "broadcast", "broadcast_object", "barrier"),
)
class TimeoutRefusingStrategy(DDPStrategy):
    """Every strategy collective raises ConfigurationError when given a timeout (STRAT-12's
    timeout check only)."""


def wrong_order_all_gather() -> TorchCollective:
    return WrongOrderAllGatherCollective(timeout=COLLECTIVE_TIMEOUT)


def broadcast_ignores_src() -> TorchCollective:
    return BroadcastIgnoresSrcCollective(timeout=COLLECTIVE_TIMEOUT)


def mean_sums() -> TorchCollective:
    return MeanSumsCollective(timeout=COLLECTIVE_TIMEOUT)


def hanging_barrier() -> TorchCollective:
    return HangingBarrierCollective(timeout=timedelta(seconds=3))


def segfaulting_all_reduce() -> TorchCollective:
    return SegfaultingCollective(timeout=timedelta(seconds=10))


def hanging_barrier_everywhere() -> TorchCollective:
    return HangingEverywhereBarrierCollective(timeout=timedelta(seconds=3))


def raising_on_last_rank_all_gather() -> TorchCollective:
    return RaisingOnLastRankAllGatherCollective(timeout=timedelta(seconds=3))


def group_keeping_collective() -> TorchCollective:
    return GroupKeepingCollective(timeout=COLLECTIVE_TIMEOUT)


def raising_teardown_collective() -> TorchCollective:
    return RaisingTeardownCollective(timeout=COLLECTIVE_TIMEOUT)


def timeout_ignoring_collective() -> TorchCollective:
    """Its default timeout (15 s) is what a timeout=1s call waits instead."""
    return TimeoutIgnoringCollective(timeout=timedelta(seconds=15))


def timeout_refusing_collective() -> TorchCollective:
    return TimeoutRefusingCollective(timeout=COLLECTIVE_TIMEOUT)


# --------------------------------------------------------------------------- strategies


class EveryRankSavesStrategy(DDPStrategy):
    """save_checkpoint writes through the checkpoint IO on every rank, then waits (STRAT-16)."""

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        self.require_set_up("save_checkpoint")
        self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options=storage_options)
        self.barrier()


class OverlappingSamplerStrategy(DDPStrategy):
    """process_dataloader gives each rank its contiguous block plus the next sample (STRAT-8)."""

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        self.require_set_up("process_dataloader")
        size = len(dataloader.dataset)  # type: ignore[arg-type]
        block = -(-size // self.world_size)
        start = self.global_rank * block
        indices = list(range(start, min(start + block + 1, size)))
        return DataLoader(dataloader.dataset, batch_size=dataloader.batch_size, sampler=indices)


def _cpu_ranks() -> list[torch.device]:
    return [torch.device("cpu")] * int(os.environ.get("WORLD_SIZE", "1"))


def group_keeping_strategy() -> DDPStrategy:
    """The reference DDP strategy whose collective's teardown never destroys the process
    group: its teardown() leaves the default group initialized (STRAT-4)."""
    strategy = DDPStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)
    strategy._collective = GroupKeepingCollective(timeout=COLLECTIVE_TIMEOUT)
    return strategy


def timeout_refusing_strategy() -> DDPStrategy:
    return TimeoutRefusingStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def every_rank_saves() -> DDPStrategy:
    return EveryRankSavesStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


def overlapping_sampler() -> DDPStrategy:
    return OverlappingSamplerStrategy(parallel_devices=_cpu_ranks(), timeout=COLLECTIVE_TIMEOUT)


@dataclass(frozen=True)
class Fault:
    """A fault-seeded target and the check that must reject it."""

    name: str
    kind: str
    factory: str
    check: str
    clause: str


_HERE = "tests.conformance.distributed.faults"

FAULTS: tuple[Fault, ...] = (
    Fault(
        "all_gather in the wrong order",
        "collective",
        f"{_HERE}:wrong_order_all_gather",
        "check_collective_all_gather_matches_direct_computation",
        "COLL-8",
    ),
    Fault(
        "broadcast that ignores src",
        "collective",
        f"{_HERE}:broadcast_ignores_src",
        "check_collective_broadcast_matches_direct_computation",
        "COLL-9",
    ),
    Fault(
        "mean that sums",
        "collective",
        f"{_HERE}:mean_sums",
        "check_collective_all_reduce_matches_direct_computation",
        "COLL-6",
    ),
    Fault(
        "save on every rank",
        "strategy",
        f"{_HERE}:every_rank_saves",
        "check_strategy_checkpoint_is_written_by_rank_zero_only",
        "STRAT-16",
    ),
    Fault(
        "overlapping sampler",
        "strategy",
        f"{_HERE}:overlapping_sampler",
        "check_strategy_process_dataloader_shares_partition_the_dataset_across_ranks",
        "STRAT-8",
    ),
)

# --------------------------------------------------------------------------- misbehaving checks


def _rank() -> int:
    return int(os.environ["RANK"])


def check_skips_on_rank_one_only(target: Target[object]) -> None:
    """Passes on rank 0, skips on rank 1: the ranks disagree."""
    if _rank() == 1:
        raise CheckSkipped("rank 1 thinks this does not apply")


def check_fails_on_rank_one_only(target: Target[object]) -> None:
    """Passes on rank 0, fails on rank 1."""
    if _rank() == 1:
        raise CheckFailure("TEST-1", expected="agree", actual="rank 1 disagrees")


def check_skips_on_every_rank(target: Target[object]) -> None:
    """Skips everywhere with one reason."""
    raise CheckSkipped("not applicable anywhere")


def check_exits_on_rank_zero_and_is_killed_on_rank_one(target: Target[object]) -> None:
    """Rank 0 leaves with os._exit(3); rank 1 is killed by SIGKILL."""
    if _rank() == 0:
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def check_that_the_distributed_checks_skip_without_the_harness(target: Target[object]) -> None:
    """Inside a rank: a distributed check given a target without a RankContext skips."""
    import dataclasses

    from trainspec.conformance.distributed.checks import DISTRIBUTED_CHECKS, NEEDS_HARNESS

    bare = dataclasses.replace(target, options={"device": "cpu"})
    for check in DISTRIBUTED_CHECKS:
        if check.kind != target.kind:
            continue
        try:
            check.run(bare)
        except CheckSkipped as skipped:
            if not check.requires <= bare.capabilities:
                continue  # skipped for a capability the target lacks: it did not run either
            if "at least 2 ranks" not in skipped.reason or skipped.reason != NEEDS_HARNESS:
                raise AssertionError(f"{check.name} skipped for {skipped.reason!r}") from None
        else:
            raise AssertionError(f"{check.name} ran without the harness")


def check_exchange_gathers_in_rank_order(target: Target[object]) -> None:
    """RankContext.exchange returns every rank's object indexed by rank, twice in a row."""
    from trainspec.conformance.distributed.context import RANK_CONTEXT_OPTION, RankContext

    context = target.options[RANK_CONTEXT_OPTION]
    assert isinstance(context, RankContext)
    assert context.exchange(("hello", context.rank)) == [("hello", r) for r in range(2)]
    assert context.exchange(context.rank * 10) == [0, 10]
    assert os.environ["MASTER_PORT"] == str(context.main_port)
    assert os.path.isdir(context.shared_dir)


def check_raises_its_own_error_on_rank_one(target: Target[object]) -> None:
    """Rank 1 raises its own error; rank 0 waits for it in the harness's exchange and gets
    PeerFailureError, an echo of rank 1's."""
    from trainspec.conformance.distributed.context import RANK_CONTEXT_OPTION, RankContext

    context = target.options[RANK_CONTEXT_OPTION]
    assert isinstance(context, RankContext)
    if context.rank == 1:
        raise ValueError("rank 1's own mistake")
    context.barrier()


def check_hangs_while_making_the_target_on_rank_one(target: Target[object]) -> None:
    """Every rank makes the target; on rank 1 the factory never returns."""
    target.make()


def never_returning_factory() -> TorchCollective:
    if _rank() == 1:
        while True:
            time.sleep(0.05)
    return TorchCollective(timeout=COLLECTIVE_TIMEOUT)
