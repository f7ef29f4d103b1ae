"""The Collective protocol: rank, world size and collective operations.

The contract, lifecycle first, is the docstring of :class:`Collective`
(``help(trainspec.Collective)``).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    from datetime import timedelta

    import torch

    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.types import ReduceOp

__all__ = ["Collective"]

_T = TypeVar("_T")


@runtime_checkable
class Collective(Protocol):
    """Collective communication between the ranks of one run.

    Lifecycle (on every rank)::

        1) setup(environment, device)     -- joins the group; collective calls are now allowed
        2) any collective, in the same order on every rank
        3) teardown()                     -- leaves the group; idempotent; 1) may run again

    A Collective connects the ranks of one training run. The strategy owns it and exposes the
    common operations as its own methods; a trainer never needs the Collective directly.

    Common rules for every operation:

    - every rank **must** call the same operations in the same order with tensors of the same
      dtype and (unless stated) shape; input tensors **must not** be modified; results are new
      tensors on the input's device (COLL-1);
    - ``timeout=None`` means the collective's default timeout (set at construction). If an
      operation does not complete in time it **must** raise
      :class:`~trainspec.CollectiveTimeoutError` instead of hanging, and the group is torn down
      (a later call raises :class:`~trainspec.LifecycleError` until ``setup`` runs again) (COLL-2);
    - a rank that dies during an operation makes the others raise a
      :class:`~trainspec.CollectiveError` (``PeerFailureError`` or ``CollectiveTimeoutError``)
      (COLL-3).

    Object collectives pickle their payload: they are for trusted ranks of one job only.

    Clauses COLL-1 ... COLL-16 in docs/spec.md.
    """

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's global rank, ``0 <= rank < world_size`` (COLL-4)."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """The number of ranks, ``>= 1`` (COLL-4)."""

    @property
    @abstractmethod
    def is_initialized(self) -> bool:
        """Whether :meth:`setup` has run and :meth:`teardown` has not (COLL-5)."""

    @abstractmethod
    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        """Join the group described by ``environment``, communicating on ``device``'s type.

        After it returns :attr:`rank` and :attr:`world_size` equal the environment's
        ``global_rank`` and ``world_size`` (COLL-5). Calling a collective before ``setup``
        **must** raise :class:`~trainspec.LifecycleError`.
        """

    @abstractmethod
    def teardown(self) -> None:
        """Leave the group. **Must** be idempotent; ``setup`` may run again (COLL-5)."""

    @abstractmethod
    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """Reduce ``tensor`` element-wise across ranks; every rank gets the result (COLL-6).

        ``"mean"`` is the sum divided by ``world_size`` on every implementation (computed as
        sum then divide where the backend lacks an average); for integer tensors the mean is a
        floating-point tensor. An unknown ``reduce_op`` **must** raise
        :class:`~trainspec.ConfigurationError` naming the valid ops (COLL-7).
        """

    @abstractmethod
    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """Every rank's ``tensor``, as a list indexed by rank (COLL-8)."""

    @abstractmethod
    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """Rank ``src``'s ``tensor`` on every rank (COLL-9). ``src`` outside
        ``[0, world_size)`` **must** raise :class:`~trainspec.ConfigurationError`."""

    @abstractmethod
    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """Rank ``src``'s picklable ``obj`` on every rank (a copy, COLL-10)."""

    @abstractmethod
    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        """Every rank's picklable ``obj``, as a list indexed by rank (COLL-11)."""

    @abstractmethod
    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        """Every rank's ``tensor`` collected on rank ``dst`` as a list indexed by rank;
        ``None`` on the other ranks (COLL-12)."""

    @abstractmethod
    def scatter(
        self,
        tensors: list[torch.Tensor] | None,
        src: int = 0,
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """Rank ``src`` passes ``world_size`` tensors of one shape; rank *i* receives
        ``tensors[i]``. Other ranks pass ``None`` (COLL-13). A list of the wrong length on
        ``src`` **must** raise :class:`~trainspec.ConfigurationError`."""

    @abstractmethod
    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """Each rank passes ``world_size`` tensors; rank *i* receives the reduction over ranks
        of their ``tensors[i]`` (COLL-14)."""

    @abstractmethod
    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """Each rank passes ``world_size`` tensors; rank *i* receives, at index *j*, rank
        *j*'s ``tensors[i]`` (COLL-15)."""

    @abstractmethod
    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """Return only after every rank has entered the barrier (COLL-16)."""
