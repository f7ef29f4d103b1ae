"""trainspec -> Lightning: a trainspec implementation as an object of Lightning's own base class.

One call per protocol; each returns an instance of Lightning's base class that delegates every
member to the trainspec implementation (``trainspec_*`` attributes give it back):

==========================================  ==================================================
call                                        returns (Lightning base class)
==========================================  ==================================================
:func:`to_lightning_accelerator`            ``lightning.pytorch.accelerators.Accelerator``
                                            (also a Fabric ``Accelerator``)
:func:`to_lightning_checkpoint_io`          ``lightning.fabric.plugins.CheckpointIO``
                                            (Fabric and Trainer)
:func:`to_lightning_cluster_environment`    ``lightning.fabric.plugins.ClusterEnvironment``
                                            (Fabric and Trainer)
:func:`to_fabric_precision`                 ``lightning.fabric.plugins.Precision``
:func:`to_trainer_precision`                ``lightning.pytorch.plugins.precision.Precision``
:func:`to_fabric_strategy`                  ``lightning.fabric.strategies.Strategy``
==========================================  ==================================================

There is no Trainer strategy: see ``docs/bridges/use-in-lightning.md`` for why. Lightning
calls some members on the *class* (``Accelerator.is_available()``, ``parse_devices``,
``ClusterEnvironment.detect()``), so the accelerator and environment calls create one subclass
per trainspec instance, bound to it. The mapping of every member and argument is the table in
``docs/bridges/mapping.md``. Errors are trainspec errors (each still the built-in type it
subclasses: ``ConfigurationError`` is a ``ValueError``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from lightning.fabric.plugins import CheckpointIO as LightningCheckpointIO
from lightning.fabric.plugins import ClusterEnvironment as LightningClusterEnvironment
from lightning.fabric.plugins import Precision as FabricPrecision
from lightning.fabric.strategies.launchers.launcher import _Launcher
from lightning.fabric.strategies.strategy import Strategy as FabricStrategy
from lightning.fabric.strategies.strategy import _BackwardSyncControl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import Accelerator as PLAccelerator
from lightning.pytorch.plugins.precision import Precision as TrainerPrecision
from torch.optim import Optimizer

from trainspec.accelerator import Accelerator
from trainspec.bridges.lightning._mapping import (
    map_location_from_lightning,
    reduce_op_from_lightning,
    unsupported,
    weights_only_allowed,
)
from trainspec.capabilities import BackwardSyncControl
from trainspec.checkpoint_io import CheckpointIO
from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError, LifecycleError, TrainspecError
from trainspec.precision import Precision
from trainspec.strategy import Strategy

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from lightning.fabric.accelerators.registry import _AcceleratorRegistry
    from torch.nn import Module
    from torch.utils.data import DataLoader

    from trainspec.launcher import Launcher
    from trainspec.types import MapLocation

__all__ = [
    "NonFiniteNormError",
    "TrainspecAccelerator",
    "TrainspecCheckpointIO",
    "TrainspecClusterEnvironment",
    "TrainspecFabricPrecision",
    "TrainspecFabricStrategy",
    "TrainspecTrainerPrecision",
    "to_fabric_precision",
    "to_fabric_strategy",
    "to_lightning_accelerator",
    "to_lightning_checkpoint_io",
    "to_lightning_cluster_environment",
    "to_trainer_precision",
]


class NonFiniteNormError(TrainspecError, RuntimeError):
    """``clip_gradients(error_if_nonfinite=True)`` found a non-finite total norm (Lightning and
    torch raise ``RuntimeError``; this is one)."""


def _check(value: object, protocol: type, name: str, call: str) -> None:
    if not isinstance(value, protocol):
        raise ConfigurationError(
            f"{call} expects a trainspec.{name}; got {type(value).__name__} {value!r:.80}. "
            f"To wrap a Lightning plugin as trainspec, use "
            f"trainspec.bridges.lightning.from_lightning_{call.removeprefix('to_')}."
        )


# -- Accelerator --------------------------------------------------------------------------------


class TrainspecAccelerator(PLAccelerator):
    """A Lightning Accelerator (Fabric and Trainer) delegating to a trainspec Accelerator.

    Lightning calls ``is_available``, ``parse_devices``, ``get_parallel_devices``,
    ``auto_device_count``, ``name`` and ``register_accelerators`` on the class; each bridged
    class is bound to one trainspec instance (:func:`to_lightning_accelerator`), and
    ``Accelerator()`` of that class (what Lightning's registry does) returns a bridge to the
    same instance.
    """

    trainspec_accelerator: ClassVar[Accelerator]
    registry_name: ClassVar[str]

    def __init__(self) -> None:
        if not hasattr(type(self), "trainspec_accelerator"):
            raise ConfigurationError(
                "TrainspecAccelerator is a template; create one with "
                "trainspec.bridges.lightning.to_lightning_accelerator(accelerator)"
            )
        super().__init__()

    def setup_device(self, device: torch.device) -> None:
        self.trainspec_accelerator.setup_device(device)

    def teardown(self) -> None:
        self.trainspec_accelerator.teardown()

    @classmethod
    def parse_devices(cls, devices: Any) -> list[torch.device]:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Lightning's device request (``int``, ``str``, ``list[int]``; ``"auto"`` was already
        replaced by :meth:`auto_device_count`) parsed by the trainspec accelerator into its
        devices (ACC-4 ... ACC-6); a list of ``torch.device`` (already parsed) is returned
        unchanged."""
        if isinstance(devices, list) and all(isinstance(d, torch.device) for d in devices):
            return cast("list[torch.device]", devices)
        return cls.trainspec_accelerator.parse_devices(devices)

    @classmethod
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The devices of ``devices`` (a parsed list or a request, as :meth:`parse_devices`)."""
        return cls.parse_devices(devices)

    @classmethod
    def auto_device_count(cls) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        """How many devices ``"auto"`` means for the trainspec accelerator:
        ``len(parse_devices("auto"))``."""
        return len(cls.trainspec_accelerator.parse_devices("auto"))

    @classmethod
    def is_available(cls) -> bool:  # pyright: ignore[reportIncompatibleMethodOverride]
        return cls.trainspec_accelerator.is_available()

    @classmethod
    def name(cls) -> str:  # pyright: ignore[reportIncompatibleMethodOverride]
        return cls.registry_name

    @classmethod
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        """Register this bridged class under :meth:`name`. A name already taken raises
        :class:`~trainspec.ConfigurationError` naming the registered names."""
        try:
            accelerator_registry.register(cls.registry_name, cls, description=cls.__doc__ or "")
        except MisconfigurationException as error:
            raise ConfigurationError(
                f"cannot register accelerator {cls.registry_name!r}: {error} Registered: "
                f"{sorted(accelerator_registry)}; pass another name= to "
                "to_lightning_accelerator"
            ) from error

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return dict(self.trainspec_accelerator.get_device_stats(_as_device(device)))

    def __repr__(self) -> str:
        return f"TrainspecAccelerator({self.trainspec_accelerator!r}, name={self.registry_name!r})"


def _as_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, (str, int)):
        return torch.device(device)
    raise ConfigurationError(f"expected a torch.device or a device string; got {device!r}")


def to_lightning_accelerator(
    accelerator: Accelerator, *, name: str | None = None
) -> TrainspecAccelerator:
    """A Lightning ``Accelerator`` (usable by Fabric and Trainer) delegating to
    ``accelerator``. ``name`` (default: its ``device_type``) is what ``name()`` returns and
    what ``register_accelerators`` registers."""
    _check(accelerator, Accelerator, "Accelerator", "to_lightning_accelerator")
    registry_name = accelerator.device_type if name is None else name
    if not isinstance(registry_name, str) or not registry_name:
        raise ConfigurationError(f"name must be a non-empty string; got {registry_name!r}")
    cls = type(
        f"TrainspecAccelerator[{type(accelerator).__name__}]",
        (TrainspecAccelerator,),
        {
            "trainspec_accelerator": accelerator,
            "registry_name": registry_name,
            "__module__": __name__,
            "__doc__": f"trainspec {type(accelerator).__name__} bridged to Lightning",
        },
    )
    return cast("TrainspecAccelerator", cls())


# -- CheckpointIO ---------------------------------------------------------------------------------


class TrainspecCheckpointIO(LightningCheckpointIO):
    """A Lightning ``CheckpointIO`` (Fabric and Trainer) delegating to a trainspec one."""

    def __init__(self, checkpoint_io: CheckpointIO) -> None:
        _check(checkpoint_io, CheckpointIO, "CheckpointIO", "to_lightning_checkpoint_io")
        self.trainspec_checkpoint_io = checkpoint_io

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        self.trainspec_checkpoint_io.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """``weights_only`` and ``map_location`` are mapped as documented in
        :func:`~trainspec.bridges.lightning._mapping.weights_only_allowed` and
        :func:`~trainspec.bridges.lightning._mapping.map_location_from_lightning`."""
        io = self.trainspec_checkpoint_io
        weights_only_allowed(io, weights_only, "TrainspecCheckpointIO.load_checkpoint")
        location = map_location_from_lightning(
            map_location, "TrainspecCheckpointIO.load_checkpoint"
        )
        return io.load_checkpoint(path, cast("MapLocation", location))

    def remove_checkpoint(self, path: Any) -> None:
        self.trainspec_checkpoint_io.remove_checkpoint(path)

    def teardown(self) -> None:
        self.trainspec_checkpoint_io.teardown()

    def __repr__(self) -> str:
        return f"TrainspecCheckpointIO({self.trainspec_checkpoint_io!r})"


def to_lightning_checkpoint_io(checkpoint_io: CheckpointIO) -> TrainspecCheckpointIO:
    """A Lightning ``CheckpointIO`` delegating to ``checkpoint_io``
    (``Fabric(plugins=[...])``, ``Trainer(plugins=[...])``)."""
    return TrainspecCheckpointIO(checkpoint_io)


# -- ClusterEnvironment ---------------------------------------------------------------------------


class TrainspecClusterEnvironment(LightningClusterEnvironment):
    """A Lightning ``ClusterEnvironment`` delegating to a trainspec one.

    A trainspec environment *describes* the run and is read-only: Lightning's
    ``set_world_size`` / ``set_global_rank`` are accepted when they agree with the description
    and raise :class:`~trainspec.UnsupportedError` otherwise. ``detect()`` (a static method in
    Lightning) is the bound instance's ``detect()``.
    """

    trainspec_environment: ClassVar[ClusterEnvironment]

    def __init__(self) -> None:
        if not hasattr(type(self), "trainspec_environment"):
            raise ConfigurationError(
                "TrainspecClusterEnvironment is a template; create one with "
                "trainspec.bridges.lightning.to_lightning_cluster_environment(environment)"
            )

    @property
    def creates_processes_externally(self) -> bool:
        return self.trainspec_environment.creates_processes_externally

    @property
    def main_address(self) -> str:
        return self.trainspec_environment.main_address

    @property
    def main_port(self) -> int:
        return self.trainspec_environment.main_port

    @classmethod
    def detect(cls) -> bool:  # pyright: ignore[reportIncompatibleMethodOverride]
        return cls.trainspec_environment.detect()

    def world_size(self) -> int:
        return self.trainspec_environment.world_size

    def set_world_size(self, size: int) -> None:
        if size != self.trainspec_environment.world_size:
            raise unsupported(
                "TrainspecClusterEnvironment.set_world_size",
                f"changing the world size to {size}",
                f"{self.trainspec_environment!r} describes {self.trainspec_environment.world_size}"
                " rank(s) and is read-only; start the ranks so that the environment describes "
                "them (torchrun, srun, or trainspec's launchers)",
            )

    def global_rank(self) -> int:
        return self.trainspec_environment.global_rank

    def set_global_rank(self, rank: int) -> None:
        if rank != self.trainspec_environment.global_rank:
            raise unsupported(
                "TrainspecClusterEnvironment.set_global_rank",
                f"changing the global rank to {rank}",
                f"{self.trainspec_environment!r} says this process is rank "
                f"{self.trainspec_environment.global_rank} and is read-only",
            )

    def local_rank(self) -> int:
        return self.trainspec_environment.local_rank

    def node_rank(self) -> int:
        return self.trainspec_environment.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """``validate()`` of the trainspec environment (ENV-5); the device and node counts are
        the strategy's business in trainspec and are not compared here."""
        self.trainspec_environment.validate()

    def teardown(self) -> None:
        self.trainspec_environment.teardown()

    def __repr__(self) -> str:
        return f"TrainspecClusterEnvironment({self.trainspec_environment!r})"


def to_lightning_cluster_environment(
    environment: ClusterEnvironment,
) -> TrainspecClusterEnvironment:
    """A Lightning ``ClusterEnvironment`` delegating to ``environment``."""
    _check(
        environment, ClusterEnvironment, "ClusterEnvironment", "to_lightning_cluster_environment"
    )
    cls = type(
        f"TrainspecClusterEnvironment[{type(environment).__name__}]",
        (TrainspecClusterEnvironment,),
        {"trainspec_environment": environment, "__module__": __name__},
    )
    return cast("TrainspecClusterEnvironment", cls())


# -- Precision ------------------------------------------------------------------------------------


class _PrecisionDelegate:
    """What the Fabric and the Trainer precision bridges share: the lazy ``setup(device)``.

    Lightning has no precision ``setup(device)``. Unless ``device`` is given (or the owner, a
    bridged strategy, sets the precision up itself), the bridge calls ``setup`` with the device
    of the first tensor it sees (the inputs in ``convert_input``, the loss in ``backward``)
    and raises :class:`~trainspec.LifecycleError` if ``forward_context`` comes first.
    """

    def __init__(self, precision: Precision, device: torch.device | str | None, owned: bool):
        self.trainspec_precision = precision
        self._device = None if device is None else _as_device(device)
        self._owned = owned
        self._set_up = owned

    def ensure_setup(self, device: torch.device | None, method: str) -> None:
        if self._set_up:
            return
        target = self._device or device
        if target is None:
            raise LifecycleError(
                f"bridged {self.trainspec_precision!r}.{method}: the precision is not set up "
                "and no device is known yet; pass device= to the bridge (trainspec "
                "precisions are set up for one device, Lightning precisions have no setup)"
            )
        self.trainspec_precision.setup(target)
        self._set_up = True

    def teardown(self) -> None:
        self.trainspec_precision.teardown()
        self._set_up = self._owned


def _first_tensor_device(data: object) -> torch.device | None:
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        values: Any = list(data.values())
    elif isinstance(data, (list, tuple)):
        values = data
    else:
        return None
    for value in values:
        found = _first_tensor_device(value)
        if found is not None:
            return found
    return None


class _DelegatedPrecision:
    """The members the Fabric and Trainer precision bridges share: each delegates to
    ``trainspec_precision``, setting it up on first use through ``_delegate``."""

    trainspec_precision: Precision
    _delegate: _PrecisionDelegate

    def convert_module(self, module: Module) -> Module:
        return self.trainspec_precision.convert_module(module)

    def module_init_context(self) -> AbstractContextManager[None]:
        return self.trainspec_precision.module_init_context()

    def tensor_init_context(self) -> AbstractContextManager[None]:
        """trainspec's ``module_init_context`` (new floating tensors get the parameter dtype)."""
        return self.trainspec_precision.module_init_context()

    def forward_context(self) -> AbstractContextManager[None]:
        self._delegate.ensure_setup(None, "forward_context")
        return self.trainspec_precision.forward_context()

    def convert_input(self, data: Any) -> Any:
        self._delegate.ensure_setup(_first_tensor_device(data), "convert_input")
        return self.trainspec_precision.convert_input(data)

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        self.trainspec_precision.unscale_gradients(_real_optimizer(optimizer))

    def state_dict(self) -> dict[str, Any]:
        return self.trainspec_precision.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.trainspec_precision.load_state_dict(state_dict)

    def teardown(self) -> None:
        self._delegate.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.trainspec_precision!r})"


