"""``SafetensorsCheckpointIO``: flat tensor dicts as ``.safetensors`` files.

safetensors never executes code on load, so CKPT-8 holds by construction. It stores a flat
``str -> Tensor`` mapping only, which this IO declares as its narrower value set (CKPT-1).
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, ClassVar, Final

import torch

from trainspec.checkpoint_io import CheckpointIO
from trainspec.errors import ConfigurationError

from . import _storage
from ._checks import apply_map_location, check_checkpoint, check_map_location
from ._errors import interruption

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

    from trainspec.types import Checkpoint, MapLocation, PathLike, StorageOptions

__all__ = ["SUPPORTED_DTYPES", "SafetensorsCheckpointIO"]

FORMAT = "safetensors"

SUPPORTED_DTYPES: Final[frozenset[torch.dtype]] = frozenset(
    dtype
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
    )
    if isinstance(dtype := getattr(torch, name, None), torch.dtype)
)
"""Tensor dtypes a safetensors file can hold (those this torch build also has)."""


_ORDER_KEY: Final = "trainspec.key_order"


def _saved_order(data: bytes) -> list[str]:
    """The key order recorded at save time (safetensors itself sorts keys), or []."""
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + size])
        order = json.loads(header.get("__metadata__", {}).get(_ORDER_KEY, "[]"))
    except (ValueError, AttributeError, TypeError):
        return []
    return [k for k in order if isinstance(k, str)] if isinstance(order, list) else []


def _import_safetensors() -> ModuleType:
    try:
        import safetensors.torch
    except ImportError as exc:
        raise ConfigurationError(
            "SafetensorsCheckpointIO needs the safetensors package: "
            "pip install 'trainspec[safetensors]'"
        ) from exc
    return safetensors.torch


def _flat_tensors(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """Check the narrower value set and return tensors safetensors accepts.

    Raises ``TypeError`` naming the first offending key. Tensors that are not contiguous, or
    share storage with an earlier tensor in the dict, are copied: the file holds each tensor's
    values on its own (the input is never modified).
    """
    out: dict[str, torch.Tensor] = {}
    seen_storages: set[int] = set()
    allowed = ", ".join(sorted(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES))
    for key, value in checkpoint.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"SafetensorsCheckpointIO stores a flat dict of tensors only; {key!r} is a "
                f"{type(value).__name__}. Use TorchCheckpointIO for nested containers, numbers, "
                "strings or None"
            )
        if value.layout is not torch.strided:
            raise TypeError(
                f"SafetensorsCheckpointIO stores dense tensors only; {key!r} has layout "
                f"{value.layout}"
            )
        if value.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"SafetensorsCheckpointIO cannot store {key!r} of dtype {value.dtype}; "
                f"supported dtypes: {allowed}"
            )
        tensor = value.detach()
        storage = tensor.untyped_storage()
        shared = storage.nbytes() > 0 and storage.data_ptr() in seen_storages
        if storage.nbytes() > 0:
            seen_storages.add(storage.data_ptr())
        if shared:
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        elif not tensor.is_contiguous():
            tensor = tensor.contiguous()
        out[key] = tensor
    return out


class SafetensorsCheckpointIO(CheckpointIO):
    """Saves a flat ``dict[str, torch.Tensor]`` in the safetensors format.

    Declared narrower value set (CKPT-1): string keys mapping to dense tensors of a dtype in
    :data:`SUPPORTED_DTYPES`; anything else raises ``TypeError`` on save. A load returns equal
    values, dtypes, shapes and key order as contiguous CPU tensors (then moved by
    ``map_location``);
    strides and storage shared between views are **not** kept — each view is stored as its
    own contiguous copy — and ``nn.Parameter`` loads as a plain tensor.

    Writes are atomic exactly as for :class:`TorchCheckpointIO` (same helper); loads never
    run code. ``storage_options`` is handled as for :class:`TorchCheckpointIO`: fsspec
    file-system options for fsspec URLs, none for local paths.

    Raises :class:`~trainspec.ConfigurationError` at construction when safetensors is not
    installed. Thread-safety: stateless; any method **may** be called from several threads.
    """

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"local_paths"})
    """What the conformance kit verifies beyond the protocol (``trainspec verify`` reads it)."""
    conformance_options: ClassVar[dict[str, object]] = {"dtypes": SUPPORTED_DTYPES}
    """Options of its conformance run (``trainspec verify`` reads them)."""

    def __init__(self, *, storage_options: Mapping[str, object] | None = None) -> None:
        self._st = _import_safetensors()
        self._storage_options: dict[str, object] = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def save_checkpoint(
        self,
        checkpoint: Checkpoint,
        path: PathLike,
        storage_options: StorageOptions = None,
    ) -> None:
        """Atomically replace ``path`` with the tensors of ``checkpoint``; **must not** modify
        it. ``TypeError`` for anything outside the declared value set."""
        check_checkpoint(checkpoint, type(self).__name__)
        location = _storage.resolve(
            path, storage_options, owner=type(self).__name__, defaults=self._storage_options
        )
        tensors = _flat_tensors(checkpoint)
        try:
            data: bytes = self._st.save(tensors, metadata={_ORDER_KEY: json.dumps(list(tensors))})
        except Exception as exc:  # e.g. a dtype this safetensors version lacks
            interrupted = interruption(exc)
            if interrupted is not None:
                raise interrupted from None
            raise TypeError(
                f"safetensors cannot encode the checkpoint for {location.display}: {exc!r}"
            ) from exc

        def write(file: IO[bytes]) -> None:
            file.write(data)

        _storage.atomic_write(location, write, fmt=FORMAT)

    def load_checkpoint(self, path: PathLike, map_location: MapLocation = None) -> Checkpoint:
        """Load the tensors at ``path`` (CKPT-7, 9, 10); never runs code (CKPT-8)."""
        check_map_location(map_location)
        location = _storage.resolve(
            path, None, owner=type(self).__name__, defaults=self._storage_options
        )

        def decode(file: IO[bytes]) -> Checkpoint:
            data = file.read()
            loaded: dict[str, torch.Tensor] = self._st.load(data)
            order = [k for k in _saved_order(data) if k in loaded] or sorted(loaded)
            return {k: apply_map_location(loaded[k], map_location) for k in order}

        return _storage.read(location, decode, fmt=FORMAT, whole=True)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete ``path``; a missing path is fine, a directory is refused (CKPT-11)."""
        location = _storage.resolve(
            path, None, owner=type(self).__name__, defaults=self._storage_options
        )
        _storage.remove(location, fmt=FORMAT)

    def teardown(self) -> None:
        """Nothing to release; idempotent (CKPT-12)."""
