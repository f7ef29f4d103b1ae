"""Reference checkpoint IOs.

- :class:`TorchCheckpointIO` -- ``torch.save`` files, local or fsspec URLs; the default.
- :class:`BackgroundCheckpointIO` -- any checkpoint IO, saving on a worker thread
  (:class:`trainspec.AsyncCheckpointIO`).
- :class:`SafetensorsCheckpointIO` -- flat tensor dicts as ``.safetensors`` files.
- :class:`MemoryCheckpointIO` -- an in-process store, for tests.

Every save is atomic (see ``_storage``), and storage, pickle and torch errors are translated
through one table (see ``_errors``). safetensors and fsspec are imported only when used.
"""

from __future__ import annotations

from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.checkpoint_io.safetensors_io import SafetensorsCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

__all__ = [
    "BackgroundCheckpointIO",
    "MemoryCheckpointIO",
    "SafetensorsCheckpointIO",
    "TorchCheckpointIO",
]
