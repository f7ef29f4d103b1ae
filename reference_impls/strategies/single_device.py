"""``SingleDeviceStrategy``: one process training on one device."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, TypeVar

from trainspec.capabilities import BackwardSyncControl
from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value
from trainspec.reference.collectives.single import SingleProcessCollective
from trainspec.reference.strategies.base import StrategyBase

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.precision import Precision

__all__ = ["SingleDeviceStrategy"]

_T = TypeVar("_T")


class SingleDeviceStrategy(StrategyBase, BackwardSyncControl):
    """Train in this process on exactly one device (rank 0 of world size 1).

    No launcher (``launcher is None``), a :class:`SingleProcessCollective`, no wrapper: the
    module returned by :meth:`setup_module` is the user's module, converted by the precision
    and moved to :attr:`root_device`. :meth:`process_dataloader` returns the dataloader
    unchanged, since this one rank's share is all of the data (STRAT-8).

    It also implements :class:`trainspec.BackwardSyncControl`: with one rank there is no
    gradient synchronisation to skip, so :meth:`no_backward_sync` is a no-op context and
    accumulating K micro-batches already equals one step on their union (SYNC-1). Offering it
    lets a trainer write gradient accumulation once for every strategy.

    The cluster environment must describe a single rank; ``setup_environment`` raises
    :class:`~trainspec.ConfigurationError` otherwise (use ``"ddp"`` for several ranks).
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
    ) -> None:
        """``parallel_devices`` defaults to the accelerator's first device; a list of more
        than one device, or ``num_nodes > 1``, raises :class:`~trainspec.ConfigurationError`
        suggesting the ``"ddp"`` strategy."""
        if parallel_devices is not None and (
            not isinstance(parallel_devices, (list, tuple)) or len(parallel_devices) != 1
        ):
            count = len(parallel_devices) if isinstance(parallel_devices, (list, tuple)) else None
            raise ConfigurationError(
                "SingleDeviceStrategy trains on exactly one device: parallel_devices must be "
                f"a list of one torch.device; got {parallel_devices!r}"
                + (f" ({count} devices)" if count else "")
                + ". Use strategy='ddp' to train on several devices."
            )
        if num_nodes != 1 and not isinstance(num_nodes, bool) and isinstance(num_nodes, int):
            raise ConfigurationError(
                "SingleDeviceStrategy runs on one node; got "
                f"num_nodes={describe_value(num_nodes)}. Use strategy='ddp' for multi-node "
                "training."
            )
        super().__init__(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            num_nodes=num_nodes,
            collective=SingleProcessCollective(),
            launcher=None,
        )

    def default_parallel_devices(self, accelerator: Accelerator) -> list[torch.device]:
        """The accelerator's first device: ``accelerator.parse_devices(1)``."""
        return accelerator.parse_devices(1)

    @property
    def global_rank(self) -> int:
        """Always ``0``."""
        return 0

    @property
    def local_rank(self) -> int:
        """Always ``0``."""
        return 0

    @property
    def node_rank(self) -> int:
        """Always ``0``."""
        return 0

    @property
    def world_size(self) -> int:
        """Always ``1``."""
        return 1

    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        """``dataloader`` itself: the only rank's share is the whole dataset (STRAT-8)."""
        self.require_set_up("process_dataloader")
        return dataloader

    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """A no-op context: one rank has no gradients to synchronise (SYNC-1)."""
        self.require_set_up("no_backward_sync")
        return nullcontext()
