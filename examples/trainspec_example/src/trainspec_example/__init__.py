"""trainspec-example: a third-party trainspec plugin, written as a plugin author would.

- :class:`~trainspec_example.compressed_io.CompressedCheckpointIO` -- a
  :class:`trainspec.CheckpointIO` writing gzip-compressed ``torch.save`` files atomically,
  registered as ``checkpoint_io="gzip"``;
- :class:`~trainspec_example.vcpu.VirtualCPUAccelerator` -- a :class:`trainspec.Accelerator`
  for CPU process slots with a thread budget, registered as ``accelerator="vcpu"``;
- :mod:`trainspec_example.conformance` -- the conformance targets that ``trainspec verify``
  and the package's own tests run.

Importing this package imports torch (the implementations need it); the entry points import
the submodules directly.
"""

from __future__ import annotations

from trainspec_example.compressed_io import CompressedCheckpointIO
from trainspec_example.vcpu import VirtualCPUAccelerator

__all__ = ["CompressedCheckpointIO", "VirtualCPUAccelerator", "__version__"]

__version__ = "0.1.0"
