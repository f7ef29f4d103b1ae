"""The Strategy protocol: the hub a trainer talks to.

The contract, lifecycle first, is the docstring of :class:`Strategy`
(``help(trainspec.Strategy)``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager
    from datetime import timedelta

    import torch
    from torch.utils.data import DataLoader

    from trainspec.accelerator import Accelerator
    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.launcher import Launcher
    from trainspec.precision import Precision
    from trainspec.types import Checkpoint, PathLike, ReduceOp, StateDict, StorageOptions

__all__ = ["Strategy"]

_T = TypeVar("_T")


@runtime_checkable
class Strategy(Protocol):
    """How a module is placed, wrapped, synchronised and checkpointed across ranks.

    Lifecycle::

        1) (main process) if launcher is not None: launcher.launch(fn) runs fn on every rank;
           everything below runs inside fn, on every rank
        2) setup_environment()             -- device, process group, precision.setup(root_device)
        3) setup_module(module), setup_optimizer(optimizer)   -- in this order, once per object
        4) training: forward_context(), batch_to_device(), backward(), clip_gradients_norm(),
           optimizer_step(), collectives, process_dataloader()
        5) checkpoints: module_state_dict(), optimizer_state_dict(), save_checkpoint(),
           load_checkpoint(), load_module_state_dict(), load_optimizer_state_dict()
        6) teardown()                      -- idempotent; 2) may run again afterwards

    A Strategy owns an :class:`~trainspec.Accelerator`, a :class:`~trainspec.Precision`, a
    :class:`~trainspec.CheckpointIO`, a :class:`~trainspec.ClusterEnvironment` and, where it starts
    processes, a :class:`~trainspec.Launcher`. It decides where modules live, how they are wrapped,
    how gradients are synchronised, who writes checkpoints, and exposes the collectives.

    Calling a step-3/4/5 method before ``setup_environment`` **must** raise
    :class:`~trainspec.LifecycleError` (STRAT-3).

    Whole-run guarantees, checked end to end through a trainer (E2E-1 ... E2E-3): N ranks with
    batch B each train to the same weights as one rank on the N*B batch, within float tolerance;
    saving, stopping and resuming continues exactly as if never stopped; a checkpoint written by N
    ranks loads into a single-device strategy and back.

    Clauses STRAT-1 ... STRAT-17 and E2E-1 ... E2E-3 in docs/spec.md.
    """

    # -- components (STRAT-1) -------------------------------------------------------------

    @property
    @abstractmethod
    def accelerator(self) -> Accelerator:
        """The accelerator whose devices this strategy uses (STRAT-1)."""

    @property
    @abstractmethod
    def precision(self) -> Precision:
        """The precision applied to modules, inputs, backward and steps (STRAT-1)."""

    @property
    @abstractmethod
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint IO that :meth:`save_checkpoint` and :meth:`load_checkpoint` use
        (STRAT-1)."""

    @property
    @abstractmethod
    def cluster_environment(self) -> ClusterEnvironment:
        """Where this run's ranks come from (STRAT-1)."""

    @property
    @abstractmethod
    def launcher(self) -> Launcher | None:
        """The launcher that starts the ranks, or ``None`` when there is nothing to start
        (STRAT-1)."""

    # -- ranks and devices (STRAT-2) ----------------------------------------------------------

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this rank computes on; its type is ``accelerator.device_type`` (STRAT-2)."""

    @property
    @abstractmethod
    def global_rank(self) -> int:
        """This rank in the run, ``0 <= global_rank < world_size`` (STRAT-2)."""

    @property
    @abstractmethod
    def local_rank(self) -> int:
        """This rank on its node, ``>= 0`` (STRAT-2)."""

    @property
    @abstractmethod
    def node_rank(self) -> int:
        """This node's index, ``>= 0`` (STRAT-2)."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """The number of ranks, ``>= 1`` (STRAT-2)."""

    @property
    @abstractmethod
    def is_global_zero(self) -> bool:
        """``True`` iff ``global_rank == 0`` (STRAT-2)."""

    # -- lifecycle (STRAT-3, STRAT-4) -------------------------------------------------------

    @abstractmethod
    def setup_environment(self) -> None:
        """Prepare this rank: set up the accelerator's root device, join the process group and
        call ``precision.setup(root_device)`` (STRAT-3). Raises what those raise."""

    @abstractmethod
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Move ``module`` to :attr:`root_device`, convert it with the precision and wrap it as
        the strategy needs (STRAT-5). The returned module is the one to train; it computes the
        same function as ``module``."""

    @abstractmethod
    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Prepare ``optimizer`` (whose parameters belong to a module already passed to
        :meth:`setup_module`) and return the optimizer to step (STRAT-5)."""

    @abstractmethod
    def teardown(self) -> None:
        """Leave the process group, release devices, tear down the components.

        **Must** be idempotent, and the strategy **must** support :meth:`setup_environment`
        again afterwards (STRAT-4).
        """

    # -- training (STRAT-6 ... STRAT-11) ---------------------------------------------------

    @abstractmethod
    def module_init_context(self) -> AbstractContextManager[None]:
        """A context for building modules: the precision's init context, plus whatever the
        strategy needs (STRAT-6)."""

    @abstractmethod
    def forward_context(self) -> AbstractContextManager[None]:
        """The context for the forward pass: the precision's forward context (STRAT-6)."""

    @abstractmethod
    def batch_to_device(self, batch: _T) -> _T:
        """``batch`` with every tensor moved to :attr:`root_device` and converted by the
        precision's ``convert_input``, in the same nested structure (STRAT-7)."""

    @abstractmethod
    def process_dataloader(self, dataloader: DataLoader[_T]) -> DataLoader[_T]:
        """A dataloader that gives this rank its share of the data.

        Across ranks the shares **must** be disjoint and together cover every sample of the
        dataset (padding to equal length allowed) (STRAT-8).
        """

    @abstractmethod
    def backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """Backward from the scalar ``tensor`` through the precision; gradients are
        synchronised across ranks as the strategy requires (STRAT-9)."""

    @abstractmethod
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step ``optimizer`` through the precision; ``True`` if parameters changed (STRAT-10)."""

    @abstractmethod
    def clip_gradients_norm(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
    ) -> torch.Tensor:
        """Unscale gradients (through the precision), clip them to ``max_norm`` and return
        the total norm before clipping, computed over the *whole* model across ranks (the
        global norm) (STRAT-11)."""

    # -- collectives (STRAT-12 ... STRAT-14) ------------------------------------------------

    @abstractmethod
    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """As :meth:`trainspec.Collective.all_reduce`, with the same default (STRAT-12)."""

    @abstractmethod
    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """As :meth:`trainspec.Collective.all_gather` (STRAT-12)."""

    @abstractmethod
    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """As :meth:`trainspec.Collective.broadcast` (STRAT-12)."""

    @abstractmethod
    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """As :meth:`trainspec.Collective.broadcast_object` (STRAT-12)."""

    @abstractmethod
    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """As :meth:`trainspec.Collective.barrier` (STRAT-12)."""

    @abstractmethod
    def reduce_boolean_decision(self, decision: bool, *, all: bool = True) -> bool:
        """``True`` iff every rank decided ``True`` (``all=True``) or at least one did
        (``all=False``); the same answer on every rank (STRAT-13)."""

    # -- checkpoints (STRAT-14 ... STRAT-17) ------------------------------------------------

    @abstractmethod
    def module_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The state dict of the module returned by :meth:`setup_module`, with keys of the
        *unwrapped* module (no ``module.`` or other wrapper prefix); every rank calls it.
        Under the full checkpoint layout global rank zero's values are complete tensors;
        under the sharded layout they **may** be sharded tensors (``DTensor``) (STRAT-14)."""

    @abstractmethod
    def load_module_state_dict(
        self,
        module: torch.nn.Module,
        state_dict: Mapping[str, torch.Tensor],
        strict: bool = True,
    ) -> None:
        """Load unwrapped-key ``state_dict`` into the set-up ``module`` (STRAT-14): complete
        tensors, or what this strategy's own :meth:`module_state_dict` and
        :meth:`load_checkpoint` return. With ``strict``, missing or unexpected keys raise
        :class:`~trainspec.ConfigurationError`."""

    @abstractmethod
    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> StateDict:
        """The full optimizer state, as loadable by :meth:`load_optimizer_state_dict` on any
        strategy (STRAT-15)."""

    @abstractmethod
    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        """Restore what :meth:`optimizer_state_dict` returned (STRAT-15)."""

    @abstractmethod
    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Every rank calls it. Full checkpoint layout: :attr:`checkpoint_io` saves on global
        rank zero only; sharded layout: the :class:`~trainspec.DistributedCheckpointIO` saves
        every rank's part. Every rank returns only after the checkpoint is complete at
        ``path``; a failure on any rank raises on every rank (STRAT-16)."""

    @abstractmethod
    def load_checkpoint(self, path: PathLike) -> Checkpoint:
        """Load through :attr:`checkpoint_io` onto :attr:`root_device`, on every rank
        (STRAT-17)."""

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Remove once (full layout: on global rank zero; sharded layout: the distributed
        checkpoint IO's collective removal); every rank returns after removal (STRAT-17)."""
