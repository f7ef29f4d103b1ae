"""Distributed checks of :class:`trainspec.Strategy` (STRAT-2, 8, 11, 12, 13, 16, 17 and
SYNC-1): rank properties agree across ranks; the strategy collectives against a direct
computation; ``reduce_boolean_decision``; ``process_dataloader`` shares partition the data;
the clipped norm is the full gradient's on every rank; checkpoints are written and removed by
rank zero only (a spy on the checkpoint IO counts calls on every rank) and every rank returns
after the file exists; ``no_backward_sync`` keeps gradients local."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Final, TypeVar, cast

import torch
from hypothesis import strategies as st
from typing_extensions import Self

from trainspec.capabilities import BackwardSyncControl
from trainspec.conformance._helpers import describe_exception, failure
from trainspec.conformance.distributed.checks._inputs import (
    all_gather_problem,
    all_reduce_problem,
    broadcast_object_problem,
    broadcast_problem,
    movements,
    picklable_objects,
    reductions,
)
from trainspec.conformance.distributed.checks._support import (
    SHORT_TIMEOUT,
    TIMEOUT_SLACK_S,
    agree,
    barrier_problem,
    distributed_check,
    guarded,
    max_examples,
    run_examples,
    set_up_strategy,
    show,
    timeout_problem,
)
from trainspec.conformance.distributed.checks._training import (
    backward_on,
    full_batch,
    gradients_of,
    mismatch,
    rank_batch,
    reference_gradients,
    set_up_training,
)
from trainspec.distributed_checkpoint_io import CheckpointLayoutControl

if TYPE_CHECKING:
    from collections.abc import Callable

    from hypothesis.strategies import SearchStrategy

    from trainspec.conformance.core import Target
    from trainspec.strategy import Strategy


__all__ = [
    "check_strategy_all_gather_matches_direct_computation",
    "check_strategy_all_reduce_matches_direct_computation",
    "check_strategy_barrier_raises_timeout_error_within_its_timeout",
    "check_strategy_barrier_waits_for_the_last_rank",
    "check_strategy_broadcast_matches_direct_computation",
    "check_strategy_broadcast_object_matches_direct_computation",
    "check_strategy_checkpoint_is_written_by_rank_zero_only",
    "check_strategy_checkpoint_loads_everywhere_and_is_removed_by_rank_zero",
    "check_strategy_clip_gradients_norm_is_the_full_gradient_norm_on_every_rank",
    "check_strategy_no_backward_sync_accumulates_like_one_step",
    "check_strategy_process_dataloader_shares_partition_the_dataset_across_ranks",
    "check_strategy_ranks_agree_across_ranks",
    "check_strategy_reduce_boolean_decision_agrees_with_every_vote",
]

_T = TypeVar("_T")

_SLOW_WRITE_S: Final = 0.5
# --------------------------------------------------------------------------- strategy collectives


def _strategy_property(
    target: Target[Strategy],
    clause: str,
    expected: str,
    strategy: Callable[[int], SearchStrategy[_T]],
    body: Callable[[Strategy, _T, int, int, torch.device], str | None],
    hint: str = "",
) -> None:
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (trained, context):
        world, rank, device = context.world_size, context.rank, trained.root_device

        def test(example: _T) -> None:
            problem = guarded(lambda: body(trained, example, rank, world, device))
            agree(plain, context, clause, problem, expected=expected, hint=hint)

        run_examples(strategy(world), test, max_examples(plain))


@distributed_check("STRAT-2", "strategy")
def check_strategy_ranks_agree_across_ranks(target: Target[Strategy]) -> None:
    """Across ranks, world_size must agree, global ranks must be 0..N-1 and zero is global zero."""
    with set_up_strategy(target) as (strategy, context):

        def body() -> str | None:
            rank, world = strategy.global_rank, strategy.world_size
            gathered = strategy.all_gather(torch.tensor([rank], device=strategy.root_device))
            order = [int(t.item()) for t in gathered]
            facts = context.exchange((rank, world, strategy.is_global_zero))
            if any(w != context.world_size for _, w, _ in facts):
                return f"world sizes {[w for _, w, _ in facts]} in a world of {context.world_size}"
            if sorted(r for r, _, _ in facts) != list(range(world)):
                return f"global ranks {[r for r, _, _ in facts]} are not 0..{world - 1}"
            if any(zero != (r == 0) for r, _, zero in facts):
                return f"(global_rank, is_global_zero) = {[(r, z) for r, _, z in facts]}"
            if order != list(range(world)):
                return f"all_gather of every rank's global_rank gave {order}"
            return None

        agree(
            cast("Target[object]", target),
            context,
            "STRAT-2",
            guarded(body),
            expected="report one world_size, distinct global ranks 0..N-1 in all_gather "
            "order, and is_global_zero exactly on global rank 0",
        )


@distributed_check("STRAT-12", "strategy")
def check_strategy_all_reduce_matches_direct_computation(target: Target[Strategy]) -> None:
    """Strategy.all_reduce on N ranks must equal the reduction computed directly."""
    _strategy_property(
        target,
        "STRAT-12",
        "return the element-wise reduction over ranks from all_reduce (mean = sum / N)",
        lambda world: reductions(world, world),
        all_reduce_problem,
        hint='Delegate to the collective; the default op is "mean" on every strategy.',
    )


@distributed_check("STRAT-12", "strategy")
def check_strategy_all_gather_matches_direct_computation(target: Target[Strategy]) -> None:
    """Strategy.all_gather on N ranks must return every rank's tensor, in rank order."""
    _strategy_property(
        target,
        "STRAT-12",
        "return every rank's tensor from all_gather, indexed by rank",
        lambda world: movements(world),
        all_gather_problem,
    )


