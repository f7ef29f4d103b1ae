"""Lightning -> trainspec: an *instance* of a Lightning plugin as the trainspec protocol.

One call per protocol. Each bridge translates names, signatures and errors (through
:data:`~trainspec.bridges.lightning._mapping.ERROR_TABLE`) and adds no behaviour the wrapped
plugin lacks: a trainspec member with no Lightning counterpart raises
:class:`~trainspec.UnsupportedError` saying so, and the capabilities the plugin cannot back
are not declared (:mod:`trainspec.bridges.lightning.targets`). So the conformance kit, run on
a bridged plugin, judges Lightning's own behaviour.

==========================================  ===============================================
call                                        wraps (an instance of)
==========================================  ===============================================
:func:`from_lightning_accelerator`          ``lightning.fabric.accelerators.Accelerator``
:func:`from_lightning_precision`            ``lightning.fabric.plugins.Precision``
:func:`from_lightning_checkpoint_io`        ``lightning.fabric.plugins.CheckpointIO``
:func:`from_lightning_cluster_environment`  ``lightning.fabric.plugins.ClusterEnvironment``
:func:`from_lightning_strategy`             ``lightning.fabric.strategies.Strategy``
:func:`from_lightning_collective`           ``lightning.fabric.plugins.collectives.Collective``
==========================================  ===============================================
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import torch
from lightning.fabric.accelerators.accelerator import Accelerator as LightningAccelerator
from lightning.fabric.plugins import CheckpointIO as LightningCheckpointIO
from lightning.fabric.plugins import ClusterEnvironment as LightningClusterEnvironment
from lightning.fabric.plugins import Precision as LightningPrecision
from lightning.fabric.plugins.collectives.collective import Collective as LightningCollective
from lightning.fabric.strategies.strategy import Strategy as LightningStrategy

from trainspec.accelerator import Accelerator
from trainspec.bridges.lightning._mapping import translating, unsupported
from trainspec.capabilities import BackwardSyncControl
from trainspec.checkpoint_io import CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.collective import Collective
from trainspec.errors import ConfigurationError, UnsupportedError
from trainspec.launcher import Launcher
from trainspec.precision import Precision
from trainspec.strategy import Strategy
from trainspec.types import PRECISION_FLAGS

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractContextManager
    from datetime import timedelta

    from torch.utils.data import DataLoader

    from trainspec.types import (
        Checkpoint,
        DeviceRequest,
        MapLocation,
        PathLike,
        PrecisionFlag,
        ReduceOp,
        StateDict,
        StorageOptions,
    )

__all__ = [
    "LightningAcceleratorBridge",
    "LightningCheckpointIOBridge",
    "LightningClusterEnvironmentBridge",
    "LightningCollectiveBridge",
    "LightningPrecisionBridge",
    "LightningStrategyBridge",
    "from_lightning_accelerator",
    "from_lightning_checkpoint_io",
    "from_lightning_cluster_environment",
    "from_lightning_collective",
    "from_lightning_precision",
    "from_lightning_strategy",
]

_T = TypeVar("_T")

_FLAG_DTYPES: Final[dict[str, tuple[torch.dtype, torch.dtype]]] = {
    "32-true": (torch.float32, torch.float32),
    "64-true": (torch.float64, torch.float64),
    "16-true": (torch.float16, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}
"""PREC-1's table: the dtypes a flag *means* (Lightning plugins carry no dtype members)."""


def _need(value: object, cls: type, what: str, call: str) -> None:
    if not isinstance(value, cls):
        raise ConfigurationError(
            f"{call} expects an instance of {cls.__module__}.{cls.__qualname__} ({what}); got "
            f"{type(value).__name__} {value!r:.80}. To bridge a trainspec implementation to "
            "Lightning, use the to_lightning_* calls."
        )


