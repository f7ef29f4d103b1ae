"""The XLA accelerator (TPUs and other PJRT devices), through ``torch_xla``, imported lazily.

Without ``torch_xla`` installed the accelerator is simply unavailable: ``is_available()`` is
``False`` and ``device_count()`` is ``0`` (never an ImportError), and a device request or
``setup_device`` raises :class:`~trainspec.DeviceUnavailableError` with an install hint.

Not guaranteed: XLA cannot count its devices without its runtime, so with ``torch_xla``
installed the first ``device_count()`` imports ``torch_xla`` and asks the PJRT runtime; the
answer is cached for the life of the process.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
from typing import TYPE_CHECKING, Final

import torch

from trainspec.accelerator import Accelerator
from trainspec.errors import DeviceUnavailableError
from trainspec.reference.accelerators.device_request import check_device, parse_device_request

if TYPE_CHECKING:
    from types import ModuleType

    from trainspec.types import DeviceRequest

__all__ = ["XLAAccelerator", "load_torch_xla", "xla_device_count"]

INSTALL_HINT: Final = (
    "Install torch_xla matching your torch version (pip install torch_xla) on a machine "
    "with XLA devices (TPU), see https://github.com/pytorch/xla"
)


def load_torch_xla() -> ModuleType | None:
    """``torch_xla`` with its ``runtime`` and ``core.xla_model`` submodules loaded, or ``None``
    when it is not installed or fails to import. Never raises."""
    try:
        if importlib.util.find_spec("torch_xla") is None:
            return None
        module = importlib.import_module("torch_xla")
        importlib.import_module("torch_xla.runtime")
        importlib.import_module("torch_xla.core.xla_model")
    except Exception:  # a broken install is an unavailable device
        return None
    return module


@functools.cache
def xla_device_count() -> int:
    """Devices the XLA runtime reports, ``0`` without ``torch_xla``; cached for the process
    (``xla_device_count.cache_clear()`` forgets it). Never raises."""
    xla = load_torch_xla()
    if xla is None:
        return 0
    try:
        count = int(xla.runtime.global_runtime_device_count())
    except Exception:  # no devices, no runtime, no plugin: all mean unavailable
        return 0
    return max(count, 0)


class XLAAccelerator(Accelerator):
    """Accelerator for ``torch.device("xla", i)``; constructible with no arguments.

    ``"auto"`` and ``-1`` mean every device this host addresses (one process per device is
    the launcher's business). ``synchronize`` waits for pending device operations
    (``xm.wait_device_ops``); ``teardown`` holds nothing and is idempotent.
    """

    def __repr__(self) -> str:
        return "XLAAccelerator()"

    @property
    def device_type(self) -> str:
        """Always ``"xla"`` (ACC-1)."""
        return "xla"

    def is_available(self) -> bool:
        """``True`` iff ``torch_xla`` imports and its runtime reports a device (ACC-2)."""
        return self.device_count() > 0

    def device_count(self) -> int:
        """Devices the XLA runtime reports; ``0`` without ``torch_xla``. Never raises (ACC-3)."""
        return xla_device_count()

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        """Distinct ``torch.device("xla", i)`` in request order (ACC-4..6)."""
        available = self.device_count()
        try:
            indices = parse_device_request(devices, device_type="xla", available=available)
        except DeviceUnavailableError as error:
            if available == 0:
                raise DeviceUnavailableError(f"{error}. {INSTALL_HINT}") from None
            raise
        return [torch.device("xla", index) for index in indices]

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the default XLA device of this process (ACC-7, ACC-8)."""
        xla = self._require(device)
        index = check_device(device, "xla", available=self.device_count())
        device_function = getattr(xla, "device", None)
        if callable(device_function):
            device_function(index)
        else:
            xla.core.xla_model.xla_device(index)

    def teardown(self) -> None:
        """Nothing to release; idempotent (ACC-8)."""

    def synchronize(self, device: torch.device) -> None:
        """Wait until pending operations on the XLA devices have finished (ACC-9)."""
        xla = self._require(device)
        check_device(device, "xla", available=self.device_count())
        xla.core.xla_model.wait_device_ops()

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """The numeric entries of ``xm.get_memory_info(device)`` as finite floats (ACC-10)."""
        xla = self._require(device)
        check_device(device, "xla", available=self.device_count())
        info = xla.core.xla_model.get_memory_info(device)
        return {
            str(key): float(value)
            for key, value in dict(info).items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        }

    def _require(self, device: torch.device) -> ModuleType:
        check_device(device, "xla")
        xla = load_torch_xla()
        if xla is None or self.device_count() == 0:
            raise DeviceUnavailableError(
                f"{device}: no XLA device is available here. {INSTALL_HINT}"
            )
        return xla
