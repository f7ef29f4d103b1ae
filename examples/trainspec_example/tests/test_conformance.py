"""The whole conformance kit on this package's plugins, through the kit's pytest suites.

The targets come from ``trainspec_example.conformance``, the same objects
``trainspec verify`` is pointed at in CI, so the tests and the command line check the same
declarations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from trainspec.conformance.suites import AcceleratorSuite, CheckpointIOSuite

from trainspec_example import conformance

if TYPE_CHECKING:
    from trainspec.conformance import Target


class TestCompressedCheckpointIO(CheckpointIOSuite):
    """CKPT-1 ... CKPT-12 (ACKPT-* are skipped: the IO is synchronous)."""

    @pytest.fixture
    def trainspec_target(self) -> Target[object]:
        return conformance.CHECKPOINT_IO


class TestVirtualCPUAccelerator(AcceleratorSuite):
    """ACC-1 ... ACC-10 as the ``"vcpu"`` entry point builds it."""

    @pytest.fixture
    def trainspec_target(self) -> Target[object]:
        return conformance.ACCELERATOR


class TestThrottledVirtualCPUAccelerator(AcceleratorSuite):
    """ACC-1 ... ACC-10 with a thread budget, so setup and teardown change state."""

    @pytest.fixture
    def trainspec_target(self) -> Target[object]:
        return conformance.THROTTLED_ACCELERATOR
