"""Optional strategy capabilities, each a small protocol of its own.

The core :class:`~trainspec.Strategy` never grows: an ability not every strategy has is a
separate protocol here. A trainer checks ``isinstance(strategy, BackwardSyncControl)`` and
falls back when it is absent; the conformance kit checks each capability a strategy claims.

Clauses SYNC-1, SHARD-1, STEP-1 in docs/spec.md.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import torch

__all__ = ["BackwardSyncControl", "ShardedModuleContext", "StepBoundary"]


@runtime_checkable
class BackwardSyncControl(Protocol):
    """Skip gradient synchronisation for some backward passes (gradient accumulation)."""

    @abstractmethod
    def no_backward_sync(
        self, module: torch.nn.Module, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """Within the context, ``backward`` on ``module`` (a module from ``setup_module``)
        **must not** synchronise gradients across ranks when ``enabled``; the next backward
        outside the context synchronises the accumulated gradients, so that accumulating K
        micro-batches equals one step on their union (SYNC-1). With ``enabled=False`` it is a
        no-op."""


@runtime_checkable
class ShardedModuleContext(Protocol):
    """Build modules directly in sharded form, without materialising them whole."""

    @abstractmethod
    def sharded_module_context(self) -> AbstractContextManager[None]:
        """A context under which created modules are sharded as the strategy needs; a module
        built inside it and passed to ``setup_module`` trains like one built outside
        (SHARD-1)."""


@runtime_checkable
class StepBoundary(Protocol):
    """Lazy-execution devices (XLA) need an explicit boundary between steps."""

    @abstractmethod
    def mark_step(self) -> None:
        """Materialise the pending lazy computation; after it returns, tensors computed so far
        hold their values. Safe to call at any time after setup (STEP-1)."""
