"""Fault-seeded distributed implementations, and checks that misbehave on purpose.

Each implementation breaks exactly one rule of a correct reference (``TorchCollective`` or
``DDPStrategy``); :data:`FAULTS` names the check that must reject it and the clause. The
``check_*`` functions at the end are run by name (``"module:function"``) to make ranks
disagree, crash or exit, so the harness's reports can be tested. Everything is at module
level so that every rank of a world can import it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

import torch
from torch.utils.data import DataLoader

from tests.conformance.distributed.targets import COLLECTIVE_TIMEOUT
from trainspec.conformance.core import CheckFailure, CheckSkipped, Target
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