@distributed_check("STRAT-12", "strategy")
def check_strategy_broadcast_matches_direct_computation(target: Target[Strategy]) -> None:
    """Strategy.broadcast(t, src) must give every rank rank src's tensor, for every src."""
    _strategy_property(
        target,
        "STRAT-12",
        "return rank src's tensor from broadcast(t, src) on every rank",
        lambda world: movements(world),
        broadcast_problem,
        hint="Pass src through to the collective.",
    )


@distributed_check("STRAT-12", "strategy")
def check_strategy_broadcast_object_matches_direct_computation(
    target: Target[Strategy],
) -> None:
    """Strategy.broadcast_object(obj, src) must give every rank rank src's object."""
    _strategy_property(
        target,
        "STRAT-12",
        "return rank src's object from broadcast_object(obj, src) on every rank",
        lambda world: st.tuples(picklable_objects(), st.integers(0, world - 1)),
        lambda comm, example, rank, world, device: broadcast_object_problem(comm, example, rank),
    )


@distributed_check("STRAT-12", "strategy")
def check_strategy_barrier_waits_for_the_last_rank(target: Target[Strategy]) -> None:
    """No rank may leave Strategy.barrier() before the last rank has entered it."""
    with set_up_strategy(target) as (strategy, context):
        agree(
            cast("Target[object]", target),
            context,
            "STRAT-12",
            guarded(lambda: barrier_problem(strategy, context)),
            expected="return from barrier() only after every rank has entered it",
        )


@distributed_check("STRAT-12", "strategy")
def check_strategy_barrier_raises_timeout_error_within_its_timeout(
    target: Target[Strategy],
) -> None:
    """Strategy.barrier that one rank never joins must raise CollectiveTimeoutError in time."""
    with set_up_strategy(target) as (strategy, context):
        problem = timeout_problem(
            lambda: strategy.barrier(timeout=SHORT_TIMEOUT), context, "barrier(timeout=1s)"
        )
        agree(
            cast("Target[object]", target),
            context,
            "STRAT-12",
            problem,
            expected=f"raise CollectiveTimeoutError within 1 s + {TIMEOUT_SLACK_S:g} s slack "
            "when a rank never joins",
        )


