"""Checks that need several ranks (``layer="distributed"``) or a whole run (``"end_to_end"``).

They run inside the ranks of a :class:`~trainspec.conformance.distributed.World` and read
their rank's :class:`~trainspec.conformance.distributed.RankContext` from the target's
options; without one (a single-process run of the kit) every check here is skipped on a
world of one. Expected values are computed directly on every rank from inputs that every
rank can rebuild: hypothesis draws the same examples on every rank (derandomized, no
database, no shrinking) and each rank derives its own input from the example and its rank.
After each example the ranks compare verdicts through the harness's own channel
(:meth:`RankContext.exchange`, not the implementation under test), so every rank fails the
same example together, with the same message naming the ranks that saw the problem.

Modules: :mod:`.collective`, :mod:`.strategy`, :mod:`.end_to_end`, :mod:`.sharded`.

Sharded strategies and distributed checkpoint IO (SHARD-1, LAYOUT-1, STRAT-14/15 by
layout, DCKPT-1 ... DCKPT-7): see :mod:`.sharded`.

Collectives (COLL-2, 4, 6, 8 ... 16): every operation against a direct computation on
generated inputs; ranks distinct and in order; the barrier waits; a timeout raises.
Strategies (STRAT-2, 8, 11, 12, 13, 16, 17, SYNC-1): rank properties agree across ranks; the
strategy collectives as above; ``reduce_boolean_decision``; ``process_dataloader`` shares are
disjoint and complete; the clipped norm is the full gradient's norm on every rank;
checkpoints are written and removed by rank zero only (a spy on the checkpoint IO counts the
writes on every rank) and every rank returns after the file exists; ``no_backward_sync``.
End to end (E2E-1 ... E2E-3), driven through the Strategy protocol: N ranks with batch B
train to the weights of one plain PyTorch loop on the N*B batch; save, stop, resume continues
bit for bit; a checkpoint from N ranks loads into the reference single-device strategy and
back.

Target options read here (besides those the harness sets): ``distributed_max_examples``
(int, default 10) bounds each property; ``e2e_rtol`` / ``e2e_atol`` (floats, default 1e-4 /
1e-5) are the tolerances of the end-to-end comparisons with plain PyTorch.
"""

from __future__ import annotations

from trainspec.conformance.distributed.checks import collective, end_to_end, sharded, strategy
from trainspec.conformance.distributed.checks._support import (
    DISTRIBUTED_CHECKS,
    NEEDS_HARNESS,
    rank_context,
)

__all__ = [
    "DISTRIBUTED_CHECKS",
    "NEEDS_HARNESS",
    "collective",
    "end_to_end",
    "rank_context",
    "sharded",
    "strategy",
]
