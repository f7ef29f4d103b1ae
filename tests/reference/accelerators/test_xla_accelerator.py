"""XLAAccelerator: unavailable without torch_xla; with a stand-in torch_xla, the wiring."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec import Accelerator, ConfigurationError, DeviceUnavailableError
from trainspec.reference.accelerators import XLAAccelerator
from trainspec.reference.accelerators import xla as xla_module

if TYPE_CHECKING:
    from collections.abc import Iterator

XLA0 = torch.device("xla", 0)


@pytest.fixture(autouse=True)
def fresh_count_cache() -> Iterator[None]:
    xla_module.xla_device_count.cache_clear()
    yield
    xla_module.xla_device_count.cache_clear()


@pytest.fixture
def fake_torch_xla(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A stand-in for torch_xla with 4 devices; records the calls made into it."""
    calls: list[object] = []
    fake = SimpleNamespace(
        runtime=SimpleNamespace(global_runtime_device_count=lambda: 4),
        core=SimpleNamespace(
            xla_model=SimpleNamespace(
                wait_device_ops=lambda: calls.append("wait"),
                get_memory_info=lambda device: {"bytes_used": 10, "bytes_limit": 100},
            )
        ),
        device=lambda index: calls.append(("device", index)),
    )
    monkeypatch.setattr(xla_module, "load_torch_xla", lambda: fake)
    return calls


def test_is_an_accelerator() -> None:
    accelerator = XLAAccelerator()
    assert isinstance(accelerator, Accelerator)
    assert accelerator.device_type == "xla"
    torch.device(accelerator.device_type)


def test_without_torch_xla_everything_says_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xla_module, "load_torch_xla", lambda: None)
    accelerator = XLAAccelerator()
    assert accelerator.is_available() is False
    assert accelerator.device_count() == 0
    with pytest.raises(DeviceUnavailableError, match="torch_xla"):
        accelerator.parse_devices(1)
    with pytest.raises(DeviceUnavailableError, match="torch_xla"):
        accelerator.setup_device(XLA0)
    with pytest.raises(ConfigurationError):
        accelerator.parse_devices("nope")
    with pytest.raises(ConfigurationError):
        accelerator.setup_device(torch.device("cpu"))
    accelerator.teardown()


def test_loading_a_missing_torch_xla_returns_none() -> None:
    try:
        import torch_xla  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        assert xla_module.load_torch_xla() is None
    else:  # pragma: no cover - only on XLA machines
        pytest.skip("torch_xla is installed here")


def test_with_torch_xla_devices_parse_and_set_up(fake_torch_xla: list[object]) -> None:
    accelerator = XLAAccelerator()
    assert accelerator.is_available()
    assert accelerator.device_count() == 4
    assert accelerator.parse_devices("auto") == [torch.device("xla", i) for i in range(4)]
    assert accelerator.parse_devices([3, 1]) == [torch.device("xla", 3), torch.device("xla", 1)]
    with pytest.raises(DeviceUnavailableError):
        accelerator.parse_devices(5)
    accelerator.setup_device(torch.device("xla", 2))
    accelerator.synchronize(torch.device("xla", 2))
    assert accelerator.get_device_stats(XLA0) == {"bytes_used": 10.0, "bytes_limit": 100.0}
    with pytest.raises(DeviceUnavailableError):
        accelerator.setup_device(torch.device("xla", 4))
    assert fake_torch_xla == [("device", 2), "wait"]


def test_a_failing_runtime_counts_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("no PJRT plugin")

    fake = SimpleNamespace(runtime=SimpleNamespace(global_runtime_device_count=broken))
    monkeypatch.setattr(xla_module, "load_torch_xla", lambda: fake)
    assert XLAAccelerator().is_available() is False
