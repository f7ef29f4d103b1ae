"""Sharded checkpoints: the DistributedCheckpointIO protocol and the checkpoint layout.

A strategy has a *checkpoint layout*. Under the **full** layout global rank zero writes one
complete checkpoint through a :class:`~trainspec.CheckpointIO`. Under the **sharded** layout
every rank writes its part through a :class:`DistributedCheckpointIO`, and the parts together
form one checkpoint that loads on any number of ranks (resharding). A strategy declares its
layout through :class:`CheckpointLayoutControl`; one without it has the full layout.

DistributedCheckpointIO lifecycle (every step on every rank of the strategy)::

    1) setup(collective)                 -- by the strategy, after its collective is set up
    2) save_checkpoint(part, path)       -- collective: each rank passes its part; the
                                            checkpoint is committed after every rank wrote,
                                            and every rank returns after the commit
    3) load_checkpoint(path)             -- the complete checkpoint, whatever N wrote it
    4) remove_checkpoint(path)           -- collective, idempotent
    5) teardown()                        -- idempotent; unbinds; 1) may run again

Without 1) (or after 5)) the instance works on one rank as a plain CheckpointIO.

Clauses DCKPT-1 ... DCKPT-7, STRAT-14 ... STRAT-17 in docs/spec.md.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Final, Literal

from typing_extensions import Protocol, runtime_checkable

from trainspec.checkpoint_io import CheckpointIO

if TYPE_CHECKING:
    from trainspec.collective import Collective
    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = [
    "CHECKPOINT_LAYOUTS",
    "CheckpointLayout",
    "CheckpointLayoutControl",
    "DistributedCheckpointIO",
]

CheckpointLayout = Literal["full", "sharded"]
"""``"full"``: global rank zero writes one complete checkpoint through a CheckpointIO.
``"sharded"``: every rank writes its part through a DistributedCheckpointIO."""

CHECKPOINT_LAYOUTS: Final[tuple[CheckpointLayout, ...]] = ("full", "sharded")
"""Every checkpoint layout, in the order of :data:`CheckpointLayout`."""


@runtime_checkable
class CheckpointLayoutControl(Protocol):
    """A strategy capability: the strategy says how it writes checkpoints (LAYOUT-1); the
    layout decides what the strategy's state dicts and checkpoint methods do."""

    @property
    @abstractmethod
    def checkpoint_layout(self) -> CheckpointLayout:
        """``"full"`` or ``"sharded"``; the same on every rank and constant while the strategy
        is set up. Under ``"sharded"`` the strategy's ``checkpoint_io`` **must** be a
        :class:`DistributedCheckpointIO` (LAYOUT-1)."""


@runtime_checkable
class DistributedCheckpointIO(CheckpointIO, Protocol):
    """A CheckpointIO whose checkpoints are written in parts by the ranks of a collective.

    A *part* is the checkpoint one rank passes: its sharded tensors
    (``torch.distributed.tensor.DTensor``) contribute their local shards; every other value
    **must** be the same on every rank (which rank's copy is written is unspecified).
    Everything :class:`~trainspec.CheckpointIO` promises holds on one rank.
    """

    @abstractmethod
    def setup(self, collective: Collective) -> None:
        """Bind to ``collective``'s ranks (every rank calls it, after ``collective.setup``).

        From then on :meth:`save_checkpoint` and :meth:`remove_checkpoint` are collective
        operations. Calling it again with the same collective **must** be harmless; a
        collective the implementation cannot drive **must** raise
        :class:`~trainspec.UnsupportedError` naming what it needs (DCKPT-7).
        """

    @abstractmethod
    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Write this rank's part ``checkpoint`` of the checkpoint at ``path``; every rank calls
        it with the same ``path`` and ``storage_options``.

        **Must**: commit the checkpoint only after every rank has written its part and return
        on every rank only after the commit; be atomic as a whole (a reader sees the previous
        checkpoint or the new complete one, even if a rank is killed mid-save) (DCKPT-2);
        when any rank fails, raise on every rank (the failing rank its own error, the others a
        :class:`~trainspec.CheckpointError` or :class:`~trainspec.CollectiveError`) and leave
        the previous checkpoint intact (DCKPT-6); and, as any CheckpointIO, not modify
        ``checkpoint`` and raise ``TypeError`` for an unsupported ``storage_options`` key.
        """

    @abstractmethod
    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """The complete checkpoint at ``path``: sharded tensors as the complete tensors their
        shards form, placed by ``map_location`` (DCKPT-1), whatever the number of ranks that
        wrote it (DCKPT-5). Need not be collective.

        **Must** be safe by default and raise :class:`~trainspec.CheckpointNotFoundError`,
        :class:`~trainspec.CheckpointCorruptedError` (a part or the metadata missing,
        truncated or of another format) or :class:`~trainspec.UnsafeCheckpointError`, naming
        the path (DCKPT-3).
        """

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Collectively delete the checkpoint at ``path``; every rank returns after the
        removal. Removing a missing path **must not** raise (DCKPT-4)."""

    @abstractmethod
    def teardown(self) -> None:
        """Unbind from the collective and release resources. **Must** be idempotent; the
        instance then works on one rank and **may** be set up again (DCKPT-7)."""