class TrainspecFabricPrecision(_DelegatedPrecision, FabricPrecision):
    """A Fabric ``Precision`` delegating to a trainspec Precision (``precision`` attribute is
    the trainspec flag)."""

    def __init__(
        self,
        precision: Precision,
        *,
        device: torch.device | str | None = None,
        _owned: bool = False,
    ) -> None:
        _check(precision, Precision, "Precision", "to_fabric_precision")
        self._delegate = _PrecisionDelegate(precision, device, _owned)
        self.trainspec_precision = precision
        self.precision = precision.flag

    def backward(
        self, tensor: torch.Tensor, model: Module | None, *args: Any, **kwargs: Any
    ) -> None:
        if args or kwargs:
            raise unsupported(
                "TrainspecFabricPrecision.backward",
                "extra backward arguments",
                "trainspec's Precision.backward(tensor, module) takes none",
            )
        self._delegate.ensure_setup(tensor.device, "backward")
        self.trainspec_precision.backward(tensor, model)

    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        """``optimizer_step(optimizer)`` of the trainspec precision; returns ``None`` (what
        ``optimizer.step()`` returns). Keyword arguments (a closure) raise
        :class:`~trainspec.UnsupportedError`."""
        if kwargs:
            raise unsupported(
                "TrainspecFabricPrecision.optimizer_step",
                f"optimizer.step arguments {sorted(kwargs)}",
                "trainspec's Precision.optimizer_step(optimizer) takes none",
            )
        self.trainspec_precision.optimizer_step(_real_optimizer(optimizer))
        return None


