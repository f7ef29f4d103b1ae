"""The CPU accelerator: processes that all run on the host CPU.

On the CPU a "device" is a *process slot*: ``devices=2`` with a DDP strategy means two
processes, each computing on ``torch.device("cpu")``. The CPU has one ``torch.device``, so
:meth:`CPUAccelerator.parse_devices` returns *n* equal ``torch.device("cpu")`` objects, one per
process, rather than *n* distinct devices. This is the one documented exception to ACC-4's
"distinct devices" wording (``torch.device("cpu", 1)`` exists as a value, but tensors placed
there report ``device == torch.device("cpu")``, so indexed CPU devices would break equality
checks downstream). Index lists are accepted and validated like on any device type (``[0, 1]``
is two slots); the indices only count slots.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Final

import torch

from trainspec.accelerator import Accelerator
from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value
from trainspec.reference.accelerators.device_request import check_device, parse_device_request

if TYPE_CHECKING:
    from trainspec.types import DeviceRequest

__all__ = ["CPUAccelerator", "usable_cpu_count"]

_CPU: Final = torch.device("cpu")


def usable_cpu_count() -> int:
    """The number of CPU cores this process may run on (its affinity mask), at least 1."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        try:
            return max(len(affinity(0)), 1)
        except OSError:
            pass
    return max(os.cpu_count() or 1, 1)


class CPUAccelerator(Accelerator):
    """Accelerator for ``torch.device("cpu")``.

    Args:
        num_devices: how many CPU process slots exist (the upper bound of a device request).
            ``None`` (the default) means the number of cores this process may use, so that
            ``devices=2`` works for DDP on any multi-core machine. ``"auto"`` always means one
            slot: several processes on one CPU are an explicit choice.

    ``setup_device`` and ``teardown`` hold no resources and are idempotent; ``synchronize`` is
    a no-op (the CPU runs synchronously); statistics are the process's resident memory.
    """

    def __init__(self, num_devices: int | None = None) -> None:
        if num_devices is not None and (
            isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1
        ):
            raise ConfigurationError(
                f"CPUAccelerator(num_devices={describe_value(num_devices)}): expected a "
                "positive int or None "
                "(None: one slot per usable core)"
            )
        self._num_devices = num_devices if num_devices is not None else usable_cpu_count()

    def __repr__(self) -> str:
        return f"CPUAccelerator(num_devices={self._num_devices})"

    @property
    def device_type(self) -> str:
        """Always ``"cpu"`` (ACC-1)."""
        return "cpu"

    def is_available(self) -> bool:
        """Always ``True``: every process has a CPU (ACC-2)."""
        return True

    def device_count(self) -> int:
        """The configured number of CPU process slots, at least 1 (ACC-3)."""
        return self._num_devices

    def parse_devices(self, devices: DeviceRequest) -> list[torch.device]:
        """*n* copies of ``torch.device("cpu")`` for a request of *n* slots (ACC-4..6).

        ``"auto"`` is one slot. Validation and errors are those of
        :func:`~trainspec.reference.accelerators.device_request.parse_device_request`.
        """
        indices = parse_device_request(
            devices, device_type="cpu", available=self._num_devices, auto_count=1
        )
        return [_CPU] * len(indices)

    def setup_device(self, device: torch.device) -> None:
        """Accept ``cpu`` or ``cpu:0``; nothing to prepare. Other types raise
        ``ConfigurationError`` (ACC-7), other CPU indices ``DeviceUnavailableError``."""
        check_device(device, "cpu", available=1)

    def teardown(self) -> None:
        """Nothing to release; idempotent (ACC-8)."""

    def synchronize(self, device: torch.device) -> None:
        """No-op after checking the device type (ACC-9)."""
        check_device(device, "cpu", available=1)

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """``rss_bytes`` (current resident memory, where ``/proc`` exists) and
        ``peak_rss_bytes`` (where the ``resource`` module exists); finite floats (ACC-10)."""
        check_device(device, "cpu", available=1)
        stats: dict[str, float] = {}
        rss = _current_rss_bytes()
        if rss is not None:
            stats["rss_bytes"] = rss
        peak = _peak_rss_bytes()
        if peak is not None:
            stats["peak_rss_bytes"] = peak
        return stats


def _current_rss_bytes() -> float | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            resident_pages = int(statm.read().split()[1])
        return float(resident_pages * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _peak_rss_bytes() -> float | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return float(peak if sys.platform == "darwin" else peak * 1024)
