"""The reference accelerators satisfy :class:`trainspec.Accelerator` (positive cases only).

Checked only once every ``trainspec.reference`` module imported here exists (see
tests/typing/test_typing.py); add a line per new reference class.
"""

from __future__ import annotations

from trainspec import Accelerator
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.accelerators.cuda import CUDAAccelerator
from trainspec.reference.accelerators.generic import TorchDeviceAccelerator
from trainspec.reference.accelerators.xla import XLAAccelerator

cpu: Accelerator = CPUAccelerator()
cuda: Accelerator = CUDAAccelerator()
generic: Accelerator = TorchDeviceAccelerator("mps")
xla: Accelerator = XLAAccelerator()
