"""``VirtualCPUAccelerator``: the host CPU, split into virtual devices with a thread budget.

On the CPU a "device" is a process slot: ``devices=2`` with DDP means two processes, each
computing on ``torch.device("cpu")``. By default every such process runs as many intra-op
threads as the machine has cores, so two ranks oversubscribe the CPU. A virtual CPU device
carries a thread budget instead: ``setup_device`` sets torch's intra-op thread count to
``threads_per_device`` for the process that uses the device, and ``teardown`` restores the
count it found.

The device-request grammar (``2``, ``-1``, ``"auto"``, ``"0,1"``, ``[0, 1]``) is parsed by
:func:`trainspec.reference.accelerators.device_request.parse_device_request`, the helper the
reference accelerators share; a plugin need not reimplement ACC-4 ... ACC-6.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

import torch
from trainspec import Accelerator, ConfigurationError
from trainspec.reference.accelerators.device_request import check_device, parse_device_request

if TYPE_CHECKING:
    from trainspec import DeviceRequest

__all__ = ["VirtualCPUAccelerator"]

_NAME: Final = "VirtualCPUAccelerator"
_CPU: Final = torch.device("cpu")


def _usable_cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        try:
            return max(len(affinity(0)), 1)
        except OSError:
            pass
    return max(os.cpu_count() or 1, 1)


def _positive(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{_NAME}: {what} must be a positive int or None; got {value!r}")
    return value


class VirtualCPUAccelerator(Accelerator):
    """CPU process slots, each with its own intra-op thread budget (ACC-1 ... ACC-10).

    Args:
        num_devices: how many virtual devices exist (the upper bound of a device request);
            ``None`` means one per usable core. ``"auto"`` requests one.
        threads_per_device: the intra-op threads ``setup_device`` gives the process;
            ``None`` (the default) leaves torch's setting alone, so the plugin registered as
            ``"vcpu"`` behaves like the built-in ``"cpu"`` until configured.

    ``setup_device`` **may** be called repeatedly (ACC-8): the thread count found by the
    first call is what ``teardown`` restores. ``teardown`` is idempotent, and the accelerator
    can be set up again afterwards. Not thread-safe: use one instance per process.
    """

    def __init__(
        self, num_devices: int | None = None, *, threads_per_device: int | None = None
    ) -> None:
        given = _positive(num_devices, "num_devices")
        self._num_devices = given if given is not None else _usable_cores()
        self._threads_per_device = _positive(threads_per_device, "threads_per_device")
        self._restore_threads: int | None = None

    def __repr__(self) -> str:
        return (
            f"{_NAME}(num_devices={self._num_devices}, "
            f"threads_per_device={self._threads_per_device})"
        )

    @property
    def device_type(self) -> str:
        """Always ``"cpu"`` (ACC-1)."""
        return "cpu"

    @property
    def threads_per_device(self) -> int | None:
        """The thread budget of a device, or ``None`` to leave torch's setting alone."""
        return self._threads_per_device

    def is_available(self) -> bool:
        """Always ``True``; never raises and changes nothing (ACC-2)."""
        return True

    def device_count(self) -> int:
        """The configured number of virtual devices, at least 1 (ACC-3)."""
        return self._num_devices

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        """One ``torch.device("cpu")`` per requested virtual device (ACC-4 ... ACC-6).

        Like the built-in CPU accelerator, the result repeats ``cpu`` once per process slot:
        the CPU is the one device type whose processes share one ``torch.device``.
        """
        indices = parse_device_request(
            devices, device_type="cpu", available=self._num_devices, auto_count=1
        )
        return [_CPU] * len(indices)

    def setup_device(self, device: torch.device) -> None:
        """Check ``device`` (ACC-7) and apply the thread budget, if one is configured."""
        check_device(device, "cpu", available=1)
        if self._threads_per_device is None:
            return
        if self._restore_threads is None:
            self._restore_threads = torch.get_num_threads()
        torch.set_num_threads(self._threads_per_device)

    def teardown(self) -> None:
        """Restore the thread count ``setup_device`` found; idempotent (ACC-8)."""
        restore, self._restore_threads = self._restore_threads, None
        if restore is not None:
            torch.set_num_threads(restore)

    def synchronize(self, device: torch.device) -> None:
        """Nothing to wait for: the CPU runs synchronously (ACC-9)."""
        check_device(device, "cpu", available=1)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """``intra_op_threads``: torch's current intra-op thread count (ACC-10)."""
        check_device(device, "cpu", available=1)
        return {"intra_op_threads": float(torch.get_num_threads())}