@distributed_check("STRAT-13", "strategy")
def check_strategy_reduce_boolean_decision_agrees_with_every_vote(
    target: Target[Strategy],
) -> None:
    """reduce_boolean_decision must be all() or any() of every rank's vote, on every rank."""
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank
        patterns = [[True] * world, [False] * world]
        for k in range(world):
            patterns.append([r == k for r in range(world)])
            patterns.append([r != k for r in range(world)])

        def body() -> str | None:
            wrong: list[str] = []
            for every in (True, False):
                for votes in patterns:
                    got = strategy.reduce_boolean_decision(votes[rank], all=every)
                    want = all(votes) if every else any(votes)
                    if got is not want:
                        wrong.append(f"votes {votes}, all={every}: {got!r} (expected {want})")
            return "; ".join(wrong[:4]) or None

        agree(
            cast("Target[object]", target),
            context,
            "STRAT-13",
            guarded(body),
            expected="return all() (all=True) or any() (all=False) of every rank's vote",
        )


# --------------------------------------------------------------------------- data and gradients


@distributed_check("STRAT-8", "strategy")
def check_strategy_process_dataloader_shares_partition_the_dataset_across_ranks(
    target: Target[Strategy],
) -> None:
    """process_dataloader shares must cover the dataset and overlap only by padding (< N)."""
    from torch.utils.data import DataLoader, TensorDataset

    with set_up_strategy(target) as (strategy, context):
        world = context.world_size

        def share(size: int) -> list[int]:
            loader: DataLoader[tuple[torch.Tensor, ...]] = DataLoader(
                TensorDataset(torch.arange(size)), batch_size=3, shuffle=False
            )
            seen: list[int] = []
            for batch in strategy.process_dataloader(loader):
                items = batch[0] if isinstance(batch, (list, tuple)) else batch
                seen.extend(int(i) for i in torch.as_tensor(items).reshape(-1).tolist())
            return seen

        problems: list[str] = []
        for size in (4 * world, 4 * world + 1):
            try:
                mine: list[int] | str = share(size)
            except Exception as error:
                mine = f"process_dataloader raised {describe_exception(error)}"
            shares = context.exchange(mine)
            failed = [f"rank {r}: {s}" for r, s in enumerate(shares) if isinstance(s, str)]
            if failed:
                problems.extend(failed)
                continue
            lists = [cast("list[int]", s) for s in shares]
            every = [i for items in lists for i in items]
            missing = sorted(set(range(size)) - set(every))
            extra = len(every) - size
            padding = 0 if size % world == 0 else world - size % world
            if missing or extra > padding or any(i not in range(size) for i in every):
                problems.append(
                    f"for a dataset of {size} samples the shares were "
                    + "; ".join(f"rank {r}: {items}" for r, items in enumerate(lists))
                    + (f" (missing {missing})" if missing else "")
                    + (
                        f" ({extra} sample(s) more than the {padding} of padding)"
                        if extra > padding
                        else ""
                    )
                )
        agree(
            cast("Target[object]", target),
            context,
            "STRAT-8",
            "; ".join(problems) or None,
            expected="give each rank a share that together cover every sample exactly once, "
            "apart from padding to equal length",
            hint="Use a sampler that splits indices by rank (DistributedSampler does).",
        )


