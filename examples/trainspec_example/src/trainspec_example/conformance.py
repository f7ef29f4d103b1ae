"""The conformance targets of this package: what it claims, in one place.

``trainspec verify`` and the package's pytest suites both read these, so the command line and
the tests check the same declarations::

    trainspec verify checkpoint_io trainspec_example.conformance:CHECKPOINT_IO
    trainspec verify accelerator trainspec_example.conformance:ACCELERATOR
"""

from __future__ import annotations

from typing import Final

from trainspec.conformance import Target

from trainspec_example.compressed_io import CompressedCheckpointIO
from trainspec_example.vcpu import VirtualCPUAccelerator

__all__ = ["ACCELERATOR", "CHECKPOINT_IO", "THROTTLED_ACCELERATOR", "trusted_compressed_io"]


def trusted_compressed_io() -> CompressedCheckpointIO:
    """The explicit opt-in for pickled content (CKPT-8): ``weights_only=False``."""
    return CompressedCheckpointIO(weights_only=False)


def _throttled() -> VirtualCPUAccelerator:
    return VirtualCPUAccelerator(threads_per_device=1)


CHECKPOINT_IO: Final = Target(
    "checkpoint_io",
    CompressedCheckpointIO,
    name="trainspec_example.CompressedCheckpointIO",
    # torch.save stores nested Python values, strides, shared storage and pickles; the files
    # are local paths that other processes see.
    capabilities=frozenset(
        {"local_paths", "python_objects", "strided_tensors", "shared_storage", "pickle"}
    ),
    options={"trusted_factory": trusted_compressed_io},
)
"""The gzip checkpoint IO with everything the torch.save format can store."""

ACCELERATOR: Final = Target(
    "accelerator", VirtualCPUAccelerator, name="trainspec_example.VirtualCPUAccelerator"
)
"""The virtual CPU accelerator as the ``"vcpu"`` entry point builds it."""

THROTTLED_ACCELERATOR: Final = Target(
    "accelerator", _throttled, name="trainspec_example.VirtualCPUAccelerator(threads=1)"
)
"""The virtual CPU accelerator with a thread budget, so setup and teardown change state."""
