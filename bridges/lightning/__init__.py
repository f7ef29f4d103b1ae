"""trainspec.bridges.lightning: trainspec <-> Lightning 2.6 (Fabric and Trainer) plugins.

Needs ``pip install 'trainspec[lightning]'``. Two directions, one call per protocol:

- ``to_lightning_*`` / ``to_fabric_*`` / ``to_trainer_*``: a trainspec implementation as an
  object of Lightning's own base class (:mod:`.to_lightning`);
- ``from_lightning_*``: an *instance* of a Lightning plugin as the trainspec protocol
  (:mod:`.from_lightning`), adding no behaviour it lacks;

and :mod:`.targets`, ready conformance targets for Lightning's CPU built-ins
(``trainspec verify checkpoint_io trainspec.bridges.lightning.targets:torch_checkpoint_io``).
The member-by-member mapping is ``docs/bridges/mapping.md``.
"""

from __future__ import annotations

from trainspec.bridges.lightning.from_lightning import (
    LightningAcceleratorBridge,
    LightningCheckpointIOBridge,
    LightningClusterEnvironmentBridge,
    LightningCollectiveBridge,
    LightningPrecisionBridge,
    LightningStrategyBridge,
    from_lightning_accelerator,
    from_lightning_checkpoint_io,
    from_lightning_cluster_environment,
    from_lightning_collective,
    from_lightning_precision,
    from_lightning_strategy,
)
from trainspec.bridges.lightning.to_lightning import (
    NonFiniteNormError,
    TrainspecAccelerator,
    TrainspecCheckpointIO,
    TrainspecClusterEnvironment,
    TrainspecFabricPrecision,
    TrainspecFabricStrategy,
    TrainspecTrainerPrecision,
    to_fabric_precision,
    to_fabric_strategy,
    to_lightning_accelerator,
    to_lightning_checkpoint_io,
    to_lightning_cluster_environment,
    to_trainer_precision,
)

__all__ = [
    "LightningAcceleratorBridge",
    "LightningCheckpointIOBridge",
    "LightningClusterEnvironmentBridge",
    "LightningCollectiveBridge",
    "LightningPrecisionBridge",
    "LightningStrategyBridge",
    "NonFiniteNormError",
    "TrainspecAccelerator",
    "TrainspecCheckpointIO",
    "TrainspecClusterEnvironment",
    "TrainspecFabricPrecision",
    "TrainspecFabricStrategy",
    "TrainspecTrainerPrecision",
    "from_lightning_accelerator",
    "from_lightning_checkpoint_io",
    "from_lightning_cluster_environment",
    "from_lightning_collective",
    "from_lightning_precision",
    "from_lightning_strategy",
    "to_fabric_precision",
    "to_fabric_strategy",
    "to_lightning_accelerator",
    "to_lightning_checkpoint_io",
    "to_lightning_cluster_environment",
    "to_trainer_precision",
]
