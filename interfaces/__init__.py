"""trainspec: the contracts for PyTorch training plugins.

This package holds only contracts: the protocols, their type aliases and flag vocabularies,
the error hierarchy and :data:`SPEC_VERSION`. It imports no torch at run time, so
``import trainspec`` is fast. Reference implementations live in :mod:`trainspec.reference`,
the conformance kit in :mod:`trainspec.conformance`; the normative text is ``docs/spec.md``.
"""

from __future__ import annotations

from typing import Final

from trainspec.accelerator import Accelerator
from trainspec.capabilities import BackwardSyncControl, ShardedModuleContext, StepBoundary
from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.collective import Collective
from trainspec.distributed_checkpoint_io import (
    CHECKPOINT_LAYOUTS,
    CheckpointLayout,
    CheckpointLayoutControl,
    DistributedCheckpointIO,
)
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    DeviceUnavailableError,
    LaunchError,
    LifecycleError,
    PeerFailureError,
    TrainspecError,
    UnsafeCheckpointError,
    UnsupportedError,
)
from trainspec.launcher import Launcher
from trainspec.precision import Precision
from trainspec.strategy import Strategy
from trainspec.types import (
    PRECISION_FLAGS,
    REDUCE_OPS,
    Checkpoint,
    DeviceRequest,
    MapLocation,
    PathLike,
    PrecisionFlag,
    ReduceOp,
    StateDict,
    StorageOptions,
)

SPEC_VERSION: Final = "1.2"
"""The version of ``docs/spec.md`` these protocols implement. A change to a clause's meaning
bumps the major number; a new clause or optional protocol bumps the minor number."""

__version__: Final = "0.1.0"

__all__ = [
    "CHECKPOINT_LAYOUTS",
    "PRECISION_FLAGS",
    "REDUCE_OPS",
    "SPEC_VERSION",
    "Accelerator",
    "AsyncCheckpointIO",
    "BackwardSyncControl",
    "Checkpoint",
    "CheckpointCorruptedError",
    "CheckpointError",
    "CheckpointIO",
    "CheckpointLayout",
    "CheckpointLayoutControl",
    "CheckpointNotFoundError",
    "CheckpointWriteError",
    "ClusterEnvironment",
    "Collective",
    "CollectiveError",
    "CollectiveTimeoutError",
    "ConfigurationError",
    "DeviceRequest",
    "DeviceUnavailableError",
    "DistributedCheckpointIO",
    "LaunchError",
    "Launcher",
    "LifecycleError",
    "MapLocation",
    "PathLike",
    "PeerFailureError",
    "Precision",
    "PrecisionFlag",
    "ReduceOp",
    "ShardedModuleContext",
    "StateDict",
    "StepBoundary",
    "StorageOptions",
    "Strategy",
    "TrainspecError",
    "UnsafeCheckpointError",
    "UnsupportedError",
    "__version__",
]
