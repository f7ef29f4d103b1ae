"""Typing cases for :class:`trainspec.Accelerator`.

Positive cases must type-check cleanly; each negative case sits on one line with the exact
``# type: ignore[code]`` that mypy reports, so a negative case that stops failing is an unused
ignore for both mypy (--warn-unused-ignores) and basedpyright
(reportUnnecessaryTypeIgnoreComment).
"""

from __future__ import annotations

import torch
from typing_extensions import assert_type

from trainspec import Accelerator, DeviceRequest


class _AcceleratorCore:
    """Every Accelerator member except ``device_type`` and ``parse_devices``."""

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def setup_device(self, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def synchronize(self, device: torch.device) -> None:
        pass

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {}


# -- positive -------------------------------------------------------------------------------


class StructuralAccelerator(_AcceleratorCore):
    @property
    def device_type(self) -> str:
        return "cpu"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return [torch.device("cpu", 0)]


class AttributeAccelerator(_AcceleratorCore):
    """A plain attribute satisfies a read-only protocol property."""

    def __init__(self) -> None:
        self.device_type = "cpu"

    def parse_devices(self, devices: object) -> list[torch.device]:
        """A wider parameter type is compatible."""
        return []


class ExplicitAccelerator(Accelerator):
    @property
    def device_type(self) -> str:
        return "cpu"

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return []

    def setup_device(self, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def synchronize(self, device: torch.device) -> None:
        pass

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {}


accelerator: Accelerator = StructuralAccelerator()
with_attribute: Accelerator = AttributeAccelerator()
explicit: Accelerator = ExplicitAccelerator()


def use_accelerator(accelerator: Accelerator) -> None:
    """Results are typed by the protocol, whatever the implementation."""
    assert_type(accelerator.device_type, str)
    assert_type(accelerator.is_available(), bool)
    assert_type(accelerator.device_count(), int)
    assert_type(accelerator.parse_devices("auto"), list[torch.device])
    assert_type(accelerator.parse_devices([0, 1]), list[torch.device])
    assert_type(accelerator.parse_devices(-1), list[torch.device])
    assert_type(accelerator.get_device_stats(torch.device("cpu")), dict[str, float])
    assert_type(accelerator.synchronize(torch.device("cpu")), None)
    assert_type(accelerator.teardown(), None)


# -- negative -------------------------------------------------------------------------------


class MissingParseDevices(_AcceleratorCore):
    @property
    def device_type(self) -> str:
        return "cpu"


class IntParseDevices(_AcceleratorCore):
    @property
    def device_type(self) -> str:
        return "cpu"

    def parse_devices(self, devices: int) -> list[torch.device]:
        return []


class StringDevices(_AcceleratorCore):
    @property
    def device_type(self) -> str:
        return "cpu"

    def parse_devices(self, devices: DeviceRequest) -> list[str]:
        return []


class MethodDeviceType(_AcceleratorCore):
    def device_type(self) -> str:
        return "cpu"

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return []


class ExplicitMissingTeardown(Accelerator):
    @property
    def device_type(self) -> str:
        return "cpu"

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        return []

    def setup_device(self, device: torch.device) -> None:
        pass

    def synchronize(self, device: torch.device) -> None:
        pass

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        return {}


missing: Accelerator = MissingParseDevices()  # type: ignore[assignment]
narrow_parameter: Accelerator = IntParseDevices()  # type: ignore[assignment]
wrong_return: Accelerator = StringDevices()  # type: ignore[assignment]
method_not_property: Accelerator = MethodDeviceType()  # type: ignore[assignment]
abstract = ExplicitMissingTeardown()  # type: ignore[abstract]


def misuse_accelerator(accelerator: Accelerator) -> None:
    accelerator.device_type = "cuda"  # type: ignore[misc]
    accelerator.parse_devices(1.5)  # type: ignore[arg-type]
    accelerator.setup_device("cuda:0")  # type: ignore[arg-type]
    accelerator.teardown(force=True)  # type: ignore[call-arg]