def _real_optimizer(optimizer: Any) -> Optimizer:
    inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's optimizer wrappers
    if not isinstance(inner, Optimizer):
        raise ConfigurationError(f"expected a torch.optim.Optimizer; got {type(inner).__name__}")
    return inner


def to_fabric_precision(
    precision: Precision, *, device: torch.device | str | None = None
) -> TrainspecFabricPrecision:
    """A Fabric ``Precision`` delegating to ``precision``. ``device``: where to ``setup`` the
    precision (default: the device of the first tensor it sees)."""
    return TrainspecFabricPrecision(precision, device=device)


class TrainspecTrainerPrecision(_DelegatedPrecision, TrainerPrecision):
    """A Trainer ``Precision`` delegating to a trainspec Precision.

    The Trainer's step: ``optimizer_step(optimizer, model, closure)`` runs ``closure()`` (the
    training step and, through :meth:`backward`, the trainspec backward), Lightning's
    before-optimizer-step hooks and gradient clipping (after the trainspec precision
    unscaled), then the trainspec ``optimizer_step``; a step whose closure returned ``None``
    (a skipped training step) is not taken. ``LightningModule.backward`` is not called: the
    trainspec precision runs the backward pass itself (it may scale the loss).
    """

    def __init__(self, precision: Precision, *, device: torch.device | str | None = None) -> None:
        _check(precision, Precision, "Precision", "to_trainer_precision")
        self._delegate = _PrecisionDelegate(precision, device, owned=False)
        self.trainspec_precision = precision
        self.precision = precision.flag

    def backward(
        self, tensor: torch.Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any
    ) -> None:
        if args or kwargs:
            raise unsupported(
                "TrainspecTrainerPrecision.backward",
                "extra backward arguments",
                "trainspec's Precision.backward(tensor, module) takes none",
            )
        self._delegate.ensure_setup(tensor.device, "backward")
        self.trainspec_precision.backward(tensor, model)

    def optimizer_step(  # type: ignore[override]
        self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        if kwargs:
            raise unsupported(
                "TrainspecTrainerPrecision.optimizer_step",
                f"optimizer.step arguments {sorted(kwargs)}",
                "trainspec's Precision.optimizer_step(optimizer) takes none",
            )
        real = _real_optimizer(optimizer)
        closure_result = closure()
        self._after_closure(model, optimizer)
        if closure_result is None and getattr(model, "automatic_optimization", True):
            return None
        self.trainspec_precision.optimizer_step(real)
        return closure_result

    def clip_gradients(
        self, optimizer: Optimizer, clip_val: float = 0.0, gradient_clip_algorithm: Any = None
    ) -> None:
        """Unscale through the trainspec precision first (idempotent within a step, PREC-8),
        then clip as Lightning does."""
        if clip_val > 0:
            self.trainspec_precision.unscale_gradients(_real_optimizer(optimizer))
        if gradient_clip_algorithm is None:
            super().clip_gradients(optimizer, clip_val)
        else:
            super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)


