"""TorchDeviceAccelerator and CUDAAccelerator, tested without a GPU by injecting device counts;
tests on a real GPU are marked ``gpu``."""

from __future__ import annotations

import math

import pytest
import torch

from trainspec import Accelerator, ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators import CUDAAccelerator, TorchDeviceAccelerator

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def two_fake_cuda_devices(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Pretend CUDA has two devices; record set_device / empty_cache / synchronize calls."""
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set", index)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty", None)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: calls.append(("sync", d)))
    return calls


@pytest.mark.parametrize("factory", [CUDAAccelerator, lambda: TorchDeviceAccelerator("cuda")])
def test_is_an_accelerator_for_cuda(factory: type[Accelerator]) -> None:
    accelerator = factory()
    assert isinstance(accelerator, Accelerator)
    assert accelerator.device_type == "cuda"


@pytest.mark.parametrize("bad", ["gpu", "", "cuda:0", 3])
def test_unknown_or_indexed_device_type_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        TorchDeviceAccelerator(bad)  # type: ignore[arg-type]


def test_unknown_type_message_names_the_known_types() -> None:
    with pytest.raises(ConfigurationError, match="cuda"):
        TorchDeviceAccelerator("gpu")


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU answers")
@pytest.mark.parametrize("device_type", ["cuda", "xpu", "mps", "hpu", "meta", "xla"])
def test_without_devices_availability_is_false_and_requests_fail(device_type: str) -> None:
    accelerator = TorchDeviceAccelerator(device_type)
    assert accelerator.is_available() is False
    assert accelerator.device_count() == 0
    with pytest.raises(DeviceUnavailableError):
        accelerator.parse_devices(1)
    with pytest.raises(ConfigurationError):
        accelerator.parse_devices(0)
    with pytest.raises(DeviceUnavailableError):
        accelerator.setup_device(torch.device(device_type, 0))
    assert not torch.cuda.is_initialized()


def test_counting_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(torch.cuda, "device_count", broken)
    for accelerator in (CUDAAccelerator(), TorchDeviceAccelerator("cuda")):
        assert accelerator.is_available() is False
        assert accelerator.device_count() == 0


def test_generic_accelerator_ignores_a_non_integer_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: "2")
    assert TorchDeviceAccelerator("cuda").device_count() == 0


@pytest.mark.usefixtures("two_fake_cuda_devices")
@pytest.mark.parametrize("factory", [CUDAAccelerator, lambda: TorchDeviceAccelerator("cuda")])
def test_parse_maps_indices_to_distinct_cuda_devices(factory: type[Accelerator]) -> None:
    accelerator = factory()
    assert accelerator.is_available()
    assert accelerator.device_count() == 2
    assert accelerator.parse_devices("auto") == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert accelerator.parse_devices([1, 0]) == [torch.device("cuda", 1), torch.device("cuda", 0)]
    assert accelerator.parse_devices("1,") == [torch.device("cuda", 1)]
    with pytest.raises(DeviceUnavailableError):
        accelerator.parse_devices(3)
    with pytest.raises(DeviceUnavailableError):
        accelerator.parse_devices([2])
    assert not torch.cuda.is_initialized()


def test_setup_selects_the_device_and_teardown_empties_the_cache_once(
    two_fake_cuda_devices: list[tuple[str, object]],
) -> None:
    accelerator = TorchDeviceAccelerator("cuda")
    accelerator.teardown()  # without setup: nothing to release
    assert two_fake_cuda_devices == []
    accelerator.setup_device(torch.device("cuda", 1))
    accelerator.setup_device(torch.device("cuda", 1))
    accelerator.synchronize(torch.device("cuda", 1))
    accelerator.teardown()
    accelerator.teardown()
    assert two_fake_cuda_devices == [
        ("set", 1),
        ("set", 1),
        ("sync", torch.device("cuda", 1)),
        ("empty", None),
    ]
    with pytest.raises(DeviceUnavailableError):
        accelerator.setup_device(torch.device("cuda", 2))
    with pytest.raises(ConfigurationError):
        accelerator.setup_device(torch.device("cpu"))


@pytest.mark.usefixtures("two_fake_cuda_devices")
def test_generic_stats_are_finite_floats_from_the_memory_functions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1024)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: float("inf"))
    stats = TorchDeviceAccelerator("cuda").get_device_stats(torch.device("cuda", 0))
    assert stats["memory_allocated"] == 1024.0
    assert "memory_reserved" not in stats  # not finite: left out
    with pytest.raises(ConfigurationError):
        TorchDeviceAccelerator("cuda").get_device_stats(torch.device("cpu"))


@pytest.mark.usefixtures("two_fake_cuda_devices")
def test_cuda_stats_keep_the_finite_numbers_of_memory_stats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = {"allocated_bytes.all.current": 512, "num_ooms": 0, "bad": float("nan"), "x": "y"}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: raw)
    stats = CUDAAccelerator().get_device_stats(torch.device("cuda", 1))
    assert stats == {"allocated_bytes.all.current": 512.0, "num_ooms": 0.0}


def test_cpu_works_through_the_generic_accelerator() -> None:
    accelerator = TorchDeviceAccelerator("cpu")
    assert accelerator.device_count() >= 1
    assert accelerator.parse_devices(1) == [torch.device("cpu", 0)]
    accelerator.setup_device(torch.device("cpu"))
    accelerator.synchronize(torch.device("cpu"))
    accelerator.teardown()


@pytest.mark.gpu
def test_real_cuda_device_lifecycle_and_stats() -> None:
    accelerator = CUDAAccelerator()
    assert accelerator.is_available()
    (device,) = accelerator.parse_devices(1)
    accelerator.setup_device(device)
    assert torch.cuda.current_device() == device.index
    torch.ones(1024, device=device)
    accelerator.synchronize(device)
    stats = accelerator.get_device_stats(device)
    assert stats["allocated_bytes.all.current"] > 0
    assert all(math.isfinite(v) for v in stats.values())
    accelerator.teardown()
    accelerator.teardown()
    accelerator.setup_device(device)
