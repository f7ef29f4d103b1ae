"""``SingleProcessCollective``: the collective of a one-rank run.

Every operation is the identity for world size 1 (``"mean"`` divides by one), but it behaves
like a real collective in everything a caller can observe: the same signatures and defaults
as :class:`trainspec.Collective`, the same argument checks, new result tensors (inputs are
never modified, COLL-1), object payloads copied through pickle, and the same lifecycle.
"""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

import torch

from trainspec.collective import Collective
from trainspec.errors import ConfigurationError
from trainspec.reference.collectives._validation import (
    check_initialized,
    check_rank,
    check_reduce_op,
    check_tensor,
    check_tensor_list,
    check_timeout,
    object_to_bytes,
)

if TYPE_CHECKING:
    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.types import ReduceOp

__all__ = ["SingleProcessCollective"]

_T = TypeVar("_T")

_NAME = "SingleProcessCollective"


class SingleProcessCollective(Collective):
    """The collective for exactly one rank (rank 0 of world size 1).

    Lifecycle as :class:`trainspec.Collective`: operations before :meth:`setup` or after
    :meth:`teardown` raise :class:`~trainspec.LifecycleError`; ``teardown`` is idempotent and
    ``setup`` may run again. Timeouts are validated and accepted; nothing here can block, so
    none is ever reached. :attr:`rank` and :attr:`world_size` are ``0`` and ``1`` at all times.

    Not thread-safe beyond what its stateless operations give for free.
    """

    def __init__(self, *, timeout: timedelta = timedelta(minutes=30)) -> None:
        """``timeout`` is the default for operations called with ``timeout=None``; it
        **must** be a positive ``timedelta``."""
        checked = check_timeout(timeout, f"{_NAME}()")
        if checked is None:
            raise ConfigurationError(
                f"{_NAME}(): timeout must be a positive datetime.timedelta; got None."
            )
        self._timeout = checked
        self._initialized = False
        self._device: torch.device | None = None

    @property
    def timeout(self) -> timedelta:
        """The default timeout of every operation."""
        return self._timeout

    @property
    def rank(self) -> int:
        """Always ``0`` (COLL-4)."""
        return 0

    @property
    def world_size(self) -> int:
        """Always ``1`` (COLL-4)."""
        return 1

    @property
    def is_initialized(self) -> bool:
        """Whether :meth:`setup` has run and :meth:`teardown` has not (COLL-5)."""
        return self._initialized

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        """Join the one-rank "group" (COLL-5).

        Raises :class:`~trainspec.ConfigurationError` when ``environment`` describes more
        than one rank (a multi-process run needs a multi-process collective, such as the
        ``ddp`` strategy's) or ``device`` is not a ``torch.device``. Calling it again while
        set up is harmless.
        """
        if not isinstance(device, torch.device):
            raise ConfigurationError(
                f"{_NAME}.setup(): device must be a torch.device; got {device!r}."
            )
        world_size, global_rank = environment.world_size, environment.global_rank
        if world_size != 1 or global_rank != 0:
            raise ConfigurationError(
                f"{_NAME}.setup(): the cluster environment describes rank {global_rank} of "
                f"world size {world_size}, but this collective has exactly one rank; use a "
                "multi-process strategy (e.g. strategy='ddp') for this run."
            )
        self._device = device
        self._initialized = True

    def teardown(self) -> None:
        """Leave the group; idempotent (COLL-5)."""
        self._initialized = False
        self._device = None

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """A new tensor equal to ``tensor``; ``"mean"`` of an integer or bool tensor is a
        floating-point tensor of the default dtype (COLL-6, COLL-7)."""
        self._check("all_reduce", timeout)
        op = check_reduce_op(reduce_op, "all_reduce")
        return _reduce_one(check_tensor(tensor, "all_reduce"), op)

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """``[copy of tensor]`` (COLL-8)."""
        self._check("all_gather", timeout)
        return [check_tensor(tensor, "all_gather").clone()]

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """A copy of ``tensor``; ``src`` must be ``0`` (COLL-9)."""
        self._check("broadcast", timeout)
        check_rank(src, 1, "broadcast")
        return check_tensor(tensor, "broadcast").clone()

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """A copy of ``obj`` made through pickle, as a real broadcast would deliver it; an
        unpicklable ``obj`` raises :class:`~trainspec.ConfigurationError` (COLL-10)."""
        self._check("broadcast_object", timeout)
        check_rank(src, 1, "broadcast_object")
        return _pickle_copy(obj, "broadcast_object")

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        """``[copy of obj]`` (COLL-11)."""
        self._check("all_gather_object", timeout)
        return [_pickle_copy(obj, "all_gather_object")]

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        """``[copy of tensor]``; ``dst`` must be ``0`` (COLL-12)."""
        self._check("gather", timeout)
        check_rank(dst, 1, "gather", role="dst")
        return [check_tensor(tensor, "gather").clone()]

    def scatter(
        self,
        tensors: list[torch.Tensor] | None,
        src: int = 0,
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """A copy of ``tensors[0]``; this rank is always ``src``, so ``tensors`` must be a
        list of exactly one tensor (COLL-13)."""
        self._check("scatter", timeout)
        check_rank(src, 1, "scatter")
        return check_tensor_list(tensors, 1, "scatter")[0].clone()

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """The reduction of ``tensors[0]`` over one rank, as :meth:`all_reduce` (COLL-14)."""
        self._check("reduce_scatter", timeout)
        op = check_reduce_op(reduce_op, "reduce_scatter")
        return _reduce_one(check_tensor_list(tensors, 1, "reduce_scatter")[0], op)

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """``[copy of tensors[0]]`` (COLL-15)."""
        self._check("all_to_all", timeout)
        return [tensor.clone() for tensor in check_tensor_list(tensors, 1, "all_to_all")]

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """Returns at once: the only rank has arrived (COLL-16)."""
        self._check("barrier", timeout)

    def _check(self, operation: str, timeout: timedelta | None) -> None:
        check_initialized(self._initialized, _NAME, operation)
        if timeout is not None:
            check_timeout(timeout, operation)


def _reduce_one(tensor: torch.Tensor, reduce_op: ReduceOp) -> torch.Tensor:
    if reduce_op == "mean":
        # Sum over one rank divided by the world size, with true division: integer and bool
        # tensors become the default floating dtype, as on a multi-rank collective.
        return torch.true_divide(tensor, 1)
    return tensor.clone()


def _pickle_copy(obj: _T, operation: str) -> _T:
    payload = object_to_bytes(obj, operation)
    copy: _T = pickle.loads(payload)
    return copy
