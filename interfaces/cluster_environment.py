"""The ClusterEnvironment protocol: where ranks come from.

The contract, lifecycle first, is the docstring of :class:`ClusterEnvironment`
(``help(trainspec.ClusterEnvironment)``).
"""

from __future__ import annotations

from abc import abstractmethod

from typing_extensions import Protocol, runtime_checkable

__all__ = ["ClusterEnvironment"]


@runtime_checkable
class ClusterEnvironment(Protocol):
    """The description of one run: rendezvous address and this process's ranks.

    Lifecycle::

        1) (registry/connector, main process) detect()  -- is this the environment we run in?
        2) (strategy, every rank) the properties below, read any number of times
        3) (strategy) teardown()

    An environment reads the description of the run (usually environment variables written by a
    scheduler or launcher) and reports the rendezvous address and this process's place in the run.

    Clauses ENV-1 ... ENV-6 in docs/spec.md.
    """

    @abstractmethod
    def detect(self) -> bool:
        """Whether the current process runs in this environment (for example, whether the
        scheduler's variables are set). **Must not** raise or change anything (ENV-1)."""

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """``True`` when something outside trainspec (torchrun, srun) already started every
        rank, so no launcher must start more (ENV-2)."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Host name or IP address of the rendezvous (rank 0); non-empty (ENV-3)."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """TCP port of the rendezvous, ``1 <= port <= 65535`` (ENV-3)."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """Total number of ranks, ``>= 1`` (ENV-4)."""

    @property
    @abstractmethod
    def global_rank(self) -> int:
        """This process's rank in the run, ``0 <= global_rank < world_size`` (ENV-4)."""

    @property
    @abstractmethod
    def local_rank(self) -> int:
        """This process's rank on its node, ``0 <= local_rank <= global_rank`` (ENV-4)."""

    @property
    @abstractmethod
    def node_rank(self) -> int:
        """The index of this node, ``>= 0`` (ENV-4)."""

    @abstractmethod
    def validate(self) -> None:
        """Check that the description is complete and consistent.

        **Must** raise :class:`~trainspec.ConfigurationError` naming the variable and the
        allowed values for inconsistent or missing values (rank >= world size, a missing or
        malformed address or port, non-integer ranks) (ENV-5). The properties may raise the
        same error.
        """

    @abstractmethod
    def teardown(self) -> None:
        """Undo any process-wide change this environment made; idempotent (ENV-6)."""