def to_trainer_precision(
    precision: Precision, *, device: torch.device | str | None = None
) -> TrainspecTrainerPrecision:
    """A Trainer ``Precision`` plugin delegating to ``precision`` (``Trainer(plugins=[...])``).
    ``device`` as in :func:`to_fabric_precision`."""
    return TrainspecTrainerPrecision(precision, device=device)


# -- Fabric Strategy ------------------------------------------------------------------------------


class _LauncherBridge(_Launcher):
    def __init__(self, launcher: Launcher) -> None:
        self.trainspec_launcher = launcher

    @property
    def is_interactive_compatible(self) -> bool:
        return self.trainspec_launcher.is_interactive_compatible

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.trainspec_launcher.launch(function, *args, **kwargs)


class _BackwardSyncBridge(_BackwardSyncControl):
    def __init__(self, strategy: BackwardSyncControl) -> None:
        self._strategy = strategy

    def no_backward_sync(self, module: Module, enabled: bool) -> AbstractContextManager[None]:
        return self._strategy.no_backward_sync(module, enabled)


class TrainspecFabricStrategy(FabricStrategy):
    """A Fabric ``Strategy`` delegating to a trainspec Strategy (its components are bridged
    too: ``accelerator``, ``precision``, ``checkpoint_io``, ``cluster_environment`` and
    ``launcher`` are bridges to the trainspec strategy's own)."""

    def __init__(self, strategy: Strategy) -> None:
        _check(strategy, Strategy, "Strategy", "to_fabric_strategy")
        self.trainspec_strategy = strategy
        super().__init__(
            accelerator=to_lightning_accelerator(strategy.accelerator),
            checkpoint_io=TrainspecCheckpointIO(strategy.checkpoint_io),
            precision=TrainspecFabricPrecision(strategy.precision, _owned=True),
        )
        self._environment = to_lightning_cluster_environment(strategy.cluster_environment)
        if isinstance(strategy, BackwardSyncControl):
            self._backward_sync_control = _BackwardSyncBridge(strategy)

    # components and ranks
    @property
    def cluster_environment(self) -> TrainspecClusterEnvironment:
        return self._environment

    def _configure_launcher(self) -> None:
        launcher = self.trainspec_strategy.launcher
        self._launcher = None if launcher is None else _LauncherBridge(launcher)

    @property
    def root_device(self) -> torch.device:
        return self.trainspec_strategy.root_device

    @property
    def is_global_zero(self) -> bool:
        return self.trainspec_strategy.is_global_zero

    @property
    def global_rank(self) -> int:
        return self.trainspec_strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.trainspec_strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self.trainspec_strategy.node_rank

    @property
    def world_size(self) -> int:
        return self.trainspec_strategy.world_size

    # lifecycle
    def setup_environment(self) -> None:
        self.trainspec_strategy.setup_environment()

    def setup_module(self, module: Module) -> Module:
        return self.trainspec_strategy.setup_module(module)

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        return self.trainspec_strategy.setup_optimizer(optimizer)

    def module_to_device(self, module: Module) -> None:
        module.to(self.trainspec_strategy.root_device)

    def module_init_context(self, empty_init: bool | None = None) -> AbstractContextManager[None]:
        if empty_init:
            raise unsupported(
                "TrainspecFabricStrategy.module_init_context",
                "empty_init=True",
                "trainspec's Strategy.module_init_context initialises parameters",
            )
        return self.trainspec_strategy.module_init_context()

    def tensor_init_context(self) -> AbstractContextManager[None]:
        return self.trainspec_strategy.module_init_context()

    def teardown(self) -> None:
        self.trainspec_strategy.teardown()

    # training
    def batch_to_device(self, batch: Any, device: torch.device | None = None) -> Any:
        if device is not None and device != self.trainspec_strategy.root_device:
            raise unsupported(
                "TrainspecFabricStrategy.batch_to_device",
                f"device={device}",
                "trainspec's Strategy.batch_to_device moves to its root_device "
                f"({self.trainspec_strategy.root_device})",
            )
        return self.trainspec_strategy.batch_to_device(batch)

    def process_dataloader(self, dataloader: DataLoader[Any]) -> DataLoader[Any]:
        return self.trainspec_strategy.process_dataloader(dataloader)

    def backward(
        self, tensor: torch.Tensor, module: Module | None, *args: Any, **kwargs: Any
    ) -> None:
        if args or kwargs:
            raise unsupported(
                "TrainspecFabricStrategy.backward",
                "extra backward arguments",
                "trainspec's Strategy.backward(tensor, module) takes none",
            )
        self.trainspec_strategy.backward(tensor, module)

    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise unsupported(
                "TrainspecFabricStrategy.optimizer_step",
                f"optimizer.step arguments {sorted(kwargs)}",
                "trainspec's Strategy.optimizer_step(optimizer) takes none",
            )
        self.trainspec_strategy.optimizer_step(_real_optimizer(optimizer))
        return None

    def clip_gradients_norm(
        self,
        module: Module,
        optimizer: Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> torch.Tensor:
        """trainspec's ``clip_gradients_norm`` (the global norm, STRAT-11). With
        ``error_if_nonfinite`` a non-finite norm raises :class:`NonFiniteNormError` *after*
        the trainspec strategy clipped (it has no option to refuse first)."""
        norm = self.trainspec_strategy.clip_gradients_norm(
            module, _real_optimizer(optimizer), float(max_norm), float(norm_type)
        )
        if error_if_nonfinite and not math.isfinite(float(norm)):
            raise NonFiniteNormError(
                f"the total gradient norm is {float(norm)}; pass error_if_nonfinite=False to "
                "Fabric.clip_gradients to allow it"
            )
        return norm

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float) -> None:
        raise unsupported(
            "TrainspecFabricStrategy.clip_gradients_value",
            "clipping by value",
            "trainspec's Strategy clips by norm only (clip_gradients_norm)",
        )

    # collectives
    def all_gather(
        self, tensor: torch.Tensor, group: Any | None = None, sync_grads: bool = False
    ) -> torch.Tensor:
        _whole_run(group, "all_gather")
        if sync_grads:
            raise unsupported(
                "all_gather", "sync_grads=True", "trainspec's all_gather is not differentiable"
            )
        if self.trainspec_strategy.world_size == 1:
            return tensor
        return torch.stack(self.trainspec_strategy.all_gather(tensor))

    def all_reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        _whole_run(group, "all_reduce")
        op = reduce_op_from_lightning(reduce_op, "TrainspecFabricStrategy.all_reduce")
        if not isinstance(tensor, torch.Tensor):
            return tensor
        return self.trainspec_strategy.all_reduce(tensor, op)

    def barrier(self, name: str | None = None) -> None:
        self.trainspec_strategy.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self.trainspec_strategy.broadcast_object(obj, src)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return self.trainspec_strategy.reduce_boolean_decision(decision, all=all)

    # checkpoints
    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        return dict(self.trainspec_strategy.module_state_dict(module))

    def load_module_state_dict(
        self, module: Module, state_dict: dict[str, Any], strict: bool = True
    ) -> None:
        self.trainspec_strategy.load_module_state_dict(module, state_dict, strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        return self.trainspec_strategy.optimizer_state_dict(_real_optimizer(optimizer))

    def _convert(self, state: Mapping[str, Any], filters: Mapping[str, Any]) -> dict[str, Any]:
        converted: dict[str, Any] = {}
        for key, obj in state.items():
            if isinstance(obj, torch.nn.Module):
                value: Any = self.get_module_state_dict(obj)
            elif isinstance(obj, Optimizer):
                value = self.get_optimizer_state(obj)
            elif callable(getattr(obj, "state_dict", None)) and callable(
                getattr(obj, "load_state_dict", None)
            ):
                value = obj.state_dict()
            else:
                value = obj
            keep = filters.get(key)
            if keep is not None and isinstance(value, dict):
                value = {k: v for k, v in value.items() if keep(k, v)}
                if not value:
                    continue
            converted[key] = value
        return converted

    def save_checkpoint(
        self,
        path: Any,
        state: dict[str, Any],
        storage_options: Any | None = None,
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        """Modules, optimizers and stateful objects in ``state`` become their state dicts
        (through the trainspec strategy), ``filter`` keeps the entries it accepts, then
        trainspec's ``save_checkpoint`` writes on global rank zero (STRAT-16)."""
        converted = self._convert(state, filter or {})
        self.trainspec_strategy.save_checkpoint(converted, path, storage_options)

    def load_checkpoint(
        self,
        path: Any,
        state: Any = None,
        strict: bool = True,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """trainspec's ``load_checkpoint`` (onto the root device), then restore ``state`` as
        Fabric does: a module, an optimizer, or a dict whose modules, optimizers and stateful
        objects are restored in place and other entries replaced; the rest is returned."""
        weights_only_allowed(
            self.trainspec_strategy.checkpoint_io,
            weights_only,
            "TrainspecFabricStrategy.load_checkpoint",
        )
        checkpoint = self.trainspec_strategy.load_checkpoint(path)
        if not state:
            return checkpoint
        if isinstance(state, torch.nn.Module):
            self.load_module_state_dict(state, checkpoint, strict)
            return {}
        if isinstance(state, Optimizer):
            self.trainspec_strategy.load_optimizer_state_dict(state, checkpoint)
            return {}
        missing = [key for key in state if key not in checkpoint]
        if strict and missing:
            raise ConfigurationError(
                f"the requested state key {missing[0]!r} is not in the checkpoint at {path!r} "
                f"(keys: {sorted(checkpoint)}); pass strict=False to skip it"
            )
        for name, obj in list(state.items()):
            if name not in checkpoint:
                continue
            if isinstance(obj, torch.nn.Module):
                self.load_module_state_dict(obj, checkpoint.pop(name), strict)
            elif isinstance(obj, Optimizer):
                self.trainspec_strategy.load_optimizer_state_dict(obj, checkpoint.pop(name))
            elif callable(getattr(obj, "load_state_dict", None)):
                obj.load_state_dict(checkpoint.pop(name))
            else:
                state[name] = checkpoint.pop(name)
        return checkpoint

    def __repr__(self) -> str:
        return f"TrainspecFabricStrategy({self.trainspec_strategy!r})"


def _whole_run(group: object, method: str) -> None:
    """``group`` must mean the whole run: ``None`` or ``torch.distributed.group.WORLD``
    (what Fabric passes by default); trainspec collectives have no subgroups."""
    if group is None:
        return
    if torch.distributed.is_available() and group is torch.distributed.group.WORLD:
        return
    raise unsupported(
        f"TrainspecFabricStrategy.{method}",
        f"group={group!r}",
        "trainspec collectives run over the whole run (group=None or group.WORLD)",
    )


def to_fabric_strategy(strategy: Strategy) -> TrainspecFabricStrategy:
    """A Fabric ``Strategy`` delegating to ``strategy`` (``Fabric(strategy=...)``; pass no
    other accelerator, precision or plugins: they come from the trainspec strategy)."""
    return TrainspecFabricStrategy(strategy)
