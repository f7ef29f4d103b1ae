"""Cheap deep snapshots of checkpoints for background saving (ACKPT-1).

A snapshot copies the container structure and every tensor's *storage* once: views that
shared a storage share the copy (with the same offsets and strides), a tensor that appears
twice is copied once, and the cost is one ``memcpy`` per storage. Values of other types are
copied with :func:`copy.deepcopy` (immutable ones are returned as they are).

A :class:`BufferPool` lets a snapshot copy into the storages of an earlier, already written
snapshot instead of allocating: a fresh allocation costs a page fault per 4 KiB on first
touch, which makes ``clone()`` several times slower than ``copy_()`` into warm memory.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, cast

import torch

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

__all__ = ["BufferPool", "snapshot"]

_ATOMIC = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


_PoolKey = tuple[int, str]


class BufferPool:
    """Storages of written snapshots, kept for reuse by later snapshots of the same shapes.

    Holds the storages of at most ``generations`` snapshots (one generation per
    :meth:`give`); older generations are released. Not thread-safe: the caller locks.
    A storage **must** only be given back once nothing else can read or write it.
    """

    def __init__(self, generations: int) -> None:
        self._generations = generations
        self._free: deque[dict[_PoolKey, list[torch.UntypedStorage]]] = deque()

    def take(self, nbytes: int, device: torch.device) -> torch.UntypedStorage | None:
        """A free storage of exactly ``nbytes`` on ``device``, removed from the pool."""
        key = (nbytes, str(device))
        for generation in self._free:
            found = generation.get(key)
            if found:
                return found.pop()
        return None

    def give(self, storages: list[torch.UntypedStorage]) -> None:
        """Return the storages of one written snapshot."""
        generation: dict[_PoolKey, list[torch.UntypedStorage]] = {}
        for storage in storages:
            generation.setdefault((storage.nbytes(), str(storage.device)), []).append(storage)
        self._free.append(generation)
        while len(self._free) > self._generations:
            self._free.popleft()

    def drain(self) -> BufferPool:
        """Move every free storage into a new pool (for one snapshot) and return it."""
        drained = BufferPool(self._generations)
        drained._free, self._free = self._free, deque()
        return drained

    def clear(self) -> None:
        """Release every kept storage."""
        self._free.clear()


class _Snapshotter:
    def __init__(self, pool: BufferPool | None) -> None:
        self.memo: dict[int, object] = {}
        self.storages: dict[tuple[int, str], torch.UntypedStorage] = {}
        self.pool = pool
        self.created: list[torch.UntypedStorage] = []

    def _copy_storage(self, source: torch.UntypedStorage) -> torch.UntypedStorage:
        reused = self.pool.take(source.nbytes(), source.device) if self.pool else None
        if reused is None:
            copied: torch.UntypedStorage = source.clone()  # type: ignore[no-untyped-call]
        else:
            copied = reused.copy_(source)
        self.created.append(copied)
        return copied

    def tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        plain = type(tensor) in (torch.Tensor, torch.nn.Parameter)
        if (
            not plain
            or tensor.layout is not torch.strided
            or tensor.is_quantized
            or tensor.is_conj()
            or tensor.is_neg()
        ):
            # Subclasses, sparse, quantized and lazily conjugated/negated views: torch's own
            # deep copy, which keeps what a storage copy would lose.
            return copy.deepcopy(tensor, self.memo)
        source = tensor.untyped_storage()
        key = (source.data_ptr(), str(source.device))
        storage = self.storages.get(key) if source.nbytes() else None
        if storage is None:
            storage = self._copy_storage(source)
            if source.nbytes():
                self.storages[key] = storage
        with torch.no_grad():
            copied = torch.empty((0,), dtype=tensor.dtype, device=tensor.device)
            copied.set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
        if tensor.requires_grad:
            copied.requires_grad_(True)  # as torch.save records it, even for a non-leaf
        return copied

    def copy(self, value: object) -> object:
        if isinstance(value, _ATOMIC):
            return value
        found = self.memo.get(id(value))
        if found is not None:
            return found
        result: object
        if isinstance(value, torch.Tensor):
            result = self.tensor(value)
        elif type(value) is dict:
            result = {k: self.copy(v) for k, v in value.items()}
        elif type(value) is OrderedDict:
            result = OrderedDict((k, self.copy(v)) for k, v in value.items())
        elif type(value) is list:
            result = [self.copy(v) for v in value]
        elif type(value) is tuple:
            result = tuple(self.copy(v) for v in value)
        else:
            # namedtuples, dataclasses, other containers: deepcopy shares our memo, so tensors
            # already copied are reused.
            result = copy.deepcopy(value, self.memo)
        self.memo[id(value)] = result
        return result


def snapshot(
    checkpoint: Checkpoint, pool: BufferPool | None = None
) -> tuple[Checkpoint, list[torch.UntypedStorage]]:
    """Return a copy of ``checkpoint`` that later changes to it cannot affect, and the
    storages it copied into (to give back to ``pool`` once the copy is written).

    Preserves tensor dtypes, shapes, strides, ``requires_grad``, ``nn.Parameter`` and storage
    shared between views or repeated tensors. **Must not** modify ``checkpoint``. Storages
    are taken from ``pool`` where one of the right size and device is free.
    """
    snapshotter = _Snapshotter(pool)
    copied = cast("Checkpoint", snapshotter.copy(checkpoint))
    return copied, snapshotter.created