def _no_timeout(timeout: object, owner: str) -> None:
    if timeout is not None:
        raise unsupported(
            owner,
            "a per-call timeout",
            "Lightning's collectives take their timeout once, when the process group is "
            "created; pass timeout=None",
        )


# -- Accelerator ------------------------------------------------------------------------------


class LightningAcceleratorBridge(Accelerator):
    """A Lightning Accelerator instance as a trainspec Accelerator.

    ``device_type`` is ``name()`` when torch accepts it as a device type (``"cpu"``,
    ``"cuda"``, ``"mps"``), else the ``device_type`` given to the bridge; ``device_count()``
    is ``auto_device_count()``; ``parse_devices(request)`` is Lightning's own two steps
    (``"auto"`` -> ``auto_device_count()``, then ``parse_devices`` and
    ``get_parallel_devices``, as Lightning's connectors do); ``synchronize`` has no
    counterpart; ``get_device_stats`` exists on Trainer accelerators only.
    """

    def __init__(self, accelerator: LightningAccelerator, device_type: str | None = None) -> None:
        _need(accelerator, LightningAccelerator, "an Accelerator", "from_lightning_accelerator")
        self.lightning_accelerator = accelerator
        name = device_type if device_type is not None else type(accelerator).name()
        try:
            torch.device(name)
        except (RuntimeError, TypeError) as error:
            raise ConfigurationError(
                f"from_lightning_accelerator: {type(accelerator).__name__}.name() is {name!r}, "
                "which is not a torch device type; pass device_type= (for example 'xla')"
            ) from error
        self._device_type = name

    @property
    def device_type(self) -> str:
        return self._device_type

    def is_available(self) -> bool:
        return type(self.lightning_accelerator).is_available()

    def device_count(self) -> int:
        return type(self.lightning_accelerator).auto_device_count()

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        cls = type(self.lightning_accelerator)

        def parse() -> list[torch.device]:
            request: object = devices
            if request == "auto":
                request = cls.auto_device_count()
            elif isinstance(request, tuple):
                request = list(cast("tuple[int, ...]", request))
            parsed = cls.parse_devices(request)
            return list(cls.get_parallel_devices(parsed))

        return translating("devices", f"{cls.__name__}.parse_devices({devices!r})", parse)

    def setup_device(self, device: torch.device) -> None:
        accelerator = self.lightning_accelerator
        translating(
            "devices",
            f"{type(accelerator).__name__}.setup_device({device})",
            lambda: accelerator.setup_device(device),
        )

    def teardown(self) -> None:
        self.lightning_accelerator.teardown()

    def synchronize(self, device: torch.device) -> None:
        raise unsupported(
            f"{type(self.lightning_accelerator).__name__}",
            "synchronize(device)",
            "Lightning's Accelerator has no synchronize member",
        )

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        accelerator = self.lightning_accelerator
        stats = getattr(accelerator, "get_device_stats", None)
        if stats is None:
            raise unsupported(
                type(accelerator).__name__,
                "get_device_stats(device)",
                "only Trainer accelerators (lightning.pytorch.accelerators) have it",
            )
        return cast(
            "dict[str, float]",
            translating(
                "devices", f"{type(accelerator).__name__}.get_device_stats", lambda: stats(device)
            ),
        )

    def __repr__(self) -> str:
        return f"from_lightning_accelerator({self.lightning_accelerator!r})"


def from_lightning_accelerator(
    accelerator: LightningAccelerator, *, device_type: str | None = None
) -> LightningAcceleratorBridge:
    """``accelerator`` (a Lightning Accelerator instance) as a trainspec Accelerator."""
    return LightningAcceleratorBridge(accelerator, device_type)


# -- Precision ---------------------------------------------------------------------------------


