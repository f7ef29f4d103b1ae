"""Reference accelerators: CPU, any torch device module, CUDA and XLA.

All of them subclass :class:`trainspec.Accelerator` explicitly (a missing member fails at
instantiation) and share one device-request parser,
:func:`~trainspec.reference.accelerators.device_request.parse_device_request`.
"""

from __future__ import annotations

from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.accelerators.cuda import CUDAAccelerator
from trainspec.reference.accelerators.device_request import check_device, parse_device_request
from trainspec.reference.accelerators.generic import TorchDeviceAccelerator
from trainspec.reference.accelerators.xla import XLAAccelerator

__all__ = [
    "CPUAccelerator",
    "CUDAAccelerator",
    "TorchDeviceAccelerator",
    "XLAAccelerator",
    "check_device",
    "parse_device_request",
]
