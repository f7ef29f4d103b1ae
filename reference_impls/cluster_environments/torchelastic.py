"""``TorchElasticEnvironment``: ranks started by ``torchrun`` (TorchElastic).

``torchrun`` starts every rank and describes it with these variables, all required:

=======================  ==========================================
variable                 meaning
=======================  ==========================================
``TORCHELASTIC_RUN_ID``  the run's id; its presence is what :meth:`detect` looks for
``RANK``                 global rank
``WORLD_SIZE``           number of ranks
``LOCAL_RANK``           rank on this node
``GROUP_RANK``           index of this node (the agent's group rank)
``MASTER_ADDR``          rendezvous host
``MASTER_PORT``          rendezvous port
=======================  ==========================================
"""

from __future__ import annotations

import os
from typing import Final

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError
from trainspec.reference.cluster_environments._variables import (
    check_index,
    read_address,
    read_int,
    read_port,
)

__all__ = ["TorchElasticEnvironment"]

_NAME: Final = "TorchElasticEnvironment"

REQUIRED_VARIABLES: Final = (
    "TORCHELASTIC_RUN_ID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""Every variable this environment reads; :meth:`TorchElasticEnvironment.detect` needs all."""


class TorchElasticEnvironment(ClusterEnvironment):
    """The ranks ``torchrun`` started (ENV-1 ... ENV-6).

    :attr:`creates_processes_externally` is ``True``: ``torchrun`` already started every
    rank, so a strategy needs no launcher. Properties read the variables when called; a
    missing or malformed one raises :class:`~trainspec.ConfigurationError` naming it.
    Nothing process-wide is changed, so :meth:`teardown` has nothing to undo.
    """

    def __repr__(self) -> str:
        return f"{_NAME}()"

    def detect(self) -> bool:
        """``True`` when every variable ``torchrun`` sets is present (ENV-1)."""
        return all(name in os.environ for name in REQUIRED_VARIABLES)

    @property
    def creates_processes_externally(self) -> bool:
        """``True``: ``torchrun`` started the ranks (ENV-2)."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR`` (ENV-3)."""
        address = read_address("MASTER_ADDR", _NAME)
        if address is None:
            raise _missing("MASTER_ADDR", "a host name or IP address")
        return address

    @property
    def main_port(self) -> int:
        """``MASTER_PORT`` (ENV-3)."""
        port = read_port("MASTER_PORT", _NAME)
        if port is None:
            raise _missing("MASTER_PORT", "an integer in [1, 65535]")
        return port

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE`` (ENV-4)."""
        return read_int("WORLD_SIZE", minimum=1, owner=_NAME)

    @property
    def global_rank(self) -> int:
        """``RANK``, in ``[0, WORLD_SIZE)`` (ENV-4)."""
        rank = read_int("RANK", owner=_NAME)
        return check_index(rank, "RANK", self.world_size, "WORLD_SIZE", owner=_NAME)

    @property
    def local_rank(self) -> int:
        """``LOCAL_RANK``, in ``[0, RANK]`` (ENV-4)."""
        rank = self.global_rank
        local = read_int("LOCAL_RANK", owner=_NAME)
        return check_index(local, "LOCAL_RANK", rank, "RANK", owner=_NAME, inclusive=True)

    @property
    def node_rank(self) -> int:
        """``GROUP_RANK`` (ENV-4)."""
        return read_int("GROUP_RANK", owner=_NAME)

    def validate(self) -> None:
        """Read every variable; the first missing or inconsistent one raises
        :class:`~trainspec.ConfigurationError` naming it (ENV-5)."""
        if not os.environ.get("TORCHELASTIC_RUN_ID"):
            raise _missing("TORCHELASTIC_RUN_ID", "the run id torchrun sets")
        _ = (self.main_address, self.main_port, self.local_rank, self.node_rank)

    def teardown(self) -> None:
        """Nothing to undo (ENV-6)."""


def _missing(name: str, allowed: str) -> ConfigurationError:
    return ConfigurationError(
        f"{_NAME}: environment variable {name} must be set to {allowed} (torchrun sets it); "
        "it is not set. Start the script with torchrun, or use LocalEnvironment."
    )