@distributed_check("STRAT-11", "strategy")
def check_strategy_clip_gradients_norm_is_the_full_gradient_norm_on_every_rank(
    target: Target[Strategy],
) -> None:
    """clip_gradients_norm must return, on every rank, the norm of the full-batch gradient."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank
        seed = 11

        def body() -> str | None:
            module, optimizer = set_up_training(strategy, seed)
            backward_on(strategy, module, rank_batch(0, rank, world))
            norm = strategy.clip_gradients_norm(module, optimizer, max_norm=1e-3)
            value = float(norm)
            want = float(
                torch.linalg.vector_norm(
                    torch.cat(
                        [g.reshape(-1) for g in reference_gradients(seed, [full_batch(0, world)])]
                    )
                )
            )
            norms = context.exchange(value)
            if not math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-6):
                return (
                    f"returned {value!r}; the full gradient's norm is {want!r} (all ranks: {norms})"
                )
            if max(norms) - min(norms) > 1e-6 * max(1.0, abs(want)):
                return f"the ranks returned different norms {norms}"
            return None

        agree(
            plain,
            context,
            "STRAT-11",
            guarded(body),
            expected="return the global norm (the norm of the whole model's full-batch "
            "gradient) from clip_gradients_norm, the same on every rank",
            hint="Sharded strategies must reduce the norm across ranks.",
        )


@distributed_check("SYNC-1", "strategy", requires=("backward_sync",))
def check_strategy_no_backward_sync_accumulates_like_one_step(target: Target[Strategy]) -> None:
    """Inside no_backward_sync gradients must stay local; the next backward syncs the sum."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        world, rank = context.world_size, context.rank
        seed = 17
        if not isinstance(strategy, BackwardSyncControl):
            raise failure(
                plain,
                "SYNC-1",
                expected="implement trainspec.BackwardSyncControl (capability backward_sync)",
                actual=f"{type(strategy).__qualname__} has no no_backward_sync",
            )
        syncing = strategy

        def body() -> str | None:
            module, _ = set_up_training(strategy, seed)
            first, second = rank_batch(0, rank, world), rank_batch(1, rank, world)
            with syncing.no_backward_sync(module, enabled=True):
                backward_on(strategy, module, first)
            # A sharded strategy may keep the unsynchronised gradients internally until the
            # synchronising backward (FSDP2 does): with no gradient visible there is nothing
            # to compare yet, and the final comparison decides.
            deferred = all(p.grad is None for p in module.parameters())
            local = gradients_of(module)
            if (
                not deferred
                and mismatch(local, reference_gradients(seed, [first]), 1e-4, 1e-6) is not None
            ):
                return (
                    "gradients after a backward inside no_backward_sync are not this rank's "
                    "own (they were synchronised or changed)"
                )
            backward_on(strategy, module, second)
            full = [
                (x, y)
                for r in range(world)
                for x, y in (rank_batch(0, r, world), rank_batch(1, r, world))
            ]
            want = reference_gradients(seed, full, scale=1.0 / world)
            worst = mismatch(gradients_of(module), want, 1e-4, 1e-6)
            if worst is not None:
                return (
                    "after the next backward outside the context the gradients are not the "
                    f"mean over ranks of the accumulated gradients (largest difference {worst:.3g})"
                )
            return None

        agree(
            plain,
            context,
            "SYNC-1",
            guarded(body),
            expected="keep gradients local inside no_backward_sync and synchronise the "
            "accumulated gradients at the next backward outside it",
        )


# --------------------------------------------------------------------------- checkpoints


class _CallSpy:
    """Counts calls of one method of a component, replacing it on the instance, optionally
    delaying each call (so that a rank that does not wait for the writer is caught)."""

    def __init__(self, owner: object, method: str, delay_s: float = 0.0) -> None:
        self._owner = owner
        self._method = method
        self._delay_s = delay_s
        self.calls = 0
        self.attached = False
        self._original: Callable[..., object] = getattr(owner, method)

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        if self._delay_s:
            time.sleep(self._delay_s)
        return self._original(*args, **kwargs)

    def __enter__(self) -> Self:
        try:
            setattr(self._owner, self._method, self)
            self.attached = True
        except (AttributeError, TypeError):  # slots or a frozen class: count nothing
            self.attached = False
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.attached:
            try:
                delattr(self._owner, self._method)
            except AttributeError:
                setattr(self._owner, self._method, self._original)


def _is_sharded(strategy: Strategy) -> bool:
    """Whether the strategy declares the sharded checkpoint layout (LAYOUT-1)."""
    return isinstance(strategy, CheckpointLayoutControl) and strategy.checkpoint_layout == "sharded"


def _exists(path: str) -> bool:
    return os.path.exists(path)


