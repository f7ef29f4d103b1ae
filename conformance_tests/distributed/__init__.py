"""The distributed harness: conformance checks on N ranks that never hang CI.

Public API (importing it imports neither torch nor the checks; the ranks do):

- :class:`World` -- N rank processes started once (multiprocessing ``spawn``), in which
  :meth:`World.run` runs one check at a time on every rank and returns a
  :class:`DistributedResult` (one :class:`RankResult` per rank). Every check has a timeout;
  past it the hung ranks' stacks are collected and the world restarts. A crashed rank is
  reported with its signal and stderr. No process is left behind. At most
  :func:`max_world_size` ranks.
- :class:`TargetSpec` -- a target as picklable data (kind, ``"module:factory"``,
  capabilities, expected failures, options), rebuilt in every rank.
- :class:`RankContext` -- inside a rank, the rank's view of the world and a channel between
  the ranks that does not go through the implementation under test.
- :func:`verify_distributed` -- the kit's collective or strategy checks plus the
  distributed and end-to-end checks (:mod:`trainspec.conformance.distributed.checks`) on N
  ranks, as a :class:`~trainspec.conformance.Report`.

Example::

    from trainspec.conformance.distributed import verify_distributed

    report = verify_distributed(("strategy", "my_plugin.strategy:MyDDP"), world_size=2)
    assert report.ok, report
"""

from __future__ import annotations

from trainspec.conformance.distributed.context import RANK_CONTEXT_OPTION, RankContext
from trainspec.conformance.distributed.results import DistributedResult, RankResult, RankStatus
from trainspec.conformance.distributed.spec import TargetSpec, factory_path
from trainspec.conformance.distributed.verify import (
    DEFAULT_LAYERS,
    DISTRIBUTED_KINDS,
    verify_distributed,
)
from trainspec.conformance.distributed.world import (
    DEFAULT_CHECK_TIMEOUT_S,
    DEFAULT_CRASH_GRACE_S,
    DEFAULT_START_TIMEOUT_S,
    MAX_WORLD_SIZE_VARIABLE,
    World,
    max_world_size,
)

__all__ = [
    "DEFAULT_CHECK_TIMEOUT_S",
    "DEFAULT_CRASH_GRACE_S",
    "DEFAULT_LAYERS",
    "DEFAULT_START_TIMEOUT_S",
    "DISTRIBUTED_KINDS",
    "MAX_WORLD_SIZE_VARIABLE",
    "RANK_CONTEXT_OPTION",
    "DistributedResult",
    "RankContext",
    "RankResult",
    "RankStatus",
    "TargetSpec",
    "World",
    "factory_path",
    "max_world_size",
    "verify_distributed",
]
