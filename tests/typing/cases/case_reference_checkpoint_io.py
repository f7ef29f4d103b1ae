"""The reference checkpoint IO satisfies :class:`trainspec.CheckpointIO` and
:class:`trainspec.AsyncCheckpointIO` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from trainspec import AsyncCheckpointIO, CheckpointIO
from trainspec.reference.checkpoint_io.background import BackgroundCheckpointIO
from trainspec.reference.checkpoint_io.memory import MemoryCheckpointIO
from trainspec.reference.checkpoint_io.safetensors_io import SafetensorsCheckpointIO
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

torch_io: CheckpointIO = TorchCheckpointIO(weights_only=True)
memory: CheckpointIO = MemoryCheckpointIO()
safetensors: CheckpointIO = SafetensorsCheckpointIO()
background: AsyncCheckpointIO = BackgroundCheckpointIO(TorchCheckpointIO())
background_default: AsyncCheckpointIO = BackgroundCheckpointIO()
