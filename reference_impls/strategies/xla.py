"""``XLAStrategy``: training on XLA devices (TPU, or PJRT's CPU device) through ``torch_xla``.

``torch_xla`` is imported lazily, on ``setup_environment`` and later calls: constructing the
strategy needs no XLA install (``setup_environment`` then raises
:class:`~trainspec.DeviceUnavailableError`).

Two paths:

- **one device** (``parallel_devices`` of length 1, the default without several devices):
  this process trains on it; no launcher; :class:`~trainspec.reference.collectives.
  SingleProcessCollective`. Verified on ``PJRT_DEVICE=CPU`` by ``scripts/xla_lane.sh``;
- **several devices**: :class:`~trainspec.reference.launchers.XLALauncher` starts one rank per
  device with ``xmp.spawn``; the ranks come from :class:`~trainspec.reference.cluster_environments.
  XLAEnvironment`. Gradients are all-reduced on the devices (``xm.all_reduce``) at the end
  of :meth:`backward`, so clipping sees the global gradients; the strategy's own collectives
  (metrics, decisions, checkpoint agreement) run over a CPU gloo group
  (:class:`~trainspec.reference.collectives.TorchCollective`), with tensors moved to the CPU
  and back. Not verified here: it needs a TPU host.

Lazy execution: :meth:`mark_step` (trainspec.StepBoundary) materialises pending work;
:meth:`optimizer_step` calls it after every step, so a trainer that knows nothing about XLA
still trains correctly. Checkpoints are saved from CPU copies of the tensors and loaded onto
the CPU, then moved to :attr:`root_device`.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import TYPE_CHECKING, Final, TypeVar, cast

import torch

from trainspec.capabilities import StepBoundary
from trainspec.errors import ConfigurationError, DeviceUnavailableError
from trainspec.reference._messages import describe_value
from trainspec.reference.cluster_environments.local import LocalEnvironment
from trainspec.reference.cluster_environments.xla import XLAEnvironment
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.reference.collectives.torch_dist import TorchCollective
from trainspec.reference.launchers.xla import XLALauncher
from trainspec.reference.strategies.base import StrategyBase
from trainspec.reference.strategies.ddp import distributed_dataloader

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from torch.utils.data import DataLoader

    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.collective import Collective
    from trainspec.precision import Precision
    from trainspec.types import Checkpoint, PathLike, ReduceOp, StorageOptions

__all__ = ["XLAStrategy"]

_T = TypeVar("_T")
_NAME: Final = "XLAStrategy"
_CPU: Final = torch.device("cpu")


def _xla_model() -> ModuleType:
    try:
        return importlib.import_module("torch_xla.core.xla_model")
    except Exception as error:
        raise DeviceUnavailableError(
            f"{_NAME}: torch_xla is not installed or fails to import ({error}); install "
            "torch_xla matching your torch version (see scripts/xla_lane.sh)."
        ) from error


class XLAStrategy(StrategyBase, StepBoundary):
    """Train on one XLA device in this process, or on every XLA device of the host with one
    process each (STRAT-1 ... STRAT-17, STEP-1). See the module docstring for the two paths.

    The accelerator defaults to :class:`~trainspec.reference.accelerators.XLAAccelerator`,
    the devices to all devices it reports (one placeholder device ``xla:0`` when XLA is not
    available, so that construction never needs torch_xla).
    """

    def __init__(
        self,
        *,
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
        checkpoint_io: CheckpointIO | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        parallel_devices: list[torch.device] | None = None,
        num_nodes: int = 1,
        timeout: timedelta = timedelta(minutes=30),
        sampler_seed: int = 0,
        start_method: str = "spawn",
    ) -> None:
        """The standard keyword arguments plus ``timeout`` (the collectives' default),
        ``sampler_seed`` (the ``DistributedSampler``'s) and ``start_method`` (``"spawn"`` or
        ``"fork"``, for ``xmp.spawn``). ``num_nodes`` must be 1."""
        if num_nodes != 1:
            raise ConfigurationError(
                f"{_NAME}: strategy 'xla' supports num_nodes=1 only (multi-host XLA runs are "
                f"not supported by this reference strategy); got "
                f"num_nodes={describe_value(num_nodes)}."
            )
        if start_method not in ("spawn", "fork"):
            raise ConfigurationError(
                f"{_NAME}: start_method must be 'spawn' or 'fork'; got {start_method!r}."
            )
        if isinstance(sampler_seed, bool) or not isinstance(sampler_seed, int):
            raise ConfigurationError(f"{_NAME}: sampler_seed must be an int; got {sampler_seed!r}.")
        if accelerator is None:
            accelerator = self.default_accelerator()
        devices = (
            parallel_devices
            if parallel_devices is not None
            else self.default_parallel_devices(accelerator)
        )
        multi = isinstance(devices, (list, tuple)) and len(devices) > 1
        collective: Collective = (
            TorchCollective(backend="gloo", timeout=timeout)
            if multi
            else SingleProcessCollective(timeout=timeout)
        )
        if cluster_environment is None:
            cluster_environment = XLAEnvironment() if multi else LocalEnvironment()
        launcher = (
            XLALauncher(len(devices), "fork" if start_method == "fork" else "spawn")
            if multi
            else None
        )
        super().__init__(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=devices,
            num_nodes=num_nodes,
            collective=collective,
            launcher=launcher,
        )
        self._multi = multi
        self._sampler_seed = sampler_seed

    def default_accelerator(self) -> Accelerator:
        """:class:`~trainspec.reference.accelerators.XLAAccelerator`."""
        from trainspec.reference.accelerators.xla import XLAAccelerator

        return XLAAccelerator()

    def default_parallel_devices(self, accelerator: Accelerator) -> list[torch.device]:
        """Every device ``accelerator`` reports, or ``[xla:0]`` when none is available."""
        if accelerator.is_available():
            return accelerator.parse_devices("auto")
        return [torch.device(accelerator.device_type, 0)]

    # -- ranks ---------------------------------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        """One device: ``parallel_devices[0]``; several: this rank's XLA device."""
        if not self._multi:
            return self._parallel_devices[0]
        device = _xla_model().xla_device()
        return cast("torch.device", device)

    @property
    def global_rank(self) -> int:
        """``0`` with one device, else the environment's (STRAT-2)."""
        return self._cluster_environment.global_rank if self._multi else 0

    @property
    def local_rank(self) -> int:
        """``0`` with one device, else the environment's (STRAT-2)."""
        return self._cluster_environment.local_rank if self._multi else 0

    @property
    def node_rank(self) -> int:
        """``0`` with one device, else the environment's (STRAT-2)."""
        return self._cluster_environment.node_rank if self._multi else 0

    @property
    def world_size(self) -> int:
        """``1`` with one device, else the environment's (STRAT-2)."""
        return self._cluster_environment.world_size if self._multi else 1

    # -- training ------------------------------------------------------------------------------

    def mark_step(self) -> None:
        """Materialise the pending lazy computation (``torch_xla.sync()``, or
        ``xm.mark_step()`` on older releases) (STEP-1)."""
        self.require_set_up("mark_step")
        torch_xla = importlib.import_module("torch_xla")
        sync = getattr(torch_xla, "sync", None)
        if callable(sync):
            sync()
        else:
            _xla_model().mark_step()

    def wrap_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Several devices: rank 0's parameters copied to every rank
        (``xm.broadcast_master_param``); one device: unchanged."""
        if self._multi:
            _xla_model().broadcast_master_param(module)
        return module

    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """The precision's backward; with several devices the gradients of ``module`` are
        then averaged across ranks on the devices (``module`` is required then) (STRAT-9)."""
        super().backward(tensor, module)
        if self._multi:
            if module is None:
                raise ConfigurationError(
                    f"{_NAME}.backward: with several XLA devices, pass the module so its "
                    "gradients can be averaged across ranks."
                )
            gradients = [p.grad for p in module.parameters() if p.grad is not None]
            if gradients:
                xm = _xla_model()
                xm.all_reduce(xm.REDUCE_SUM, gradients, scale=1.0 / self.world_size)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The precision's step, then :meth:`mark_step` (STRAT-10)."""
        stepped = super().optimizer_step(optimizer)
        self.mark_step()
        return stepped

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        """One device: ``dataloader``; several: a ``DistributedSampler`` share, as
        :meth:`DDPStrategy.process_dataloader <trainspec.reference.strategies.DDPStrategy.
        process_dataloader>` (STRAT-8)."""
        self.require_set_up("process_dataloader")
        if not self._multi:
            return dataloader
        return distributed_dataloader(
            dataloader,
            num_replicas=self.world_size,
            rank=self.global_rank,
            seed=self._sampler_seed,
            owner=f"{_NAME}.process_dataloader",
        )

    # -- collectives over the CPU group ------------------------------------------------------

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """As :meth:`trainspec.Collective.all_reduce`; through the CPU (STRAT-12)."""
        self.require_set_up("all_reduce")
        reduced = self.collective.all_reduce(tensor.to(_CPU), reduce_op, timeout=timeout)
        return reduced.to(tensor.device)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """As :meth:`trainspec.Collective.all_gather`; through the CPU (STRAT-12)."""
        self.require_set_up("all_gather")
        gathered = self.collective.all_gather(tensor.to(_CPU), timeout=timeout)
        return [item.to(tensor.device) for item in gathered]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """As :meth:`trainspec.Collective.broadcast`; through the CPU (STRAT-12)."""
        self.require_set_up("broadcast")
        return self.collective.broadcast(tensor.to(_CPU), src, timeout=timeout).to(tensor.device)

    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        """As the base, with the vote counted on the CPU (STRAT-13)."""
        self.require_set_up("reduce_boolean_decision")
        votes = torch.tensor(int(bool(decision)), dtype=torch.int64)
        total = int(self.collective.all_reduce(votes, "sum").item())
        return total == self.world_size if all else total > 0

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Save CPU copies of the tensors on global rank zero only (STRAT-16)."""
        self.require_set_up("save_checkpoint")
        on_cpu = cast("Checkpoint", _map_tensors(checkpoint, lambda t: t.to(_CPU)))
        super().save_checkpoint(on_cpu, path, storage_options)

    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        """Load onto the CPU, then move every tensor to :attr:`root_device` (STRAT-17)."""
        self.require_set_up("load_checkpoint")
        loaded = self.checkpoint_io.load_checkpoint(path, map_location=_CPU)
        device = self.root_device
        return cast("Checkpoint", _map_tensors(loaded, lambda t: t.to(device)))


def _map_tensors(value: object, function: Callable[[torch.Tensor], torch.Tensor]) -> object:
    """``value`` with ``function`` applied to every tensor in nested dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if type(value) is dict:
        return {key: _map_tensors(item, function) for key, item in value.items()}
    if type(value) is list:
        return [_map_tensors(item, function) for item in value]
    if type(value) is tuple:
        return tuple(_map_tensors(item, function) for item in value)
    return value
