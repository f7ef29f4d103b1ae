"""CPUAccelerator: process slots on the host CPU (ACC-1 ... ACC-10)."""

from __future__ import annotations

import math

import pytest
import torch

from trainspec import Accelerator, ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators import CPUAccelerator
from trainspec.reference.accelerators.cpu import usable_cpu_count

CPU = torch.device("cpu")


def test_is_an_accelerator_by_subclassing_and_structurally() -> None:
    accelerator = CPUAccelerator()
    assert isinstance(accelerator, Accelerator)
    assert Accelerator in type(accelerator).__mro__
    assert accelerator.device_type == "cpu"
    torch.device(accelerator.device_type)


def test_default_slot_count_is_the_usable_cores() -> None:
    accelerator = CPUAccelerator()
    assert accelerator.is_available()
    assert accelerator.device_count() == usable_cpu_count() >= 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_invalid_slot_count_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        CPUAccelerator(num_devices=bad)  # type: ignore[arg-type]


def test_parse_gives_one_cpu_device_per_slot() -> None:
    accelerator = CPUAccelerator(num_devices=3)
    assert accelerator.parse_devices(2) == [CPU, CPU]
    assert accelerator.parse_devices(-1) == [CPU] * 3
    assert accelerator.parse_devices("0,2") == [CPU, CPU]
    assert accelerator.parse_devices("auto") == [CPU]


def test_parse_rejects_more_slots_than_configured() -> None:
    accelerator = CPUAccelerator(num_devices=2)
    with pytest.raises(DeviceUnavailableError, match=r"valid: 1\.\.2"):
        accelerator.parse_devices(5)
    with pytest.raises(ConfigurationError):
        accelerator.parse_devices(0)


def test_setup_and_teardown_are_idempotent_and_repeatable() -> None:
    accelerator = CPUAccelerator()
    accelerator.teardown()  # safe without setup
    accelerator.setup_device(CPU)
    accelerator.setup_device(torch.device("cpu", 0))
    accelerator.teardown()
    accelerator.teardown()
    accelerator.setup_device(CPU)


@pytest.mark.parametrize("method", ["setup_device", "synchronize", "get_device_stats"])
def test_other_device_types_are_refused(method: str) -> None:
    call = getattr(CPUAccelerator(), method)
    with pytest.raises(ConfigurationError):
        call(torch.device("meta"))
    with pytest.raises(ConfigurationError):
        call("cpu")


def test_cpu_indices_above_zero_do_not_exist() -> None:
    with pytest.raises(DeviceUnavailableError):
        CPUAccelerator().setup_device(torch.device("cpu", 1))


def test_stats_are_finite_floats_and_track_memory() -> None:
    stats = CPUAccelerator().get_device_stats(CPU)
    assert stats, "on Linux the CPU accelerator reports resident memory"
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    assert stats["rss_bytes"] > 0
    assert stats["peak_rss_bytes"] > 0


def test_synchronize_is_a_noop_on_cpu() -> None:
    CPUAccelerator().synchronize(CPU)
