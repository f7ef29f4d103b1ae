"""``RankContext``: what a check running in one rank of a world knows, and the harness's
own channel between the ranks.

A check run by :meth:`World.run <trainspec.conformance.distributed.World.run>` finds the
context in its target's options under :data:`RANK_CONTEXT_OPTION`. The channel
(:meth:`RankContext.exchange`) goes through the harness's parent process, not through the
implementation under test: a check uses it to compare what each rank saw, or to wait for the
other ranks, without trusting the collective it is checking.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Final, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainspec.conformance.fakes import StaticEnvironment

__all__ = ["RANK_CONTEXT_OPTION", "RankContext"]

_T = TypeVar("_T")

RANK_CONTEXT_OPTION: Final = "rank_context"
"""The target option under which a rank's :class:`RankContext` is passed to a check."""


class RankContext:
    """One rank's view of the world running the current check.

    Read-only description (:attr:`rank`, :attr:`world_size`, :attr:`local_rank`,
    :attr:`device`, :attr:`backend`, :attr:`main_address`, :attr:`main_port`,
    :attr:`shared_dir`) plus :meth:`exchange`. ``main_port`` is fresh for every check (also
    set as ``MASTER_PORT``), so a check's process group never meets the remains of the
    previous one. ``shared_dir`` is an empty directory that every rank of this check sees and
    that the harness removes afterwards.

    Not thread-safe: call :meth:`exchange` from the thread running the check.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        local_rank: int,
        device: str,
        backend: str,
        main_address: str,
        main_port: int,
        shared_dir: str,
        check: str,
        channel: Callable[[bytes], list[bytes]],
    ) -> None:
        """``channel`` sends this rank's pickled payload and returns every rank's, indexed by
        rank; the harness provides it."""
        self._rank = rank
        self._world_size = world_size
        self._local_rank = local_rank
        self._device = device
        self._backend = backend
        self._main_address = main_address
        self._main_port = main_port
        self._shared_dir = shared_dir
        self._check = check
        self._channel = channel

    def __repr__(self) -> str:
        return (
            f"RankContext(rank={self._rank}, world_size={self._world_size}, "
            f"device={self._device!r}, check={self._check!r})"
        )

    @property
    def rank(self) -> int:
        """This rank, ``0 <= rank < world_size`` (the ``RANK`` variable)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks (``WORLD_SIZE``)."""
        return self._world_size

    @property
    def local_rank(self) -> int:
        """This rank on its machine (``LOCAL_RANK``)."""
        return self._local_rank

    @property
    def device(self) -> str:
        """This rank's device: ``"cpu"``, or ``"<type>:<local_rank>"`` for accelerators."""
        return self._device

    @property
    def backend(self) -> str:
        """The c10d backend the world was started for (``"gloo"``, ``"nccl"``, ...)."""
        return self._backend

    @property
    def main_address(self) -> str:
        """The rendezvous host (``MASTER_ADDR``)."""
        return self._main_address

    @property
    def main_port(self) -> int:
        """This check's rendezvous port (``MASTER_PORT``)."""
        return self._main_port

    @property
    def shared_dir(self) -> str:
        """An empty directory, the same for every rank of this check."""
        return self._shared_dir

    @property
    def check(self) -> str:
        """The name of the check being run."""
        return self._check

    def environment(self) -> StaticEnvironment:
        """A fresh :class:`~trainspec.ClusterEnvironment` describing this rank of the world
        (rank, world size, local rank, address and this check's port)."""
        from trainspec.conformance.fakes import StaticEnvironment

        return StaticEnvironment(
            world_size=self._world_size,
            global_rank=self._rank,
            local_rank=self._local_rank,
            main_address=self._main_address,
            main_port=self._main_port,
        )

    def exchange(self, obj: _T) -> list[_T]:
        """Every rank's ``obj``, indexed by rank, through the harness (an all-gather that does
        not use the implementation under test).

        Every rank **must** call it the same number of times during a check; it returns once
        every rank has called it. When another rank finishes the check or dies without
        calling it, it raises :class:`~trainspec.PeerFailureError`. ``obj`` **must** be
        picklable (:class:`~trainspec.ConfigurationError` otherwise); it is unpickled on the
        other ranks of the same job, which trust each other.
        """
        from trainspec.errors import ConfigurationError

        try:
            payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:
            raise ConfigurationError(
                f"RankContext.exchange: the object must be picklable; {type(obj).__name__} is "
                f"not ({type(error).__name__}: {error})."
            ) from error
        return [cast("_T", pickle.loads(item)) for item in self._channel(payload)]

    def barrier(self) -> None:
        """Return once every rank has called it (an :meth:`exchange` of nothing)."""
        self.exchange(None)
