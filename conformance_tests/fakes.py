"""Small public stand-ins the kit uses to drive the protocol under test.

:class:`StaticEnvironment` is a :class:`trainspec.ClusterEnvironment` whose description is
given as constructor arguments instead of read from a scheduler's variables.
:class:`SingleProcessEnvironment` is the one the collective checks pass to
``Collective.setup``: rank 0 of a world of one, rendezvous on ``127.0.0.1`` at a free port.
A distributed harness builds one :class:`StaticEnvironment` per rank. Both conform to the
cluster-environment checks themselves.
"""

from __future__ import annotations

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError

__all__ = ["SingleProcessEnvironment", "StaticEnvironment", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the operating system's pick).

    Another process may take it before it is used; callers that need certainty retry. The
    one implementation is the reference environments' ``find_free_port``: an address that is
    not local raises :class:`~trainspec.ConfigurationError` naming it.
    """
    from trainspec.reference.cluster_environments._variables import find_free_port

    return find_free_port(host, owner="free_port")


class StaticEnvironment(ClusterEnvironment):
    """A cluster environment described by its constructor arguments.

    The constructor stores what it is given without judging it; :meth:`validate` raises
    :class:`~trainspec.ConfigurationError` for an inconsistent description (ENV-5) and the
    properties return the stored values unchanged. ``main_port=None`` picks a free port on
    ``main_address`` once, at construction. :meth:`detect` is always ``True``: a static
    description applies wherever it is used. :meth:`teardown` changes nothing (there is
    nothing process-wide to undo) and is idempotent (ENV-6).
    """

    def __init__(
        self,
        *,
        world_size: int = 1,
        global_rank: int = 0,
        local_rank: int | None = None,
        node_rank: int = 0,
        main_address: str = "127.0.0.1",
        main_port: int | None = None,
        creates_processes_externally: bool = False,
    ) -> None:
        """``local_rank=None`` means ``global_rank`` (one node); ``main_port=None`` means a
        free port of ``main_address``, chosen now."""
        self._world_size = world_size
        self._global_rank = global_rank
        self._local_rank = global_rank if local_rank is None else local_rank
        self._node_rank = node_rank
        self._main_address = main_address
        self._main_port = free_port(main_address) if main_port is None else main_port
        self._external = creates_processes_externally

    def detect(self) -> bool:
        """Always ``True``; never raises (ENV-1)."""
        return True

    @property
    def creates_processes_externally(self) -> bool:
        """As given to the constructor (ENV-2)."""
        return self._external

    @property
    def main_address(self) -> str:
        """As given to the constructor (ENV-3)."""
        return self._main_address

    @property
    def main_port(self) -> int:
        """As given to the constructor, or the free port picked then (ENV-3)."""
        return self._main_port

    @property
    def world_size(self) -> int:
        """As given to the constructor (ENV-4)."""
        return self._world_size

    @property
    def global_rank(self) -> int:
        """As given to the constructor (ENV-4)."""
        return self._global_rank

    @property
    def local_rank(self) -> int:
        """As given to the constructor (ENV-4)."""
        return self._local_rank

    @property
    def node_rank(self) -> int:
        """As given to the constructor (ENV-4)."""
        return self._node_rank

    def validate(self) -> None:
        """Raise :class:`~trainspec.ConfigurationError` naming the argument and the allowed
        values when the description is inconsistent (ENV-5)."""
        _require_int("world_size", self._world_size, minimum=1)
        _require_int("global_rank", self._global_rank, minimum=0)
        _require_int("local_rank", self._local_rank, minimum=0)
        _require_int("node_rank", self._node_rank, minimum=0)
        if self._global_rank >= self._world_size:
            raise ConfigurationError(
                f"global_rank must be in [0, world_size={self._world_size}); "
                f"got {self._global_rank}."
            )
        if self._local_rank > self._global_rank:
            raise ConfigurationError(
                f"local_rank must be in [0, global_rank={self._global_rank}]; "
                f"got {self._local_rank}."
            )
        if not isinstance(self._main_address, str) or not self._main_address.strip():
            raise ConfigurationError(
                f"main_address must be a non-empty host name or IP address; "
                f"got {self._main_address!r}."
            )
        _require_int("main_port", self._main_port, minimum=1, maximum=65535)

    def teardown(self) -> None:
        """Nothing to undo; idempotent (ENV-6)."""


class SingleProcessEnvironment(StaticEnvironment):
    """Rank 0 of a world of one on ``127.0.0.1``, at ``main_port`` or a free port."""

    def __init__(self, *, main_port: int | None = None) -> None:
        super().__init__(main_port=main_port)


def _require_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    upper = "" if maximum is None else f" and <= {maximum}"
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        raise ConfigurationError(f"{name} must be an int >= {minimum}{upper}; got {value!r}.")
