"""``LocalEnvironment``: the ranks of one machine, described by trainspec's own launchers.

The reference launchers (:class:`~trainspec.reference.launchers.SubprocessScriptLauncher`,
:class:`~trainspec.reference.launchers.MultiprocessingLauncher`) describe each rank they start
with the variables below; without them the process is the only rank of its run.

=================  ==========================================  ===========================
variable           meaning                                     when unset
=================  ==========================================  ===========================
``RANK``           global rank                                 ``0``
``WORLD_SIZE``     number of ranks                             ``1``
``LOCAL_RANK``     rank on this machine                        ``RANK``
``NODE_RANK``      index of this machine                       ``0``
``MASTER_ADDR``    rendezvous host                             ``main_address`` argument
``MASTER_PORT``    rendezvous port                             ``main_port`` argument, else
                                                               a free port picked once
=================  ==========================================  ===========================
"""

from __future__ import annotations

from typing import Final

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError
from trainspec.reference.cluster_environments._variables import (
    check_address,
    check_index,
    check_port,
    find_free_port,
    read_address,
    read_int,
    read_port,
)

__all__ = ["LocalEnvironment"]

_NAME: Final = "LocalEnvironment"


class LocalEnvironment(ClusterEnvironment):
    """This machine's ranks, as trainspec's launchers describe them (ENV-1 ... ENV-6).

    The variables (see the module docstring) take precedence over the constructor arguments,
    which are the defaults a launcher uses to describe the ranks it starts. Every property
    reads the variables when it is called, so one object built before a launcher runs
    describes each rank correctly afterwards.

    :meth:`detect` is always ``True``: this is the fallback when no scheduler is detected
    (see :func:`~trainspec.reference.cluster_environments.detect_environment`).
    :attr:`creates_processes_externally` is ``False``: a launcher starts the other ranks.

    When neither ``MASTER_PORT`` nor ``main_port`` gives a port, :attr:`main_port` picks a
    free one on first use and keeps it for the life of the object (and of its pickled
    copies). That is only consistent across ranks when the launcher passes the port on, which
    the reference launchers do; :meth:`validate` refuses a run of several ranks without an
    agreed port. Nothing process-wide is changed, so :meth:`teardown` has nothing to undo.
    """

    def __init__(self, main_address: str = "127.0.0.1", main_port: int | None = None) -> None:
        """``main_address`` **must** be a non-empty host; ``main_port``, when given, an int
        in ``[1, 65535]``; otherwise :class:`~trainspec.ConfigurationError`."""
        self._main_address = check_address(main_address, "main_address", _NAME)
        self._main_port = None if main_port is None else check_port(main_port, "main_port", _NAME)
        self._picked_port: int | None = None

    def __repr__(self) -> str:
        return f"{_NAME}(main_address={self._main_address!r}, main_port={self._main_port!r})"

    def detect(self) -> bool:
        """Always ``True``: any process can run as the ranks of one machine (ENV-1)."""
        return True

    @property
    def creates_processes_externally(self) -> bool:
        """``False``: a trainspec launcher starts the ranks (ENV-2)."""
        return False

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the ``main_address`` argument (ENV-3)."""
        return read_address("MASTER_ADDR", _NAME) or self._main_address

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else the ``main_port`` argument, else a free port picked once
        on :attr:`main_address` (ENV-3).

        Picking needs ``main_address`` to be an address of this machine; one that does not
        resolve or is not local raises :class:`~trainspec.ConfigurationError`.
        """
        port = read_port("MASTER_PORT", _NAME)
        if port is not None:
            return port
        if self._main_port is not None:
            return self._main_port
        if self._picked_port is None:
            self._picked_port = find_free_port(self._main_address, owner=_NAME)
        return self._picked_port

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE``, else ``1`` (ENV-4)."""
        return read_int("WORLD_SIZE", 1, minimum=1, owner=_NAME)

    @property
    def global_rank(self) -> int:
        """``RANK``, else ``0``; ``RANK >= WORLD_SIZE`` raises
        :class:`~trainspec.ConfigurationError` (ENV-4, ENV-5)."""
        rank = read_int("RANK", 0, owner=_NAME)
        return check_index(rank, "RANK", self.world_size, "WORLD_SIZE", owner=_NAME)

    @property
    def local_rank(self) -> int:
        """``LOCAL_RANK``, else :attr:`global_rank`; it may not exceed the global rank
        (ENV-4, ENV-5)."""
        rank = self.global_rank
        local = read_int("LOCAL_RANK", rank, owner=_NAME)
        return check_index(local, "LOCAL_RANK", rank, "RANK", owner=_NAME, inclusive=True)

    @property
    def node_rank(self) -> int:
        """``NODE_RANK``, else ``0`` (ENV-4)."""
        return read_int("NODE_RANK", 0, owner=_NAME)

    def validate(self) -> None:
        """Check every variable (ENV-5); with ``WORLD_SIZE > 1``, a port must be agreed:
        ``MASTER_PORT`` or the ``main_port`` argument."""
        _ = (self.main_address, self.local_rank, self.node_rank)  # each reader checks
        if read_port("MASTER_PORT", _NAME) is None and self._main_port is None:
            world_size = self.world_size
            if world_size > 1:
                raise ConfigurationError(
                    f"{_NAME}: a run of WORLD_SIZE={world_size} ranks needs an agreed "
                    "rendezvous port: set MASTER_PORT (an integer in [1, 65535]) or pass "
                    "main_port=; without one every rank would pick its own."
                )

    def teardown(self) -> None:
        """Nothing to undo: this environment changes nothing process-wide (ENV-6)."""

    @staticmethod
    def variables_for(
        *, rank: int, local_rank: int, world_size: int, node_rank: int, address: str, port: int
    ) -> dict[str, str]:
        """The variables that describe one rank to a :class:`LocalEnvironment`; what the
        reference launchers set for each rank they start."""
        return {
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(world_size),
            "NODE_RANK": str(node_rank),
            "MASTER_ADDR": address,
            "MASTER_PORT": str(port),
        }