class LightningPrecisionBridge(Precision):
    """A Lightning (Fabric or Trainer) Precision instance as a trainspec Precision.

    ``flag`` is the plugin's ``precision`` attribute; ``param_dtype``/``compute_dtype`` are
    PREC-1's dtypes for that flag. ``setup(device)`` has no counterpart in Lightning (a plugin
    is bound to its device at construction): it records the device and refuses one of another
    type than a plugin's own ``device`` attribute (``MixedPrecision``); it cannot validate the
    flag on the device. ``backward`` is Lightning's ``pre_backward``, ``backward``,
    ``post_backward`` (as ``Strategy.backward`` calls them); ``optimizer_step`` returns whether
    the step was taken: ``True`` without a ``scaler``, else whether the scaler's scale did not
    drop (``GradScaler`` lowers it exactly when it skips a step).
    """

    def __init__(self, precision: LightningPrecision) -> None:
        _need(precision, LightningPrecision, "a Precision plugin", "from_lightning_precision")
        flag = getattr(precision, "precision", None)
        if flag not in PRECISION_FLAGS:
            raise ConfigurationError(
                f"from_lightning_precision: {type(precision).__name__}.precision is {flag!r}; "
                f"trainspec's flags are {', '.join(PRECISION_FLAGS)}"
            )
        self.lightning_precision = precision
        self._flag: PrecisionFlag = cast("PrecisionFlag", flag)
        self._device: torch.device | None = None

    @property
    def flag(self) -> PrecisionFlag:
        return self._flag

    @property
    def param_dtype(self) -> torch.dtype:
        return _FLAG_DTYPES[self._flag][0]

    @property
    def compute_dtype(self) -> torch.dtype:
        return _FLAG_DTYPES[self._flag][1]

    def setup(self, device: torch.device) -> None:
        bound = getattr(self.lightning_precision, "device", None)
        if isinstance(bound, str) and device.type != torch.device(bound).type:
            raise UnsupportedError(
                f"{type(self.lightning_precision).__name__} was constructed for device "
                f"{bound!r}; setup({device}) asks for another device type"
            )
        self._device = device

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.lightning_precision.convert_module(module)

    def convert_input(self, data: _T) -> _T:
        return cast("_T", self.lightning_precision.convert_input(data))

    def module_init_context(self) -> AbstractContextManager[None]:
        return cast("AbstractContextManager[None]", self.lightning_precision.module_init_context())

    def forward_context(self) -> AbstractContextManager[None]:
        return cast("AbstractContextManager[None]", self.lightning_precision.forward_context())

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        precision = self.lightning_precision
        precision.pre_backward(tensor, module)
        precision.backward(tensor, module)
        precision.post_backward(tensor, module)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.lightning_precision.unscale_gradients(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        scaler = getattr(self.lightning_precision, "scaler", None)
        before = scaler.get_scale() if scaler is not None else None
        self.lightning_precision.optimizer_step(optimizer)
        if scaler is None or before is None:
            return True
        return bool(scaler.get_scale() >= before)

    def state_dict(self) -> StateDict:
        return self.lightning_precision.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        precision = self.lightning_precision
        translating(
            "config",
            f"{type(precision).__name__}.load_state_dict",
            lambda: precision.load_state_dict(dict(state_dict)),
        )

    def teardown(self) -> None:
        self.lightning_precision.teardown()
        self._device = None

    def __repr__(self) -> str:
        return f"from_lightning_precision({self.lightning_precision!r})"


def from_lightning_precision(precision: LightningPrecision) -> LightningPrecisionBridge:
    """``precision`` (a Lightning Precision plugin instance) as a trainspec Precision."""
    return LightningPrecisionBridge(precision)


# -- CheckpointIO --------------------------------------------------------------------------------


class LightningCheckpointIOBridge(CheckpointIO):
    """A Lightning CheckpointIO instance as a trainspec CheckpointIO.

    trainspec's load policy belongs to the instance: ``weights_only`` given here is passed to
    every ``load_checkpoint`` (``None``: the plugin's default, which for Lightning's
    ``TorchCheckpointIO`` is ``torch.load``'s, weights-only in torch >= 2.6; ``False``: the
    explicit opt-in to trust pickled content). Lightning's ``AsyncCheckpointIO`` has no
    ``wait()``, so a bridged one is a plain CheckpointIO (its saves still run in the
    background).
    """

    def __init__(self, checkpoint_io: LightningCheckpointIO, weights_only: bool | None) -> None:
        _need(
            checkpoint_io, LightningCheckpointIO, "a CheckpointIO", "from_lightning_checkpoint_io"
        )
        if weights_only is not None and not isinstance(weights_only, bool):
            raise ConfigurationError(f"weights_only must be None or a bool; got {weights_only!r}")
        self.lightning_checkpoint_io = checkpoint_io
        self.weights_only = weights_only

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        io = self.lightning_checkpoint_io
        translating(
            "write",
            f"{type(io).__name__}.save_checkpoint({str(path)!r})",
            lambda: io.save_checkpoint(
                checkpoint, os.fspath(path), storage_options=storage_options
            ),
        )

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        io = self.lightning_checkpoint_io
        return translating(
            "read",
            f"{type(io).__name__}.load_checkpoint({str(path)!r})",
            lambda: io.load_checkpoint(
                os.fspath(path), map_location=map_location, weights_only=self.weights_only
            ),
        )

    def remove_checkpoint(self, path: PathLike) -> None:
        io = self.lightning_checkpoint_io
        translating(
            "remove",
            f"{type(io).__name__}.remove_checkpoint({str(path)!r})",
            lambda: io.remove_checkpoint(os.fspath(path)),
        )

    def teardown(self) -> None:
        self.lightning_checkpoint_io.teardown()

    def __repr__(self) -> str:
        return (
            f"from_lightning_checkpoint_io({self.lightning_checkpoint_io!r}, "
            f"weights_only={self.weights_only!r})"
        )


def from_lightning_checkpoint_io(
    checkpoint_io: LightningCheckpointIO, *, weights_only: bool | None = None
) -> LightningCheckpointIOBridge:
    """``checkpoint_io`` (a Lightning CheckpointIO instance) as a trainspec CheckpointIO;
    ``weights_only`` is passed to every load (see :class:`LightningCheckpointIOBridge`)."""
    return LightningCheckpointIOBridge(checkpoint_io, weights_only)


# -- ClusterEnvironment ----------------------------------------------------------------------------


class LightningClusterEnvironmentBridge(ClusterEnvironment):
    """A Lightning ClusterEnvironment instance as a trainspec ClusterEnvironment.

    ``detect()`` is the class's static ``detect()``; ``world_size``, ``global_rank``,
    ``local_rank`` and ``node_rank`` are Lightning's methods read as properties. Lightning has
    no ``validate()`` (its ``validate_settings`` needs the trainer's device and node counts):
    the bridge's ``validate()`` reads every member, so an error Lightning raises surfaces
    (translated), and checks nothing Lightning does not.
    """

    def __init__(self, environment: LightningClusterEnvironment) -> None:
        _need(
            environment,
            LightningClusterEnvironment,
            "a ClusterEnvironment",
            "from_lightning_cluster_environment",
        )
        self.lightning_environment = environment

    def _read(self, what: str, read: Callable[[], _T]) -> _T:
        return translating("config", f"{type(self.lightning_environment).__name__}.{what}", read)

    def detect(self) -> bool:
        return type(self.lightning_environment).detect()

    @property
    def creates_processes_externally(self) -> bool:
        return self._read(
            "creates_processes_externally",
            lambda: self.lightning_environment.creates_processes_externally,
        )

    @property
    def main_address(self) -> str:
        return self._read("main_address", lambda: self.lightning_environment.main_address)

    @property
    def main_port(self) -> int:
        return self._read("main_port", lambda: self.lightning_environment.main_port)

    @property
    def world_size(self) -> int:
        return self._read("world_size()", self.lightning_environment.world_size)

    @property
    def global_rank(self) -> int:
        return self._read("global_rank()", self.lightning_environment.global_rank)

    @property
    def local_rank(self) -> int:
        return self._read("local_rank()", self.lightning_environment.local_rank)

    @property
    def node_rank(self) -> int:
        return self._read("node_rank()", self.lightning_environment.node_rank)

    def validate(self) -> None:
        for read in (
            lambda: self.main_address,
            lambda: self.main_port,
            lambda: self.world_size,
            lambda: self.global_rank,
            lambda: self.local_rank,
            lambda: self.node_rank,
        ):
            read()

    def teardown(self) -> None:
        self.lightning_environment.teardown()

    def __repr__(self) -> str:
        return f"from_lightning_cluster_environment({self.lightning_environment!r})"


def from_lightning_cluster_environment(
    environment: LightningClusterEnvironment,
) -> LightningClusterEnvironmentBridge:
    """``environment`` (a Lightning ClusterEnvironment instance) as a trainspec one."""
    return LightningClusterEnvironmentBridge(environment)


# -- Launcher ----------------------------------------------------------------------------------


class _LightningLauncherBridge(Launcher):
    def __init__(self, launcher: Any) -> None:
        self.lightning_launcher = launcher

    @property
    def is_interactive_compatible(self) -> bool:
        return bool(self.lightning_launcher.is_interactive_compatible)

    def launch(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        return cast("_T", self.lightning_launcher.launch(function, *args, **kwargs))


# -- Strategy ------------------------------------------------------------------------------------


_OPS: Final[dict[str, str]] = {
    "sum": "sum",
    "mean": "mean",
    "min": "min",
    "max": "max",
    "product": "product",
}


class LightningStrategyBridge(Strategy):
    """A Fabric Strategy instance (with its accelerator, precision and checkpoint IO set, as
    Fabric's connector leaves it) as a trainspec Strategy.

    Lightning splits what trainspec's Strategy promises between the strategy and ``Fabric``.
    The bridge takes the strategy's members only, in the order Fabric calls them where one
    trainspec member needs several (``setup_module``: ``precision.convert_module``,
    ``module_to_device``, ``setup_module``, as ``Fabric.setup``; ``batch_to_device`` then
    ``precision.convert_input``, as ``_FabricModule.forward``), and never what ``Fabric`` adds
    itself (the ``DistributedSampler`` of ``setup_dataloaders``, the barrier after
    ``Fabric.save``). Ranks default as ``Fabric`` reads them (``getattr(strategy,
    "global_rank", 0)``, world size 1). No ``remove_checkpoint`` in Fabric strategies, no
    per-call collective timeouts, no cluster environment on single-device strategies: those
    raise :class:`~trainspec.UnsupportedError`.
    """

    def __init__(self, strategy: LightningStrategy) -> None:
        _need(strategy, LightningStrategy, "a Fabric Strategy", "from_lightning_strategy")
        if strategy.accelerator is None:
            raise ConfigurationError(
                f"from_lightning_strategy: {type(strategy).__name__} has no accelerator; "
                "construct it with accelerator=... (Fabric's connector sets it otherwise)"
            )
        self.lightning_strategy = strategy
        self._accelerator = from_lightning_accelerator(strategy.accelerator)
        self._precision = from_lightning_precision(strategy.precision)
        self._checkpoint_io = from_lightning_checkpoint_io(strategy.checkpoint_io)
        environment = getattr(strategy, "cluster_environment", None)
        self._environment = (
            None if environment is None else from_lightning_cluster_environment(environment)
        )

    @property
    def _name(self) -> str:
        return type(self.lightning_strategy).__name__

    # components
    @property
    def accelerator(self) -> Accelerator:
        return self._accelerator

    @property
    def precision(self) -> Precision:
        return self._precision

    @property
    def checkpoint_io(self) -> CheckpointIO:
        return self._checkpoint_io

    @property
    def cluster_environment(self) -> ClusterEnvironment:
        if self._environment is None:
            raise unsupported(self._name, "cluster_environment", "this Lightning strategy has none")
        return self._environment

    @property
    def launcher(self) -> Launcher | None:
        launcher = self.lightning_strategy.launcher
        return None if launcher is None else _LightningLauncherBridge(launcher)

    # ranks
    @property
    def root_device(self) -> torch.device:
        return self.lightning_strategy.root_device

    @property
    def global_rank(self) -> int:
        return int(getattr(self.lightning_strategy, "global_rank", 0))

    @property
    def local_rank(self) -> int:
        return int(getattr(self.lightning_strategy, "local_rank", 0))

    @property
    def node_rank(self) -> int:
        return int(getattr(self.lightning_strategy, "node_rank", 0))

    @property
    def world_size(self) -> int:
        return int(getattr(self.lightning_strategy, "world_size", 1))

    @property
    def is_global_zero(self) -> bool:
        return bool(self.lightning_strategy.is_global_zero)

    # lifecycle
    def setup_environment(self) -> None:
        strategy = self.lightning_strategy
        translating("config", f"{self._name}.setup_environment", strategy.setup_environment)

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        strategy = self.lightning_strategy
        module = strategy.precision.convert_module(module)
        strategy.module_to_device(module)
        return strategy.setup_module(module)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return self.lightning_strategy.setup_optimizer(optimizer)

    def teardown(self) -> None:
        self.lightning_strategy.teardown()

    # training
    def module_init_context(self) -> AbstractContextManager[None]:
        return cast("AbstractContextManager[None]", self.lightning_strategy.module_init_context())

    def forward_context(self) -> AbstractContextManager[None]:
        return cast(
            "AbstractContextManager[None]", self.lightning_strategy.precision.forward_context()
        )

    def batch_to_device(self, batch: _T) -> _T:
        strategy = self.lightning_strategy
        return cast("_T", strategy.precision.convert_input(strategy.batch_to_device(batch)))

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        return self.lightning_strategy.process_dataloader(dataloader)

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        self.lightning_strategy.backward(tensor, module)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        scaler = getattr(self.lightning_strategy.precision, "scaler", None)
        before = scaler.get_scale() if scaler is not None else None
        self.lightning_strategy.optimizer_step(optimizer)
        if scaler is None or before is None:
            return True
        return bool(scaler.get_scale() >= before)

    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        return self.lightning_strategy.clip_gradients_norm(
            module, optimizer, max_norm, norm_type, error_if_nonfinite=False
        )

    # collectives
    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        _no_timeout(timeout, f"{self._name}.all_reduce")
        if reduce_op not in _OPS:
            raise ConfigurationError(f"unknown reduce_op {reduce_op!r}; valid: {', '.join(_OPS)}")
        strategy = self.lightning_strategy
        return cast(
            "torch.Tensor",
            translating(
                "collective",
                f"{self._name}.all_reduce",
                lambda: strategy.all_reduce(tensor, reduce_op=_OPS[reduce_op]),
            ),
        )

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        _no_timeout(timeout, f"{self._name}.all_gather")
        strategy = self.lightning_strategy
        gathered = translating(
            "collective", f"{self._name}.all_gather", lambda: strategy.all_gather(tensor)
        )
        if self.world_size == 1 and gathered.shape == tensor.shape:
            return [gathered]
        return list(gathered.unbind(0))

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        _no_timeout(timeout, f"{self._name}.broadcast")
        strategy = self.lightning_strategy
        return translating(
            "collective", f"{self._name}.broadcast", lambda: strategy.broadcast(tensor, src)
        )

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        _no_timeout(timeout, f"{self._name}.broadcast_object")
        strategy = self.lightning_strategy
        return translating(
            "collective", f"{self._name}.broadcast", lambda: strategy.broadcast(obj, src)
        )

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        _no_timeout(timeout, f"{self._name}.barrier")
        self.lightning_strategy.barrier()

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        return bool(self.lightning_strategy.reduce_boolean_decision(decision, all=all))

    # checkpoints
    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return cast(
            "dict[str, torch.Tensor]", self.lightning_strategy.get_module_state_dict(module)
        )

    def load_module_state_dict(
        self, module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], strict: bool = True
    ) -> None:
        strategy = self.lightning_strategy
        translating(
            "state",
            f"{self._name}.load_module_state_dict",
            lambda: strategy.load_module_state_dict(module, dict(state_dict), strict=strict),
        )

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> StateDict:
        return dict(self.lightning_strategy.get_optimizer_state(optimizer))

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        translating(
            "state",
            f"{self._name}: optimizer.load_state_dict",
            lambda: optimizer.load_state_dict(dict(state_dict)),
        )

    def save_checkpoint(
        self, checkpoint: Checkpoint, path: PathLike, storage_options: StorageOptions = None
    ) -> None:
        strategy = self.lightning_strategy
        translating(
            "write",
            f"{self._name}.save_checkpoint({str(path)!r})",
            lambda: strategy.save_checkpoint(
                os.fspath(path), checkpoint, storage_options=storage_options
            ),
        )

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        strategy = self.lightning_strategy
        return translating(
            "read",
            f"{self._name}.load_checkpoint({str(path)!r})",
            lambda: strategy.load_checkpoint(os.fspath(path)),
        )

    def remove_checkpoint(self, path: PathLike) -> None:
        raise unsupported(
            self._name,
            "remove_checkpoint(path)",
            "Fabric strategies have no remove_checkpoint (Trainer strategies do)",
        )

    def __repr__(self) -> str:
        return f"from_lightning_strategy({self.lightning_strategy!r})"


class _LightningStrategyWithSync(LightningStrategyBridge, BackwardSyncControl):
    """A bridged strategy whose Lightning strategy has backward-sync control (SYNC-1)."""

    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        control = self.lightning_strategy._backward_sync_control
        assert control is not None
        return cast("AbstractContextManager[None]", control.no_backward_sync(module, enabled))


def from_lightning_strategy(strategy: LightningStrategy) -> LightningStrategyBridge:
    """``strategy`` (a Fabric Strategy instance) as a trainspec Strategy. It is also a
    :class:`~trainspec.BackwardSyncControl` exactly when the Lightning strategy has one (its
    ``_backward_sync_control``: Lightning offers no public way to ask)."""
    _need(strategy, LightningStrategy, "a Fabric Strategy", "from_lightning_strategy")
    if strategy._backward_sync_control is not None:
        return _LightningStrategyWithSync(strategy)
    return LightningStrategyBridge(strategy)


# -- Collective ----------------------------------------------------------------------------------


class LightningCollectiveBridge(Collective):
    """A Lightning Collective instance (``TorchCollective``) as a trainspec Collective.

    ``setup(environment, device)`` is ``setup(main_address=..., main_port=..., rank=...,
    world_size=..., backend=...)`` (gloo on CPU, nccl on CUDA): the arguments
    ``TorchCollective.setup`` passes to ``torch.distributed.init_process_group``. Operations
    map to Lightning's output-argument forms (results in new tensors the bridge allocates);
    Lightning's in-place semantics (``all_reduce`` and ``broadcast`` write into their input)
    are kept, not hidden. No per-call timeouts; ``scatter`` with ``None`` on the other ranks
    has no counterpart (Lightning needs an output tensor of the right shape on every rank).
    """

    def __init__(self, collective: LightningCollective) -> None:
        _need(collective, LightningCollective, "a Collective", "from_lightning_collective")
        self.lightning_collective = collective
        self._set_up = False

    @property
    def _name(self) -> str:
        return type(self.lightning_collective).__name__

    def _object_collective(self, name: str) -> Callable[..., object]:
        method = getattr(self.lightning_collective, name, None)
        if not callable(method):
            raise unsupported(self._name, name, "this Lightning collective does not have it")
        return cast("Callable[..., object]", method)

    def _call(self, what: str, call: Callable[[], _T], timeout: object) -> _T:
        _no_timeout(timeout, f"{self._name}.{what}")
        return translating("collective", f"{self._name}.{what}", call)

    @property
    def rank(self) -> int:
        return int(self.lightning_collective.rank)

    @property
    def world_size(self) -> int:
        return int(self.lightning_collective.world_size)

    @property
    def is_initialized(self) -> bool:
        return self._set_up and bool(type(self.lightning_collective).is_initialized())

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        backend = "nccl" if device.type == "cuda" else "gloo"
        collective = self.lightning_collective
        translating(
            "collective",
            f"{self._name}.setup",
            lambda: collective.setup(
                main_address=environment.main_address,
                main_port=environment.main_port,
                rank=environment.global_rank,
                world_size=environment.world_size,
                backend=backend,
            ),
        )
        self._set_up = True

    def teardown(self) -> None:
        if self._set_up:
            self.lightning_collective.teardown()
        self._set_up = False

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        if reduce_op not in _OPS:
            raise ConfigurationError(f"unknown reduce_op {reduce_op!r}; valid: {', '.join(_OPS)}")
        op = "avg" if reduce_op == "mean" else reduce_op
        collective = self.lightning_collective
        return self._call("all_reduce", lambda: collective.all_reduce(tensor, op=op), timeout)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        collective = self.lightning_collective
        return list(self._call("all_gather", lambda: collective.all_gather(out, tensor), timeout))

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        collective = self.lightning_collective
        return self._call("broadcast", lambda: collective.broadcast(tensor, src), timeout)

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        box: list[Any] = [obj]
        method = self._object_collective("broadcast_object_list")
        self._call("broadcast_object_list", lambda: method(box, src), timeout)
        return cast("_T", box[0])

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        box: list[Any] = [None] * self.world_size
        method = self._object_collective("all_gather_object")
        self._call("all_gather_object", lambda: method(box, obj), timeout)
        return cast("list[_T]", box)

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        out = (
            [torch.empty_like(tensor) for _ in range(self.world_size)] if self.rank == dst else None
        )
        collective = self.lightning_collective
        self._call(
            "gather",
            lambda: collective.gather(tensor, cast("list[torch.Tensor]", out), dst),
            timeout,
        )
        return out

    def scatter(
        self, tensors: list[torch.Tensor] | None, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        raise unsupported(
            f"{self._name}.scatter",
            "scatter with no tensor on the receiving ranks",
            "Lightning's scatter(tensor, scatter_list, src) needs an output tensor of the "
            "right shape on every rank",
        )

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        if reduce_op not in _OPS:
            raise ConfigurationError(f"unknown reduce_op {reduce_op!r}; valid: {', '.join(_OPS)}")
        op = "avg" if reduce_op == "mean" else reduce_op
        out = torch.empty_like(tensors[self.rank])
        collective = self.lightning_collective
        return self._call(
            "reduce_scatter", lambda: collective.reduce_scatter(out, tensors, op=op), timeout
        )

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        out = [torch.empty_like(t) for t in tensors]
        collective = self.lightning_collective
        return list(self._call("all_to_all", lambda: collective.all_to_all(out, tensors), timeout))

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        collective = self.lightning_collective
        self._call("barrier", collective.barrier, timeout)

    def __repr__(self) -> str:
        return f"from_lightning_collective({self.lightning_collective!r})"


def from_lightning_collective(collective: LightningCollective) -> LightningCollectiveBridge:
    """``collective`` (a Lightning Collective instance, e.g. ``TorchCollective()``) as a
    trainspec Collective."""
    return LightningCollectiveBridge(collective)
