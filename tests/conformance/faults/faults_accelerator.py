"""Fault-seeded accelerators: each breaks exactly one rule; ``clause`` names the clause and
``rejected_by`` the check that must reject it.

Baselines: the reference :class:`CPUAccelerator` and :class:`IndexedFakeAccelerator`, a correct
accelerator of ``meta`` devices with indices (``meta:0`` ... ``meta:3``), so that index
parsing, ordering and distinctness (which the CPU's index-less process slots do not exercise)
can be broken and caught without hardware.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, ClassVar

import torch

from trainspec.accelerator import Accelerator
from trainspec.errors import ConfigurationError, DeviceUnavailableError, LifecycleError
from trainspec.reference.accelerators.cpu import CPUAccelerator
from trainspec.reference.accelerators.device_request import check_device, parse_device_request

if TYPE_CHECKING:
    from trainspec.types import DeviceRequest

ENV_MARKER = "TRAINSPEC_FAULT_ACCELERATOR_PROBED"
"""The environment variable the side-effect faults set (the tests restore os.environ)."""


class IndexedFakeAccelerator(Accelerator):
    """A correct accelerator of ``count`` indexed ``meta`` devices (no hardware needed)."""

    def __init__(self, count: int = 4) -> None:
        self.count = count
        self.current: torch.device | None = None

    @property
    def device_type(self) -> str:
        return "meta"

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        indices = parse_device_request(devices, device_type="meta", available=self.count)
        return [torch.device("meta", i) for i in indices]

    def setup_device(self, device: torch.device) -> None:
        check_device(device, "meta", available=self.count)
        self.current = device

    def teardown(self) -> None:
        self.current = None

    def synchronize(self, device: torch.device) -> None:
        check_device(device, "meta", available=self.count)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        check_device(device, "meta", available=self.count)
        return {"allocated_bytes": 0.0}


class _CPUFault(CPUAccelerator):
    clause: ClassVar[str]
    rejected_by: ClassVar[str]


class _IndexedFault(IndexedFakeAccelerator):
    clause: ClassVar[str]
    rejected_by: ClassVar[str]


# --------------------------------------------------------------------------- ACC-1 ... ACC-3


class MisspelledDeviceTypeAccelerator(_CPUFault):
    """device_type is "CPU", which torch.device does not accept."""

    clause = "ACC-1"
    rejected_by = "check_accelerator_device_type_is_a_constant_torch_device_type"

    @property
    def device_type(self) -> str:
        return "CPU"


class RaisingIsAvailableAccelerator(_IndexedFault):
    """is_available() raises when there is no device instead of returning False."""

    clause = "ACC-2"
    rejected_by = "check_accelerator_is_available_never_raises_and_is_stable"

    def __init__(self) -> None:
        super().__init__(count=0)

    def is_available(self) -> bool:
        if self.count == 0:
            raise DeviceUnavailableError("no meta device")
        return True


class EnvironmentProbingAccelerator(_CPUFault):
    """is_available() records its probe in an environment variable."""

    clause = "ACC-2"
    rejected_by = "check_accelerator_is_available_has_no_side_effects"

    def is_available(self) -> bool:
        os.environ[ENV_MARKER] = "1"
        return True


class ZeroCountWhileAvailableAccelerator(_CPUFault):
    """device_count() is 0 although is_available() is True."""

    clause = "ACC-3"
    rejected_by = "check_accelerator_device_count_matches_availability"

    def device_count(self) -> int:
        return 0


# --------------------------------------------------------------------------- ACC-4


class WrongTypeDevicesAccelerator(_IndexedFault):
    """parse_devices returns cpu devices for a meta accelerator."""

    clause = "ACC-4"
    rejected_by = "check_accelerator_parses_every_accepted_request_form"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return [torch.device("cpu") for _ in super().parse_devices(devices)]


class DuplicateDevicesAccelerator(_IndexedFault):
    """parse_devices(n) returns the first device n times."""

    clause = "ACC-4"
    rejected_by = "check_accelerator_parses_every_accepted_request_form"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        parsed = super().parse_devices(devices)
        return [parsed[0]] * len(parsed)


class SortedIndicesAccelerator(_IndexedFault):
    """parse_devices sorts an index list instead of keeping the requested order."""

    clause = "ACC-4"
    rejected_by = "check_accelerator_parses_every_accepted_request_form"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return sorted(super().parse_devices(devices), key=lambda d: d.index or 0)


class AutoRefusedAccelerator(_CPUFault):
    """parse_devices refuses the "auto" request."""

    clause = "ACC-4"
    rejected_by = "check_accelerator_parses_every_accepted_request_form"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if devices == "auto":
            raise ConfigurationError("'auto' is not supported")
        return super().parse_devices(devices)


class ParseSetsEnvironmentAccelerator(_CPUFault):
    """parse_devices exports the request as an environment variable."""

    clause = "ACC-4"
    rejected_by = "check_accelerator_parse_devices_has_no_side_effects"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        os.environ[ENV_MARKER] = repr(devices)
        return super().parse_devices(devices)


# --------------------------------------------------------------------------- ACC-5, ACC-6


class ZeroDevicesAcceptedAccelerator(_CPUFault):
    """parse_devices(0) returns an empty list."""

    clause = "ACC-5"
    rejected_by = "check_accelerator_rejects_malformed_requests"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if devices == 0 and not isinstance(devices, bool):
            return []
        return super().parse_devices(devices)


class BoolAcceptedAccelerator(_CPUFault):
    """parse_devices(True) is read as 1 device."""

    clause = "ACC-5"
    rejected_by = "check_accelerator_rejects_malformed_requests"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if isinstance(devices, bool):
            devices = int(devices)
        return super().parse_devices(devices)


class DeduplicatingAccelerator(_IndexedFault):
    """Duplicate indices ("0,0", [1, 1]) are silently merged instead of refused."""

    clause = "ACC-5"
    rejected_by = "check_accelerator_rejects_malformed_requests"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if isinstance(devices, list):
            devices = list(dict.fromkeys(devices))
        elif isinstance(devices, str) and "," in devices:
            parts = [p for p in devices.split(",") if p]
            devices = ",".join(dict.fromkeys(parts)) + ","
        return super().parse_devices(devices)


class UnboundedCountAccelerator(_IndexedFault):
    """parse_devices(n) returns n devices even when fewer exist."""

    clause = "ACC-6"
    rejected_by = "check_accelerator_rejects_requests_beyond_device_count"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > self.count:
            return [torch.device("meta", i) for i in range(devices)]
        return super().parse_devices(devices)


# --------------------------------------------------------------------------- ACC-7 ... ACC-10


class SetupAcceptsOtherTypeAccelerator(_CPUFault):
    """setup_device accepts a device of any type."""

    clause = "ACC-7"
    rejected_by = "check_accelerator_setup_device_refuses_another_device_type"

    def setup_device(self, device: torch.device) -> None:
        if device.type == "cpu":
            super().setup_device(device)


class SetupAcceptsMissingIndexAccelerator(_IndexedFault):
    """setup_device accepts an index at or beyond device_count()."""

    clause = "ACC-7"
    rejected_by = "check_accelerator_setup_device_refuses_a_missing_index"

    def setup_device(self, device: torch.device) -> None:
        check_device(device, "meta")
        self.current = device


class TeardownNeedsSetupAccelerator(_CPUFault):
    """teardown() without a prior setup_device raises LifecycleError."""

    clause = "ACC-8"
    rejected_by = "check_accelerator_teardown_is_safe_without_setup"

    def __init__(self) -> None:
        super().__init__()
        self.set_up = False

    def setup_device(self, device: torch.device) -> None:
        super().setup_device(device)
        self.set_up = True

    def teardown(self) -> None:
        if not self.set_up:
            raise LifecycleError("teardown() before setup_device()")
        self.set_up = False


class SetupOnceAccelerator(_IndexedFault):
    """A second setup_device raises LifecycleError."""

    clause = "ACC-8"
    rejected_by = "check_accelerator_setup_and_teardown_are_idempotent_and_repeatable"

    def setup_device(self, device: torch.device) -> None:
        if self.current is not None:
            raise LifecycleError(f"already set up on {self.current}")
        super().setup_device(device)


class SynchronizeAnyTypeAccelerator(_CPUFault):
    """synchronize() is a no-op that accepts a device of any type."""

    clause = "ACC-7"
    rejected_by = "check_accelerator_synchronize_refuses_another_device_type"

    def synchronize(self, device: torch.device) -> None:
        return None


class SynchronizeReturnsStatusAccelerator(_CPUFault):
    """synchronize() returns True (a status) instead of None."""

    clause = "ACC-9"
    rejected_by = "check_accelerator_synchronize_waits_for_queued_work"

    def synchronize(self, device: torch.device) -> None:
        super().synchronize(device)
        return True  # type: ignore[return-value]


class NaNStatsAccelerator(_CPUFault):
    """get_device_stats reports an unknown utilisation as NaN."""

    clause = "ACC-10"
    rejected_by = "check_accelerator_device_stats_are_finite_numbers"

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {**super().get_device_stats(device), "utilisation": math.nan}


class StatsAnyTypeAccelerator(_IndexedFault):
    """get_device_stats answers for a device of another type."""

    clause = "ACC-7"
    rejected_by = "check_accelerator_device_stats_refuse_another_device_type"

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {"allocated_bytes": 0.0}


class _NeedsTwoArguments(ConfigurationError):
    """A ConfigurationError whose __init__ does not accept its own args: unpickling fails."""

    def __init__(self, value: object, valid: str) -> None:
        super().__init__(f"devices={value!r} is not valid; valid: {valid}")


class UnpicklableErrorAccelerator(_CPUFault):
    """parse_devices raises a ConfigurationError subclass that cannot be unpickled."""

    clause = "ERR-1"
    rejected_by = "check_accelerator_errors_are_trainspec_errors_that_survive_pickling"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        if devices == 0 and not isinstance(devices, bool):
            raise _NeedsTwoArguments(devices, "1..n, -1, 'auto'")
        return super().parse_devices(devices)


FAULTS: tuple[type[_CPUFault | _IndexedFault], ...] = (
    UnpicklableErrorAccelerator,
    MisspelledDeviceTypeAccelerator,
    RaisingIsAvailableAccelerator,
    EnvironmentProbingAccelerator,
    ZeroCountWhileAvailableAccelerator,
    WrongTypeDevicesAccelerator,
    DuplicateDevicesAccelerator,
    SortedIndicesAccelerator,
    AutoRefusedAccelerator,
    ParseSetsEnvironmentAccelerator,
    ZeroDevicesAcceptedAccelerator,
    BoolAcceptedAccelerator,
    DeduplicatingAccelerator,
    UnboundedCountAccelerator,
    SetupAcceptsOtherTypeAccelerator,
    SetupAcceptsMissingIndexAccelerator,
    TeardownNeedsSetupAccelerator,
    SetupOnceAccelerator,
    SynchronizeAnyTypeAccelerator,
    SynchronizeReturnsStatusAccelerator,
    NaNStatsAccelerator,
    StatsAnyTypeAccelerator,
)
"""Every fault-seeded accelerator; ``clause`` / ``rejected_by`` name what must reject it."""