@distributed_check("STRAT-16", "strategy")
def check_strategy_checkpoint_is_written_by_rank_zero_only(target: Target[Strategy]) -> None:
    """save_checkpoint must write once, on global rank 0, and return after the file exists."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        path = os.path.join(context.shared_dir, "rank_zero.ckpt")

        sharded = _is_sharded(strategy)

        def body() -> tuple[int, bool, bool, int]:
            # Under the sharded layout every rank's part must hold the same non-sharded values.
            writer = 0 if sharded else context.rank
            checkpoint = {"writer": writer, "weights": torch.arange(6.0).reshape(2, 3)}
            with _CallSpy(strategy.checkpoint_io, "save_checkpoint", _SLOW_WRITE_S) as spy:
                strategy.save_checkpoint(checkpoint, path)
            return spy.calls, spy.attached, _exists(path), strategy.global_rank

        try:
            facts: tuple[int, bool, bool, int] | str = body()
        except Exception as error:
            facts = f"save_checkpoint raised {describe_exception(error)}"
        seen = context.exchange(facts)
        problems: list[str] = []
        for rank, fact in enumerate(seen):
            if isinstance(fact, str):
                problems.append(f"rank {rank}: {fact}")
                continue
            calls, attached, exists, global_rank = fact
            wanted = 1 if global_rank == 0 or sharded else 0
            if attached and calls != wanted:
                problems.append(
                    f"({'sharded' if sharded else 'full'} layout) global rank {global_rank} "
                    f"called checkpoint_io.save_checkpoint {calls} "
                    f"time(s) (expected {wanted})"
                )
            if not exists:
                problems.append(
                    f"global rank {global_rank} returned before the checkpoint existed at the path"
                )
        agree(
            plain,
            context,
            "STRAT-16",
            "; ".join(problems) or None,
            expected="write the checkpoint through checkpoint_io on global rank 0 only (full "
            "layout) or on every rank (sharded layout), every rank returning after it exists",
            hint="Full layout: save on is_global_zero only, then wait for every rank (a barrier "
            "or an all-reduce of the outcome). Sharded layout: every rank calls the "
            "DistributedCheckpointIO.",
        )


@distributed_check("STRAT-17", "strategy")
def check_strategy_checkpoint_loads_everywhere_and_is_removed_by_rank_zero(
    target: Target[Strategy],
) -> None:
    """load_checkpoint must give every rank rank 0's checkpoint; removal happens on rank 0 only."""
    plain = cast("Target[object]", target)
    with set_up_strategy(target) as (strategy, context):
        path = os.path.join(context.shared_dir, "load_and_remove.ckpt")

        sharded = _is_sharded(strategy)

        def body() -> str | None:
            # Under the sharded layout every rank's part must hold the same non-sharded values.
            mine = 0 if sharded else context.rank
            weights = torch.arange(6.0).reshape(2, 3) * (mine + 1)
            strategy.save_checkpoint({"weights": weights, "writer": mine}, path)
            loaded = strategy.load_checkpoint(path)
            got = loaded.get("weights")
            if (
                loaded.get("writer") != 0
                or not isinstance(got, torch.Tensor)
                or not torch.equal(got.to("cpu"), torch.arange(6.0).reshape(2, 3))
            ):
                return (
                    f"load_checkpoint returned {show(loaded)}, expected global rank 0's checkpoint"
                )
            if got.device != strategy.root_device:
                return (
                    f"loaded tensors are on {got.device}, expected the root device "
                    f"{strategy.root_device}"
                )
            context.barrier()  # every rank has loaded before anyone removes
            with _CallSpy(strategy.checkpoint_io, "remove_checkpoint") as spy:
                strategy.remove_checkpoint(path)
            wanted = 1 if strategy.global_rank == 0 or sharded else 0
            if spy.attached and spy.calls != wanted:
                return (
                    f"checkpoint_io.remove_checkpoint was called {spy.calls} time(s) "
                    f"(expected {wanted})"
                )
            if _exists(path):
                return "remove_checkpoint returned while the checkpoint still existed"
            return None

        agree(
            plain,
            context,
            "STRAT-17",
            guarded(body),
            expected="load global rank 0's checkpoint on every rank (on the root device) and "
            "remove it on global rank 0 only, every rank returning after the removal",
        )
