"""Reference implementations of the trainspec protocols.

Every public name of the subpackages is re-exported here and loaded on first access, so that
``import trainspec.reference`` imports neither torch nor any implementation::

    from trainspec.reference import Runner, resolve       # imports what these need, only

Subpackages and modules: ``accelerators``, ``precisions``, ``checkpoint_io``,
``collectives``, ``environments``, ``launchers``, ``strategies``, ``registry`` (entry-point
discovery), ``connector`` (:func:`resolve`) and ``runner`` (:class:`Runner`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from trainspec.reference.accelerators.cpu import CPUAccelerator
    from trainspec.reference.accelerators.cuda import CUDAAccelerator
    from trainspec.reference.accelerators.generic import TorchDeviceAccelerator
    from trainspec.reference.accelerators.xla import XLAAccelerator
    from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
    from trainspec.reference.checkpoint_io.distributed import DCPCheckpointIO
    from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
    from trainspec.reference.checkpoint_io.safetensors_io import SafetensorsCheckpointIO
    from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
    from trainspec.reference.cluster_environments import detect_environment
    from trainspec.reference.cluster_environments.local import LocalEnvironment
    from trainspec.reference.cluster_environments.slurm import SLURMEnvironment
    from trainspec.reference.cluster_environments.torchelastic import TorchElasticEnvironment
    from trainspec.reference.cluster_environments.xla import XLAEnvironment
    from trainspec.reference.collectives.single import SingleProcessCollective
    from trainspec.reference.collectives.torch_dist import TorchCollective
    from trainspec.reference.connector import resolve
    from trainspec.reference.launchers.spawn import MultiprocessingLauncher
    from trainspec.reference.launchers.subprocess_script import SubprocessScriptLauncher
    from trainspec.reference.launchers.xla import XLALauncher
    from trainspec.reference.precisions import (
        BFloat16MixedPrecision,
        BFloat16Precision,
        DtypePrecision,
        Float16MixedPrecision,
        Float16Precision,
        Float32Precision,
        Float64Precision,
        MixedPrecision,
        TruePrecision,
        precision_for_flag,
    )
    from trainspec.reference.registry import ComponentInfo, Registry, default_registry
    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.base import StrategyBase
    from trainspec.reference.strategies.ddp import DDPStrategy
    from trainspec.reference.strategies.fsdp import FSDPStrategy
    from trainspec.reference.strategies.single_device import SingleDeviceStrategy
    from trainspec.reference.strategies.xla import XLAStrategy

__all__ = [
    "BFloat16MixedPrecision",
    "BFloat16Precision",
    "BackgroundCheckpointIO",
    "CPUAccelerator",
    "CUDAAccelerator",
    "ComponentInfo",
    "DCPCheckpointIO",
    "DDPStrategy",
    "DtypePrecision",
    "FSDPStrategy",
    "Float16MixedPrecision",
    "Float16Precision",
    "Float32Precision",
    "Float64Precision",
    "LocalEnvironment",
    "MemoryCheckpointIO",
    "MixedPrecision",
    "MultiprocessingLauncher",
    "Registry",
    "Runner",
    "SLURMEnvironment",
    "SafetensorsCheckpointIO",
    "SingleDeviceStrategy",
    "SingleProcessCollective",
    "StrategyBase",
    "SubprocessScriptLauncher",
    "TorchCheckpointIO",
    "TorchCollective",
    "TorchDeviceAccelerator",
    "TorchElasticEnvironment",
    "TruePrecision",
    "XLAAccelerator",
    "XLAEnvironment",
    "XLALauncher",
    "XLAStrategy",
    "default_registry",
    "detect_environment",
    "precision_for_flag",
    "resolve",
]

_PRECISIONS: Final = "trainspec.reference.precisions"

_EXPORTS: Final[dict[str, str]] = {
    "CPUAccelerator": "trainspec.reference.accelerators.cpu",
    "CUDAAccelerator": "trainspec.reference.accelerators.cuda",
    "TorchDeviceAccelerator": "trainspec.reference.accelerators.generic",
    "XLAAccelerator": "trainspec.reference.accelerators.xla",
    "BFloat16MixedPrecision": _PRECISIONS,
    "BFloat16Precision": _PRECISIONS,
    "DtypePrecision": _PRECISIONS,
    "Float16MixedPrecision": _PRECISIONS,
    "Float16Precision": _PRECISIONS,
    "Float32Precision": _PRECISIONS,
    "Float64Precision": _PRECISIONS,
    "MixedPrecision": _PRECISIONS,
    "TruePrecision": _PRECISIONS,
    "precision_for_flag": _PRECISIONS,
    "BackgroundCheckpointIO": "trainspec.reference.checkpoint_io.background",
    "DCPCheckpointIO": "trainspec.reference.checkpoint_io.distributed",
    "MemoryCheckpointIO": "trainspec.reference.checkpoint_io.memory",
    "SafetensorsCheckpointIO": "trainspec.reference.checkpoint_io.safetensors_io",
    "TorchCheckpointIO": "trainspec.reference.checkpoint_io.torch_io",
    "SingleProcessCollective": "trainspec.reference.collectives.single",
    "TorchCollective": "trainspec.reference.collectives.torch_dist",
    "LocalEnvironment": "trainspec.reference.cluster_environments.local",
    "SLURMEnvironment": "trainspec.reference.cluster_environments.slurm",
    "TorchElasticEnvironment": "trainspec.reference.cluster_environments.torchelastic",
    "XLAEnvironment": "trainspec.reference.cluster_environments.xla",
    "detect_environment": "trainspec.reference.cluster_environments",
    "MultiprocessingLauncher": "trainspec.reference.launchers.spawn",
    "SubprocessScriptLauncher": "trainspec.reference.launchers.subprocess_script",
    "XLALauncher": "trainspec.reference.launchers.xla",
    "StrategyBase": "trainspec.reference.strategies.base",
    "SingleDeviceStrategy": "trainspec.reference.strategies.single_device",
    "DDPStrategy": "trainspec.reference.strategies.ddp",
    "FSDPStrategy": "trainspec.reference.strategies.fsdp",
    "XLAStrategy": "trainspec.reference.strategies.xla",
    "ComponentInfo": "trainspec.reference.registry",
    "Registry": "trainspec.reference.registry",
    "default_registry": "trainspec.reference.registry",
    "resolve": "trainspec.reference.connector",
    "Runner": "trainspec.reference.runner",
}
"""Public name -> the module that defines it (imported on first access)."""


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
