"""The CUDA accelerator: :class:`TorchDeviceAccelerator` for ``"cuda"`` with richer statistics.

Counting uses ``torch.cuda.device_count()``, which asks NVML (no CUDA context, fork-safe)
where NVML is present. Devices are initialised only by :meth:`CUDAAccelerator.setup_device`.
"""

from __future__ import annotations

import math

import torch

from trainspec.errors import DeviceUnavailableError
from trainspec.reference.accelerators.device_request import check_device
from trainspec.reference.accelerators.generic import TorchDeviceAccelerator

__all__ = ["CUDAAccelerator"]


class CUDAAccelerator(TorchDeviceAccelerator):
    """Accelerator for ``torch.device("cuda", i)``; constructible with no arguments."""

    def __init__(self) -> None:
        super().__init__("cuda")

    def __repr__(self) -> str:
        return "CUDAAccelerator()"

    def _device_count(self) -> int:
        return max(torch.cuda.device_count(), 0)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """Every numeric entry of ``torch.cuda.memory_stats(device)`` (``allocated_bytes.
        all.current``, ``num_alloc_retries``, ...) as finite floats (ACC-10)."""
        check_device(device, "cuda", available=self.device_count())
        try:
            raw = torch.cuda.memory_stats(device)
        except (RuntimeError, AssertionError) as error:
            raise DeviceUnavailableError(f"cannot read memory stats of {device}: {error}") from (
                error
            )
        return {
            key: float(value)
            for key, value in raw.items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        }
