"""An accelerator for any torch device type that has a device module (``torch.<type>``).

``TorchDeviceAccelerator("xpu")``, ``("mps")``, ``("cuda")``, or a PrivateUse1 backend's
name: everything goes through ``torch.get_device_module(device_type)`` (``device_count``,
``set_device``, ``synchronize``, ``empty_cache``, ``memory_allocated``, ...) and, where the
module lacks a function and the type is torch's current accelerator, through
``torch.accelerator``. Nothing here initialises a device before :meth:`setup_device`.

For ``"cpu"`` this gives ``cpu:0`` for the one CPU; use
:class:`~trainspec.reference.accelerators.CPUAccelerator` for several CPU processes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import torch

from trainspec.accelerator import Accelerator
from trainspec.errors import ConfigurationError, DeviceUnavailableError
from trainspec.reference._messages import describe_value
from trainspec.reference.accelerators.device_request import check_device, parse_device_request

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from trainspec.types import DeviceRequest

__all__ = ["TorchDeviceAccelerator", "device_module"]

_COMMON_DEVICE_TYPES: Final = ("cpu", "cuda", "mps", "xpu", "xla", "hpu", "mtia", "meta")
"""Device types an error message offers when ``TorchDeviceAccelerator`` is given a string
torch does not parse (torch knows a few more, and a PrivateUse1 backend adds its own name)."""


def device_module(device_type: str) -> ModuleType | None:
    """``torch.get_device_module(device_type)``, or ``None`` where torch has none. Never raises."""
    try:
        module: ModuleType = torch.get_device_module(device_type)
    except Exception:  # torch raises RuntimeError today; any failure means "no module"
        return None
    return module


class TorchDeviceAccelerator(Accelerator):
    """Accelerator for one torch device type, driven through its torch device module.

    Args:
        device_type: a torch device type without an index (``"cuda"``, ``"xpu"``, ``"mps"``).
            A string torch does not parse (``""``, ``"cpu "``, an unknown name) raises
            :class:`~trainspec.ConfigurationError` naming the common valid types; an index
            (``"cuda:0"``) is refused too.

    ``is_available`` and ``device_count`` only count devices: they never raise and never
    initialise the device (for CUDA, ``torch.cuda.device_count`` asks NVML where it can).
    ``setup_device`` makes the device current; ``teardown`` empties the caching allocator of
    the devices set up (where the module has ``empty_cache``) and is idempotent.
    """

    def __init__(self, device_type: str) -> None:
        if not isinstance(device_type, str):
            raise ConfigurationError(
                f"device_type must be a str such as 'cuda', got {describe_value(device_type)} "
                f"of type {type(device_type).__name__}; {_valid_types()}"
            )
        try:
            parsed = torch.device(device_type)
        except (RuntimeError, ValueError) as error:
            raise ConfigurationError(
                f"device_type={describe_value(device_type)} is not a torch device type"
                f"{_did_you_mean(device_type)}; {_valid_types()}"
            ) from error
        if parsed.index is not None:
            raise ConfigurationError(
                f"device_type={describe_value(device_type)} names one device; pass the type "
                f"alone ({parsed.type!r}) and choose devices with parse_devices"
            )
        self._device_type: str = str(parsed.type)
        self._set_up: bool = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device_type={self._device_type!r})"

    @property
    def device_type(self) -> str:
        """The device type given at construction, normalised by ``torch.device`` (ACC-1)."""
        return self._device_type

    def is_available(self) -> bool:
        """``device_count() > 0``; never raises, never initialises (ACC-2)."""
        return self.device_count() > 0

    def device_count(self) -> int:
        """The device module's ``device_count()``, ``0`` on any failure (ACC-3)."""
        try:
            count = self._device_count()
        except Exception:  # ACC-2/3: whatever the driver does, the answer is "none"
            return 0
        return count if not isinstance(count, bool) else 0

    def _device_count(self) -> int:
        """How many devices exist; may raise (the public method turns failures into 0)."""
        count = self._function("device_count", prefer_accelerator=False)
        value = count() if count is not None else 0
        return max(value, 0) if isinstance(value, int) else 0

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        """Distinct ``torch.device(device_type, i)`` in request order (ACC-4..6); ``"auto"``
        is every device. Only counts devices; never initialises one."""
        indices = parse_device_request(
            devices, device_type=self._device_type, available=self.device_count()
        )
        return [torch.device(self._device_type, index) for index in indices]

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the current device of its type (ACC-7, ACC-8).

        A device without an index keeps the current device. Raises
        :class:`~trainspec.DeviceUnavailableError` when the index does not exist here.
        """
        index = check_device(device, self._device_type, available=self.device_count())
        if index is not None:
            set_device = self._function("set_device_index") or self._function("set_device")
            if set_device is not None:
                set_device(index)
        self._set_up = True

    def teardown(self) -> None:
        """Empty the allocator cache if a device was set up; idempotent (ACC-8)."""
        if not self._set_up:
            return
        self._set_up = False
        empty_cache = self._function("empty_cache")
        if empty_cache is not None:
            empty_cache()

    def synchronize(self, device: torch.device) -> None:
        """Wait for queued work on ``device`` (ACC-9)."""
        check_device(device, self._device_type, available=self.device_count())
        synchronize = self._function("synchronize")
        if synchronize is not None:
            _call_with_device(synchronize, device)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """``memory_allocated``, ``memory_reserved``, ``max_memory_allocated`` and
        ``max_memory_reserved`` in bytes, for those the device module has (ACC-10)."""
        check_device(device, self._device_type, available=self.device_count())
        stats: dict[str, float] = {}
        for name in (
            "memory_allocated",
            "memory_reserved",
            "max_memory_allocated",
            "max_memory_reserved",
        ):
            function = self._function(name)
            if function is None:
                continue
            try:
                value = _call_with_device(function, device)
            except RuntimeError as error:
                raise DeviceUnavailableError(
                    f"{name}({device}) failed on this machine: {error}"
                ) from error
            if isinstance(value, (int, float)) and math.isfinite(value):
                stats[name] = float(value)
        return stats

    # -- helpers ---------------------------------------------------------------------------

    def _function(
        self, name: str, *, prefer_accelerator: bool = True
    ) -> Callable[..., object] | None:
        """Function ``name`` of ``torch.accelerator`` (when this type is torch's current
        accelerator; its signatures are uniform across backends) or of the device module.

        With ``prefer_accelerator=False`` the device module comes first (device counting:
        ``torch.cuda.device_count`` asks NVML without initialising CUDA).
        """
        module = device_module(self._device_type)
        sources: list[object] = [module] if module is not None else []
        if self._is_current_accelerator():
            if prefer_accelerator:
                sources.insert(0, torch.accelerator)
            else:
                sources.append(torch.accelerator)
        for source in sources:
            function = getattr(source, name, None)
            if callable(function):
                return function  # type: ignore[no-any-return]
        return None

    def _is_current_accelerator(self) -> bool:
        try:
            current = torch.accelerator.current_accelerator(check_available=False)
        except Exception:  # an old or broken backend: treat as "not the current one"
            return False
        return current is not None and current.type == self._device_type


def _valid_types() -> str:
    """The message fragment naming the valid device types."""
    names = ", ".join(map(repr, _COMMON_DEVICE_TYPES))
    return f"valid device types include {names} (or a PrivateUse1 backend's name)"


def _did_you_mean(device_type: str) -> str:
    """`` (did you mean 'cpu'?)`` when ``device_type`` is a common type give or take
    surrounding whitespace and case; else empty."""
    candidate = device_type.strip().lower()
    return f" (did you mean {candidate!r}?)" if candidate in _COMMON_DEVICE_TYPES else ""


def _call_with_device(function: Callable[..., object], device: torch.device) -> object:
    """Call a device-module function with ``device``; some (``torch.mps``) take no device."""
    try:
        return function(device)
    except TypeError:
        return function()
