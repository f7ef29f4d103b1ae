"""``XLAEnvironment``: ranks started by ``torch_xla``'s ``xmp.spawn`` (PJRT).

The ranks come from the XLA runtime (``torch_xla.runtime``), imported on first use; the
rendezvous address and port are ``MASTER_ADDR`` and ``MASTER_PORT``, which
:class:`~trainspec.reference.launchers.XLALauncher` sets for the CPU (gloo) group the XLA
strategy uses for its own collectives. XLA's runtime does its own device rendezvous.

Not verified here: the multi-process path needs XLA devices (TPU); see scripts/xla_lane.sh.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Final

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError, DeviceUnavailableError
from trainspec.reference.cluster_environments._variables import (
    find_free_port,
    read_address,
    read_port,
)

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["XLAEnvironment"]

_NAME: Final = "XLAEnvironment"


def _runtime() -> ModuleType:
    try:
        return importlib.import_module("torch_xla.runtime")
    except Exception as error:
        raise DeviceUnavailableError(
            f"{_NAME}: torch_xla is not installed or fails to import ({error}); install "
            "torch_xla matching your torch version to run XLA ranks."
        ) from error


class XLAEnvironment(ClusterEnvironment):
    """The ranks of an ``xmp.spawn`` run (ENV-1 ... ENV-6).

    :meth:`detect` only reads variables (``PJRT_LOCAL_PROCESS_COUNT``, set by torch_xla in
    spawned ranks) and never imports torch_xla. The rank properties ask the XLA runtime and
    **must not** be read in the launching process before ``xmp.spawn``: that would
    initialise the runtime, which ``xmp.spawn`` refuses. :attr:`creates_processes_externally`
    is ``False``: the XLA strategy's launcher starts the ranks.
    """

    def __init__(self) -> None:
        self._picked_port: int | None = None

    def __repr__(self) -> str:
        return f"{_NAME}()"

    def detect(self) -> bool:
        """``True`` inside a rank torch_xla spawned (ENV-1)."""
        return "PJRT_LOCAL_PROCESS_COUNT" in os.environ

    @property
    def creates_processes_externally(self) -> bool:
        """``False``: :class:`~trainspec.reference.launchers.XLALauncher` starts them (ENV-2)."""
        return False

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else ``127.0.0.1`` (ENV-3)."""
        return read_address("MASTER_ADDR", _NAME) or "127.0.0.1"

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else a free port picked once (one rank only) (ENV-3)."""
        port = read_port("MASTER_PORT", _NAME)
        if port is not None:
            return port
        if self._picked_port is None:
            self._picked_port = find_free_port()
        return self._picked_port

    @property
    def world_size(self) -> int:
        """``torch_xla.runtime.world_size()`` (ENV-4)."""
        return int(_runtime().world_size())

    @property
    def global_rank(self) -> int:
        """``torch_xla.runtime.global_ordinal()`` (ENV-4)."""
        return int(_runtime().global_ordinal())

    @property
    def local_rank(self) -> int:
        """``torch_xla.runtime.local_ordinal()`` (ENV-4)."""
        return int(_runtime().local_ordinal())

    @property
    def node_rank(self) -> int:
        """``torch_xla.runtime.host_index()`` where the runtime has it, else ``0`` (ENV-4)."""
        host_index = getattr(_runtime(), "host_index", None)
        value = host_index() if callable(host_index) else 0
        return value if isinstance(value, int) else 0

    def validate(self) -> None:
        """Check the runtime's ranks are consistent and, with several ranks, that
        ``MASTER_PORT`` is set (ENV-5)."""
        world_size, rank = self.world_size, self.global_rank
        if not 0 <= rank < world_size:
            raise ConfigurationError(
                f"{_NAME}: the XLA runtime reports global ordinal {rank} of world size "
                f"{world_size}; it must be in [0, {world_size})."
            )
        if world_size > 1 and read_port("MASTER_PORT", _NAME) is None:
            raise ConfigurationError(
                f"{_NAME}: {world_size} XLA ranks need MASTER_PORT (an integer in "
                "[1, 65535]) for their CPU group; start them with XLALauncher."
            )

    def teardown(self) -> None:
        """Nothing to undo (ENV-6)."""
